"""Every bad input gets a TypeError/ValueError naming the argument, before anything is written.

One test per bad input (a failure names its case). Each case mutates a valid bf16 call; the
`out` buffer is passed and checked to be untouched afterwards.
"""

from __future__ import annotations

import pytest
import torch

import ragged_attn

H_Q, H_KV, D = 8, 2, 64
LENS = [5, 0, 11]
TOTAL = sum(LENS)


def valid_call():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(TOTAL, H_Q, D, generator=g).bfloat16()
    k = torch.randn(TOTAL, H_KV, D, generator=g).bfloat16()
    v = torch.randn(TOTAL, H_KV, D, generator=g).bfloat16()
    cu = torch.tensor([0, 5, 5, 16], dtype=torch.int32)
    kwargs = dict(
        q=q, k=k, v=v, cu_seqlens_q=cu, cu_seqlens_k=cu.clone(), max_seqlen_q=11, max_seqlen_k=11,
        out=torch.full((TOTAL, H_Q, D), 3.0, dtype=torch.bfloat16),
    )  # fmt: skip
    return kwargs


def paged_call():
    kw = valid_call()
    kw.update(
        k=torch.randn(4, 16, H_KV, D).bfloat16(), v=torch.randn(4, 16, H_KV, D).bfloat16(),
        page_table=torch.tensor([[0], [1], [2]], dtype=torch.int32),
        seqused_k=torch.tensor([5, 0, 11], dtype=torch.int32), cu_seqlens_k=None,
    )  # fmt: skip
    return kw


def _misaligned(x):
    flat = torch.empty(x.numel() + 8, dtype=x.dtype)
    return flat[1 : 1 + x.numel()].view(x.shape)


def _strided_rows(x, pad):
    base = torch.empty(x.shape[0], x.shape[1], x.shape[2] + pad, dtype=x.dtype)
    return base[..., : x.shape[2]]


def _inside(kw, buffer, name, values):
    """Pass as `name` an int32 view into `buffer`'s bytes holding `values` (its valid contents)."""
    flat = kw[buffer].view(-1).view(torch.int32) if buffer == "out" else kw[buffer].view(-1)
    view = flat.view(torch.int32)[64 : 64 + len(values)]
    view.copy_(torch.tensor(values, dtype=torch.int32).view(-1))
    kw[name] = view.view(torch.tensor(values).shape)


def _lse_holding(kw, name, values):
    kw.update(return_lse=True, lse=torch.full((H_Q, TOTAL), 5.0))
    _inside(kw, "lse", name, values)


# (id, exception, words the message must contain, mutation of the valid kwargs)
BAD = [
    ("q-not-tensor", TypeError, ["q", "torch.Tensor"], lambda kw: kw.update(q=kw["q"].tolist())),
    ("q-rank", ValueError, ["q", "3-D"], lambda kw: kw.update(q=kw["q"][None])),
    ("q-int-dtype", TypeError, ["q", "dtype"], lambda kw: kw.update(q=kw["q"].to(torch.int16))),
    ("q-float64", TypeError, ["q", "float64"], lambda kw: kw.update(q=kw["q"].double())),
    ("k-rank", ValueError, ["k", "3-D"], lambda kw: kw.update(k=kw["k"][None])),
    ("v-rank", ValueError, ["v", "3-D"], lambda kw: kw.update(v=kw["v"][0])),
    ("k-dtype", TypeError, ["k", "dtype of q"], lambda kw: kw.update(k=kw["k"].half())),
    ("v-dtype", TypeError, ["v", "dtype of q"], lambda kw: kw.update(v=kw["v"].float())),
    ("k-device", ValueError, ["k", "device"], lambda kw: kw.update(k=kw["k"].to("meta"))),
    ("gqa-indivisible", ValueError, ["H_kv", "divide"], lambda kw: kw.update(
        k=torch.randn(TOTAL, 3, D).bfloat16(), v=torch.randn(TOTAL, 3, D).bfloat16())),
    ("kv-heads-differ", ValueError, ["v", "H_kv"], lambda kw: kw.update(v=torch.randn(TOTAL, 1, D).bfloat16())),
    ("kv-tokens-differ", ValueError, ["v", "tokens"], lambda kw: kw.update(v=kw["v"][:-1])),
    ("head-dim-qk", ValueError, ["k", "head_dim"], lambda kw: kw.update(k=torch.randn(TOTAL, H_KV, 32).bfloat16())),
    ("head-dim-not-8", ValueError, ["v", "multiple of 8"], lambda kw: kw.update(
        v=torch.randn(TOTAL, H_KV, 36).bfloat16(), out=None)),
    ("head-dim-too-big", ValueError, ["q", "256"], lambda kw: kw.update(
        q=torch.randn(TOTAL, H_Q, 264).bfloat16(), k=torch.randn(TOTAL, H_KV, 264).bfloat16(),
        v=torch.randn(TOTAL, H_KV, 264).bfloat16(), out=None)),
    ("q-last-dim-strided", ValueError, ["q", "contiguous"], lambda kw: kw.update(q=torch.randn(TOTAL, H_Q, 2 * D).bfloat16()[..., ::2])),
    ("q-misaligned-pointer", ValueError, ["q", "16 bytes"], lambda kw: kw.update(q=_misaligned(kw["q"]))),
    ("k-misaligned-stride", ValueError, ["k", "stride"], lambda kw: kw.update(k=_strided_rows(kw["k"], 4))),
    ("cu-q-dtype", TypeError, ["cu_seqlens_q", "int32"], lambda kw: kw.update(cu_seqlens_q=kw["cu_seqlens_q"].long())),
    ("cu-q-rank", ValueError, ["cu_seqlens_q", "1-D"], lambda kw: kw.update(cu_seqlens_q=kw["cu_seqlens_q"][None])),
    ("cu-q-empty", ValueError, ["cu_seqlens_q", "B + 1"], lambda kw: kw.update(cu_seqlens_q=torch.zeros(0, dtype=torch.int32))),
    ("cu-k-length", ValueError, ["cu_seqlens_k", "(4,)"], lambda kw: kw.update(cu_seqlens_k=kw["cu_seqlens_k"][:-1])),
    ("cu-k-missing", ValueError, ["cu_seqlens_k", "ragged"], lambda kw: kw.update(cu_seqlens_k=None)),
    ("cu-k-device", ValueError, ["cu_seqlens_k", "device"], lambda kw: kw.update(cu_seqlens_k=kw["cu_seqlens_k"].to("meta"))),
    # The offsets check blames cu_seqlens_k; the message says how many rows k has.
    ("k-fewer-rows-than-cu-seqlens-k", ValueError, ["cu_seqlens_k", "total_k = 10", "the rows of k"],
     lambda kw: kw.update(k=kw["k"][:10], v=kw["v"][:10])),
    ("cu-q-not-tensor", TypeError, ["cu_seqlens_q", "torch.Tensor"], lambda kw: kw.update(cu_seqlens_q=[0, 5, 5, 16])),
    ("seqused-q-shape", ValueError, ["seqused_q", "(3,)"], lambda kw: kw.update(seqused_q=torch.zeros(2, dtype=torch.int32))),
    ("seqused-k-dtype", TypeError, ["seqused_k", "int32"], lambda kw: kw.update(seqused_k=torch.zeros(3, dtype=torch.int64))),
    ("max-seqlen-tensor", TypeError, ["max_seqlen_q", "sync"], lambda kw: kw.update(max_seqlen_q=torch.tensor(11))),
    ("max-seqlen-negative", ValueError, ["max_seqlen_k", "[0, 2147483647]"], lambda kw: kw.update(max_seqlen_k=-1)),
    ("max-seqlen-above-int32", ValueError, ["max_seqlen_q", "2147483647"], lambda kw: kw.update(max_seqlen_q=2**31)),
    ("max-seqlen-float", TypeError, ["max_seqlen_q", "int"], lambda kw: kw.update(max_seqlen_q=11.0)),
    ("causal-bad", ValueError, ["causal", "top_left"], lambda kw: kw.update(causal="bottom-left")),
    ("window-not-pair", ValueError, ["window_size", "pair"], lambda kw: kw.update(window_size=(3,))),
    ("window-below-minus-one", ValueError, ["window_size", "-1"], lambda kw: kw.update(window_size=(-2, 0))),
    ("window-huge", ValueError, ["window_size", "-1 = unbounded"], lambda kw: kw.update(window_size=(-1, 2**29))),
    ("window-right-with-causal", ValueError, ["window_size", "causal"], lambda kw: kw.update(causal=True, window_size=(4, 2))),
    ("scale-negative", ValueError, ["softmax_scale", "positive"], lambda kw: kw.update(softmax_scale=-0.1)),
    ("scale-nan", ValueError, ["softmax_scale", "finite"], lambda kw: kw.update(softmax_scale=float("nan"))),
    ("scale-tensor", TypeError, ["softmax_scale", "float"], lambda kw: kw.update(softmax_scale=torch.tensor(0.1))),
    ("lse-layout-bad", ValueError, ["lse_layout", "padded"], lambda kw: kw.update(return_lse=True, lse_layout="bhs")),
    ("lse-base-bad", ValueError, ["lse_base", "log2"], lambda kw: kw.update(return_lse=True, lse_base="e")),
    ("return-lse-not-bool", TypeError, ["return_lse", "bool"], lambda kw: kw.update(return_lse="yes")),
    ("lse-without-return", ValueError, ["lse", "return_lse"], lambda kw: kw.update(lse=torch.empty(H_Q, TOTAL))),
    ("lse-shape", ValueError, ["lse", "(8, 16)"], lambda kw: kw.update(return_lse=True, lse=torch.empty(TOTAL, H_Q))),
    ("lse-dtype", TypeError, ["lse", "float32"], lambda kw: kw.update(return_lse=True, lse=torch.empty(H_Q, TOTAL).bfloat16())),
    ("lse-not-compact", ValueError, ["lse", "compact"], lambda kw: kw.update(return_lse=True, lse=torch.empty(H_Q, 2 * TOTAL)[:, ::2])),
    ("lse-padded-too-short", ValueError, ["lse", "s_max"], lambda kw: kw.update(
        return_lse=True, lse_layout="padded", lse=torch.empty(3, 4, H_Q))),
    ("lse-padded-no-max", ValueError, ["max_seqlen_q", "padded"], lambda kw: kw.update(
        return_lse=True, lse_layout="padded", max_seqlen_q=None)),
    ("out-shape", ValueError, ["out", "shape"], lambda kw: kw.update(out=torch.empty(TOTAL, H_Q, 32).bfloat16())),
    ("out-dtype-int8", TypeError, ["out", "bfloat16", "q's"], lambda kw: kw.update(out=torch.empty(TOTAL, H_Q, D, dtype=torch.int8))),
    # One rule for both backends: out is q's dtype (the reference wrote a float32 out for bf16 q).
    ("out-dtype-float32", TypeError, ["out", "bfloat16", "every backend"], lambda kw: kw.update(
        out=torch.empty(TOTAL, H_Q, D, dtype=torch.float32))),
    ("out-last-dim", ValueError, ["out", "contiguous"], lambda kw: kw.update(out=torch.empty(TOTAL, H_Q, 2 * D).bfloat16()[..., ::2])),
    ("out-aliases-q", ValueError, ["out", "overlapping q"], lambda kw: kw.update(out=kw["q"])),
    ("out-expanded", ValueError, ["out", "do not share memory"], lambda kw: kw.update(
        out=torch.zeros(1, H_Q, D, dtype=torch.bfloat16).expand(TOTAL, H_Q, D))),
    ("lse-aliases-q", ValueError, ["lse", "overlapping q"], lambda kw: kw.update(
        return_lse=True, lse=kw["q"].view(torch.float32).reshape(-1)[: H_Q * TOTAL].view(H_Q, TOTAL))),
    ("lse-aliases-out", ValueError, ["lse", "overlapping out"], lambda kw: kw.update(
        return_lse=True, lse=kw["out"].view(torch.float32).reshape(-1)[: H_Q * TOTAL].view(H_Q, TOTAL))),
    ("out-overlaps-cu-seqlens-q", ValueError, ["out", "overlapping cu_seqlens_q"],
     lambda kw: _inside(kw, "out", "cu_seqlens_q", [0, 5, 5, 16])),
    ("out-overlaps-cu-seqlens-k", ValueError, ["out", "overlapping cu_seqlens_k"],
     lambda kw: _inside(kw, "out", "cu_seqlens_k", [0, 5, 5, 16])),
    ("out-overlaps-seqused-q", ValueError, ["out", "overlapping seqused_q"],
     lambda kw: _inside(kw, "out", "seqused_q", [5, 0, 11])),
    ("out-overlaps-seqused-k", ValueError, ["out", "overlapping seqused_k"],
     lambda kw: _inside(kw, "out", "seqused_k", [5, 0, 11])),
    ("lse-overlaps-cu-seqlens-q", ValueError, ["lse", "overlapping cu_seqlens_q"],
     lambda kw: _lse_holding(kw, "cu_seqlens_q", [0, 5, 5, 16])),
    ("lse-overlaps-seqused-k", ValueError, ["lse", "overlapping seqused_k"],
     lambda kw: _lse_holding(kw, "seqused_k", [5, 0, 11])),
    ("kv-layout-bad", ValueError, ["kv_layout", "HND"], lambda kw: kw.update(kv_layout="NDH")),
    ("backend-bad", ValueError, ["backend", "reference"], lambda kw: kw.update(backend="triton")),
]

BAD_PAGED = [
    ("page-table-dtype", TypeError, ["page_table", "int32"], lambda kw: kw.update(page_table=kw["page_table"].long())),
    ("page-table-rank", ValueError, ["page_table", "2-D"], lambda kw: kw.update(page_table=kw["page_table"][:, 0])),
    ("page-table-batch", ValueError, ["page_table", "B = 3"], lambda kw: kw.update(page_table=kw["page_table"][:2])),
    ("paged-no-lengths", ValueError, ["seqused_k", "page pools", "or cu_seqlens_k"], lambda kw: kw.update(seqused_k=None)),
    # Page pools: cu_seqlens_k gives lengths only (its differences), so no bound on its entries but >= 0.
    ("paged-cu-k-decreasing", ValueError, ["cu_seqlens_k", "non-decreasing offsets >= 0", "5 then 3"],
     lambda kw: kw.update(seqused_k=None, cu_seqlens_k=torch.tensor([0, 5, 3, 16], dtype=torch.int32))),
    # More keys than the page table's pages hold: named after where the lengths came from.
    ("paged-seqused-k-over-capacity", ValueError, ["seqused_k", "max_pages * page_size = 16", "got 17"],
     lambda kw: kw.update(seqused_k=torch.tensor([5, 0, 17], dtype=torch.int32))),
    ("paged-cu-k-over-capacity", ValueError, ["cu_seqlens_k", "max_pages * page_size = 16", "got 17"],
     lambda kw: kw.update(seqused_k=None, cu_seqlens_k=torch.tensor([0, 5, 5, 22], dtype=torch.int32))),
    ("paged-k-rank", ValueError, ["k", "4-D"], lambda kw: kw.update(k=kw["k"][0])),
    ("paged-v-pool-differs", ValueError, ["v", "pool shape"], lambda kw: kw.update(v=torch.randn(4, 8, H_KV, D).bfloat16())),
    # Issue 11: an out over the page table was written, overwrote the table, then raised IndexError.
    ("out-overlaps-page-table", ValueError, ["out", "overlapping page_table"],
     lambda kw: _inside(kw, "out", "page_table", [[0], [1], [2]])),
    ("out-overlaps-paged-seqused-k", ValueError, ["out", "overlapping seqused_k"],
     lambda kw: _inside(kw, "out", "seqused_k", [5, 0, 11])),
    ("lse-overlaps-page-table", ValueError, ["lse", "overlapping page_table"],
     lambda kw: _lse_holding(kw, "page_table", [[0], [1], [2]])),
]


def _bytes(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(-1).view(torch.uint8)


def _run_bad(make, exc, words, mutate):
    kw = make()
    mutate(kw)
    # Bit patterns of every tensor argument after the mutation (some share memory on purpose).
    before = {name: x.clone() for name, x in kw.items() if isinstance(x, torch.Tensor) and x.device.type == "cpu"}
    with pytest.raises(exc) as info:
        ragged_attn.attention(**kw)
    message = str(info.value)
    for word in words:
        assert word in message, f"message {message!r} lacks {word!r}"
    for name, x in before.items():
        assert torch.equal(_bytes(kw[name]), _bytes(x)), (
            f"{name} was written before the error"
        )


@pytest.mark.parametrize("exc,words,mutate", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_input_is_named(exc, words, mutate):
    _run_bad(valid_call, exc, words, mutate)


@pytest.mark.parametrize("exc,words,mutate", [c[1:] for c in BAD_PAGED], ids=[c[0] for c in BAD_PAGED])
def test_bad_paged_input_is_named(exc, words, mutate):
    _run_bad(paged_call, exc, words, mutate)


def test_valid_calls_pass():
    """The mutations above start from calls that are valid (so each failure is the mutation's)."""
    for make in (valid_call, paged_call):
        kw = make()
        out = ragged_attn.attention(**kw)
        assert out is kw["out"] and torch.isfinite(out).all()


def test_cute_backend_on_cpu_declines_with_reason():
    kw = valid_call()
    with pytest.raises(NotImplementedError, match='backend="reference"'):
        ragged_attn.attention(**kw, backend="cute")
    assert torch.all(kw["out"] == 3.0)


def test_all_meta_call_with_out_names_the_meta_tensors():
    """Meta tensors share no memory (every data_ptr is 0): the error is the meta one, not an overlap."""
    kw = {name: x.to("meta") if isinstance(x, torch.Tensor) else x for name, x in valid_call().items()}
    with pytest.raises(ValueError, match="meta tensors carry no data") as info:
        ragged_attn.attention(**kw)
    assert "overlapping" not in str(info.value)


def test_out_apart_from_the_metadata_passes():
    """Neighbouring but disjoint memory is not an overlap: metadata stored right after out's end."""
    kw = valid_call()
    buf = torch.full((TOTAL * H_Q * D + 8,), 3.0, dtype=torch.bfloat16)
    kw["out"] = buf[: TOTAL * H_Q * D].view(TOTAL, H_Q, D)
    tail = buf[TOTAL * H_Q * D :].view(torch.int32)
    tail.copy_(torch.tensor([0, 5, 5, 16], dtype=torch.int32))
    kw["cu_seqlens_q"] = tail
    out = ragged_attn.attention(**kw)
    assert out is kw["out"] and torch.isfinite(out).all() and tail.tolist() == [0, 5, 5, 16]
