"""Calls that the launch fast path must not serve, shared by the CPU tests (a model of the TVM-FFI
entry's checks) and the GPU tests (the real entry, compiled by the CuTe DSL).

Each mutation takes the keyword arguments of `BoundKernel.try_launch` for the base problem of
`base_arguments` (2 sequences, 40 query / 50 key tokens, 8/2 heads, d 128, bf16) and changes one
thing. ENTRY_MUTATIONS are what the compiled entry rejects (ValueError/TypeError before any launch);
PREDICATE_MUTATIONS are what `try_launch` itself sends to the checked path before calling it.
"""

from __future__ import annotations

import torch

BF16 = torch.bfloat16


def base_arguments(device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(BF16).to(device)

    return dict(
        q=randn(40, 8, 128), k=randn(50, 2, 128), v=randn(50, 2, 128),
        cu_q=torch.tensor([0, 10, 40], dtype=torch.int32, device=device),
        cu_k=torch.tensor([0, 20, 50], dtype=torch.int32, device=device),
        max_q=30, seqused_q=None, seqused_k=None, page_table=None, out=None, lse=None,
    )  # fmt: skip


def _like(a, shape, dtype=BF16):
    return torch.randn(shape, device=a["q"].device).to(dtype)


def _offset_view(a, shape, elements):
    """A tensor of `shape` whose base address is `elements` bf16 elements past an allocation."""
    n = 1
    for s in shape:
        n *= s
    return torch.randn(n + elements, device=a["q"].device).to(BF16)[elements:].view(shape)


ENTRY_MUTATIONS = {
    "q-dtype": lambda a: a.update(q=a["q"].half()),
    "k-dtype": lambda a: a.update(k=a["k"].half()),
    "cu-dtype": lambda a: a.update(cu_q=a["cu_q"].long()),
    "cu-rank": lambda a: a.update(cu_q=a["cu_q"][None], cu_k=a["cu_k"][None]),
    "cu-lengths-differ": lambda a: a.update(cu_k=a["cu_k"][:-1]),
    "cu-strided": lambda a: a.update(cu_q=torch.stack([a["cu_q"], a["cu_q"]], 1)[:, 0]),
    "q-stride-not-8": lambda a: a.update(q=_like(a, (40, 8, 132))[..., :128]),
    "q-last-dim-strided": lambda a: a.update(q=_like(a, (40, 128, 8)).transpose(1, 2)),
    "q-base-8-bytes-off": lambda a: a.update(q=_offset_view(a, (40, 8, 128), 4)),
    "k-v-tokens-differ": lambda a: a.update(v=_like(a, (49, 2, 128))),
    "k-v-heads-differ": lambda a: a.update(v=_like(a, (50, 1, 128))),
    "k-head-dim-differs-from-q": lambda a: a.update(k=_like(a, (50, 2, 64))),
    "out-dtype": lambda a: a.update(out=_like(a, (40, 8, 128), torch.float16)),
    "out-tokens": lambda a: a.update(out=_like(a, (41, 8, 128))),
    "out-head-dim": lambda a: a.update(out=_like(a, (40, 8, 64))),
}

PREDICATE_MUTATIONS = {
    # A caller's out meets the entry's stride and alignment rules in the predicate too: a split
    # launch hands the entry a workspace instead of out (fast_launch.try_launch).
    "out-last-dim-strided": lambda a: a.update(out=_like(a, (40, 128, 8)).transpose(1, 2)),
    "out-stride-not-8": lambda a: a.update(out=_like(a, (40, 8, 132))[..., :128]),
    "out-base-8-bytes-off": lambda a: a.update(out=_offset_view(a, (40, 8, 128), 4)),
    "max-q-above-int32": lambda a: a.update(max_q=2**31),
    "seqused-dtype": lambda a: a.update(seqused_k=torch.tensor([5, 7], device=a["q"].device)),
    "head-dim-not-multiple-of-8": lambda a: a.update(
        q=_like(a, (40, 8, 128))[..., :124], k=_like(a, (50, 2, 128))[..., :124]
    ),
    "k-rank": lambda a: a.update(k=a["k"][None]),
    "q-not-a-tensor": lambda a: a.update(q=a["q"].tolist()),
    "max-q-none": lambda a: a.update(max_q=None),
    "max-q-zero": lambda a: a.update(max_q=0),
    "max-q-float": lambda a: a.update(max_q=30.0),
    "max-q-bool": lambda a: a.update(max_q=True),
    "max-k-negative": lambda a: a.update(max_k=-5),
    "max-k-above-int32": lambda a: a.update(max_k=2**31),
    "lse-buffer": lambda a: a.update(lse=torch.empty(8, 40, device=a["q"].device)),
    "empty-q": lambda a: a.update(q=a["q"][:0]),
    "empty-k": lambda a: a.update(k=a["k"][:0], v=a["v"][:0]),
    "no-sequences": lambda a: a.update(cu_q=a["cu_q"][:1], cu_k=a["cu_k"][:1]),
    "head-dims-of-another-class": lambda a: a.update(
        q=_like(a, (40, 8, 64)), k=_like(a, (50, 2, 64)), v=_like(a, (50, 2, 64))
    ),
    "gqa-indivisible": lambda a: a.update(k=_like(a, (50, 3, 128)), v=_like(a, (50, 3, 128))),
    "more-kv-heads-than-q": lambda a: a.update(q=_like(a, (40, 1, 128))),
    "heads-above-grid": lambda a: a.update(q=_like(a, (1, 65536, 8)), k=_like(a, (50, 1, 8)), v=_like(a, (50, 1, 8))),
    "seqused-shape": lambda a: a.update(seqused_q=torch.tensor([1, 2, 3], dtype=torch.int32, device=a["q"].device)),
    "paged": lambda a: a.update(page_table=torch.zeros(2, 1, dtype=torch.int32, device=a["q"].device)),
    "out-is-q": lambda a: a.update(out=a["q"]),
    "out-overlaps-v": lambda a: a.update(out=_overlapping_out(a)),
    "out-expanded": lambda a: a.update(out=_like(a, (1, 8, 128)).expand(40, 8, 128)),
    "out-heads-share-rows": lambda a: a.update(out=_like(a, (40, 8, 128)).as_strided((40, 8, 128), (128, 128, 1))),
    # Issue 11: an out holding the metadata the kernel reads while it writes out.
    "out-overlaps-cu-q": lambda a: _metadata_inside_out(a, "cu_q", [0, 10, 40]),
    "out-overlaps-cu-k": lambda a: _metadata_inside_out(a, "cu_k", [0, 20, 50]),
    "out-overlaps-seqused-q": lambda a: _metadata_inside_out(a, "seqused_q", [5, 7]),
    "out-overlaps-seqused-k": lambda a: _metadata_inside_out(a, "seqused_k", [5, 7]),
    "out-ends-on-cu-q": lambda a: _metadata_inside_out(a, "cu_q", [0, 10, 40], at=40 * 8 * 128 // 2 - 1),
}


def _metadata_inside_out(a, name, values, at=256):
    """An out whose bytes hold `values` as int32 at int32 offset `at` (the last one may run past
    out's end), passed as argument `name`: out[...] and the metadata share memory."""
    device = a["q"].device
    buf = torch.zeros(40 * 8 * 128 + 2 * len(values), device=device).to(BF16)
    view = buf.view(torch.int32)[at : at + len(values)]
    view.copy_(torch.tensor(values, dtype=torch.int32, device=device))
    a["out"], a[name] = buf[: 40 * 8 * 128].view(40, 8, 128), view


def _overlapping_out(a):
    """An out whose last rows are v's first rows."""
    buf = torch.randn(40 * 8 * 128 + 50 * 2 * 128, device=a["q"].device).to(BF16)
    a["v"] = buf[39 * 8 * 128:39 * 8 * 128 + 50 * 2 * 128].view(50, 2, 128)
    return buf[: 40 * 8 * 128].view(40, 8, 128)


# --- page pools (a paged class's fast path) ------------------------------------------------------
# The base paged call: the same q (2 sequences of 10 + 30 queries, 8 heads, d 128, bf16), keys in
# page pools of 8 pages x 16 slots x 2 heads (NHD (8, 16, 2, 128) or HND (8, 2, 16, 128)), 20 and 50
# keys through a (2, 4) int32 page table, key lengths from seqused_k (cu_seqlens_k None, as vLLM).
# The mutations take (arguments, kv_layout).

KV_LAYOUTS = ("NHD", "HND")


def _pool_shape(kv_layout, num_pages, page_size, h_kv, d):
    return (num_pages, page_size, h_kv, d) if kv_layout == "NHD" else (num_pages, h_kv, page_size, d)


def paged_base_arguments(kv_layout="NHD", device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(BF16).to(device)

    shape = _pool_shape(kv_layout, 8, 16, 2, 128)
    return dict(
        q=randn(40, 8, 128), k=randn(*shape), v=randn(*shape),
        cu_q=torch.tensor([0, 10, 40], dtype=torch.int32, device=device), cu_k=None, max_q=30,
        seqused_q=None, seqused_k=torch.tensor([20, 50], dtype=torch.int32, device=device),
        page_table=torch.tensor([[3, 1, 0, 0], [5, 0, 7, 2]], dtype=torch.int32, device=device),
        out=None, lse=None,
    )  # fmt: skip


def _pools(a, layout, num_pages=8, page_size=16, h_kv=2, d_qk=128, d_v=128, dtype=BF16):
    device = a["q"].device
    a["k"] = torch.randn(_pool_shape(layout, num_pages, page_size, h_kv, d_qk), device=device).to(dtype)
    a["v"] = torch.randn(_pool_shape(layout, num_pages, page_size, h_kv, d_v), device=device).to(dtype)


def _pool_over_token_limit(a, layout):
    """Pages of 2**20 slots (stride-0 views, no memory) and 512 columns: max_pages * page_size = 2**29
    keys per sequence, the kernel's token limit (the checked path: NotImplementedError)."""
    shape = _pool_shape(layout, 1, 2**20, 2, 128)
    a["k"] = a["k"][:1, :1, :1].expand(shape) if layout == "NHD" else a["k"][:1, :, :1].expand(shape)
    a["v"] = a["v"][:1, :1, :1].expand(shape) if layout == "NHD" else a["v"][:1, :, :1].expand(shape)
    a["page_table"] = torch.zeros(2, 512, dtype=torch.int32, device=a["q"].device)


def _pool_inside_out(a, layout, name):
    """An out whose last rows are the first bytes of pool `name` (k or v)."""
    n_out, n_pool = 40 * 8 * 128, 8 * 16 * 2 * 128
    buf = torch.randn(n_out + n_pool, device=a["q"].device).to(BF16)
    a[name] = buf[n_out - 128 : n_out - 128 + n_pool].view(_pool_shape(layout, 8, 16, 2, 128))
    a["out"] = buf[:n_out].view(40, 8, 128)


def _table_inside_out(a, at=256):
    """An out whose bytes hold the page table (int32 (2, 4) at int32 offset `at`)."""
    device = a["q"].device
    buf = torch.zeros(40 * 8 * 128 + 16, device=device).to(BF16)
    view = buf.view(torch.int32)[at : at + 8].view(2, 4)
    view.copy_(a["page_table"])
    a["out"], a["page_table"] = buf[: 40 * 8 * 128].view(40, 8, 128), view


def _int32(a, values):
    return torch.tensor(values, dtype=torch.int32, device=a["q"].device)


def _ragged_call(a, layout):
    """A valid ragged call (k, v (50, 2, 128) with cu_seqlens_k, no page table) offered to a paged class."""
    a.update(k=_like(a, (50, 2, 128)), v=_like(a, (50, 2, 128)), cu_k=_int32(a, [0, 20, 50]), seqused_k=None,
             page_table=None)  # fmt: skip


PAGED_PREDICATE_MUTATIONS = {
    "ragged-call": _ragged_call,
    "no-page-table": lambda a, layout: a.update(page_table=None),
    "no-key-lengths": lambda a, layout: a.update(seqused_k=None, cu_k=None),
    "page-table-dtype": lambda a, layout: a.update(page_table=a["page_table"].long()),
    "page-table-rank-1": lambda a, layout: a.update(page_table=a["page_table"][0]),
    "page-table-rank-3": lambda a, layout: a.update(page_table=a["page_table"][None]),
    "page-table-rows": lambda a, layout: a.update(page_table=torch.cat([a["page_table"], a["page_table"][:1]])),
    "page-table-strided-rows": lambda a, layout: a.update(page_table=a["page_table"].repeat(1, 2)[:, ::2]),
    "page-table-no-columns": lambda a, layout: a.update(page_table=a["page_table"][:, :0]),
    "page-table-not-a-tensor": lambda a, layout: a.update(page_table=a["page_table"].tolist()),
    "empty-pool": lambda a, layout: a.update(k=a["k"][:0], v=a["v"][:0]),
    "pages-of-no-slots": lambda a, layout: _pools(a, layout, page_size=0),
    "pages-above-token-limit": _pool_over_token_limit,
    "pool-rank-3": lambda a, layout: a.update(k=a["k"][0], v=a["v"][0]),
    "pool-rank-5": lambda a, layout: a.update(k=a["k"][None], v=a["v"][None]),
    "gqa-indivisible": lambda a, layout: _pools(a, layout, h_kv=3),
    "more-kv-heads-than-q": lambda a, layout: a.update(q=_like(a, (40, 1, 128))),
    "head-dims-of-another-class": lambda a, layout: (
        a.update(q=_like(a, (40, 8, 64))), _pools(a, layout, d_qk=64, d_v=64)
    ),
    "head-dim-not-multiple-of-8": lambda a, layout: a.update(q=a["q"][..., :124], k=a["k"][..., :124]),
    "seqused-k-shape": lambda a, layout: a.update(seqused_k=_int32(a, [20, 50, 1])),
    "seqused-k-dtype": lambda a, layout: a.update(seqused_k=a["seqused_k"].long()),
    "seqused-q-shape": lambda a, layout: a.update(seqused_q=_int32(a, [1, 2, 3])),
    "lse-buffer": lambda a, layout: a.update(lse=torch.empty(8, 40, device=a["q"].device)),
    "max-q-none": lambda a, layout: a.update(max_q=None),
    "max-q-zero": lambda a, layout: a.update(max_q=0),
    "max-k-negative": lambda a, layout: a.update(max_k=-5),
    "empty-q": lambda a, layout: a.update(q=a["q"][:0]),
    "no-sequences": lambda a, layout: a.update(
        cu_q=a["cu_q"][:1], page_table=a["page_table"][:0], seqused_k=a["seqused_k"][:0]
    ),
    "q-not-a-tensor": lambda a, layout: a.update(q=a["q"].tolist()),
    "k-requires-grad": lambda a, layout: a.update(k=a["k"].clone().requires_grad_(True)),
    "sinks-to-a-plain-class": lambda a, layout: a.update(sinks=torch.zeros(8, device=a["q"].device)),
    "out-is-q": lambda a, layout: a.update(out=a["q"]),
    "out-expanded": lambda a, layout: a.update(out=_like(a, (1, 8, 128)).expand(40, 8, 128)),
    "out-overlaps-k-pool": lambda a, layout: _pool_inside_out(a, layout, "k"),
    "out-overlaps-v-pool": lambda a, layout: _pool_inside_out(a, layout, "v"),
    "out-overlaps-page-table": lambda a, layout: _table_inside_out(a),
    "out-ends-on-page-table": lambda a, layout: _table_inside_out(a, at=40 * 8 * 128 // 2 - 1),
    "out-overlaps-seqused-k": lambda a, layout: _metadata_inside_out(a, "seqused_k", [20, 50]),
    "out-overlaps-cu-k": lambda a, layout: _metadata_inside_out(a, "cu_k", [0, 20, 50]),
    "out-overlaps-cu-q": lambda a, layout: _metadata_inside_out(a, "cu_q", [0, 10, 40]),
}

PAGED_ENTRY_MUTATIONS = {
    "q-dtype": lambda a, layout: a.update(q=a["q"].half()),
    "k-pool-dtype": lambda a, layout: a.update(k=a["k"].half()),
    "cu-q-dtype": lambda a, layout: a.update(cu_q=a["cu_q"].long()),
    "cu-k-lengths-differ": lambda a, layout: a.update(cu_k=_int32(a, [0, 20])),
    "v-pool-pages-differ": lambda a, layout: a.update(v=a["v"][:7]),
    "v-pool-page-size-differs": lambda a, layout: a.update(v=a["v"].narrow(1 if layout == "NHD" else 2, 0, 8)),
    "v-pool-heads-differ": lambda a, layout: a.update(v=a["v"].narrow(2 if layout == "NHD" else 1, 0, 1)),
    "k-head-dim-differs-from-q": lambda a, layout: a.update(k=a["k"][..., :64].contiguous()),
    "k-pool-stride-not-8": lambda a, layout: a.update(
        k=torch.randn(_pool_shape(layout, 8, 16, 2, 132)).to(BF16).to(a["q"].device)[..., :128]
    ),
    "k-pool-last-dim-strided": lambda a, layout: a.update(k=a["k"].mT.contiguous().mT),
    "k-pool-base-8-bytes-off": lambda a, layout: a.update(k=_offset_view(a, tuple(a["k"].shape), 4)),
    "out-dtype": lambda a, layout: a.update(out=_like(a, (40, 8, 128), torch.float16)),
    "out-tokens": lambda a, layout: a.update(out=_like(a, (41, 8, 128))),
    "out-head-dim": lambda a, layout: a.update(out=_like(a, (40, 8, 64))),
}
