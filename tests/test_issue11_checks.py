"""Issue 11 items 6 and 7: what layout_class_of declines, padded-LSE allocation, and small checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ragged_attn
from ragged_attn.problem import MAX_PADDED_LSE_ROWS, MAX_SOFTMAX_SCALE
from tests.test_bad_inputs import paged_call, valid_call
from tests.test_layout_class import meta_call

# ---- item 6: layout_class_of declines what the kernel declines ------------------------------------


@pytest.mark.parametrize(
    "call,words",
    [
        (dict(batch=70_000), ["cu_seqlens_q", "65535 sequences"]),
        (dict(h_q=65536 * 2, h_kv=2, d=8, total_q=1), ["H_q", "65535"]),
        (dict(return_lse=True, lse_layout="padded", max_seqlen_q=2**31 - 1), ["lse", f"{MAX_PADDED_LSE_ROWS} rows"]),
        (dict(total_q=2**29), ["q", "2**29"]),
    ],
    ids=["batch-70000", "heads", "padded-lse-s-max-int32", "tokens"],
)
def test_layout_class_of_raises_not_implemented_where_the_kernel_declines(call, words):
    with pytest.raises(NotImplementedError) as info:
        ragged_attn.layout_class_of(**meta_call(**call))
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_layout_class_of_needs_no_max_seqlen_q_for_a_padded_lse():
    """s_max is not part of the key: the class is the one any s_max gets."""
    lc = ragged_attn.layout_class_of(**meta_call(return_lse=True, lse_layout="padded"))
    assert lc == ragged_attn.layout_class_of(**meta_call(return_lse=True, lse_layout="padded", max_seqlen_q=77))
    assert lc.lse and lc == ragged_attn.layout_class_of(**meta_call(return_lse=True, lse_layout="head_major"))


def test_layout_class_of_at_the_padded_row_limit_is_served():
    call = meta_call(return_lse=True, lse_layout="padded", max_seqlen_q=MAX_PADDED_LSE_ROWS)
    assert ragged_attn.layout_class_of(**call).lse


def test_warmup_dicts_decline_like_layout_class_of():
    with pytest.raises(NotImplementedError, match="65535 sequences"):
        ragged_attn.warmup([meta_call(batch=70_000)], progress=False)


# ---- item 6: a padded LSE is allocated by a bounded s_max, or refused by name ---------------------


def test_padded_lse_with_no_bound_max_seqlen_q_is_refused_by_name_before_allocating():
    """12 tokens with max_seqlen_q = 2**31 - 1 ("no bound") used to allocate 68 GB for the LSE."""
    kw = valid_call()
    before = kw["out"].clone()
    with pytest.raises(ValueError, match=r"max_seqlen_q: a padded LSE .*2147483647 .*GiB.*lse buffer") as info:
        ragged_attn.attention(**{**kw, "max_seqlen_q": 2**31 - 1}, return_lse=True, lse_layout="padded")
    assert f"s_max <= {MAX_PADDED_LSE_ROWS}" in str(info.value)
    assert torch.equal(kw["out"], before)


def test_padded_lse_with_a_caller_buffer_and_no_bound_max_seqlen_q_runs_on_the_reference():
    """The caller owns the buffer (its s_max is the rows), so the no-bound max_seqlen_q is fine."""
    kw = valid_call()
    lse = torch.full((3, 11, 8), 7.0)
    _, got = ragged_attn.attention(**{**kw, "max_seqlen_q": None}, return_lse=True, lse_layout="padded", lse=lse)
    assert got is lse and torch.isfinite(lse[2]).all() and (lse[1] == -math.inf).all()


def test_padded_lse_at_a_real_bound_is_allocated_by_it():
    kw = valid_call()
    _, lse = ragged_attn.attention(**{**kw, "out": None}, return_lse=True, lse_layout="padded")
    assert lse.shape == (3, 11, 8)


# ---- item 7 ------------------------------------------------------------------------------------


def test_negative_paged_seqused_k_names_a_key_count():
    kw = paged_call()
    kw["seqused_k"] = torch.tensor([5, -1, 11], dtype=torch.int32)
    before = kw["out"].clone()
    with pytest.raises(ValueError, match=r"seqused_k: expected a key count >= 0 at sequence 1, got -1") as info:
        ragged_attn.attention(**kw)
    assert "None" not in str(info.value)
    assert torch.equal(kw["out"], before)


@pytest.mark.parametrize(
    "value",
    [np.array([True, False]), np.array(True), np.bool_(True), torch.tensor(True), [True], 1, None],
    ids=["np-array", "np-0d", "np-bool", "tensor", "list", "int", "none"],
)
def test_causal_of_another_type_is_named(value):
    kw = valid_call()
    with pytest.raises(ValueError, match="causal: expected False, True"):
        ragged_attn.attention(**kw, causal=value)


@pytest.mark.parametrize("name", ["lse_layout", "lse_base", "kv_layout", "backend"])
def test_string_options_given_a_numpy_array_are_named(name):
    kw = valid_call()
    with pytest.raises(ValueError, match=f"{name}: expected one of"):
        ragged_attn.attention(**kw, return_lse=True, **{name: np.array(["a", "b"])})


@pytest.mark.parametrize("scale", [1e39, 3e38, MAX_SOFTMAX_SCALE * 1.0001])
def test_softmax_scale_whose_kernel_value_overflows_float32_is_refused(scale):
    kw = valid_call()
    with pytest.raises(ValueError, match="softmax_scale: expected at most 2.359e\\+38"):
        ragged_attn.attention(**kw, softmax_scale=scale)


def test_softmax_scale_near_the_bound_overflows_only_rows_whose_scores_do():
    """The documented behaviour below the bound: scaled scores beyond float32 make their rows NaN;
    a row whose scores are 0 (a zero query) stays finite (uniform over its keys)."""
    kw = valid_call()
    kw["q"][0] = 0
    kw["q"][1] = 1
    kw["k"].fill_(1)
    out = ragged_attn.attention(**kw, softmax_scale=1e38)
    assert torch.isfinite(out[0]).all()
    assert torch.isnan(out[1]).all()
    torch.testing.assert_close(out[0].float(), kw["v"][:5].float().mean(0).repeat_interleave(4, 0), atol=2e-2, rtol=0)
    ragged_attn.attention(**kw, softmax_scale=MAX_SOFTMAX_SCALE)  # the bound itself passes
