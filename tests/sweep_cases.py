"""The seeded random sweep of the public API: problem generator, tensor builder and checks.

Shared by tests/gpu/test_sweep_gpu.py (the kernel on an sm_90a GPU against the reference) and
tests/test_sweep_cases.py (on the CPU: the generator is deterministic and covers every feature, and
the checks themselves pass when the reference backend stands in for the kernel).

`draw(seed, index)` gives problem `index` of a sweep; it depends on the seed and the index only, so
problem 17 is the same problem in a 300-problem run and in a 3000-problem run. Each problem is
plain data (`SweepProblem`); `run_and_check(problem, device)` builds its tensors (NaN in every
page-pool slot no sequence uses, NaN-poisoned out/LSE buffers), calls `ragged_attn.attention` or
`Plan.run`, and checks the results against `backend="reference"` on the same device with
tests/cases.py's `close` and `valid_rows`:
- every valid output row within 2e-2 + 2e-2 |ref|, every valid LSE entry within 1e-2 (its base);
- rows that see no key: O exactly 0 and LSE exactly -inf;
- padded-LSE rows past a sequence's length: -inf (in a caller's buffer and in one allocated here);
- rows outside every sequence (leading rows, gaps, trailing rows) and out columns past d_v of a
  caller's buffer keep their NaN; an out allocated by the call has them 0 when seqused_q is given;
- the returned tensors are the caller's buffers; the inputs are unchanged.

Work per problem is bounded (`MAX_SCORES`, `MAX_TOKEN_HEADS`): most problems are small, a few
reach 8192 tokens per sequence or 300 sequences.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

import ragged_attn
from ragged_attn.layout_class import HEAD_DIM_CLASSES, LayoutClass, head_dim_class
from tests.cases import close, valid_rows

DEFAULT_SIZE = 300
DEFAULT_SEED = 20261201

MAX_LEN = 8192
MAX_BATCH = 300
MAX_RATIO = 16
# Score elements (sum over sequences of len_q * len_k, times H_q) the float32 reference materialises
# for one problem: 2**30 is 8192 x 8192 queries x keys over 16 heads, about 20 ms of reference time
# on an H200 at d 256.
MAX_SCORES = 2**30
# Rows x heads of q (and of k / of the page pool x H_kv): 2**20 is 8192 tokens x 128 heads.
MAX_TOKEN_HEADS = 2**20

TIERS = (("tiny", 0.33), ("small", 0.30), ("many", 0.10), ("long", 0.19), ("huge", 0.08))
# Real head dims that ride a larger class's zero-padded envelope (head_dim_class picks the class).
ENVELOPE_DIMS = (
    (8, 8), (16, 16), (24, 24), (40, 40), (48, 48), (56, 56), (72, 72), (80, 80), (88, 88),
    (104, 104), (112, 112), (120, 120), (64, 32), (32, 64), (128, 64), (96, 128), (136, 128),
    (160, 96), (176, 128), (192, 64), (200, 136), (224, 224), (248, 248), (256, 128), (128, 256),
)  # fmt: skip
PAGE_SIZES = (1, 2, 3, 5, 8, 16, 16, 32, 64, 64, 100, 128, 256, 256)
WINDOW_BOUNDS = (-1, 0, 1, 7, 64, 200, 1000, 10000)
LSE_ORDERS = ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class SweepProblem:
    """One problem of the sweep, as plain data (see `draw`). Lengths are the used lengths."""

    index: int
    seed: int
    tier: str
    lens_q: tuple[int, ...]
    lens_k: tuple[int, ...]
    h_q: int
    h_kv: int
    d_qk: int
    d_v: int
    dtype: str  # "bf16" | "fp16"
    causal: object  # False | True | "bottom_right" | "top_left" (the API's values)
    window: tuple[int, int]
    page_size: int  # 0: ragged KV
    kv_layout: str  # "NHD" | "HND" (paged only)
    paged_lengths: str  # paged key lengths from "seqused_k", "cu_seqlens_k" or "both" (seqused_k wins)
    lse_layout: str | None  # None: no LSE
    lse_base: str
    lse_buffer: bool  # pass a NaN-poisoned `lse=` (else the call allocates it)
    lse_order: tuple[int, int, int]  # padded buffer: physical order of the logical (B, s_max, H) axes
    lse_s_extra: int  # padded buffer: rows per sequence beyond max_seqlen_q (or the longest sequence)
    out_buffer: bool  # pass a NaN-poisoned `out=` (else the call allocates it)
    out_pad: int  # columns past d_v in the out buffer's rows (must stay NaN)
    in_pad: int  # columns past the head dim in the q / k / v (or pool) buffers' rows
    q_lead: int  # rows before cu_seqlens_q[0]
    q_tail: int  # rows after cu_seqlens_q[B]
    gaps_q: tuple[int, ...] | None  # rows after each sequence (seqused_q given), or None
    k_lead: int
    k_tail: int
    gaps_k: tuple[int, ...] | None  # ragged: seqused_k gaps; paged "both": cu_seqlens_k beyond seqused_k
    table_extra: int  # page-table columns past the longest sequence's pages (point at NaN pages)
    pool_extra: int  # pool pages no sequence uses (all NaN)
    softmax_scale: float | None
    max_seqlen_q: int | None
    max_seqlen_k: int | None
    api: str  # "attention" | "plan"
    calls: int  # calls of the same problem (the second can take the launch fast path)
    backend: str  # "auto" | "cute"

    @property
    def batch(self) -> int:
        return len(self.lens_q)

    @property
    def paged(self) -> bool:
        return self.page_size > 0

    @property
    def scores(self) -> int:
        """Score elements the reference materialises (before masking)."""
        return sum(lq * lk for lq, lk in zip(self.lens_q, self.lens_k)) * self.h_q

    @property
    def total_q(self) -> int:
        return self.q_lead + sum(self.lens_q) + sum(self.gaps_q or ()) + self.q_tail

    @property
    def kv_rows(self) -> int:
        """Rows of k/v (ragged) or slots of the page pool (paged)."""
        if self.paged:
            return (sum(_pages(lk, self.page_size) for lk in self.lens_k) + self.pool_extra) * self.page_size
        return self.k_lead + sum(self.lens_k) + sum(self.gaps_k or ()) + self.k_tail

    def describe(self) -> str:
        kv = (
            f"paged ps={self.page_size} {self.kv_layout} lengths={self.paged_lengths}"
            if self.paged
            else "ragged"
        )
        lse = "no lse" if self.lse_layout is None else (
            f"lse {self.lse_layout}/{self.lse_base}" + (" buffer" if self.lse_buffer else " allocated")
            + (f" order={self.lse_order} s_extra={self.lse_s_extra}" if self.lse_layout == "padded" else "")
        )  # fmt: skip

        def lens(xs):
            return str(list(xs)) if len(xs) <= 12 else f"{list(xs[:12])}...({len(xs)})"

        return (
            f"case{self.index} (seed {self.seed}, {self.tier}): B={self.batch} lens_q={lens(self.lens_q)} "
            f"lens_k={lens(self.lens_k)} h={self.h_q}/{self.h_kv} d={self.d_qk}x{self.d_v} {self.dtype} "
            f"causal={self.causal!r} window={self.window} {kv} {lse} "
            f"out={'buffer+' + str(self.out_pad) if self.out_buffer else 'allocated'} in_pad={self.in_pad} "
            f"q lead/tail={self.q_lead}/{self.q_tail} seqused_q={self.gaps_q is not None} "
            f"k lead/tail={self.k_lead}/{self.k_tail} gaps_k={self.gaps_k is not None} "
            f"scale={self.softmax_scale} max_seqlen={self.max_seqlen_q}/{self.max_seqlen_k} "
            f"{self.api} x{self.calls} backend={self.backend}"
        )


def _pages(length: int, page_size: int) -> int:
    return (length + page_size - 1) // page_size


def mask_family(causal, window) -> str:
    """The mask family a call lands in (Problem.mask_family, from the call's arguments)."""
    left, right = window
    if causal is not False:
        right = 0
    if left < 0 and right < 0:
        return "none"
    if causal is not False and left < 0:
        return "causal"
    return "window"


def expected_class(p: SweepProblem, arch: str = "sm_90a") -> LayoutClass:
    """The layout class the kernel runs `p` on (what ragged_attn.layout_class_of must say)."""
    d_qk, d_v = head_dim_class(p.d_qk, p.d_v)
    return LayoutClass(
        arch, d_qk, d_v, p.dtype, p.dtype, mask_family(p.causal, p.window), p.lse_layout is not None,
        "paged" if p.paged else "ragged",
    )  # fmt: skip


def sweep_classes(seed: int, indices) -> list:
    """The layout classes the problems `indices` of the sweep `seed` run on, with their split-KV
    siblings (backends.split_kv_sibling: a class without an LSE splits through its LSE sibling),
    sorted: what the sweep's prewarm and tools/sweep_cache.py compile."""
    from ragged_attn.backends import split_kv_sibling

    expected = {expected_class(draw(seed, i)) for i in indices}
    return sorted(expected | {split_kv_sibling(lc) for lc in expected})


# ----------------------------------------------------------------------------- the generator
def _weighted(rng: random.Random, pairs):
    x = rng.random() * sum(w for _, w in pairs)
    for value, w in pairs:
        x -= w
        if x < 0:
            return value
    return pairs[-1][0]


def _length(rng: random.Random, hi: int) -> int:
    """0..hi with empty and one-token sequences and lengths around the tile sizes (64..256) overrepresented."""
    r = rng.random()
    if r < 0.10:
        return 0
    if r < 0.17:
        return 1
    if r < 0.30:
        return min(hi, rng.choice([63, 64, 65, 79, 80, 81, 127, 128, 129, 191, 192, 193, 255, 256, 257]))
    return rng.randint(0, hi)


def _lengths(rng: random.Random, tier: str) -> tuple[list[int], list[int]]:
    if tier == "tiny":
        b, hi_q, hi_k = rng.randint(1, 6), 48, 64
    elif tier == "small":
        b, hi_q, hi_k = rng.randint(1, 24), 512, 700
    elif tier == "many":
        b = MAX_BATCH if rng.random() < 0.2 else rng.randint(48, MAX_BATCH)
        hi_q, hi_k = 64, 160
    elif tier == "long":
        b, hi_q, hi_k = rng.randint(1, 6), 700, MAX_LEN
    else:  # huge
        b, hi_q, hi_k = rng.randint(1, 2), MAX_LEN, MAX_LEN
    lens_q, lens_k = [], []
    for _ in range(b):
        if tier == "huge":
            lq = MAX_LEN if rng.random() < 0.3 else rng.randint(1024, MAX_LEN)
            lk = rng.choice([lq, lq, rng.randint(0, MAX_LEN), MAX_LEN])
        else:
            lq = _length(rng, hi_q)
            mode = rng.choice(["same", "indep", "prefix"] + (["decode", "decode"] if tier == "long" else []))
            if mode == "decode":
                lq = rng.choice([1, 1, rng.randint(1, 16)])
            lk = {"same": lq, "indep": _length(rng, hi_k), "prefix": min(hi_k, lq + _length(rng, hi_k)),
                  "decode": rng.choice([rng.randint(0, hi_k), hi_k])}[mode]  # fmt: skip
        lens_q.append(lq)
        lens_k.append(lk)
    return lens_q, lens_k


def _window(rng: random.Random) -> tuple[object, tuple[int, int]]:
    r = rng.random()
    if r < 0.28:
        return False, (-1, -1)
    if r < 0.60:
        return rng.choice([True, True, "bottom_right", "top_left", "top_left"]), (-1, -1)
    kind = rng.choice(
        ["two_sided", "two_sided", "causal_left", "causal_left", "left_only", "right_only", "causal_like"]
    )
    if kind == "two_sided":
        left, right = rng.choice(WINDOW_BOUNDS), rng.choice(WINDOW_BOUNDS)
        if left < 0 and right < 0:
            left = rng.choice(WINDOW_BOUNDS[1:])
        return False, (left, right)
    if kind == "causal_left":  # causal fixes right = 0; -1 and 0 both say so
        return rng.choice([True, "top_left"]), (rng.choice(WINDOW_BOUNDS[1:]), rng.choice([-1, 0]))
    if kind == "left_only":
        return False, (rng.choice(WINDOW_BOUNDS[1:]), -1)
    if kind == "right_only":
        return False, (-1, rng.choice(WINDOW_BOUNDS[1:]))
    return False, (-1, 0)  # the causal mask, in the window family


def _fit_budget(lens_q, lens_k, h_kv, ratio, kv_rows):
    """Shrink heads (kv heads first, then the ratio), then lengths, until the problem fits the caps."""

    def over():
        h_q = h_kv * ratio
        scores = sum(a * b for a, b in zip(lens_q, lens_k)) * h_q
        return (
            scores > MAX_SCORES
            or sum(lens_q) * h_q > MAX_TOKEN_HEADS
            or kv_rows(lens_k) * h_kv > MAX_TOKEN_HEADS
        )

    while over():
        if h_kv > 1:
            h_kv = max(1, h_kv // 2)
        elif ratio > 1:
            ratio = max(1, ratio // 2)
        else:
            lens_q[:] = [x // 2 for x in lens_q]
            lens_k[:] = [x // 2 for x in lens_k]
    return h_kv, ratio


def draw(seed: int, index: int) -> SweepProblem:
    """Problem `index` of the sweep seeded `seed` (a pure function of both)."""
    rng = random.Random(f"ragged_attn-sweep:{seed}:{index}")
    tier = _weighted(rng, TIERS)
    lens_q, lens_k = _lengths(rng, tier)
    b = len(lens_q)

    paged = rng.random() < 0.45
    page_size = rng.choice(PAGE_SIZES) if paged else 0
    kv_layout = rng.choice(["NHD", "HND"]) if paged else "NHD"
    pool_extra = rng.randint(1, 4) if paged else 0

    # Empty packed tensors now and then: no query rows at all, or (ragged) no key rows at all.
    empty = rng.random()
    no_q_rows = empty < 0.02
    no_k_rows = 0.02 <= empty < 0.04 and not paged
    if no_q_rows:
        lens_q = [0] * b
    if no_k_rows:
        lens_k = [0] * b

    gaps_q = [rng.randint(0, 6) for _ in range(b)] if rng.random() < 0.25 and not no_q_rows else None
    q_lead = rng.randint(1, 9) if rng.random() < 0.15 and not no_q_rows else 0
    q_tail = rng.randint(1, 9) if rng.random() < 0.15 and not no_q_rows else 0
    if paged:
        paged_lengths = _weighted(rng, (("seqused_k", 0.6), ("cu_seqlens_k", 0.25), ("both", 0.15)))
        gaps_k = [rng.randint(0, 9) for _ in range(b)] if paged_lengths == "both" else None
        k_lead = rng.randint(0, 9) if paged_lengths != "seqused_k" else 0
        k_tail = 0
    else:
        paged_lengths = ""
        gaps_k = [rng.randint(0, 9) for _ in range(b)] if rng.random() < 0.25 and not no_k_rows else None
        k_lead = rng.randint(1, 9) if rng.random() < 0.15 and not no_k_rows else 0
        k_tail = rng.randint(1, 9) if rng.random() < 0.15 and not no_k_rows else 0

    h_kv = rng.choice([1, 1, 2, 2, 3, 4, 8]) if tier != "many" else rng.choice([1, 2])
    ratio = rng.randint(1, MAX_RATIO)

    def kv_rows(lk):
        if paged:
            return (sum(_pages(x, page_size) for x in lk) + pool_extra) * page_size
        return sum(lk) + sum(gaps_k or ()) + k_lead + k_tail

    h_kv, ratio = _fit_budget(lens_q, lens_k, h_kv, ratio, kv_rows)

    d_qk, d_v = rng.choice(HEAD_DIM_CLASSES) if rng.random() < 0.55 else rng.choice(ENVELOPE_DIMS)
    dtype = "bf16" if rng.random() < 0.55 else "fp16"
    causal, window = _window(rng)

    lse_layout = None if rng.random() < 0.25 else rng.choice(["token_major", "head_major", "padded"])
    lse_base = rng.choice(["ln", "log2"])
    lse_buffer = rng.random() < 0.75
    lse_order = rng.choice(LSE_ORDERS)
    lse_s_extra = rng.choice([0, 0, 0, 1, rng.randint(2, 40)])

    out_buffer = rng.random() < 0.8
    class_dv = head_dim_class(d_qk, d_v)[1]
    out_pad = rng.choice([8, 16, class_dv - d_v + 8]) if out_buffer and rng.random() < 0.3 else 0
    in_pad = rng.choice([8, 16, 64]) if rng.random() < 0.2 else 0

    longest_q, longest_k = max(lens_q), max(lens_k)
    r = rng.random()
    max_seqlen_q = longest_q if r < 0.7 else (longest_q + rng.randint(1, 300) if r < 0.9 else None)
    if max_seqlen_q is None and lse_layout == "padded" and not lse_buffer:
        max_seqlen_q = longest_q  # the padded LSE the call allocates takes s_max from max_seqlen_q
    r = rng.random()
    max_seqlen_k = longest_k if r < 0.6 else (longest_k + rng.randint(1, 300) if r < 0.8 else None)
    softmax_scale = round(d_qk**-0.5 * rng.uniform(0.25, 2.0), 6) if rng.random() < 0.15 else None
    api = "plan" if rng.random() < 0.3 else "attention"
    if max_seqlen_q is None and lse_layout == "padded" and api == "plan":
        max_seqlen_q = longest_q  # a plan binds no LSE buffer: its padded s_max is max_seqlen_q

    return SweepProblem(
        index=index, seed=seed, tier=tier, lens_q=tuple(lens_q), lens_k=tuple(lens_k),
        h_q=h_kv * ratio, h_kv=h_kv, d_qk=d_qk, d_v=d_v, dtype=dtype, causal=causal, window=window,
        page_size=page_size, kv_layout=kv_layout, paged_lengths=paged_lengths,
        lse_layout=lse_layout, lse_base=lse_base, lse_buffer=lse_buffer, lse_order=lse_order,
        lse_s_extra=lse_s_extra, out_buffer=out_buffer, out_pad=out_pad, in_pad=in_pad,
        q_lead=q_lead, q_tail=q_tail, gaps_q=tuple(gaps_q) if gaps_q is not None else None,
        k_lead=k_lead, k_tail=k_tail, gaps_k=tuple(gaps_k) if gaps_k is not None else None,
        table_extra=rng.choice([0, 0, 0, 1, 3]) if paged else 0, pool_extra=pool_extra,
        softmax_scale=softmax_scale, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
        api=api, calls=2 if rng.random() < 0.15 else 1,
        backend="cute" if rng.random() < 0.15 else "auto",
    )  # fmt: skip


# ----------------------------------------------------------------------------- tensors
@dataclass
class Built:
    """A problem's tensors: `args` / `kwargs` for ragged_attn.attention (without out / lse)."""

    args: tuple
    kwargs: dict
    cu_q: list[int]  # host copy of cu_seqlens_q


def _offsets(lead: int, lens, gaps) -> list[int]:
    starts, pos = [], lead
    for i, n in enumerate(lens):
        starts.append(pos)
        pos += n + (gaps[i] if gaps is not None else 0)
    return starts + [pos]


def build(p: SweepProblem, device) -> Built:
    """The problem's inputs on `device` ("meta": shapes only). Data comes from a generator seeded by
    (seed, index); page-pool slots that no sequence uses, pages no table row uses and the pages that
    unused table columns point at hold NaN."""
    device = torch.device(device)
    meta = device.type == "meta"
    dt = TORCH_DTYPES[p.dtype]
    g = None if meta else torch.Generator(device=device).manual_seed(p.seed * 1_000_003 + p.index)
    b = p.batch

    def randn(*shape):  # a (rows, heads, d) view of a buffer with p.in_pad extra columns per row
        full = shape[:-1] + (shape[-1] + p.in_pad,)
        buf = torch.empty(full, dtype=dt, device=device) if meta else torch.randn(
            full, generator=g, device=device, dtype=torch.float32).to(dt)  # fmt: skip
        return buf[..., : shape[-1]]

    def ints(xs):
        return torch.tensor(list(xs), dtype=torch.int32).to(device)

    cu_q = _offsets(p.q_lead, p.lens_q, p.gaps_q)
    q = randn(cu_q[-1] + p.q_tail, p.h_q, p.d_qk)
    kwargs = {
        "causal": p.causal, "window_size": p.window, "return_lse": p.lse_layout is not None,
        "lse_layout": p.lse_layout or "head_major", "lse_base": p.lse_base, "backend": p.backend,
    }  # fmt: skip
    if p.softmax_scale is not None:
        kwargs["softmax_scale"] = p.softmax_scale
    if p.gaps_q is not None:
        kwargs["seqused_q"] = ints(p.lens_q)
    if not p.paged:
        cu_k = _offsets(p.k_lead, p.lens_k, p.gaps_k)
        total_k = cu_k[-1] + p.k_tail
        k, v = randn(total_k, p.h_kv, p.d_qk), randn(total_k, p.h_kv, p.d_v)
        if p.gaps_k is not None:
            kwargs["seqused_k"] = ints(p.lens_k)
        args = (q, k, v, ints(cu_q), ints(cu_k), p.max_seqlen_q, p.max_seqlen_k)
        return Built(args, kwargs, cu_q)

    ps = p.page_size
    n_pages = [_pages(lk, ps) for lk in p.lens_k]
    used = sum(n_pages)
    num_pages = used + p.pool_extra
    width = max(n_pages + [1]) + p.table_extra
    perm = torch.randperm(num_pages, generator=torch.Generator().manual_seed(p.seed + 7 * p.index))
    poison = perm[used:]  # pages no sequence uses: unused table columns point at them
    table = poison[torch.randint(len(poison), (b, width), generator=torch.Generator().manual_seed(p.index))]
    table = table.to(torch.int32)
    starts = [0]
    for n in n_pages:
        starts.append(starts[-1] + n)
    for i, n in enumerate(n_pages):
        table[i, :n] = perm[starts[i] : starts[i] + n].to(torch.int32)
    shape = (num_pages, ps, p.h_kv) if p.kv_layout == "NHD" else (num_pages, p.h_kv, ps)
    pools = []
    for d in (p.d_qk, p.d_v):
        buf = torch.full(shape + (d + p.in_pad,), math.nan, dtype=dt, device=device)
        pools.append(buf[..., :d])
    if not meta and sum(p.lens_k):
        lens = torch.tensor(p.lens_k)
        seq = torch.repeat_interleave(torch.arange(b), lens)
        first = torch.cumsum(lens, 0) - lens
        tok = torch.arange(int(lens.sum())) - torch.repeat_interleave(first, lens)
        page = table[seq, tok // ps].long().to(device)
        slot = (tok % ps).to(device)
        for pool, d in zip(pools, (p.d_qk, p.d_v)):
            nhd = pool if p.kv_layout == "NHD" else pool.transpose(1, 2)  # (pages, page_size, H_kv, d) view
            nhd[page, slot] = torch.randn(len(tok), p.h_kv, d, generator=g, device=device).to(dt)
    kwargs.update(page_table=table.to(device), kv_layout=p.kv_layout)
    cu_k = None
    if p.paged_lengths in ("seqused_k", "both"):
        kwargs["seqused_k"] = ints(p.lens_k)
    if p.paged_lengths in ("cu_seqlens_k", "both"):
        cu_k = ints(_offsets(p.k_lead, p.lens_k, p.gaps_k))
    args = (q, pools[0], pools[1], ints(cu_q), cu_k, p.max_seqlen_q, p.max_seqlen_k)
    return Built(args, kwargs, cu_q)


def lse_s_max(p: SweepProblem) -> int:
    """Rows per sequence of the padded LSE: the caller's buffer's, or max_seqlen_q for one allocated."""
    base = p.max_seqlen_q if p.max_seqlen_q is not None else max(p.lens_q)
    return base + (p.lse_s_extra if p.lse_buffer else 0)


def poisoned_buffers(p: SweepProblem, device):
    """(out_full, out, lse_physical, lse) filled with NaN, or None where the call allocates.
    out is out_full[..., :d_v]; lse is the logical view of lse_physical (padded: any dim order)."""
    out_full = out = lse_phys = lse = None
    total_q = p.total_q
    if p.out_buffer:
        out_full = torch.full((total_q, p.h_q, p.d_v + p.out_pad), math.nan, dtype=TORCH_DTYPES[p.dtype],
                              device=device)  # fmt: skip
        out = out_full[..., : p.d_v]
    if p.lse_layout is not None and p.lse_buffer:
        if p.lse_layout == "token_major":
            lse = lse_phys = torch.full((total_q, p.h_q), math.nan, device=device)
        elif p.lse_layout == "head_major":
            lse = lse_phys = torch.full((p.h_q, total_q), math.nan, device=device)
        else:
            logical = (p.batch, lse_s_max(p), p.h_q)
            lse_phys = torch.full([logical[a] for a in p.lse_order], math.nan, device=device)
            lse = lse_phys.permute([p.lse_order.index(a) for a in range(3)])
    return out_full, out, lse_phys, lse


# ----------------------------------------------------------------------------- the call and the checks
def _snapshot(tensors):
    return [None if t is None else t.clone() for t in tensors]


def _unchanged(before, after) -> bool:
    for a, b in zip(before, after):
        if a is None:
            continue
        if a.is_floating_point():  # pools hold NaN: compare NaN as a value
            if not (torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))):
                return False
        elif not torch.equal(a, b):
            return False
    return True


def _call(p: SweepProblem, built: Built, plan, out, lse, backend: str):
    kw = built.kwargs
    if plan is not None:
        per_call = {name: kw[name] for name in ("seqused_q", "seqused_k", "page_table") if name in kw}
        return plan.run(*built.args, **per_call, out=out, lse=lse)
    return ragged_attn.attention(*built.args, **{**kw, "backend": backend}, out=out, lse=lse)


def run_and_check(p: SweepProblem, device, backend: str | None = None, sync_debug: bool = True) -> None:
    """Run `p` through the public API on `device` and check it against the reference (module doc).

    backend: None runs the problem's own ("auto" / "cute"); "reference" checks the checks on a
    machine without a GPU. Raises AssertionError naming the problem and what broke.
    """
    try:
        _run_and_check(p, torch.device(device), backend or p.backend, sync_debug)
    except AssertionError as e:
        raise AssertionError(f"{p.describe()}\n{e}") from None


def _run_and_check(p: SweepProblem, device, backend: str, sync_debug: bool) -> None:
    built = build(p, device)
    q, k, v, cu_q_t, cu_k_t = built.args[:5]
    kw = built.kwargs
    inputs = [q, k, v, cu_q_t, cu_k_t, kw.get("seqused_q"), kw.get("seqused_k"), kw.get("page_table")]
    before = _snapshot(inputs)
    sync = sync_debug and device.type == "cuda"

    # The oracle: the reference backend in float32 on the same device, token-major LSE in the call's base.
    ref_kw = {**kw, "return_lse": True, "lse_layout": "token_major", "backend": "reference"}
    ref_out, ref_lse = ragged_attn.attention(*built.args, **ref_kw)

    rows = valid_rows(p, built.cu_q)
    rows_t = torch.tensor(rows, dtype=torch.long, device=device)
    in_rows = torch.zeros(p.total_q, dtype=torch.bool, device=device)
    in_rows[rows_t] = True
    want_o = ref_out[rows_t]
    want_lse = ref_lse[rows_t]  # (n, H_q)
    masked = torch.isneginf(want_lse)  # (row, head) pairs that see no key
    # Padded LSE: sequence and row of each valid row, and the (b, i) cells past each length.
    b_of = torch.repeat_interleave(torch.arange(p.batch), torch.tensor(p.lens_q)).to(device)
    i_of = torch.cat([torch.arange(n) for n in p.lens_q]).to(device) if rows else b_of

    plan = None
    if p.api == "plan":
        plan_kw = {name: value for name, value in kw.items() if name != "backend"}
        plan = ragged_attn.plan(*built.args, **plan_kw, backend=backend)

    for call in range(p.calls):
        tag = f"call {call + 1}/{p.calls} ({p.api})"
        out_full, out, _, lse = poisoned_buffers(p, device)
        if sync:
            torch.cuda.set_sync_debug_mode("error")
        try:
            result = _call(p, built, plan, out, lse, backend)
        finally:
            if sync:
                torch.cuda.set_sync_debug_mode(0)
        got_o, got_lse = result if p.lse_layout is not None else (result, None)
        if device.type == "cuda":
            torch.cuda.synchronize()

        assert tuple(got_o.shape) == (p.total_q, p.h_q, p.d_v), f"{tag}: out shape {tuple(got_o.shape)}"
        assert got_o.dtype == TORCH_DTYPES[p.dtype], f"{tag}: out dtype {got_o.dtype}"
        if out is not None:
            assert got_o is out, f"{tag}: the call did not return the caller's out"
        o = got_o[rows_t]
        if rows:  # close() needs at least one element
            close(o, want_o, f"{tag}: out")
        if masked.any():
            assert (o[masked] == 0).all(), f"{tag}: a row that sees no key has O != 0"
        outside = ~in_rows
        if out is not None:
            assert torch.isnan(got_o[outside]).all(), f"{tag}: out rows outside every sequence were written"
            if p.out_pad:
                assert torch.isnan(out_full[..., p.d_v :]).all(), f"{tag}: out columns past d_v were written"
        elif p.gaps_q is not None:
            assert (got_o[outside] == 0).all(), f"{tag}: allocated out rows outside every sequence are not 0"

        if p.lse_layout is None:
            assert got_lse is None
            continue
        assert got_lse.dtype == torch.float32, f"{tag}: lse dtype {got_lse.dtype}"
        if lse is not None:
            assert got_lse is lse, f"{tag}: the call did not return the caller's lse"
        if p.lse_layout == "token_major":
            assert tuple(got_lse.shape) == (p.total_q, p.h_q), f"{tag}: lse shape {tuple(got_lse.shape)}"
            got_rows, got_outside = got_lse[rows_t], got_lse[outside]
        elif p.lse_layout == "head_major":
            assert tuple(got_lse.shape) == (p.h_q, p.total_q), f"{tag}: lse shape {tuple(got_lse.shape)}"
            got_rows, got_outside = got_lse[:, rows_t].t(), got_lse[:, outside]
        else:
            s_max = lse_s_max(p)
            assert tuple(got_lse.shape) == (p.batch, s_max, p.h_q), f"{tag}: lse shape {tuple(got_lse.shape)}"
            got_rows, got_outside = got_lse[b_of, i_of], None
            lens = torch.tensor(p.lens_q, device=device)
            past = torch.arange(s_max, device=device)[None, :] >= lens[:, None]  # (B, s_max)
            assert torch.isneginf(got_lse[past]).all(), f"{tag}: padded LSE rows past a length are not -inf"
        if rows:
            close(got_rows, want_lse, f"{tag}: lse", atol=1e-2, rtol=0)
        if masked.any():
            assert torch.isneginf(got_rows[masked]).all(), f"{tag}: a row that sees no key has LSE != -inf"
        if lse is not None and got_outside is not None:
            assert torch.isnan(got_outside).all(), f"{tag}: LSE entries outside every sequence were written"

    assert _unchanged(before, inputs), "an input changed"


# ----------------------------------------------------------------------------- compiling ahead
def _warm_one(fields: dict) -> tuple[dict, int, float]:
    """In a worker process: compile (or load) one class through the process-wide cache, which
    writes its disk entry. Returns (fields, compiles, seconds)."""
    import time

    from ragged_attn import compile_cache
    from ragged_attn.kernels import sm90

    lc = LayoutClass(**fields)
    before = compile_cache.cache_info().compiles
    t0 = time.perf_counter()
    compile_cache.get_kernel(lc, sm90.compile_forward)
    return fields, compile_cache.cache_info().compiles - before, time.perf_counter() - t0


def prewarm(classes, jobs: int) -> dict:
    """Compile the classes that have no disk entry yet into the disk cache, in `jobs` spawned
    processes, so that this process then loads each one from disk (one compile per class either
    way: the cache's file lock serialises two processes on one entry).

    Does nothing when jobs <= 1, the disk cache is off (RAGGED_ATTN_DISK_CACHE) or the CuTe DSL
    is missing. Returns {class: (compiles, seconds)} for the classes it handed to the workers.
    """
    if jobs <= 1 or not classes:
        return {}
    from ragged_attn import backends, compile_cache

    if compile_cache.cache_dir() is None or backends.cute_import_error() is not None:
        return {}
    cache = compile_cache.CompileCache()  # the process-wide cache's directory and build env
    info = compile_cache.cache_info()
    missing = [
        lc for lc in classes if lc not in info.classes and not cache.entry_paths(lc).meta_path.exists()
    ]
    if not missing:
        return {}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # Longest compiles first (the d256 and paged classes), so the pool's tail is short.
    missing.sort(key=lambda lc: (-(lc.d_qk + lc.d_v), lc.kv != "paged", lc.name))
    report = {}
    with ProcessPoolExecutor(
        min(jobs, len(missing)), mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        for fields, compiles, seconds in pool.map(_warm_one, [lc.as_dict() for lc in missing]):
            report[LayoutClass(**fields)] = (compiles, seconds)
    return report
