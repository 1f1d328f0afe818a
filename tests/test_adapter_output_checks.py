"""What the adapters write and where: FlashInfer's output offsets (batch_offsets_o / _stats) inside
out / lse and apart from each other, a caller's lse apart from the inputs, the LSE the adapter
allocates within `attention`'s row limit, an empty batch with output offsets, k_cache / v_cache of a
wrong rank; FlashAttention's causal kept as `attention` reads it ("top_left" stays top-left). Each bad
call names the argument and leaves the caller's buffers untouched (CPU; found by an adversarial
session, 2026-12-04)."""

from __future__ import annotations

import math

import pytest
import torch

import ragged_attn
from ragged_attn.compat.flash_attn import flash_attn_varlen_func as fa2
from ragged_attn.compat.flash_attn_cute import flash_attn_varlen_func as fa4
from ragged_attn.compat.flashinfer import cudnn_batch_prefill_with_kv_cache as fi


def _i32(*x):
    return torch.tensor(x, dtype=torch.int32)


def _fi_inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(8, 4, 16, generator=g)
    k = torch.randn(10, 2, 16, generator=g)
    v = torch.randn(10, 2, 16, generator=g)
    kw = {"max_token_per_sequence": 5, "max_sequence_kv": 6, "actual_seq_lens_q": _i32(3, 5),
              "actual_seq_lens_kv": _i32(4, 6), "causal": True, "return_lse": True}  # fmt: skip
    return q, k, v, kw


@pytest.mark.parametrize("which", ["out", "k_cache"])
def test_flashinfer_stats_lse_overlapping_an_input_or_out_is_refused(which):
    q, k, v, kw = _fi_inputs()
    out = torch.zeros(8, 4, 16)
    host = out if which == "out" else k
    before = host.clone()
    lse = host.view(-1)[:32].view(8, 4)
    with pytest.raises(
        ValueError,
        match=rf"^lse: expected memory apart from the inputs and out, got a tensor overlapping {which}",
    ):
        fi(q, k, v, 0.25, None, **kw, batch_offsets_stats=_i32(0, 12, 32), out=out, lse=lse)
    assert torch.equal(host, before)


@pytest.mark.parametrize("kind", ["o", "stats"])
def test_flashinfer_empty_batch_with_output_offsets(kind):
    q, k, v, _ = _fi_inputs()
    e = torch.zeros(0, dtype=torch.int32)
    extra = {"batch_offsets_o": _i32(0)} if kind == "o" else {"batch_offsets_stats": _i32(0)}
    o, lse = fi(q, k, v, 0.25, None, max_token_per_sequence=0, max_sequence_kv=0, actual_seq_lens_q=e,
                actual_seq_lens_kv=e, causal=True, return_lse=True, **extra)  # fmt: skip
    assert o.shape == (8, 4, 16) and lse.shape == (0, 0, 4)


@pytest.mark.parametrize(
    "name,offsets,match",
    [("batch_offsets_o", _i32(0, 5, 10), "lie within the 8 rows of out"),
     ("batch_offsets_o", _i32(-2, 3, 8), "lie within the 8 rows of out"),
     ("batch_offsets_o", _i32(0, 1, 8), "do not overlap"),
     ("batch_offsets_stats", _i32(0, 20, 40), "lie within the 8 rows of lse")],  # elements: token * H_q
    ids=["o-past-end", "o-negative", "o-overlapping", "stats-past-end"],
)  # fmt: skip
def test_flashinfer_output_offsets_out_of_range_are_named(name, offsets, match):
    q, k, v, kw = _fi_inputs()
    out = torch.full((8, 4, 16), math.nan)
    lse = torch.full((8, 4), math.nan)
    extra = (
        {"batch_offsets_stats": offsets, "lse": lse}
        if name == "batch_offsets_stats"
        else {
            name: offsets,
            "batch_offsets_q": _i32(0, 3, 8),
            "batch_offsets_units": "tokens",
            "batch_offsets_k": _i32(0, 4, 10),
        }
    )
    with pytest.raises(ValueError, match=rf"^{name}: expected .*{match}"):
        fi(q, k, v, 0.25, None, **kw, out=out, **extra)
    assert torch.isnan(out).all() and torch.isnan(lse).all()


@pytest.mark.parametrize("shape", [(10,), ()], ids=["1d", "0d"])
def test_flashinfer_kv_cache_of_a_wrong_rank_is_named(shape):
    q, _k, v, kw = _fi_inputs()
    with pytest.raises(ValueError, match=r"^k_cache: expected a 3-D tensor"):
        fi(q, torch.zeros(shape), v, 0.25, None, **kw)


def test_flashinfer_allocated_lse_keeps_attentions_row_limit():
    q, k, v, kw = _fi_inputs()
    kw["max_token_per_sequence"] = 2**31 - 1
    with pytest.raises(ValueError, match=r"^max_token_per_sequence: the LSE allocated by the call"):
        fi(q, k, v, 0.25, None, **kw)
    with pytest.raises(ValueError, match=r"^max_token_per_sequence: the LSE allocated by the call"):
        fi(q, k, v, 0.25, None, **kw, batch_offsets_stats=_i32(0, 12, 32))


def test_flash_attn_adapters_keep_top_left_and_refuse_other_causal_values():
    g = torch.Generator().manual_seed(1)
    q, k, v = (
        torch.randn(3, 2, 16, generator=g),
        torch.randn(6, 2, 16, generator=g),
        torch.randn(6, 2, 16, generator=g),
    )
    cq, ck = _i32(0, 3), _i32(0, 6)
    top_left = ragged_attn.attention(q, k, v, cq, ck, 3, 6, causal="top_left")
    assert not torch.allclose(top_left, ragged_attn.attention(q, k, v, cq, ck, 3, 6, causal=True))
    assert torch.equal(fa2(q, k, v, cq, ck, 3, 6, causal="top_left"), top_left)
    assert torch.equal(fa4(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, causal="top_left")[0], top_left)
    assert torch.equal(fa2(q, k, v, cq, ck, 3, 6, causal=1), fa2(q, k, v, cq, ck, 3, 6, causal=True))
    for bad in ("no", 2):
        with pytest.raises(ValueError, match=r"^causal: expected"):
            fa2(q, k, v, cq, ck, 3, 6, causal=bad)
