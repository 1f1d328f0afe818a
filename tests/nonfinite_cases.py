"""Non-finite inputs: the one definition, its oracle and its cases, shared by the CPU test of the
reference (tests/test_nonfinite.py) and the GPU test of the kernel (tests/gpu/test_api_gpu.py).

Definition (docs/SUPPORT_MATRIX.md "Non-finite inputs"): row i of a sequence is computed over
the keys it may see and nothing else, in IEEE arithmetic. NaN/inf in a key or value it may not
see never reaches it.

The oracle below writes that definition down literally: for each (row, head) it gathers the
indices of the keys the row may see, and computes softmax(q k^T * scale) v over those rows of
k and v only, in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class NonFiniteCase:
    """Ragged sequences with NaN/inf planted in given (token, kv head, column) places of k or v.

    plant: ((tensor "k" or "v", global key token, kv head or None for all, column or None for all,
    value), ...).
    """

    name: str
    lens_q: tuple[int, ...]
    lens_k: tuple[int, ...]
    h_q: int = 2
    h_kv: int = 1
    d: int = 64
    causal: bool | str = False
    window: tuple[int, int] = (-1, -1)
    plant: tuple = field(default_factory=tuple)

    def make(self, device="cpu", dtype=torch.float32, seed=0):
        g = torch.Generator().manual_seed(seed)
        tq, tk = sum(self.lens_q), sum(self.lens_k)
        q = torch.randn(tq, self.h_q, self.d, generator=g)
        k = torch.randn(tk, self.h_kv, self.d, generator=g)
        v = torch.randn(tk, self.h_kv, self.d, generator=g)
        for which, token, head, col, value in self.plant:
            t = k if which == "k" else v
            t[token, slice(None) if head is None else head, slice(None) if col is None else col] = value
        cu_q = torch.tensor([0] + list(_cumsum(self.lens_q)), dtype=torch.int32)
        cu_k = torch.tensor([0] + list(_cumsum(self.lens_k)), dtype=torch.int32)
        args = tuple(x.to(dtype).to(device) for x in (q, k, v)) + (cu_q.to(device), cu_k.to(device))
        kwargs = dict(max_seqlen_q=max(self.lens_q), max_seqlen_k=max(self.lens_k), causal=self.causal,
                      window_size=self.window)  # fmt: skip
        return args, kwargs


def _cumsum(lens):
    total = 0
    for n in lens:
        total += n
        yield total


def visible_keys(case: NonFiniteCase, lq: int, lk: int, i: int) -> list[int]:
    """The keys query i of a sequence (lq queries, lk keys) may see, written from the definition."""
    offset = 0 if case.causal == "top_left" else lk - lq
    left, right = case.window
    if case.causal:
        right = 0
    lo = 0 if left < 0 else i + offset - left
    hi = lk - 1 if right < 0 else i + offset + right
    return [j for j in range(lk) if lo <= j <= hi]


def oracle(case: NonFiniteCase, q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (total_q, H_q, D) float64, lse (H_q, total_q) float64, natural log), per row over its
    visible keys only. Rows that see no key: O = 0, LSE = -inf."""
    q, k, v = (x.double().cpu() for x in (q, k, v))
    ratio = case.h_q // case.h_kv
    scale = 1.0 / math.sqrt(case.d)
    out = torch.zeros(q.shape[0], case.h_q, case.d, dtype=torch.float64)
    lse = torch.full((case.h_q, q.shape[0]), -math.inf, dtype=torch.float64)
    q0 = k0 = 0
    for lq, lk in zip(case.lens_q, case.lens_k):
        for i in range(lq):
            keys = visible_keys(case, lq, lk, i)
            if not keys:
                continue
            idx = torch.tensor(keys) + k0
            for h in range(case.h_q):
                s = (k[idx, h // ratio] @ q[q0 + i, h]) * scale
                row_lse = torch.logsumexp(s, 0)
                p = torch.exp(s - row_lse)
                out[q0 + i, h] = p @ v[idx, h // ratio]
                lse[h, q0 + i] = row_lse
        q0, k0 = q0 + lq, k0 + lk
    return out, lse


NAN, INF = math.nan, math.inf

CASES = [
    # Issue 11's case: NaN in V row 0, causal with a window of 4: rows 0..4 see key 0, 59 do not.
    NonFiniteCase("v-row0-causal-window4", (64,), (64,), causal=True, window=(4, 0), plant=(("v", 0, None, None, NAN),)),
    NonFiniteCase("k-row0-causal-window4", (64,), (64,), causal=True, window=(4, 0), plant=(("k", 0, None, None, NAN),)),
    NonFiniteCase("v-one-column", (48,), (48,), causal=True, plant=(("v", 20, None, 5, NAN),)),
    NonFiniteCase("v-inf-masked-and-seen", (40,), (40,), causal=True, window=(8, 0),
                  plant=(("v", 3, None, 0, INF), ("v", 30, None, 1, -INF))),
    NonFiniteCase("top-left-ahead-keys", (16,), (80,), causal="top_left", plant=(("v", 40, None, None, NAN),
                                                                                 ("k", 70, None, None, NAN))),
    NonFiniteCase("window-right-only", (32,), (32,), window=(-1, 3), plant=(("v", 31, None, None, NAN),)),
    NonFiniteCase("gqa-one-kv-head", (30,), (30,), h_q=4, h_kv=2, causal=True, plant=(("v", 10, 1, None, NAN),)),
    NonFiniteCase("two-sequences", (20, 33), (25, 40), causal=True, window=(6, 0),
                  plant=(("v", 0, None, None, NAN), ("k", 25 + 2, None, None, NAN))),
    NonFiniteCase("k-nan-top-left-gqa", (16, 40), (80, 40), h_q=4, h_kv=2, causal="top_left", window=(5, 0),
                  plant=(("k", 30, 0, None, NAN), ("k", 80 + 3, 1, 7, NAN))),
    NonFiniteCase("k-nan-window-both-sides", (64,), (96,), window=(10, 10), plant=(("k", 50, None, None, NAN),)),
    NonFiniteCase("k-inf-seen-and-masked", (24,), (24,), causal=True, window=(3, 0), plant=(("k", 6, None, None, INF),)),
    # A long sequence: the NaN key lies in key tiles that most query tiles skip on the kernel.
    NonFiniteCase("long-sequence-first-key", (600,), (600,), causal=True, window=(100, 0),
                  plant=(("v", 0, None, None, NAN), ("k", 1, None, None, NAN))),
]
