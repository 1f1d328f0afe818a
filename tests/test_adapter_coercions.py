"""Adapter arguments that used to be coerced into another meaning, or reach torch's internals.

An adversarial pass (session 23, 2026-12-07) found, on the CPU reference path: torch varlen's
is_causal="false" ran causal (bool() of a string), tensor-valued flags raised torch's "Boolean value
of Tensor ... is ambiguous", FlashInfer's batch_offsets_v was never looked at, transformers' float
additive masks were read inverted and q_len > the mask's keys scrambled rows, float cu_seq_lens were
truncated. Every case here fails on the code before that pass; each refusal names the caller's
argument and leaves a NaN-poisoned output untouched.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

import ragged_attn
from ragged_attn import _checks as chk
from ragged_attn.compat.flash_attn import flash_attn_varlen_func as fa2_varlen
from ragged_attn.compat.flash_attn_cute import flash_attn_varlen_func as fa4_varlen
from ragged_attn.compat.flashinfer import cudnn_batch_prefill_with_kv_cache
from ragged_attn.compat.torch_varlen import varlen_attn
from tests.cases import Case


def _refused(exc_type, call, lead: str, untouched: torch.Tensor | None = None) -> str:
    before = untouched.clone() if untouched is not None else None
    with pytest.raises(exc_type) as info:
        call()
    message = str(info.value)
    assert type(info.value) is exc_type, f"{type(info.value).__name__}: {message}"
    assert message.startswith(f"{lead}: "), message
    if untouched is not None:
        assert torch.equal(untouched, before) or (torch.isnan(untouched) == torch.isnan(before)).all()
    return message


# --- the flag rule ---------------------------------------------------------------------------------


@pytest.mark.parametrize("x,want", [(True, True), (False, False), (0, False), (1, True)])
def test_flag_takes_bools_and_zero_one(x, want):
    assert chk.flag("f", x) is want


def test_flag_takes_numpy_bools_and_none_where_allowed():
    np = pytest.importorskip("numpy")
    assert chk.flag("f", np.bool_(True)) is True
    assert chk.flag("f", None, none_as=False) is False


@pytest.mark.parametrize(
    "x,words",
    [("false", "str 'false'"), ("top_left", "str 'top_left'"), (2, "int 2"), (0.5, "float 0.5"),
     (None, "NoneType"), (torch.tensor([True, False]), "torch.Tensor")],
    ids=["str-false", "str-top-left", "int-2", "float", "none", "tensor"],
)  # fmt: skip
def test_flag_refuses_everything_else_by_name(x, words):
    msg = _refused(TypeError, lambda: chk.flag("is_causal", x), "is_causal")
    assert "expected a bool" in msg and words in msg, msg


# --- torch varlen_attn -----------------------------------------------------------------------------


def _torch_args(seed):
    (q, k, v, cu_q, cu_k, mq, mk), _ = Case(seed, [5, 7], [5, 7], 4, 2, 64, 64, dtype=torch.bfloat16).make()
    return [q, k, v, cu_q, cu_k, mq, mk]


@pytest.mark.parametrize("value", ["false", "top_left", torch.tensor([True, False]), 2], ids=["false", "tl", "t", "2"])
def test_torch_varlen_is_causal_is_not_coerced(value):
    """is_causal="false" ran causal and "top_left" ran bottom-right causal (bool() of a string)."""
    args = _torch_args(401)
    _refused(TypeError, lambda: varlen_attn(*args, value, enable_gqa=True), "is_causal")


def test_torch_varlen_is_causal_zero_one_still_run():
    args = _torch_args(402)
    got = varlen_attn(*args, 1, enable_gqa=True)
    assert torch.equal(got, ragged_attn.attention(*args, causal=True))
    got = varlen_attn(*args, 0, enable_gqa=True)
    assert torch.equal(got, ragged_attn.attention(*args, causal=False))


def test_torch_varlen_enable_gqa_and_aux_lse_are_flags():
    args = _torch_args(403)
    _refused(TypeError, lambda: varlen_attn(*args, enable_gqa="no"), "enable_gqa")
    aux = SimpleNamespace(lse=torch.tensor([True, False]))
    _refused(TypeError, lambda: varlen_attn(*args, enable_gqa=True, return_aux=aux), "return_aux.lse")


# --- FlashAttention ---------------------------------------------------------------------------------


@pytest.mark.parametrize("adapter", [fa2_varlen, fa4_varlen], ids=["fa2", "fa4"])
def test_flash_attn_return_lse_is_a_flag(adapter):
    """return_lse="no" returned (out, lse); a 2-element tensor hit torch's ambiguity error."""
    q, k, v, cu_q, cu_k, mq, mk = _torch_args(404)
    out = torch.full_like(q, math.nan)
    kw = {"out": out} if adapter is fa2_varlen else {}
    kw.update(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=mq, max_seqlen_k=mk)
    for bad in ("no", torch.tensor([1, 0])):
        call = lambda bad=bad: adapter(q, k, v, return_lse=bad, **kw)
        _refused(TypeError, call, "return_lse", out)


def test_flash_attn_return_attn_probs_and_dropout_p_are_checked():
    q, k, v, cu_q, cu_k, mq, mk = _torch_args(405)
    out = torch.full_like(q, math.nan)
    call = lambda: fa2_varlen(q, k, v, cu_q, cu_k, mq, mk, return_attn_probs=torch.tensor([1, 0]), out=out)
    _refused(TypeError, call, "return_attn_probs", out)
    call = lambda: fa2_varlen(q, k, v, cu_q, cu_k, mq, mk, dropout_p=torch.tensor([0.0, 0.0]), out=out)
    msg = _refused(TypeError, call, "dropout_p", out)
    assert "torch.Tensor" in msg
    assert torch.isnan(out).all()


# --- FlashInfer's batch_offsets_v -------------------------------------------------------------------


def _fi(**overrides):
    g = torch.Generator().manual_seed(406)
    q = torch.randn(12, 4, 16, generator=g)
    k, v = (torch.randn(20, 2, 16, generator=g) for _ in range(2))
    out = torch.full((12, 4, 16), math.nan)
    lens = torch.tensor([5, 7], dtype=torch.int32)
    kw = {"max_token_per_sequence": 7, "max_sequence_kv": 7, "actual_seq_lens_q": lens, "actual_seq_lens_kv": lens,
          "batch_offsets_k": torch.tensor([0, 8, 20], dtype=torch.int32), "batch_offsets_units": "tokens",
          "causal": True, "return_lse": False, "out": out}  # fmt: skip
    kw.update(overrides)
    return (lambda: cudnn_batch_prefill_with_kv_cache(q, k, v, 0.25, None, **kw)), out


def test_flashinfer_batch_offsets_v_other_starts_are_refused():
    """V was read at K's offsets whatever batch_offsets_v said."""
    call, out = _fi(batch_offsets_v=torch.tensor([0, 6, 20], dtype=torch.int32))
    msg = _refused(ValueError, call, "batch_offsets_v", out)
    assert "token 6 at sequence 1" in msg and "batch_offsets_k gives 8" in msg, msg
    assert torch.isnan(out).all()


@pytest.mark.parametrize("bad,exc", [("garbage", TypeError), (torch.tensor([0.0, 8.0, 20.0]), TypeError)])
def test_flashinfer_batch_offsets_v_type_is_checked(bad, exc):
    call, out = _fi(batch_offsets_v=bad)
    _refused(exc, call, "batch_offsets_v", out)


def test_flashinfer_batch_offsets_v_equal_to_k_runs_in_both_units():
    call, out = _fi(batch_offsets_v=torch.tensor([0, 8, 20], dtype=torch.int32))
    call()
    want = out.clone()
    assert torch.isfinite(want[:5]).all() and torch.isfinite(want[5:12]).all()
    elements = {"batch_offsets_units": "elements", "batch_offsets_q": torch.tensor([0, 5 * 64, 12 * 64], dtype=torch.int32),
                "batch_offsets_k": torch.tensor([0, 8 * 32, 20 * 32], dtype=torch.int32),
                "batch_offsets_v": torch.tensor([0, 8 * 32, 20 * 32], dtype=torch.int32)}  # fmt: skip
    call, out = _fi(**elements)
    call()
    assert torch.equal(out, want)


def test_flashinfer_o_data_type_must_be_a_dtype():
    call, out = _fi(o_data_type="float16")
    msg = _refused(TypeError, call, "o_data_type", out)
    assert "torch.dtype" in msg and "str" in msg


# --- transformers -----------------------------------------------------------------------------------


def _hf(q_len=6, kv_len=6, seed=407):
    pytest.importorskip("transformers")
    from ragged_attn.compat.transformers import attention_forward

    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 4, q_len, 16, generator=g)
    k, v = (torch.randn(2, 2, kv_len, 16, generator=g) for _ in range(2))
    return attention_forward, SimpleNamespace(is_causal=True), q, k, v


def test_transformers_float_additive_mask_is_refused():
    """An additive 0 / -inf mask cast to bool dropped the real tokens and kept the padding."""
    af, m, q, k, v = _hf()
    mask = torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]])
    additive = torch.zeros(2, 6).masked_fill(mask == 0, -math.inf)
    msg = _refused(TypeError, lambda: af(m, q, k, v, additive), "attention_mask")
    assert "float32" in msg and "additive" in msg
    _refused(ValueError, lambda: af(m, q, k, v, mask * 2), "attention_mask")
    got, _ = af(m, q, k, v, mask)  # the 0 / 1 mask itself still runs
    assert torch.isfinite(got).all()


def test_transformers_more_queries_than_mask_keys_is_refused():
    """q_len > the mask's keys gathered query rows with key-row indices (wrong rows, silently)."""
    af, m, q, k, v = _hf(q_len=8, kv_len=6)
    mask = torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]])
    msg = _refused(ValueError, lambda: af(m, q, k, v, mask), "query")
    assert "q_len = 8" in msg and "6 keys" in msg


def test_transformers_shapes_and_flags_are_named():
    af, m, q, k, v = _hf()
    _refused(ValueError, lambda: af(m, q[0], k, v, None), "query")
    _refused(TypeError, lambda: af(m, None, k, v, None), "query")
    _refused(ValueError, lambda: af(m, q, k[:1], v[:1], None), "key")
    _refused(ValueError, lambda: af(m, q, k, v[:, :, :5], None), "value")
    _refused(TypeError, lambda: af(m, q, k, v, None, is_causal="false"), "is_causal")


def test_transformers_float_cu_seq_lens_are_refused():
    """[0., 2.7, 12.] was truncated to [0, 2, 12]."""
    af, m, q, k, v = _hf()
    cu = torch.tensor([0.0, 2.7, 12.0])
    kw = {"cu_seq_lens_q": cu, "cu_seq_lens_k": torch.tensor([0, 6, 12]), "max_length_q": 10, "max_length_k": 6}
    msg = _refused(TypeError, lambda: af(m, q, k, v, None, **kw), "cu_seq_lens_q")
    assert "float32" in msg


# --- attention / warmup ---------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [5e-324, 1e-46, 2.0**-127])
def test_softmax_scale_below_normal_float32_is_refused(scale):
    """These became 0 in float32: a uniform average (what softmax_scale=0.0 is refused for)."""
    args = _torch_args(408)
    msg = _refused(ValueError, lambda: ragged_attn.attention(*args, softmax_scale=scale), "softmax_scale")
    assert "2**-126" in msg


def test_softmax_scale_smallest_normal_runs_and_huge_is_shown_short():
    args = _torch_args(409)
    assert torch.isfinite(ragged_attn.attention(*args, softmax_scale=2.0**-126)).all()
    msg = _refused(ValueError, lambda: ragged_attn.attention(*args, softmax_scale=2**1100), "softmax_scale")
    assert len(msg) < 200 and "characters" in msg, msg


@pytest.mark.parametrize("bad", [None, 3, "abc"], ids=["none", "int", "str"])
def test_warmup_needs_an_iterable_of_items(bad):
    msg = _refused(TypeError, lambda: ragged_attn.warmup(bad), "problems_or_classes")
    assert type(bad).__name__ in msg
