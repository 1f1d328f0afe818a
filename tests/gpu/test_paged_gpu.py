"""Paged KV on the sm90 kernel (issue 5), through the public API and the adapters, against the reference.

Every pool page that no table references, and every slot past seqused_k inside a sequence's last
page, holds NaN (tests/cases.py builds the pools that way, pages shuffled inside the pool): the
outputs must stay finite and match, so nothing outside a sequence's keys may reach S or P V.
Outputs and LSE buffers start NaN-poisoned; every call runs under sync-debug "error".
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import ragged_attn
from ragged_attn.compat.flash_attn import flash_attn_varlen_func
from ragged_attn.compat.flashinfer import cudnn_batch_prefill_with_kv_cache
from tests.cases import Case, close, valid_rows

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="needs a CUDA GPU (sm_90a)",
    ),
]

PAGE_SIZES = (1, 3, 8, 16, 64, 128, 256)
LAYOUTS = ("NHD", "HND")
MASKS = ("none", "causal", "window")
RATIOS = (1, 2, 4, 8, 3)
LSE_LAYOUTS = (("head_major", "ln"), ("token_major", "log2"), ("padded", "ln"), ("padded", "log2"))


def lengths_for(ps: int, seed: int) -> tuple[list[int], list[int]]:
    """Query/key lengths around one page size: shorter than a page, not a multiple of the page size,
    an exact multiple, an empty sequence, and one long enough for several key blocks."""
    import random

    r = random.Random(seed)
    lens_k = [max(1, ps // 2), ps * 3 + 1, ps * 2, 0, r.randint(300, 700)]
    lens_q = [min(lk, r.randint(1, 40)) for lk in lens_k[:3]] + [r.randint(0, 5), r.randint(200, lens_k[4])]
    return lens_q, lens_k


def grid_cases():
    cases = []
    for i, (ps, layout, mask) in enumerate(itertools.product(PAGE_SIZES, LAYOUTS, MASKS)):
        lens_q, lens_k = lengths_for(ps, 500 + i)
        ratio = RATIOS[i % len(RATIOS)]
        h_kv = 2 if ratio <= 4 else 1
        lse_layout, lse_base = LSE_LAYOUTS[i % len(LSE_LAYOUTS)]
        causal = {"none": False, "causal": True if i % 4 else "top_left", "window": False}[mask]
        window = (100, 17) if mask == "window" else (-1, -1)
        cases.append(Case(500 + i, lens_q, lens_k, h_kv * ratio, h_kv, 128, 128, dtype=torch.bfloat16,
                          causal=causal, window=window, page_size=ps, kv_layout=layout,
                          lse_layout=lse_layout, lse_base=lse_base, q_gaps=i % 5 == 0))
    return cases


# Other head-dim classes (their own tile_n and gather widths: d32 tile_n 192 with 4 threads per
# row, d96 3 chunks per thread, d192/128 K and V of different widths, d256 tile_n 80), and real
# head dims riding an envelope (columns past the real dim must be zero-filled, not stale smem).
DIM_CASES = [
    Case(601, [7, 300], [20, 400], 8, 2, 32, 32, dtype=torch.float16, causal=True, page_size=3, kv_layout="HND"),
    Case(602, [64, 1], [64, 900], 8, 1, 64, 64, dtype=torch.bfloat16, page_size=16, lse_layout="token_major"),
    Case(603, [200], [333], 6, 2, 96, 96, dtype=torch.bfloat16, window=(50, 0), page_size=64),
    Case(604, [129, 3], [260, 17], 16, 2, 192, 128, dtype=torch.bfloat16, causal=True, page_size=8, kv_layout="HND"),
    Case(605, [90, 0, 11], [500, 3, 80], 4, 4, 256, 256, dtype=torch.bfloat16, causal=True, page_size=5),
    Case(606, [100, 5], [257, 40], 8, 2, 112, 112, dtype=torch.bfloat16, causal=True, page_size=16, kv_layout="HND"),
    Case(607, [33], [129], 4, 1, 40, 40, dtype=torch.bfloat16, page_size=7),
    # d64 causal with GQA 4: the paged class packs the group's query heads into 192-row tiles
    # (pack_gqa), tiles whose items start past their first row block included (item_shift: the
    # producer warps 1-3 must load warp 0's block range; a mismatch hangs).
    Case(608, [300, 1000, 77, 0, 513], [300, 1000, 77, 0, 513], 32, 8, 64, 64, dtype=torch.bfloat16, causal=True,
         page_size=16, lse_layout="token_major"),
    Case(609, [129, 64, 1500, 2], [129, 64, 1500, 2], 16, 4, 64, 64, dtype=torch.bfloat16, causal=True,
         page_size=128, kv_layout="HND", lse_layout="head_major", lse_base="log2"),
    Case(610, [40, 700], [900, 701], 12, 4, 64, 64, dtype=torch.float16, causal=True, page_size=64),
    # ... by the gather (page 5: no boxes), and decode rows over long keys (GQA 8).
    Case(611, [70, 200, 5, 130], [70, 333, 5, 900], 12, 3, 64, 64, dtype=torch.bfloat16, causal=True,
         page_size=5, kv_layout="HND", lse_layout="token_major", lse_base="log2"),
    Case(612, [1] * 6, [3000, 1, 4096, 777, 2049, 130], 16, 2, 64, 64, dtype=torch.bfloat16, causal=True,
         page_size=16, lse_layout="token_major"),
]

# Decode-shaped rows: one query per sequence over long paged KV, GQA up to 8.
DECODE_CASES = [
    Case(700 + i, [1] * len(lens_k), lens_k, h_q, h_kv, 128, 128, dtype=torch.bfloat16, causal=causal,
         page_size=ps, kv_layout=layout, lse_layout="padded", lse_base="log2")
    for i, (lens_k, h_q, h_kv, causal, ps, layout) in enumerate([
        ([4096, 1, 2049, 777], 8, 1, True, 16, "NHD"),
        ([4000, 4096, 15], 8, 2, False, 64, "HND"),
        ([3333, 129], 8, 4, True, 1, "NHD"),
        ([4096, 2500], 16, 2, False, 256, "HND"),
    ])
]  # fmt: skip


def run_and_check(case: Case, *, return_lse: bool = True):
    args, kwargs = case.make("cuda")
    q, _, _, cu_q = args[:4]
    total_q = q.shape[0]
    out = torch.full((total_q, case.h_q, case.d_v), math.nan, dtype=case.dtype, device="cuda")
    lse = None
    if return_lse:
        shape = ragged_attn.problem.build_problem(*args, **kwargs, return_lse=True)[0].lse_shape()
        lse = torch.full(shape, math.nan, device="cuda")
    assert ragged_attn.layout_class_of(*args, **kwargs, return_lse=return_lse).kv == "paged"
    before = [a.clone() for a in args[:3]]
    torch.cuda.set_sync_debug_mode("error")
    try:
        result = ragged_attn.attention(*args, **kwargs, return_lse=return_lse, out=out, lse=lse, backend="cute")
    finally:
        torch.cuda.set_sync_debug_mode(0)
    got_out = result[0] if return_lse else result
    assert got_out is out
    want = ragged_attn.attention(*args, **kwargs, return_lse=return_lse, backend="reference")
    want_out = want[0] if return_lse else want
    rows = valid_rows(case, cu_q)
    close(out[rows], want_out[rows], f"{case.id} out")
    others = sorted(set(range(total_q)) - set(rows))
    if others:
        assert torch.isnan(out[others]).all(), f"{case.id}: rows outside every sequence were written"
    if return_lse:
        want_lse = want[1]
        if case.lse_layout == "padded":
            close(lse, want_lse, f"{case.id} lse", atol=1e-2, rtol=0)
        elif case.lse_layout == "token_major":
            close(lse[rows], want_lse[rows], f"{case.id} lse", atol=1e-2, rtol=0)
        else:
            close(lse[:, rows], want_lse[:, rows], f"{case.id} lse", atol=1e-2, rtol=0)
    for name, a, b in zip("qkv", args[:3], before):  # the pools hold NaN: compare with NaN as a value
        assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)) and torch.equal(a.isnan(), b.isnan()), (
            f"{case.id}: {name} changed"
        )


@pytest.mark.parametrize("case", grid_cases(), ids=lambda c: c.id)
def test_paged_grid(case):
    run_and_check(case)


@pytest.mark.parametrize("case", DIM_CASES, ids=lambda c: c.id)
def test_paged_head_dim_classes(case):
    run_and_check(case)


@pytest.mark.parametrize("case", DECODE_CASES, ids=lambda c: c.id)
def test_paged_decode_rows(case):
    run_and_check(case)


def test_paged_without_lse_and_every_page_size_one_kernel():
    """Page size, page count, layout (NHD/HND) and table width never compile another kernel."""
    first = Case(800, [40, 9], [70, 300], 8, 2, 128, 128, dtype=torch.bfloat16, causal=True, page_size=16)
    run_and_check(first, return_lse=False)
    compiles = ragged_attn.cache_info().compiles
    for j, (ps, layout) in enumerate(itertools.product(PAGE_SIZES, LAYOUTS)):
        case = Case(801 + j, [40, 9 + j], [70 + 13 * j, 300], 8, 2, 128, 128, dtype=torch.bfloat16, causal=True,
                    page_size=ps, kv_layout=layout)
        run_and_check(case, return_lse=False)
    assert ragged_attn.cache_info().compiles == compiles, "a page size or pool layout compiled another kernel"


def test_flash_attn_adapter_block_table_on_the_kernel():
    case = Case(901, [129, 1, 0, 256], [200, 1, 7, 300], 32, 8, 128, 128, dtype=torch.bfloat16, causal=True,
                page_size=16)
    (q, k, v, cu_q, _, mq, mk), kwargs = case.make("cuda")
    cu_k = torch.tensor([0] + list(itertools.accumulate(case.lens_k)), dtype=torch.int32, device="cuda")
    out, lse, none = flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, mk, causal=True, return_attn_probs=True,
                                            block_table=kwargs["page_table"], backend="cute")
    want, want_lse = ragged_attn.attention(q, k, v, cu_q, None, mq, mk, **kwargs, return_lse=True, backend="reference")
    rows = valid_rows(case, cu_q)
    assert none is None
    close(out[rows], want[rows], "out")
    close(lse[:, rows], want_lse[:, rows], "lse", atol=1e-2, rtol=0)


@pytest.mark.parametrize("return_lse", [True, False])
def test_flashinfer_adapter_block_tables_on_the_kernel(return_lse):
    case = Case(911, [17, 700, 8], [32, 1066, 8], 4, 1, 128, 128, dtype=torch.bfloat16, causal=True,
                page_size=16, kv_layout="HND", lse_layout="padded", lse_base="log2")
    (q, k, v, cu_q, _, mq, mk), kwargs = case.make("cuda")
    lq = torch.tensor(case.lens_q, dtype=torch.int32, device="cuda")
    lk = torch.tensor(case.lens_k, dtype=torch.int32, device="cuda")
    result = cudnn_batch_prefill_with_kv_cache(
        q, k, v, 1 / math.sqrt(128), None, max_token_per_sequence=mq, max_sequence_kv=mk,
        actual_seq_lens_q=lq.view(-1, 1, 1, 1), actual_seq_lens_kv=lk.view(-1, 1, 1, 1),
        block_tables=kwargs["page_table"], causal=True, return_lse=return_lse,
        batch_offsets_q=(cu_q * 4 * 128).view(-1, 1, 1, 1), ragged_attn_backend="cute",
    )  # fmt: skip
    out, lse = result
    want, want_lse = ragged_attn.attention(q, k, v, cu_q, None, mq, mk, **kwargs, return_lse=True, backend="reference")
    rows = valid_rows(case, cu_q)
    close(out[rows], want[rows], "out")
    if return_lse:
        close(lse, want_lse, "lse", atol=1e-2, rtol=0)
        assert torch.all(lse[2, 8:] == -math.inf)
    else:
        assert lse is None


def test_paged_cuda_graph_replay_with_new_lengths_and_pages():
    """A captured paged call replays with new key lengths and new page-table contents."""
    h_q, h_kv, d, ps, pages = 16, 4, 128, 16, 64
    g = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn(300, h_q, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(pages, ps, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(pages, ps, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    cu_q = torch.tensor([0, 100, 300], dtype=torch.int32, device="cuda")
    used_k = torch.tensor([200, 300], dtype=torch.int32, device="cuda")
    table = torch.randperm(pages, device="cuda", generator=g)[:40].to(torch.int32).view(2, 20)
    out = torch.empty(300, h_q, d, device="cuda", dtype=torch.bfloat16)
    kw = dict(seqused_k=used_k, page_table=table, causal=True)
    ragged_attn.attention(q, k, v, cu_q, None, 200, 320, **kw, out=out)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ragged_attn.attention(q, k, v, cu_q, None, 200, 320, **kw, out=out)
    for lens, seed in (([100, 200], 1), ([5, 320], 2), ([0, 1], 3)):
        used_k.copy_(torch.tensor(lens, dtype=torch.int32))
        table.copy_(torch.randperm(pages, generator=torch.Generator().manual_seed(seed))[:40].view(2, 20))
        out.fill_(math.nan)
        graph.replay()
        torch.cuda.synchronize()
        want = ragged_attn.attention(q, k, v, cu_q, None, 200, 320, **kw, backend="reference")
        close(out, want, f"graph replay with key lengths {lens}")
