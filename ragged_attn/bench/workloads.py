"""Named, seeded benchmark workloads: the suites `python -m ragged_attn bench --suite NAME` runs.

Every suite is a pure function of its name: the same lengths, page tables and inputs on every
machine. Lengths are drawn with `torch.Generator` seeds written here, never with global state.

Suites
- `serving`: Llama-3-8B (32/8, d128), Llama-3-70B (64/8, d128; 8-way TP shards keep the ratio),
  Qwen2.5-7B (28/4, d128), DeepSeek-style (128 heads, d_qk 192 / d_v 128, MHA) over five length
  distributions: 64 x 128, 16 x 256, 4 x 512, `longtail` (14 sequences, log-uniform in
  [64, 2048], seed LONGTAIL_SEED) and 1 x 16384. Causal (bottom-right). `serving-full`: the same,
  no mask.
- `dense-long`: 2 x 8192, Llama-3-8B heads, causal and full.
- `paged`: the serving mixes (causal) with K/V in NHD page pools of page 16 and 64; pages are
  handed out in a seeded random order (PAGE_SEED) so that no peer profits from contiguity.
- `flashinfer-cudnn`: FlashInfer's `tests/attention/test_cudnn_prefill.py` grid (batch {1, 4},
  s_qo {8, 17, 700}, s_kv {8, 32, 1066} with s_qo <= s_kv, page {8, 16, 64}, H_kv {1, 4},
  H_q 4, d 128, causal and not): 144 paged shapes; per-sequence lengths q in [1, s_qo],
  kv in [s_qo, s_kv] drawn with seed 1 per shape as that test does. Every shape runs once (so
  compiles and graph builds count over all 144); FLASHINFER_TIMED_EVERY-th shape is timed.
- `issue10`: bf16, d128 unless said: Llama-3-70B heads (64/8) at 2 x 8192 causal and full;
  Llama-3-8B heads (32/8) over `uniform14` (lengths uniform in [64, 2048), drawn one at a time with
  seed ISSUE10_SEED until they sum to >= 16384: 14 sequences, 16,879 tokens), the same at d64, and
  16 x 256, 4 x 512, 64 x 128 (all causal).
- `smoke`: two tiny mixes for the CPU smoke test in CI.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Model:
    name: str
    h_q: int
    h_kv: int
    d_qk: int
    d_v: int


MODELS = {
    "llama3-8b": Model("llama3-8b", 32, 8, 128, 128),
    "llama3-70b": Model("llama3-70b", 64, 8, 128, 128),
    "qwen2.5-7b": Model("qwen2.5-7b", 28, 4, 128, 128),
    "deepseek": Model("deepseek", 128, 128, 192, 128),
}

LONGTAIL_SEED = 20261130  # the 14-sequence long-tail mix
PAGE_SEED = 7  # the order pages are handed out in paged pools
FLASHINFER_SEED = 1  # FlashInfer's test: torch.manual_seed(1) before drawing lengths
FLASHINFER_TIMED_EVERY = 12  # shapes 0, 12, 24, ... of the 144 are timed (12 shapes)
ISSUE10_SEED = 1  # the `uniform14` mix of suite issue10


def longtail_lengths(n: int = 14, lo: int = 64, hi: int = 2048, seed: int = LONGTAIL_SEED) -> tuple[int, ...]:
    """n lengths, log-uniform in [lo, hi], from a private generator (the `longtail` mix)."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    return tuple(round(math.exp(math.log(lo) + float(x) * (math.log(hi) - math.log(lo)))) for x in u)


def uniform_lengths_until(total: int, lo: int = 64, hi: int = 2048,
                          seed: int = ISSUE10_SEED) -> tuple[int, ...]:
    """Lengths uniform in [lo, hi), drawn one at a time from a private generator until their sum
    reaches `total` (the last one crosses it): 14 sequences, 16,879 tokens for the defaults and
    total 16384 (the `uniform14` mix)."""
    g = torch.Generator().manual_seed(seed)
    lens: list[int] = []
    while sum(lens) < total:
        lens.append(int(torch.randint(lo, hi, (1,), generator=g)))
    return tuple(lens)


# name -> sequence lengths (q and k alike: prefill of whole prompts)
DISTRIBUTIONS = {
    "64x128": (128,) * 64,
    "16x256": (256,) * 16,
    "4x512": (512,) * 4,
    "longtail14": longtail_lengths(),
    "1x16384": (16384,),
}


@dataclass(frozen=True)
class Workload:
    """One benchmark problem. q_lens/k_lens per sequence; page_size None for ragged K/V."""

    name: str
    model: Model
    q_lens: tuple[int, ...]
    k_lens: tuple[int, ...]
    causal: bool
    page_size: int | None = None
    timed: bool = True
    dtype: str = "bf16"

    @property
    def batch(self) -> int:
        return len(self.q_lens)

    @property
    def total_q(self) -> int:
        return sum(self.q_lens)

    @property
    def total_k(self) -> int:
        return sum(self.k_lens)

    @property
    def pairs(self) -> int:
        """Exact number of allowed (query, key) pairs over all sequences (bottom-right causal)."""
        return sum(allowed_pairs(lq, lk, self.causal) for lq, lk in zip(self.q_lens, self.k_lens))

    @property
    def flops(self) -> int:
        """Useful FLOPs: 2 * H_q * (d_qk + d_v) * pairs (= 4 * H_q * d * pairs when d_qk == d_v)."""
        m = self.model
        return 2 * m.h_q * (m.d_qk + m.d_v) * self.pairs

    def describe(self) -> dict:
        m = self.model
        return {
            "name": self.name, "model": m.name, "h_q": m.h_q, "h_kv": m.h_kv, "d_qk": m.d_qk,
            "d_v": m.d_v, "batch": self.batch, "total_q": self.total_q, "total_k": self.total_k,
            "max_q": max(self.q_lens), "max_k": max(self.k_lens), "causal": self.causal,
            "page_size": self.page_size, "timed": self.timed, "pairs": self.pairs,
            "flops": self.flops, "dtype": self.dtype,
        }


def allowed_pairs(lq: int, lk: int, causal: bool) -> int:
    """Keys query i may see: all lk, or (bottom-right causal) j <= i + lk - lq, clamped to [0, lk]."""
    if not causal:
        return lq * lk
    off = lk - lq
    # sum_{i=0}^{lq-1} clamp(i + off + 1, 0, lk)
    total = 0
    first = max(0, -off)  # first query that sees at least one key (i + off + 1 >= 1)
    full = max(first, lk - off - 1)  # from here on the row sees all lk keys
    full = min(full, lq)
    if full > first:
        a, b = first + off + 1, full - 1 + off + 1
        total += (a + b) * (full - first) // 2
    total += (lq - full) * lk
    return total


def _serving(suite: str, causal: bool, page_size: int | None = None) -> list[Workload]:
    out = []
    for model in MODELS.values():
        for dist, lens in DISTRIBUTIONS.items():
            tag = "" if causal else "-full"
            page = f"-p{page_size}" if page_size else ""
            out.append(Workload(f"{model.name}/{dist}{tag}{page}", model, lens, lens, causal, page_size))
    return out


def _flashinfer_cudnn() -> list[Workload]:
    out = []
    grid = itertools.product((1, 4), (8, 17, 700), (8, 32, 1066), (8, 16, 64), (1, 4), (True, False))
    idx = 0
    for batch, s_qo, s_kv, page, h_kv, causal in grid:
        if s_qo > s_kv:
            continue
        g = torch.Generator().manual_seed(FLASHINFER_SEED)
        lq = torch.randint(1, s_qo + 1, (batch,), generator=g).tolist()
        lk = torch.randint(s_qo, s_kv + 1, (batch,), generator=g).tolist()
        model = Model(f"fi-h4/{h_kv}", 4, h_kv, 128, 128)
        name = f"b{batch}-q{s_qo}-kv{s_kv}-p{page}-hkv{h_kv}-{'causal' if causal else 'full'}"
        out.append(Workload(name, model, tuple(lq), tuple(lk), causal, page,
                            timed=idx % FLASHINFER_TIMED_EVERY == 0))
        idx += 1
    return out


def _smoke() -> list[Workload]:
    m = Model("tiny-gqa", 4, 2, 32, 32)
    mla = Model("tiny-mla", 2, 2, 48, 32)
    return [
        Workload("tiny-gqa/2mix", m, (16, 33), (16, 33), True),
        Workload("tiny-gqa/2mix-full", m, (16, 33), (16, 33), False),
        Workload("tiny-mla/2mix", mla, (8, 24), (8, 24), True),
        Workload("tiny-gqa/2mix-p8", m, (16, 33), (16, 33), True, page_size=8),
    ]


def _issue10() -> list[Workload]:
    big, small = MODELS["llama3-70b"], MODELS["llama3-8b"]
    small_d64 = Model("llama3-8b-d64", small.h_q, small.h_kv, 64, 64)
    uniform = uniform_lengths_until(16384)
    rows = [Workload(f"{big.name}/2x8192", big, (8192,) * 2, (8192,) * 2, True),
            Workload(f"{big.name}/2x8192-full", big, (8192,) * 2, (8192,) * 2, False)]
    rows += [Workload(f"{m.name}/uniform{len(uniform)}", m, uniform, uniform, True)
             for m in (small, small_d64)]
    rows += [Workload(f"{small.name}/{dist}", small, DISTRIBUTIONS[dist], DISTRIBUTIONS[dist], True)
             for dist in ("16x256", "4x512", "64x128")]
    return rows


SUITES = {
    "serving": lambda: _serving("serving", True),
    "serving-full": lambda: _serving("serving-full", False),
    "dense-long": lambda: [
        Workload("llama3-8b/2x8192", MODELS["llama3-8b"], (8192,) * 2, (8192,) * 2, True),
        Workload("llama3-8b/2x8192-full", MODELS["llama3-8b"], (8192,) * 2, (8192,) * 2, False),
    ],
    "paged": lambda: _serving("paged", True, 16) + _serving("paged", True, 64),
    "flashinfer-cudnn": _flashinfer_cudnn,
    "issue10": _issue10,
    "smoke": _smoke,
}


def suite(name: str) -> list[Workload]:
    if name not in SUITES:
        raise ValueError(f"--suite: unknown suite {name!r}; known: {', '.join(SUITES)}")
    return SUITES[name]()


def named_workloads(suite_name: str, names: list[str]) -> list[Workload]:
    """The workloads of suite `suite_name` called `names` (e.g. "llama3-8b/1x16384-full"), in that
    order, for tools that time a few rows. ValueError naming the suite (unknown) or the names it
    lacks, with the names it has."""
    by_name = {w.name: w for w in suite(suite_name)}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ValueError(f"workloads: {missing} not in suite {suite_name!r}; it has {sorted(by_name)}")
    return [by_name[n] for n in names]


# ---------------------------------------------------------------------------------------------
# Inputs


@dataclass
class Inputs:
    """One set of device tensors for a workload (the harness rotates several so L2 holds none).

    Ragged: k, v are (total_k, H_kv, D). Paged: k, v are pools (num_pages, page_size, H_kv, D)
    NHD, page_table (B, max_pages) int32, seqused_k (B,) int32 and cu_seqlens_k is None.
    """

    q: torch.Tensor  # (total_q, H_q, d_qk)
    k: torch.Tensor
    v: torch.Tensor
    cu_seqlens_q: torch.Tensor  # (B+1,) int32
    cu_seqlens_k: torch.Tensor | None  # (B+1,) int32, ragged only
    max_seqlen_q: int
    max_seqlen_k: int
    page_table: torch.Tensor | None = None  # (B, max_pages) int32
    seqused_k: torch.Tensor | None = None  # (B,) int32

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.q, self.k, self.v))


def _cu(lens, device) -> torch.Tensor:
    c = [0]
    for n in lens:
        c.append(c[-1] + n)
    return torch.tensor(c, dtype=torch.int32, device=device)


def make_inputs(w: Workload, device, seed: int) -> Inputs:
    """Random normal q, k, v (never zeros) for workload w; deterministic in (w, seed)."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[w.dtype]
    m = w.model
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dtype)

    q = randn(w.total_q, m.h_q, m.d_qk)
    cu_q = _cu(w.q_lens, device)
    if w.page_size is None:
        k = randn(w.total_k, m.h_kv, m.d_qk)
        v = randn(w.total_k, m.h_kv, m.d_v)
        return Inputs(q, k, v, cu_q, _cu(w.k_lens, device), max(w.q_lens), max(w.k_lens))
    ps = w.page_size
    pages_per = [-(-n // ps) for n in w.k_lens]
    max_pages = max(pages_per)
    num_pages = sum(pages_per)
    perm = torch.randperm(num_pages, generator=torch.Generator().manual_seed(PAGE_SEED)).tolist()
    table = torch.zeros(w.batch, max_pages, dtype=torch.int32)
    used = 0
    for b, n in enumerate(pages_per):
        table[b, :n] = torch.tensor(perm[used:used + n], dtype=torch.int32)
        used += n
    k = randn(num_pages, ps, m.h_kv, m.d_qk)
    v = randn(num_pages, ps, m.h_kv, m.d_v)
    seqused = torch.tensor(w.k_lens, dtype=torch.int32, device=device)
    return Inputs(q, k, v, cu_q, None, max(w.q_lens), max(w.k_lens), table.to(device), seqused)


def gather_kv(inp: Inputs, w: Workload, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(lk, H_kv, D) keys and values of sequence b, ragged or paged."""
    lk = w.k_lens[b]
    if inp.page_table is None:
        s = int(inp.cu_seqlens_k[b])
        return inp.k[s:s + lk], inp.v[s:s + lk]
    ps = w.page_size
    pages = inp.page_table[b, : -(-lk // ps)].long()
    k = inp.k[pages].reshape(-1, *inp.k.shape[2:])[:lk]
    v = inp.v[pages].reshape(-1, *inp.v.shape[2:])[:lk]
    return k, v


def to_ragged(inp: Inputs, w: Workload) -> Inputs:
    """The same problem with K/V gathered out of the page pool (used only by the reference check)."""
    if inp.page_table is None:
        return inp
    ks, vs = zip(*(gather_kv(inp, w, b) for b in range(w.batch)))
    return Inputs(inp.q, torch.cat(ks), torch.cat(vs), inp.cu_seqlens_q, _cu(w.k_lens, inp.q.device),
                  inp.max_seqlen_q, inp.max_seqlen_k)
