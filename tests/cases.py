"""Random ragged / paged attention inputs and an independent float64 oracle for the tests."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch


@dataclass
class Case:
    """One randomized problem; `make()` turns it into tensors and keyword arguments."""

    seed: int
    lens_q: list[int]
    lens_k: list[int]
    h_q: int
    h_kv: int
    d_qk: int
    d_v: int
    dtype: torch.dtype = torch.float32
    causal: object = False
    window: tuple[int, int] = (-1, -1)
    page_size: int = 0  # 0 = ragged
    kv_layout: str = "NHD"
    lse_layout: str = "head_major"
    lse_base: str = "ln"
    q_gaps: bool = False  # sequences use fewer rows than the gap between starts (seqused_q)
    extra: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        kv = f"paged{self.page_size}{self.kv_layout}" if self.page_size else "ragged"
        return (
            f"s{self.seed}-B{len(self.lens_q)}-h{self.h_q}x{self.h_kv}-d{self.d_qk}x{self.d_v}-{kv}-"
            f"c{self.causal}-w{self.window[0]}_{self.window[1]}-{self.lse_layout}-{self.lse_base}"
            + ("-gaps" if self.q_gaps else "")
        )

    def make(self, device="cpu"):
        g = torch.Generator().manual_seed(self.seed)
        rng = random.Random(self.seed)
        b = len(self.lens_q)

        def randn(*shape):
            return torch.randn(*shape, generator=g).to(self.dtype).to(device)

        gaps_q = [rng.randint(0, 3) if self.q_gaps else 0 for _ in range(b)]
        starts_q, pos = [], 0
        for lq, gap in zip(self.lens_q, gaps_q):
            starts_q.append(pos)
            pos += lq + gap
        cu_q = torch.tensor(starts_q + [pos], dtype=torch.int32, device=device)
        q = randn(pos, self.h_q, self.d_qk)
        kwargs = dict(causal=self.causal, window_size=self.window, lse_layout=self.lse_layout, lse_base=self.lse_base)
        if self.q_gaps:
            kwargs["seqused_q"] = torch.tensor(self.lens_q, dtype=torch.int32, device=device)
        if self.page_size == 0:
            cu_k = torch.tensor([0] + list(_cumsum(self.lens_k)), dtype=torch.int32, device=device)
            k = randn(cu_k[-1].item(), self.h_kv, self.d_qk)
            v = randn(cu_k[-1].item(), self.h_kv, self.d_v)
            args = (q, k, v, cu_q, cu_k, max(self.lens_q, default=0), max(self.lens_k, default=0))
        else:
            ps = self.page_size
            n_pages = [(lk + ps - 1) // ps for lk in self.lens_k]
            max_pages = max(n_pages + [1])
            total_pages = sum(n_pages) + 3  # some pages nobody references
            perm = torch.randperm(total_pages, generator=g).tolist()
            table = torch.zeros(b, max_pages, dtype=torch.int32)
            nxt = 0
            for i, n in enumerate(n_pages):
                table[i, :n] = torch.tensor(perm[nxt : nxt + n], dtype=torch.int32)
                nxt += n
            shape_k = (total_pages, ps, self.h_kv, self.d_qk) if self.kv_layout == "NHD" else (total_pages, self.h_kv, ps, self.d_qk)
            shape_v = shape_k[:-1] + (self.d_v,)
            k = torch.full(shape_k, math.nan, dtype=self.dtype)
            v = torch.full(shape_v, math.nan, dtype=self.dtype)
            # Fill only the slots that hold a sequence's keys: everything else stays NaN.
            for i, lk in enumerate(self.lens_k):
                for t in range(lk):
                    page, slot = int(table[i, t // ps]), t % ps
                    idx = (page, slot) if self.kv_layout == "NHD" else (page, slice(None), slot)
                    k[idx] = torch.randn(self.h_kv, self.d_qk, generator=g).to(self.dtype)
                    v[idx] = torch.randn(self.h_kv, self.d_v, generator=g).to(self.dtype)
            k, v, table = k.to(device), v.to(device), table.to(device)
            kwargs.update(page_table=table, kv_layout=self.kv_layout,
                          seqused_k=torch.tensor(self.lens_k, dtype=torch.int32, device=device))
            args = (q, k, v, cu_q, None, max(self.lens_q, default=0), max(self.lens_k, default=0))
        kwargs.update(self.extra)
        return args, kwargs


def _cumsum(xs):
    total = 0
    for x in xs:
        total += x
        yield total


def oracle_float64(case: Case, args, kwargs):
    """Per sequence, per head, in float64, with the mask written from the key range of each query.

    Returns (out (total_q, H_q, D_v) float64 with NaN in rows outside every sequence,
             lse per (sequence, row, head) as a dict {(b, i, h): value in the case's base}).
    kwargs may carry issue 14's `softcap` (scores -> softcap * tanh(scores / softcap) after the
    scale) and `sinks` ((H_q,) logits: one more softmax column per head with no value; a row that
    sees no key gets O = 0, LSE = the sink).
    """
    q, k, v, cu_q, cu_k = args[:5]
    b_count = len(case.lens_q)
    ratio = case.h_q // case.h_kv
    out = torch.full((q.shape[0], case.h_q, case.d_v), math.nan, dtype=torch.float64)
    lse = {}
    scale = kwargs.get("softmax_scale") or 1.0 / math.sqrt(case.d_qk)
    softcap = kwargs.get("softcap") or 0.0
    sinks = kwargs.get("sinks")
    sinks = None if sinks is None else sinks.cpu().double().tolist()
    left, right = case.window
    if case.causal:
        right = 0
    k_start = 0
    for b in range(b_count):
        lq, lk = case.lens_q[b], case.lens_k[b]
        q0 = int(cu_q[b])
        if case.page_size:
            ps = case.page_size
            table = kwargs["page_table"][b].cpu()
            rows_k, rows_v = [], []
            for t in range(lk):
                page, slot = int(table[t // ps]), t % ps
                if case.kv_layout == "NHD":
                    rows_k.append(k[page, slot].cpu()); rows_v.append(v[page, slot].cpu())
                else:
                    rows_k.append(k[page, :, slot].cpu()); rows_v.append(v[page, :, slot].cpu())
            kk = torch.stack(rows_k).double() if lk else torch.zeros(0, case.h_kv, case.d_qk, dtype=torch.float64)
            vv = torch.stack(rows_v).double() if lk else torch.zeros(0, case.h_kv, case.d_v, dtype=torch.float64)
        else:
            kk = k[k_start : k_start + lk].cpu().double()
            vv = v[k_start : k_start + lk].cpu().double()
            k_start += lk
        off = (lk - lq) if case.causal != "top_left" else 0
        for i in range(lq):
            hi = lk - 1 if right < 0 else min(lk - 1, i + off + right)
            lo = 0 if left < 0 else max(0, i + off - left)
            for h in range(case.h_q):
                sink = -math.inf if sinks is None else sinks[h]
                if hi < lo:
                    out[q0 + i, h] = 0.0
                    lse[(b, i, h)] = sink if case.lse_base == "ln" else sink / math.log(2.0)
                    continue
                s = (kk[lo : hi + 1, h // ratio] @ q[q0 + i, h].cpu().double()) * scale
                if softcap:
                    s = softcap * torch.tanh(s / softcap)
                m = max(float(s.max()), sink)
                p = torch.exp(s - m)
                denom = p.sum() + math.exp(sink - m)
                out[q0 + i, h] = (p / denom) @ vv[lo : hi + 1, h // ratio]
                value = float(m + torch.log(denom))
                lse[(b, i, h)] = value if case.lse_base == "ln" else value / math.log(2.0)
    return out, lse


def random_case(seed: int, **overrides) -> Case:
    """A randomized Case over the reference grid of issue 2 (lengths 0..300, ratios 1..8, ...)."""
    rng = random.Random(seed)
    ratio = rng.choice([1, 2, 3, 4, 5, 6, 7, 8])
    h_kv = rng.choice([1, 2])
    d_qk, d_v = rng.choice([(32, 32), (64, 64), (128, 128), (192, 128)])
    b = rng.randint(1, 4)
    lens_q = [rng.choice([0, 1, rng.randint(0, 300)]) for _ in range(b)]
    lens_k = [rng.choice([0, lq, rng.randint(0, 300)]) for lq in lens_q]
    causal = rng.choice([False, True, "top_left"])
    window = rng.choice([(-1, -1), (-1, -1), (rng.randint(0, 64), -1 if causal else rng.randint(-1, 40))])
    page_size = rng.choice([0, 0, 1, 3, 16, 64])
    fields = dict(
        seed=seed, lens_q=lens_q, lens_k=lens_k, h_q=h_kv * ratio, h_kv=h_kv, d_qk=d_qk, d_v=d_v,
        causal=causal, window=window, page_size=page_size, kv_layout=rng.choice(["NHD", "HND"]),
        lse_layout=rng.choice(["head_major", "token_major", "padded"]), lse_base=rng.choice(["ln", "log2"]),
        q_gaps=rng.random() < 0.25,
    )  # fmt: skip
    fields.update(overrides)
    return Case(**fields)


def valid_rows(case: Case, cu_q) -> list[int]:
    """Indices of the output rows that belong to a sequence of `case` (starts from cu_q)."""
    return [int(cu_q[b]) + i for b, lq in enumerate(case.lens_q) for i in range(lq)]


def close(got, want, what, atol=2e-2, rtol=2e-2):
    """|got - want| <= atol + rtol * |want| (docs/DESIGN.md's tolerance); equal infinities match."""
    got, want = got.float(), want.float()
    both_inf = torch.isinf(want) & (got == want)
    err = torch.where(both_inf, 0.0, (got - want).abs() - rtol * want.abs())
    assert torch.isfinite(got[~both_inf]).all(), f"{what}: non-finite values where the reference is finite"
    assert err.max().item() <= atol, f"{what}: max excess error {err.max().item():.3e}"
