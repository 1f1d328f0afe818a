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
    "out-last-dim-strided": lambda a: a.update(out=_like(a, (40, 128, 8)).transpose(1, 2)),
}

PREDICATE_MUTATIONS = {
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
