"""Correctness spot check: nothing fast and wrong is reported as fast.

Each system's output on input set 0 is compared with the reference (float32 throughout) on a fixed
sample: sequences first, longest and last; query-head chunks first and last (HEAD_CHUNK heads,
widened to whole GQA groups). The reference runs one sequence and one head chunk at a time, so the
largest workloads (1 x 16384 with 128 heads) fit in memory. The oracle is
`ragged_attn.reference.attention_reference`; if that module cannot be imported, a local float32
softmax stands in and the report says so.

Tolerance (docs/DESIGN.md, Testing): |out - ref| <= ATOL + RTOL * |ref| for bf16/fp16 outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .workloads import Inputs, Workload, gather_kv

ATOL = 2e-2
RTOL = 2e-2
HEAD_CHUNK = 8


@dataclass
class RefSlice:
    b: int  # sequence
    q0: int  # first token of the sequence in q
    lq: int
    h0: int  # query heads [h0, h1)
    h1: int
    ref: torch.Tensor  # (lq, h1 - h0, d_v) float32


def sample_sequences(w: Workload) -> list[int]:
    longest = max(range(w.batch), key=lambda b: w.q_lens[b] * w.k_lens[b])
    return sorted({0, longest, w.batch - 1})


def sample_head_chunks(w: Workload) -> list[tuple[int, int]]:
    ratio = w.model.h_q // w.model.h_kv
    size = max(ratio, HEAD_CHUNK // ratio * ratio)
    first = (0, min(size, w.model.h_q))
    last = (max(0, w.model.h_q - size), w.model.h_q)
    return sorted({first, last})


def _oracle():
    try:
        from ragged_attn.reference import attention_reference

        return attention_reference, "ragged_attn.reference"
    except ImportError:
        return _local_reference, "local float32 (ragged_attn.reference not importable)"


def _local_reference(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal=False,
                     softmax_scale=None, **_):
    """One sequence, float32: softmax(scale * q k^T, bottom-right causal) v. q (lq, H, d)."""
    lq, lk = q.shape[0], k.shape[0]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    ratio = q.shape[1] // k.shape[1]
    kf = k.float().repeat_interleave(ratio, dim=1)
    vf = v.float().repeat_interleave(ratio, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), kf) * scale
    if causal:
        i = torch.arange(lq, device=q.device).unsqueeze(1) + (lk - lq)
        j = torch.arange(lk, device=q.device).unsqueeze(0)
        s = s.masked_fill(j > i, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("hqk,khd->qhd", p, vf)


def reference_slices(w: Workload, inp: Inputs) -> tuple[list[RefSlice], str]:
    """The reference output on the sample; and the oracle's name."""
    fn, name = _oracle()
    ratio = w.model.h_q // w.model.h_kv
    dev = inp.q.device
    out = []
    for b in sample_sequences(w):
        q0 = sum(w.q_lens[:b])
        lq, lk = w.q_lens[b], w.k_lens[b]
        k, v = gather_kv(inp, w, b)
        for h0, h1 in sample_head_chunks(w):
            qs = inp.q[q0:q0 + lq, h0:h1].contiguous()
            ks = k[:, h0 // ratio:h1 // ratio].contiguous()
            vs = v[:, h0 // ratio:h1 // ratio].contiguous()
            cq = torch.tensor([0, lq], dtype=torch.int32, device=dev)
            ck = torch.tensor([0, lk], dtype=torch.int32, device=dev)
            ref = fn(qs, ks, vs, cq, ck, lq, lk, causal=w.causal)
            if isinstance(ref, tuple):
                ref = ref[0]
            out.append(RefSlice(b, q0, lq, h0, h1, ref.float()))
    return out, name


def max_error(out: torch.Tensor, refs: list[RefSlice]) -> tuple[float, bool]:
    """(max |out - ref| over the sample, within tolerance). NaN or Inf anywhere fails."""
    worst, ok = 0.0, True
    for r in refs:
        got = out[r.q0:r.q0 + r.lq, r.h0:r.h1].float()
        if not torch.isfinite(got).all():
            return float("nan"), False
        diff = (got - r.ref).abs()
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
        ok = ok and bool((diff <= ATOL + RTOL * r.ref.abs()).all())
    return worst, ok
