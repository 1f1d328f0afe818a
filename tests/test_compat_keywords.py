"""Issue 12 items 1-2: the keywords of today's FlashInfer, FlashAttention and torch, on the reference backend."""

from __future__ import annotations

import math
from collections import namedtuple

import pytest
import torch

from ragged_attn import attention
from ragged_attn.compat import flash_attn_cute
from ragged_attn.compat.flash_attn import flash_attn_varlen_func
from ragged_attn.compat.flashinfer import cudnn_batch_prefill_with_kv_cache
from ragged_attn.compat.torch_varlen import varlen_attn
from tests.cases import Case

AuxRequest = namedtuple("AuxRequest", ["lse"])


def _fi_case(seed, lens_q, lens_k, h_q=4, h_kv=2, d=64):
    case = Case(seed, lens_q, lens_k, h_q, h_kv, d, d, dtype=torch.bfloat16, causal=True, kv_layout="HND",
                lse_layout="padded", lse_base="log2")  # fmt: skip
    return case, *case.make()


def _fi(q, k, v, **kw):
    kw.setdefault("causal", True)
    kw.setdefault("return_lse", True)
    return cudnn_batch_prefill_with_kv_cache(q, k, v, 0.125, None, **kw)


# --- FlashInfer 0.7.2 -------------------------------------------------------------------------

def test_flashinfer_fp8_scales_none_accepted_tensor_declined_by_name():
    case, args, _ = _fi_case(51, [3, 5], [4, 5])
    q, k, v, cu_q, cu_k, mq, mk = args
    lq, lk = torch.tensor(case.lens_q, dtype=torch.int32), torch.tensor(case.lens_k, dtype=torch.int32)
    common = dict(max_token_per_sequence=mq, max_sequence_kv=mk, actual_seq_lens_q=lq, actual_seq_lens_kv=lk)
    out, _ = _fi(q, k, v, q_scale=None, k_scale=None, v_scale=None, **common)
    want = attention(*args, causal=True, softmax_scale=0.125)
    assert torch.equal(out, want)
    for name in ("q_scale", "k_scale", "v_scale"):
        with pytest.raises(NotImplementedError, match=name):
            _fi(q, k, v, **{name: torch.ones(1, 1, 1, 1)}, **common)


def test_flashinfer_lengths_derived_from_token_indptrs():
    case, args, _ = _fi_case(52, [5, 0, 9], [6, 3, 9])
    q, k, v, cu_q, cu_k, mq, mk = args
    out, lse = _fi(q, k, v, max_token_per_sequence=mq, max_sequence_kv=mk, batch_offsets_q=cu_q.view(-1, 1, 1, 1),
                   batch_offsets_k=cu_k, batch_offsets_units="tokens")  # fmt: skip
    want, want_lse = attention(*args, causal=True, softmax_scale=0.125, return_lse=True, lse_layout="padded",
                               lse_base="log2")  # fmt: skip
    assert torch.equal(out, want) and torch.equal(lse, want_lse)


@pytest.mark.parametrize("missing", ["actual_seq_lens_q", "actual_seq_lens_kv"])
def test_flashinfer_lengths_omitted_with_element_offsets_is_a_named_error(missing):
    case, args, _ = _fi_case(53, [3, 4], [3, 4])
    q, k, v, cu_q, cu_k, mq, mk = args
    lens = {"actual_seq_lens_q": torch.tensor(case.lens_q, dtype=torch.int32),
            "actual_seq_lens_kv": torch.tensor(case.lens_k, dtype=torch.int32)}  # fmt: skip
    lens.pop(missing)
    with pytest.raises(ValueError, match=missing):
        _fi(q, k, v, max_token_per_sequence=mq, max_sequence_kv=mk, batch_offsets_q=cu_q * 4 * 64,
            batch_offsets_k=cu_k * 2 * 64, **lens)  # fmt: skip


def test_flashinfer_token_units_default_output_offsets_to_q_and_v_to_k():
    # q and k carry gaps between sequences; no batch_offsets_o / _v: FlashInfer takes q's / k's.
    g = torch.Generator().manual_seed(54)
    q = torch.randn(12, 2, 32, generator=g).half()
    k = torch.randn(10, 2, 32, generator=g).half()
    v = torch.randn(10, 2, 32, generator=g).half()
    off_q = torch.tensor([1, 6, 12], dtype=torch.int32)
    off_k = torch.tensor([0, 5, 10], dtype=torch.int32)
    lq = torch.tensor([3, 4], dtype=torch.int32)
    lk = torch.tensor([4, 5], dtype=torch.int32)
    out = torch.full((12, 2, 32), 7.0).half()
    _fi(q, k, v, max_token_per_sequence=4, max_sequence_kv=5, actual_seq_lens_q=lq, actual_seq_lens_kv=lk,
        batch_offsets_q=off_q, batch_offsets_k=off_k, batch_offsets_units="tokens", out=out, return_lse=False)  # fmt: skip
    want = attention(q, k, v, off_q, off_k, 4, 5, seqused_q=lq, seqused_k=lk, causal=True, softmax_scale=0.125)
    assert torch.equal(out[1:4], want[1:4]) and torch.equal(out[6:10], want[6:10])
    rows = [0, 4, 5, 10, 11]
    assert torch.all(out[rows] == 7.0), "rows outside q's sequences were written"


def test_flashinfer_element_units_without_output_offsets_pack_from_row_zero():
    # FlashInfer 0.7.2 with B = 1: q read at its offset, out written from row 0 (no ragged O offset).
    g = torch.Generator().manual_seed(55)
    q = torch.randn(7, 2, 32, generator=g).half()
    k = v = torch.randn(4, 2, 32, generator=g).half()
    lens = torch.tensor([4], dtype=torch.int32)
    out = torch.full((7, 2, 32), 3.0).half()
    _fi(q, k, v, max_token_per_sequence=4, max_sequence_kv=4, actual_seq_lens_q=lens, actual_seq_lens_kv=lens,
        batch_offsets_q=torch.tensor([2 * 2 * 32, 7 * 2 * 32], dtype=torch.int32), out=out, return_lse=False)  # fmt: skip
    want = attention(q, k, v, torch.tensor([2, 7], dtype=torch.int32), torch.tensor([0, 4], dtype=torch.int32), 4, 4,
                     seqused_q=lens, causal=True, softmax_scale=0.125)  # fmt: skip
    assert torch.equal(out[0:4], want[2:6])
    assert torch.all(out[4:] == 3.0)


@pytest.mark.parametrize("units", ["tokens", "elements"])
def test_flashinfer_packed_lse_buffer_with_stats_offsets(units):
    case, args, _ = _fi_case(56, [3, 6, 2], [5, 6, 2], h_q=4)
    q, k, v, cu_q, cu_k, mq, mk = args
    lq = torch.tensor(case.lens_q, dtype=torch.int32)
    lse = torch.full((q.shape[0], 4), 9.0)  # (num_tokens, H_q): FlashInfer's wrapper contract
    per = 4 if units == "elements" else 1
    got_out, got_lse = _fi(q, k, v, max_token_per_sequence=mq, max_sequence_kv=mk, actual_seq_lens_q=lq,
                           actual_seq_lens_kv=torch.tensor(case.lens_k, dtype=torch.int32),
                           batch_offsets_q=cu_q * (per * 64 if units == "elements" else 1),
                           batch_offsets_k=cu_k * (2 * 64 if units == "elements" else 1),
                           batch_offsets_stats=cu_q * per, batch_offsets_units=units, lse=lse)  # fmt: skip
    want, want_lse = attention(*args, causal=True, softmax_scale=0.125, return_lse=True, lse_layout="token_major",
                               lse_base="log2")  # fmt: skip
    assert got_lse is lse and torch.equal(lse, want_lse) and torch.equal(got_out, want)


def test_flashinfer_lse_of_another_shape_with_stats_offsets_is_refused():
    case, args, _ = _fi_case(57, [3, 4], [3, 4])
    q, k, v, cu_q, cu_k, mq, mk = args
    lq = torch.tensor(case.lens_q, dtype=torch.int32)
    with pytest.raises(ValueError, match="lse"):
        _fi(q, k, v, max_token_per_sequence=mq, max_sequence_kv=mk, actual_seq_lens_q=lq, actual_seq_lens_kv=lq,
            batch_offsets_q=cu_q, batch_offsets_k=cu_k, batch_offsets_stats=cu_q, batch_offsets_units="tokens",
            lse=torch.empty(q.shape[0] + 1, 4))  # fmt: skip


def test_flashinfer_lse_ignored_without_return_lse_and_other_keywords_accepted():
    case, args, _ = _fi_case(58, [3, 4], [5, 4])
    q, k, v, cu_q, cu_k, mq, mk = args
    lse = torch.full((2, mq, 4), 1.5)
    out, got = _fi(q, k, v, max_token_per_sequence=mq, max_sequence_kv=mk,
                   actual_seq_lens_q=torch.tensor(case.lens_q, dtype=torch.int32),
                   actual_seq_lens_kv=torch.tensor(case.lens_k, dtype=torch.int32), return_lse=False, lse=lse,
                   is_cuda_graph_compatible=True, backend="cubin", o_data_type=q.dtype)  # fmt: skip
    assert got is None and torch.all(lse == 1.5)
    want = attention(*args, causal=True, softmax_scale=0.125)
    assert out.dtype == q.dtype == torch.bfloat16 and torch.equal(out, want)


@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_flashinfer_output_is_q_dtype_on_every_backend(backend):
    """One out-dtype rule for both backends (issue 12 item 5): the output is q's dtype; an
    o_data_type of another dtype declines by name and an out buffer of another dtype is a
    TypeError, on the reference as on the kernel, before anything is written."""
    case, args, _ = _fi_case(59, [3, 4], [5, 4])
    q, k, v, cu_q, cu_k, mq, mk = args
    kw = dict(max_token_per_sequence=mq, max_sequence_kv=mk, return_lse=False, ragged_attn_backend=backend,
              actual_seq_lens_q=torch.tensor(case.lens_q, dtype=torch.int32),
              actual_seq_lens_kv=torch.tensor(case.lens_k, dtype=torch.int32))  # fmt: skip
    out, _ = _fi(q, k, v, **kw)
    assert out.dtype == torch.bfloat16
    with pytest.raises(NotImplementedError, match="o_data_type.*q's dtype"):
        _fi(q, k, v, o_data_type=torch.float32, **kw)
    buf = torch.full((q.shape[0], 4, 64), 7.0)
    with pytest.raises(TypeError, match="out: expected dtype bfloat16"):
        _fi(q, k, v, out=buf, **kw)
    assert torch.all(buf == 7.0)


# --- FlashAttention 2.8.3 + FA4 keywords ------------------------------------------------------

def test_flash_attn_fa4_keywords_seqused_page_table_return_lse():
    case = Case(61, [4, 6], [20, 35], 4, 2, 64, 64, page_size=16, causal=True, q_gaps=True)
    args, kw = case.make()
    q, k, v, cu_q, _, mq, mk = args
    out, lse = flash_attn_varlen_func(q, k, v, cu_q, None, mq, mk, causal=True, seqused_q=kw["seqused_q"],
                                      seqused_k=kw["seqused_k"], page_table=kw["page_table"], return_lse=True,
                                      num_splits=3, pack_gqa=True, min_seqlen_k=1, deterministic=True)  # fmt: skip
    want, want_lse = attention(*args, **{**kw, "lse_layout": "head_major"}, return_lse=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)


def test_flash_attn_fa4_window_none_is_unbounded():
    case = Case(62, [5, 7], [5, 9], 2, 2, 64, 64)
    args, _ = case.make()
    want = attention(*args)
    assert torch.equal(flash_attn_varlen_func(*args, window_size=(None, None)), want)
    assert torch.equal(flash_attn_varlen_func(*args, window_size=(None, 2)), attention(*args, window_size=(-1, 2)))


def test_flash_attn_out_keyword_is_written():
    case = Case(63, [3, 5], [3, 5], 2, 2, 64, 64)
    args, _ = case.make()
    out = torch.empty(8, 2, 64)
    assert flash_attn_varlen_func(*args, out=out) is out
    assert torch.equal(out, attention(*args))


@pytest.mark.parametrize(
    "option,value",
    [("qv", torch.ones(1)), ("gather_kv_indices", torch.ones(1)),
     ("score_mod", lambda *a: a[0]), ("mask_mod", lambda *a: True), ("block_sparse_tensors", [torch.ones(1)])],
    ids=["qv", "gather", "score_mod", "mask_mod", "block_sparse"],
)  # fmt: skip  (learnable_sink is served since issue 14: tests/test_sinks_softcap.py)
def test_flash_attn_declines_fa4_options_by_name(option, value):
    args, _ = Case(64, [3], [3], 2, 2, 64, 64).make()
    with pytest.raises(NotImplementedError, match=option):
        flash_attn_varlen_func(*args, **{option: value})
    with pytest.raises(NotImplementedError, match=option):
        flash_attn_cute.flash_attn_varlen_func(args[0], args[1], args[2], cu_seqlens_q=args[3], cu_seqlens_k=args[4],
                                               **{option: value})  # fmt: skip


@pytest.mark.parametrize(
    "kwargs,match",
    [({"block_table": "t", "page_table": "t"}, "page_table"), ({"return_lse": True, "return_attn_probs": True}, "return_lse"),
     ({"gather_bwd_recompute_p": True}, "gather_bwd"), ({"gather_bwd_token_chunk": 64}, "gather_bwd")],
    ids=["both-tables", "both-lse", "recompute-p", "token-chunk"],
)  # fmt: skip
def test_flash_attn_conflicting_keywords_are_value_errors(kwargs, match):
    args, _ = Case(65, [3], [3], 2, 2, 64, 64).make()
    with pytest.raises(ValueError, match=match):
        flash_attn_varlen_func(*args, **kwargs)


# --- FA4's own signature (ragged_attn.compat.flash_attn_cute) ---------------------------------

def test_flash_attn_cute_returns_fa4_pair():
    case = Case(66, [6, 2], [8, 2], 4, 2, 64, 64, causal=True)
    args, _ = case.make()
    q, k, v, cu_q, cu_k, mq, mk = args
    out, lse = flash_attn_cute.flash_attn_varlen_func(q, k, v, None, cu_q, cu_k, mq, mk, causal=True)
    assert lse is None and torch.equal(out, attention(*args, causal=True))
    out, lse = flash_attn_cute.flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True,
                                                      return_lse=True, window_size=(3, None))  # fmt: skip
    want, want_lse = attention(*args, causal=True, window_size=(3, 0), return_lse=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse) and lse.shape == (4, 8)


def test_flash_attn_cute_batched_layout_declined_by_name():
    q = torch.randn(2, 3, 2, 64)
    with pytest.raises(NotImplementedError, match="cu_seqlens_q"):
        flash_attn_cute.flash_attn_varlen_func(q, q, q)


# --- torch varlen_attn 2.10's positional is_causal / return_aux -------------------------------

def test_torch_varlen_2_10_positional_is_causal_and_return_aux():
    case = Case(71, [6, 3], [6, 9], 2, 2, 64, 64, causal=True)
    args, _ = case.make()
    out, lse = varlen_attn(*args, True, AuxRequest(lse=True))
    want, want_lse = attention(*args, causal=True, return_lse=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    assert torch.equal(varlen_attn(*args, False), attention(*args))
    assert torch.isfinite(lse).all() and not math.isnan(out.sum().item())
