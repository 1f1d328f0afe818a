"""The drop-in adapters end to end on the reference backend, against the oracle and `attention`."""

from __future__ import annotations

import math
from collections import namedtuple

import pytest
import torch

from ragged_attn import attention
from ragged_attn.compat.flash_attn import flash_attn_varlen_func
from ragged_attn.compat.flashinfer import cudnn_batch_prefill_with_kv_cache
from ragged_attn.compat.torch_varlen import varlen_attn
from tests.cases import Case, oracle_float64, valid_rows

AuxRequest = namedtuple("AuxRequest", ["lse"])


def _assert_matches_oracle(case, args, kwargs, out, atol=1e-4):
    want, _ = oracle_float64(case, args, kwargs)
    rows = valid_rows(case, args[3])
    err = (out[rows].double() - want[rows]).abs().max().item()
    assert err < atol, f"max |out - oracle| = {err}"


# --- FlashAttention ---------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_varlen_matches_oracle(causal):
    case = Case(21, [7, 0, 19], [9, 3, 19], 6, 2, 64, 64, causal=causal)
    args, kwargs = case.make()
    q, k, v, cu_q, cu_k, mq, mk = args
    out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, mk, causal=causal)
    _assert_matches_oracle(case, args, kwargs, out)


def test_flash_attn_varlen_returns_fa2_lse_triple():
    case = Case(22, [5, 8], [6, 8], 4, 4, 64, 64, window=(3, 2))
    args, kwargs = case.make()
    out, lse, probs = flash_attn_varlen_func(*args, window_size=(3, 2), return_attn_probs=True)
    assert probs is None and lse.shape == (4, 13) and lse.dtype == torch.float32
    want_out, want_lse = attention(*args, window_size=(3, 2), return_lse=True)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)


def test_flash_attn_varlen_block_table_uses_cu_seqlens_k_as_lengths():
    case = Case(23, [4, 6], [20, 35], 4, 2, 64, 64, page_size=16, causal=True)
    args, kwargs = case.make()
    q, k, v, cu_q, _, mq, mk = args
    lens_k = kwargs["seqused_k"]
    cu_k = torch.cat([torch.zeros(1, dtype=torch.int32), torch.cumsum(lens_k, 0).to(torch.int32)])
    out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, mk, causal=True, block_table=kwargs["page_table"])
    _assert_matches_oracle(case, args, kwargs, out)


@pytest.mark.parametrize(
    "option,value", [("dropout_p", 0.1), ("alibi_slopes", torch.ones(4))], ids=["dropout", "alibi"]
)  # softcap is served since issue 14 (tests/test_sinks_softcap.py)
def test_flash_attn_varlen_declines_unserved_options(option, value):
    case = Case(24, [3], [3], 4, 4, 64, 64)
    args, _ = case.make()
    with pytest.raises(NotImplementedError, match=option):
        flash_attn_varlen_func(*args, **{option: value})


# --- torch varlen_attn ------------------------------------------------------------------------

def test_torch_varlen_causal_window_minus_one_zero():
    case = Case(31, [6, 11], [6, 11], 4, 4, 64, 64, causal=True)
    args, kwargs = case.make()
    out, lse = varlen_attn(*args, window_size=(-1, 0), return_aux=AuxRequest(lse=True))
    _assert_matches_oracle(case, args, kwargs, out)
    assert lse.shape == (4, 17)


def test_torch_varlen_gqa_needs_enable_gqa():
    case = Case(32, [5], [5], 6, 2, 64, 64)
    args, kwargs = case.make()
    with pytest.raises(ValueError, match="enable_gqa"):
        varlen_attn(*args)
    out = varlen_attn(*args, enable_gqa=True)
    _assert_matches_oracle(case, args, kwargs, out)


def test_torch_varlen_paged_with_seqused_k():
    case = Case(33, [3, 5], [17, 40], 4, 2, 64, 64, page_size=16)
    args, kwargs = case.make()
    q, k, v, cu_q, _, mq, mk = args
    out = varlen_attn(q, k, v, cu_q, None, mq, mk, enable_gqa=True, seqused_k=kwargs["seqused_k"],
                      block_table=kwargs["page_table"])
    _assert_matches_oracle(case, args, kwargs, out)


# --- FlashInfer cuDNN prefill -----------------------------------------------------------------

def _flashinfer_inputs(seed, lens_q, lens_k, h_q, h_kv, d, page_size=0):
    case = Case(seed, lens_q, lens_k, h_q, h_kv, d, d, dtype=torch.bfloat16, causal=True,
                page_size=page_size, kv_layout="HND", lse_layout="padded", lse_base="log2")
    args, kwargs = case.make()
    return case, args, kwargs


@pytest.mark.parametrize("units", ["elements", "tokens"])
def test_flashinfer_ragged_with_batch_offsets(units):
    case, args, kwargs = _flashinfer_inputs(41, [5, 12, 0, 7], [8, 12, 4, 30], 8, 2, 128)
    q, k, v, cu_q, cu_k, mq, mk = args
    lq = torch.tensor(case.lens_q, dtype=torch.int32)
    lk = torch.tensor(case.lens_k, dtype=torch.int32)
    scale_q = q.shape[1] * q.shape[2] if units == "elements" else 1
    scale_k = k.shape[1] * k.shape[2] if units == "elements" else 1
    out, lse = cudnn_batch_prefill_with_kv_cache(
        q, k, v, 0.125, torch.empty(1), max_token_per_sequence=mq, max_sequence_kv=mk,
        actual_seq_lens_q=lq.view(-1, 1, 1, 1), actual_seq_lens_kv=lk.view(-1, 1, 1, 1), causal=True,
        return_lse=True, batch_offsets_q=(cu_q * scale_q).view(-1, 1, 1, 1),
        batch_offsets_k=(cu_k * scale_k).view(-1, 1, 1, 1), batch_offsets_v=(cu_k * scale_k).view(-1, 1, 1, 1),
        batch_offsets_units=units,
    )  # fmt: skip
    want_out, want_lse = attention(*args, causal=True, softmax_scale=0.125, return_lse=True,
                                   lse_layout="padded", lse_base="log2")
    assert torch.equal(out, want_out)
    assert torch.equal(lse, want_lse)
    assert lse.shape == (4, mq, 8) and torch.all(lse[2] == -math.inf) and torch.all(lse[0, 5:] == -math.inf)


def test_flashinfer_derives_offsets_from_lengths_when_none_given():
    case, args, kwargs = _flashinfer_inputs(42, [9, 3, 14], [9, 20, 14], 4, 1, 128)
    q, k, v, *_ = args
    out, lse = cudnn_batch_prefill_with_kv_cache(
        q, k, v, 1 / math.sqrt(128), None, max_token_per_sequence=14, max_sequence_kv=20,
        actual_seq_lens_q=torch.tensor(case.lens_q, dtype=torch.int32),
        actual_seq_lens_kv=torch.tensor(case.lens_k, dtype=torch.int32), causal=True, return_lse=False,
    )  # fmt: skip
    assert lse is None
    _assert_matches_oracle(case, args, {}, out, atol=2e-2)


def test_flashinfer_paged_hnd_lse_ln():
    case, args, kwargs = _flashinfer_inputs(43, [4, 17], [30, 17], 4, 4, 128, page_size=8)
    q, k, v, cu_q, _, mq, mk = args
    out, lse = cudnn_batch_prefill_with_kv_cache(
        q, k, v, 1 / math.sqrt(128), None, max_token_per_sequence=mq, max_sequence_kv=mk,
        actual_seq_lens_q=kwargs["seqused_k"].new_tensor(case.lens_q), actual_seq_lens_kv=kwargs["seqused_k"],
        block_tables=kwargs["page_table"], causal=True, return_lse=True, lse_base="ln",
    )  # fmt: skip
    _assert_matches_oracle(case, args, kwargs, out, atol=2e-2)
    _, want_lse = attention(*args, **{**kwargs, "lse_base": "ln"}, return_lse=True)
    assert torch.equal(lse, want_lse)


def test_flashinfer_separate_output_offsets_and_packed_stats():
    case, args, kwargs = _flashinfer_inputs(44, [3, 6], [3, 6], 2, 2, 128)
    q, k, v, cu_q, cu_k, mq, mk = args
    lq = torch.tensor(case.lens_q, dtype=torch.int32)
    off_o = torch.tensor([2, 7, 13], dtype=torch.int32)  # output rows 2..4 and 7..12, gaps elsewhere
    out = torch.full((13, 2, 128), 5.0, dtype=torch.bfloat16)
    lse = torch.full((2, 6, 2), 9.0)
    got, got_lse = cudnn_batch_prefill_with_kv_cache(
        q, k, v, 0.1, None, max_token_per_sequence=mq, max_sequence_kv=mk, actual_seq_lens_q=lq,
        actual_seq_lens_kv=lq, causal=True, return_lse=True, batch_offsets_o=off_o, batch_offsets_stats=cu_q,
        batch_offsets_units="tokens", out=out, lse=lse,
    )  # fmt: skip
    want, want_lse = attention(*args, causal=True, softmax_scale=0.1, return_lse=True, lse_layout="token_major",
                               lse_base="log2")
    assert got is out and got_lse is lse
    assert torch.equal(out[2:5], want[0:3]) and torch.equal(out[7:13], want[3:9])
    assert torch.all(out[:2] == 5.0) and torch.all(out[5:7] == 5.0), "rows between sequences were written"
    assert torch.equal(lse.view(-1, 2)[:9], want_lse)


def test_flash_attn_causal_forces_right_window_to_zero():
    case = Case(25, [6, 9], [6, 9], 2, 2, 64, 64, causal=True, window=(2, 0))
    args, kwargs = case.make()
    out = flash_attn_varlen_func(*args, causal=True, window_size=(2, 2))
    _assert_matches_oracle(case, args, kwargs, out)


def test_flashinfer_output_offsets_leave_leading_rows_untouched():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(6, 2, 16, generator=g).half()
    k = v = torch.randn(6, 2, 16, generator=g).half()
    lengths = torch.tensor([2, 2], dtype=torch.int32)
    out = torch.full((6, 2, 16), 5.0).half()
    cudnn_batch_prefill_with_kv_cache(
        q, k, v, 0.25, None, max_token_per_sequence=2, max_sequence_kv=2, actual_seq_lens_q=lengths,
        actual_seq_lens_kv=lengths, causal=False, return_lse=False, batch_offsets_q=torch.tensor([2, 4, 6], dtype=torch.int32),
        batch_offsets_o=torch.tensor([0, 3, 6], dtype=torch.int32), batch_offsets_k=torch.tensor([0, 2, 4], dtype=torch.int32),
        batch_offsets_units="tokens", out=out,
    )  # fmt: skip
    want = attention(q, k, v, torch.tensor([2, 4, 6], dtype=torch.int32), torch.tensor([0, 2, 4], dtype=torch.int32),
                     2, 2, seqused_q=lengths, seqused_k=lengths)
    assert torch.equal(out[0:2], want[2:4]) and torch.equal(out[3:5], want[4:6])
    assert torch.all(out[2] == 5.0) and torch.all(out[5] == 5.0), "a row outside every sequence was written"


def test_flashinfer_separate_out_overlapping_q_is_refused_before_writing():
    q = torch.randn(4, 2, 16).half()
    lengths = torch.tensor([2, 2], dtype=torch.int32)
    before = q.clone()
    with pytest.raises(ValueError, match="out"):
        cudnn_batch_prefill_with_kv_cache(
            q, q.clone(), q.clone(), 0.25, None, max_token_per_sequence=2, max_sequence_kv=2,
            actual_seq_lens_q=lengths, actual_seq_lens_kv=lengths, causal=False, return_lse=False,
            batch_offsets_o=torch.tensor([0, 2, 4], dtype=torch.int32), batch_offsets_units="tokens", out=q,
        )  # fmt: skip
    assert torch.equal(q, before)
