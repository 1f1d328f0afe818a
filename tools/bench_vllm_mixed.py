"""Issue 14 item 4: a mixed batch as vLLM sends it, ours beside FA3 and FA4 on the same batch (GPU time).

The batch (`vllm_mixed_lengths`, seed SEED = 14004, Python's random.Random): 4 prefill chunks of
512..2048 queries each (uniform), each after a prior context of 0..8192 keys (chunked prefill: keys
= context + chunk), and 64 decode rows (1 query each) over 2048..32768 keys (uniform; bounds
inclusive); decode rows first, then the chunks (VLLM_BENCH_ORDER=decode_first | prefill_first |
shuffled | longest_first: sequences by key length, longest first, the batch-level LPT order that
FA3's prepare kernel sorts its varlen batches into; ours takes a batch in the caller's order). H_q 32, H_kv 8, d 128 (VLLM_BENCH_HEADS, VLLM_BENCH_D), bf16, causal bottom-right aligned (FlashAttention's and vLLM's
convention: query i of a sequence with lq queries and lk keys sees key j iff j <= i + lk - lq), no
LSE (vLLM's FlashAttention backend asks for none). K/V in a paged NHD pool (num_pages, page_size,
H_kv, d) of page size 16 (argv: one or more page sizes, e.g. `16 64 128`), the pages of every
sequence at random places in the pool (a few spare pages that no table references), page_table
int32 (B, max_pages) padded with page 0, seqused_k = key lengths, cu_seqlens_q int32 (`build_batch`).

Implementations, timed interleaved in one process (ragged_attn.bench.timing.gpu_ms_interleaved: the
L2 flushed and a sleep head start before each call, every implementation once per round, BENCH_REPS
rounds, default 30; median GPU time; host time is not counted):
  ours paged            ragged_attn.attention(q, k_pool, v_pool, cu_seqlens_q, None, max_q, max_k,
                        seqused_k=, page_table=, causal=True): the public call, the library's own
                        choices (its split-KV count where the tree has split-KV, printed)
  ours paged out=       the same into a caller's out buffer (vLLM passes one)
  ours paged S=n        split-KV forced to n splits through kernels.sm90.launch_forward(num_splits=n)
                        (VLLM_BENCH_SPLITS, default 1,4,8; only where the tree's launch_forward has
                        num_splits, e.g. wip/split-kv; for a class without an LSE the splits run on
                        its LSE sibling's kernel, as the library does); VLLM_BENCH_PACK_ROWS=0 / 1
                        forces row packing off / on there (wip/pack-rows; unset: the library's choice)
  ours paged +lse       return_lse=True (VLLM_BENCH_LSE=1)
  ours ragged K/V       the same keys copied into ragged (total_k, H_kv, d) tensors with cu_seqlens_k
                        (VLLM_BENCH_RAGGED=0 drops the ragged rows, ours and the peers')
  <label> paged ...     the public call of another tree's package (RAGGED_ATTN_AB_TREES=label=DIR,
                        tools/ab_tree.sh; its prebuilt objects from DIR/sm90 when they are there)
  FA3 paged             fa3_fwd_interface.flash_attn_with_kvcache(page_table=, cache_seqlens=,
                        cu_seqlens_q=, num_splits=0: FA3's own split heuristic, pack_gqa its default).
                        Skipped with the reason printed when the installed fa3-fwd wheel is built
                        without paged KV (fa3_fwd_config: FLASHATTENTION_DISABLE_PAGEDKV; the 0.0.3
                        wheel is), then FA3 stands in on the ragged copy:
  FA3 ragged K/V S=..   fa3_fwd_interface.flash_attn_varlen_func on the ragged copy, num_splits from
                        VLLM_BENCH_FA3_SPLITS (default 0,1; 0 = "S=auto", FA3's heuristic)
  FA4 paged S=..        flash_attn.cute.flash_attn_varlen_func(q, k_pool, v_pool, cu_seqlens_q=,
                        seqused_k=, page_table=, max_seqlen_q=, max_seqlen_k=, causal=True),
                        num_splits from VLLM_BENCH_FA4_SPLITS (default 1, FA4's default; 0 = its
                        heuristic). FA4 JIT-compiles on its first call (30+ s per page size);
                        VLLM_BENCH_FA4=0 skips it, VLLM_BENCH_FA4_RAGGED=1 adds FA4 on the ragged copy
Peers that fail to import are skipped with the reason printed; a call that raises is reported and
dropped from the timing.

Columns: GPU us (median over the rounds), TFLOP/s = 2 * H_q * (d_qk + d_v) * allowed (query, key)
pairs / GPU time (useful work: masked pairs not counted), K/V TB/s = unique K/V bytes (every
sequence's keys and values read once: sum(lk) * H_kv * (d_qk + d_v) * 2 bytes) / GPU time, x ours =
GPU time / ours paged's (above 1: slower than ours), first call s (includes any JIT compile), host
us (median host time of one call with the GPU drained first, timing.host_us: it must stay below the
head start), max diff vs ours (max |out - ours paged's out| over all rows), err vs fp32 = max |out -
reference| over a subset (`reference_subset`: the cheapest prefill chunk and the decode rows of
fewest and most keys; `reference_rows`: per-sequence float32 attention on the keys gathered from
the pool), ok = every element of the subset within 2e-2 + 2e-2 |ref|. Each batch ends with "item 4"
lines: ours paged against the fastest FA3 row and the fastest FA4 row (HOLDS when at most both),
and ours ragged K/V against the peers' ragged rows.

Kernels: RAGGED_ATTN_SM90_PREBUILT/<class>.o (tools/prebuild_sm90.py) seed the compile cache of
the public call; classes without one compile (or load from the disk cache) on the first call.
VLLM_BENCH_OURS_TREE=DIR imports `ragged_attn` from DIR instead of this checkout. VLLM_BENCH_PARTS=1
also times the decode rows alone and the prefill chunks alone (the same lengths).
VLLM_BENCH_POOL_FILL=nan puts NaN in every pool slot no sequence uses (default: random values, a
pool's stale data). VLLM_BENCH_HEAD_START_US (default 1000) is the sleep before each timed call:
longer than any implementation's host time.

Usage (from the repository root, on an H200):
    RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/sm90 python tools/bench_vllm_mixed.py [PAGE_SIZE ...]
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import os
import random
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.environ.get("VLLM_BENCH_OURS_TREE") or ROOT)

from ragged_attn.bench.timing import gpu_ms_interleaved, host_us  # noqa: E402

SEED = 14004  # issue 14, item 4
# VLLM_BENCH_HEADS ("H_q/H_kv", default 32/8) and VLLM_BENCH_D (head dim of Q, K and V, default 128):
# the same batch at another class (e.g. d64 for the stream mix beyond the d128 classes).
H_Q, H_KV = (int(x) for x in os.environ.get("VLLM_BENCH_HEADS", "32/8").split("/"))
D = int(os.environ.get("VLLM_BENCH_D", "128"))
N_PREFILL, N_DECODE = 4, 64
PREFILL_Q = (512, 2048)  # queries per prefill chunk, inclusive bounds
PREFILL_CONTEXT = (0, 8192)  # keys before the chunk (earlier chunks of the same request)
DECODE_K = (2048, 32768)  # keys per decode row
ORDERS = ("decode_first", "prefill_first", "shuffled", "longest_first")
SPARE_PAGES = 0.05  # pool pages no table references, as a fraction of the pages in use
TOLERANCE = (2e-2, 2e-2)  # |out - ref| <= atol + rtol |ref| (tests/cases.py `close`)


def log(*parts) -> None:
    print(*parts, flush=True)


def env_ints(name: str, default: str) -> list[int]:
    return [int(x) for x in os.environ.get(name, default).split(",") if x.strip()]


# ----------------------------------------------------------------------------- the batch


def vllm_mixed_lengths(
    seed: int = SEED,
    n_prefill: int = N_PREFILL,
    n_decode: int = N_DECODE,
    prefill_q: tuple[int, int] = PREFILL_Q,
    prefill_context: tuple[int, int] = PREFILL_CONTEXT,
    decode_k: tuple[int, int] = DECODE_K,
    order: str = "decode_first",
) -> tuple[list[int], list[int], list[str]]:
    """(lens_q, lens_k, kinds) of vLLM's mixed batch: n_prefill chunks (queries uniform in prefill_q,
    keys = a context uniform in prefill_context + the chunk) and n_decode rows (1 query over keys
    uniform in decode_k); kinds[b] is "prefill" or "decode". Bounds inclusive; random.Random(seed),
    so the lengths do not depend on torch. order: decode rows first ("decode_first"), chunks first
    ("prefill_first"), both shuffled together ("shuffled", the same seed) or by key length, longest
    first ("longest_first"; ties keep decode_first's order)."""
    if order not in ORDERS:
        raise ValueError(f"order: expected one of {ORDERS}, got {order!r}")
    rng = random.Random(seed)
    prefill = []
    for _ in range(n_prefill):
        chunk = rng.randint(*prefill_q)
        context = rng.randint(*prefill_context)
        prefill.append((chunk, context + chunk, "prefill"))
    decode = [(1, rng.randint(*decode_k), "decode") for _ in range(n_decode)]
    seqs = decode + prefill if order == "decode_first" else prefill + decode
    if order == "shuffled":
        rng.shuffle(seqs)
    if order == "longest_first":
        seqs = sorted(seqs, key=lambda s: -s[1])
    return [s[0] for s in seqs], [s[1] for s in seqs], [s[2] for s in seqs]


def allowed_pairs(lens_q, lens_k) -> int:
    """(query, key) pairs a bottom-right causal mask allows: row i of lq sees min(lk, i + lk - lq + 1)
    keys (none before row lq - lk)."""
    total = 0
    for lq, lk in zip(lens_q, lens_k, strict=True):
        first_full = max(0, lq - lk)  # rows before this one see no key
        total += sum(min(lk, i + lk - lq + 1) for i in range(first_full, lq))
    return total


@dataclasses.dataclass
class MixedBatch:
    """One batch's lengths and device tensors (build_batch)."""

    lens_q: list[int]
    lens_k: list[int]
    kinds: list[str]
    page_size: int
    q: torch.Tensor  # (total_q, H_q, d)
    k_pool: torch.Tensor  # (num_pages, page_size, H_kv, d) NHD
    v_pool: torch.Tensor
    page_table: torch.Tensor  # (B, max_pages) int32
    cu_seqlens_q: torch.Tensor  # (B + 1,) int32
    seqused_k: torch.Tensor  # (B,) int32
    starts_q: list[int]  # cu_seqlens_q on the host, without the last entry

    @property
    def max_seqlen_q(self) -> int:
        return max(self.lens_q, default=0)

    @property
    def max_seqlen_k(self) -> int:
        return max(self.lens_k, default=0)

    @property
    def total_q(self) -> int:
        return sum(self.lens_q)

    def token_slots(self, b: int) -> torch.Tensor:
        """Sequence b's keys as row indices into the pool viewed as (pages * page_size, H_kv, d)."""
        t = torch.arange(self.lens_k[b], device=self.page_table.device)
        return self.page_table[b, t // self.page_size].long() * self.page_size + t % self.page_size

    def keys(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Sequence b's K and V, (lk, H_kv, d) each, gathered from the pool."""
        slots = self.token_slots(b)
        h_kv, d_k, d_v = self.k_pool.shape[2], self.k_pool.shape[3], self.v_pool.shape[3]
        return self.k_pool.view(-1, h_kv, d_k)[slots], self.v_pool.view(-1, h_kv, d_v)[slots]

    def ragged_kv(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The same keys as contiguous ragged tensors: (k, v, cu_seqlens_k), (total_k, H_kv, d)."""
        slots = torch.cat([self.token_slots(b) for b in range(len(self.lens_k))])
        h_kv, d_k, d_v = self.k_pool.shape[2], self.k_pool.shape[3], self.v_pool.shape[3]
        k = self.k_pool.view(-1, h_kv, d_k)[slots]
        v = self.v_pool.view(-1, h_kv, d_v)[slots]
        cu = [0]
        for n in self.lens_k:
            cu.append(cu[-1] + n)
        return k, v, torch.tensor(cu, dtype=torch.int32, device=k.device)

    def flops(self) -> int:
        """2 * H_q * (d_qk + d_v) * allowed pairs."""
        d_qk, d_v = self.q.shape[2], self.v_pool.shape[3]
        return 2 * self.q.shape[1] * (d_qk + d_v) * allowed_pairs(self.lens_q, self.lens_k)

    def kv_bytes(self) -> int:
        """Unique K/V bytes: every sequence's keys and values read once."""
        h_kv, d_qk, d_v = self.k_pool.shape[2], self.k_pool.shape[3], self.v_pool.shape[3]
        per_token = h_kv * (d_qk + d_v) * self.k_pool.element_size()
        return sum(self.lens_k) * per_token


def build_batch(
    lens_q,
    lens_k,
    kinds,
    page_size: int,
    h_q: int = H_Q,
    h_kv: int = H_KV,
    d: int = D,
    device="cuda",
    dtype=torch.bfloat16,
    seed: int = SEED,
    spare_pages: float = SPARE_PAGES,
    pool_fill: str = "randn",
) -> MixedBatch:
    """The batch's tensors on `device`: q (total_q, H_q, d) and the NHD pools random normal
    (torch.Generator seeded with `seed`), each sequence's ceil(lk / page_size) pages drawn without
    repeats from a random permutation of the pool (which holds ceil(spare_pages * used) + 1 pages
    more), the table padded with page 0. pool_fill "nan": every slot that no sequence's keys use
    (spare pages, slots past a sequence's last key) holds NaN; "randn": random like the rest."""
    if pool_fill not in ("randn", "nan"):
        raise ValueError(f"pool_fill: expected 'randn' or 'nan', got {pool_fill!r}")
    if not (len(lens_q) == len(lens_k) == len(kinds)):
        raise ValueError("lens_q, lens_k and kinds differ in length")
    pages_per_seq = [-(-n // page_size) for n in lens_k]
    used = sum(pages_per_seq)
    num_pages = used + math.ceil(spare_pages * used) + 1
    perm = torch.randperm(num_pages, generator=torch.Generator().manual_seed(seed))
    table = torch.zeros(len(lens_k), max(1, max(pages_per_seq, default=1)), dtype=torch.int32)
    nxt = 0
    for b, n in enumerate(pages_per_seq):
        table[b, :n] = perm[nxt : nxt + n].to(torch.int32)
        nxt += n
    gen = torch.Generator(device=device).manual_seed(seed)
    k_pool = torch.randn(num_pages, page_size, h_kv, d, device=device, dtype=dtype, generator=gen)
    v_pool = torch.randn(num_pages, page_size, h_kv, d, device=device, dtype=dtype, generator=gen)
    q = torch.randn(sum(lens_q), h_q, d, device=device, dtype=dtype, generator=gen)
    starts = [0]
    for n in lens_q:
        starts.append(starts[-1] + n)
    batch = MixedBatch(
        lens_q=list(lens_q), lens_k=list(lens_k), kinds=list(kinds), page_size=page_size, q=q, k_pool=k_pool,
        v_pool=v_pool, page_table=table.to(device),
        cu_seqlens_q=torch.tensor(starts, dtype=torch.int32, device=device),
        seqused_k=torch.tensor(list(lens_k), dtype=torch.int32, device=device), starts_q=starts[:-1],
    )  # fmt: skip
    if pool_fill == "nan":
        in_use = torch.zeros(num_pages * page_size, dtype=torch.bool, device=device)
        for b in range(len(lens_k)):
            in_use[batch.token_slots(b)] = True
        k_pool.view(-1, h_kv, d)[~in_use] = float("nan")
        v_pool.view(-1, h_kv, d)[~in_use] = float("nan")
    return batch


# ----------------------------------------------------------------------------- the reference


def reference_subset(batch: MixedBatch) -> list[int]:
    """The sequences the float32 reference checks: the prefill chunk of fewest lq * lk and the decode
    rows of fewest and most keys (those that exist)."""
    prefill = [b for b, kind in enumerate(batch.kinds) if kind == "prefill"]
    decode = [b for b, kind in enumerate(batch.kinds) if kind == "decode"]
    picks = []
    if prefill:
        picks.append(min(prefill, key=lambda b: batch.lens_q[b] * batch.lens_k[b]))
    if decode:
        picks.append(min(decode, key=lambda b: batch.lens_k[b]))
        picks.append(max(decode, key=lambda b: batch.lens_k[b]))
    return sorted(set(picks))


def reference_rows(batch: MixedBatch, seq_ids, softmax_scale: float | None = None) -> dict[int, torch.Tensor]:
    """{b: float32 (lq, H_q, d_v)}: attention of sequence b in float32 (scores, softmax, P V) on the
    keys gathered from the pool, bottom-right causal, GQA (query head h reads K/V head h // (H_q /
    H_kv)); rows that see no key are 0. Runs on the batch's device (CPU tensors too)."""
    h_q, d = batch.q.shape[1], batch.q.shape[2]
    scale = d**-0.5 if softmax_scale is None else softmax_scale
    refs = {}
    for b in seq_ids:
        lq, lk, s = batch.lens_q[b], batch.lens_k[b], batch.starts_q[b]
        k, v = batch.keys(b)
        group = h_q // k.shape[1]
        q = batch.q[s : s + lq].float()
        k = k.float().repeat_interleave(group, dim=1)
        v = v.float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale
        i = torch.arange(lq, device=q.device)[:, None]
        j = torch.arange(lk, device=q.device)[None, :]
        scores = scores.masked_fill(j > i + (lk - lq), float("-inf"))
        p = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows without keys: 0
        refs[b] = torch.einsum("hqk,khd->qhd", p, v)
    return refs


def error_vs_reference(out: torch.Tensor, batch: MixedBatch, refs: dict) -> tuple[float, bool]:
    """(max |out - ref| over the reference's rows, every element within TOLERANCE)."""
    worst, ok = 0.0, True
    atol, rtol = TOLERANCE
    for b, ref in refs.items():
        s = batch.starts_q[b]
        got = out[s : s + batch.lens_q[b]].float()
        err = (got - ref).abs()
        worst = max(worst, err.max().item() if err.numel() else 0.0)
        ok = ok and bool((err <= atol + rtol * ref.abs()).all())
    return worst, ok


# ----------------------------------------------------------------------------- the implementations


def first_tensor(result) -> torch.Tensor:
    """The output of a call returning out or (out, lse, ...)."""
    return result[0] if isinstance(result, (tuple, list)) else result


def accepted(fn, kwargs: dict) -> dict:
    """The keyword arguments `fn` accepts (peers' versions differ)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def other_trees() -> list[tuple[str, str]]:
    """RAGGED_ATTN_AB_TREES=label=DIR[,label=DIR...]: [(label, DIR)], DIR as tools/ab_tree.sh wrote it."""
    spec = os.environ.get("RAGGED_ATTN_AB_TREES", "")
    return [tuple(item.split("=", 1)) for item in filter(None, spec.split(","))]


def preload_prebuilt(pkg_name: str, classes, directory: str) -> None:
    """Seed package `pkg_name`'s process-wide compile cache with directory/<class>.o (tools/prebuild_sm90.py
    objects) so its public call runs them; a class without an object compiles (or loads from the
    disk cache) on its first call. The disk cache is off while they load (RAGGED_ATTN_DISK_CACHE=0),
    so a prebuilt object (maybe a variant's build) is never stored under its class's key."""
    if not directory:
        return
    compile_cache = importlib.import_module(f"{pkg_name}.compile_cache")
    for lc in classes:
        path = os.path.join(directory, lc.name + ".o")
        if not os.path.exists(path):
            log(f"  {pkg_name}: no prebuilt {path}: compiled (or read from the disk cache) on the first call")
            continue

        def load(_lc, path=path):
            import cutlass.cute as cute

            return cute.runtime.load_module(path, enable_tvm_ffi=True).fwd

        saved = os.environ.get("RAGGED_ATTN_DISK_CACHE")
        os.environ["RAGGED_ATTN_DISK_CACHE"] = "0"
        try:
            compile_cache.get_kernel(lc, load)
        finally:
            if saved is None:
                del os.environ["RAGGED_ATTN_DISK_CACHE"]
            else:
                os.environ["RAGGED_ATTN_DISK_CACHE"] = saved
        log(f"  {pkg_name}: {lc.name} from {path}")


def ours_impls(pkg_name: str, label: str, batch: MixedBatch, ragged, prebuilt_dir: str) -> dict:
    """{label: zero-argument call} of package `pkg_name` (ragged_attn or an A/B tree's copy): the
    public paged call (fresh out and a caller's out), forced split counts where its launch_forward
    takes num_splits, +lse on request, and the ragged copy."""
    pkg = importlib.import_module(pkg_name)
    b = batch
    paged_args = (b.q, b.k_pool, b.v_pool, b.cu_seqlens_q, None, b.max_seqlen_q, b.max_seqlen_k)
    paged_kw = dict(seqused_k=b.seqused_k, page_table=b.page_table, causal=True)
    want_lse = os.environ.get("VLLM_BENCH_LSE", "0") == "1"
    lc = pkg.layout_class_of(*paged_args, **paged_kw)
    classes = [lc]
    if want_lse:
        classes.append(dataclasses.replace(lc, lse=True))
    launch_forward = importlib.import_module(f"{pkg_name}.kernels.sm90").launch_forward
    if "num_splits" in inspect.signature(launch_forward).parameters and not lc.lse and not want_lse:
        classes.append(dataclasses.replace(lc, lse=True))  # the LSE sibling runs a no-LSE class's splits
    ragged_args = None
    if ragged is not None:
        k, v, cu_k = ragged
        ragged_args = (b.q, k, v, b.cu_seqlens_q, cu_k, b.max_seqlen_q, b.max_seqlen_k)
        classes.append(pkg.layout_class_of(*ragged_args, causal=True))
    preload_prebuilt(pkg_name, classes, prebuilt_dir)
    log(f"  {label}: paged class {lc.name}")
    attention = pkg.attention
    out_buf = torch.empty(b.total_q, b.q.shape[1], b.v_pool.shape[3], device=b.q.device, dtype=b.q.dtype)
    impls = {
        f"{label} paged": lambda: attention(*paged_args, **paged_kw),
        f"{label} paged out=": lambda: attention(*paged_args, **paged_kw, out=out_buf),
    }
    if want_lse:
        impls[f"{label} paged +lse"] = lambda: attention(*paged_args, **paged_kw, return_lse=True)[0]
    impls.update(forced_split_impls(pkg_name, label, paged_args, paged_kw))
    if ragged_args is not None:
        impls[f"{label} ragged K/V"] = lambda: attention(*ragged_args, causal=True)
    return impls


def forced_split_impls(pkg_name: str, label: str, paged_args, paged_kw) -> dict:
    """{label paged S=n: call} for n in VLLM_BENCH_SPLITS through the package's launch_forward (as
    backends.launch_cute launches, with num_splits forced), or {} where launch_forward has no
    num_splits. Prints the library's own count where backends.num_splits_for exists."""
    sm90 = importlib.import_module(f"{pkg_name}.kernels.sm90")
    backends = importlib.import_module(f"{pkg_name}.backends")
    problem_mod = importlib.import_module(f"{pkg_name}.problem")
    compile_cache = importlib.import_module(f"{pkg_name}.compile_cache")
    params = inspect.signature(sm90.launch_forward).parameters
    problem, tensors = problem_mod.build_problem(*paged_args, **paged_kw)
    lc = backends.check_support(problem)
    if hasattr(backends, "num_splits_for"):
        log(f"  {label}: the library's split-KV count for this batch: {backends.num_splits_for(lc, problem)}")
    if "num_splits" not in params:
        log(f"  {label}: launch_forward has no num_splits (no split-KV in this tree): forced splits skipped")
        return {}
    splits = env_ints("VLLM_BENCH_SPLITS", "1,4,8")
    if not splits:
        return {}
    compiled = compile_cache.get_kernel(lc, sm90.compile_forward)
    sibling = None
    if not lc.lse:
        sibling_of = getattr(backends, "split_kv_sibling", lambda c: dataclasses.replace(c, lse=True))
        sibling = compile_cache.get_kernel(sibling_of(lc), sm90.compile_forward)
    q = paged_args[0]
    impls = {}
    for n in splits:
        out = torch.empty(q.shape[0], q.shape[1], paged_args[2].shape[-1], device=q.device, dtype=q.dtype)
        kw = backends.kernel_arguments(problem, tensors._replace(out=out, lse=None), out, None)
        kw["num_splits"] = n
        rows = os.environ.get("VLLM_BENCH_PACK_ROWS")  # "0" / "1": force row packing off / on
        if rows in ("0", "1") and "pack_rows" in params:
            kw["pack_rows"] = rows == "1"
        elif "max_seqlen_k" in params:  # the library's row-packing rule needs the keys (split_kv.choose_pack_rows)
            kw["max_seqlen_k"] = problem.max_seqlen_k
        if "split_compiled" in params:
            kw["split_compiled"] = sibling
        if "fresh_outputs" in params:
            kw["fresh_outputs"] = True  # as attention() without out: every row of this batch is a sequence's

        def call(kw=kw):
            sm90.launch_forward(compiled, **kw)
            return kw["out"]

        impls[f"{label} paged S={n}"] = call
    return impls


def fa3_impls(batch: MixedBatch, ragged) -> dict:
    """FA3 (the fa3-fwd wheel): paged through flash_attn_with_kvcache where the wheel has paged KV,
    and flash_attn_varlen_func on the ragged copy (num_splits from VLLM_BENCH_FA3_SPLITS)."""
    try:
        import fa3_fwd_interface as fa3
    except Exception as e:  # noqa: BLE001 - any import failure means absent
        log(f"  FA3 skipped: fa3_fwd_interface not importable ({type(e).__name__}: {e})")
        return {}
    b = batch
    impls = {}
    try:
        from fa3_fwd_config import CONFIG

        no_paged = bool(CONFIG.get("build_flags", {}).get("FLASHATTENTION_DISABLE_PAGEDKV"))
    except Exception:  # noqa: BLE001 - no config: try the paged call, a failure is reported
        no_paged = False
    if no_paged:
        log("  FA3 paged skipped: this fa3-fwd wheel is built with FLASHATTENTION_DISABLE_PAGEDKV "
            "(fa3_fwd_config); FA3 runs on the ragged copy of the same keys")  # fmt: skip
    else:
        impls["FA3 paged"] = lambda: first_tensor(fa3.flash_attn_with_kvcache(
            b.q, b.k_pool, b.v_pool, cache_seqlens=b.seqused_k, page_table=b.page_table,
            cu_seqlens_q=b.cu_seqlens_q, max_seqlen_q=b.max_seqlen_q, causal=True, num_splits=0,
        ))  # fmt: skip
    if ragged is not None:
        k, v, cu_k = ragged
        for n in env_ints("VLLM_BENCH_FA3_SPLITS", "0,1"):
            impls[f"FA3 ragged K/V S={n or 'auto'}"] = lambda n=n: first_tensor(fa3.flash_attn_varlen_func(
                b.q, k, v, b.cu_seqlens_q, cu_k, b.max_seqlen_q, b.max_seqlen_k, causal=True, num_splits=n,
            ))  # fmt: skip
    return impls


def fa4_impls(batch: MixedBatch, ragged) -> dict:
    """FA4 (flash_attn.cute) paged, num_splits from VLLM_BENCH_FA4_SPLITS; on the ragged copy with
    VLLM_BENCH_FA4_RAGGED=1. Nothing with VLLM_BENCH_FA4=0."""
    if os.environ.get("VLLM_BENCH_FA4", "1") == "0":
        log("  FA4 skipped (VLLM_BENCH_FA4=0)")
        return {}
    try:
        from flash_attn.cute import flash_attn_varlen_func as fa4
    except Exception as e:  # noqa: BLE001
        log(f"  FA4 skipped: flash_attn.cute not importable ({type(e).__name__}: {e})")
        return {}
    b = batch
    impls = {}
    for n in env_ints("VLLM_BENCH_FA4_SPLITS", "1"):
        kw = accepted(fa4, dict(
            cu_seqlens_q=b.cu_seqlens_q, seqused_k=b.seqused_k, page_table=b.page_table,
            max_seqlen_q=b.max_seqlen_q, max_seqlen_k=b.max_seqlen_k, causal=True, num_splits=n,
            return_lse=False,
        ))  # fmt: skip
        if "num_splits" not in kw and n != 1:
            log(f"  FA4 paged S={n} skipped: this FA4 has no num_splits")
            continue
        impls[f"FA4 paged S={n or 'auto'}"] = lambda kw=kw: first_tensor(fa4(b.q, b.k_pool, b.v_pool, **kw))
    if ragged is not None and os.environ.get("VLLM_BENCH_FA4_RAGGED", "0") == "1":
        k, v, cu_k = ragged
        kw = accepted(fa4, dict(
            cu_seqlens_q=b.cu_seqlens_q, cu_seqlens_k=cu_k, max_seqlen_q=b.max_seqlen_q,
            max_seqlen_k=b.max_seqlen_k, causal=True, return_lse=False,
        ))  # fmt: skip
        impls["FA4 ragged K/V"] = lambda: first_tensor(fa4(b.q, k, v, **kw))
    return impls


# ----------------------------------------------------------------------------- one batch


def run_batch(name: str, batch: MixedBatch, reps: int, head_start_us: float) -> list[tuple]:
    """Check and time every implementation on `batch`; prints as it goes. Returns the table rows."""
    dev = batch.q.device
    flops, kv_bytes = batch.flops(), batch.kv_bytes()
    log(f"{name}: B {len(batch.lens_q)}, total_q {batch.total_q}, total_k {sum(batch.lens_k)}, "
        f"pool {tuple(batch.k_pool.shape)}, table {tuple(batch.page_table.shape)}, "
        f"{flops / 1e9:.1f} GFLOP useful, {kv_bytes / 1e9:.3f} GB unique K/V")  # fmt: skip
    ragged = batch.ragged_kv() if os.environ.get("VLLM_BENCH_RAGGED", "1") != "0" else None
    subset = reference_subset(batch)
    t0 = time.perf_counter()
    refs = reference_rows(batch, subset)
    shapes = [(batch.lens_q[b], batch.lens_k[b]) for b in subset]
    log(f"  float32 reference of sequences {subset} (lq, lk = {shapes}) in {time.perf_counter() - t0:.1f} s")

    impls: dict = {}
    log("  ours: ragged_attn from", os.path.dirname(importlib.import_module("ragged_attn").__file__))
    prebuilt = os.environ.get("RAGGED_ATTN_SM90_PREBUILT", "")
    impls.update(ours_impls("ragged_attn", "ours", batch, ragged, prebuilt))
    for label, tree in other_trees():
        try:
            if tree not in sys.path:
                sys.path.append(tree)
            impls.update(ours_impls(f"ragged_attn_{label}", label, batch, ragged, os.path.join(tree, "sm90")))
        except Exception as e:  # noqa: BLE001 - report and go on
            log(f"  {label} skipped: {type(e).__name__}: {e}"[:300])
    impls.update(fa3_impls(batch, ragged))
    impls.update(fa4_impls(batch, ragged))

    good, first_s, host, diffs, errs = {}, {}, {}, {}, {}
    ours_out = None
    for label, call in impls.items():  # each output checked before timing; the first is ours paged
        log(f"  first call: {label} ...")
        try:
            torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            out = first_tensor(call())
            torch.cuda.synchronize(dev)
            first_s[label] = time.perf_counter() - t0
            out = out.float().reshape(batch.total_q, batch.q.shape[1], -1)
            if ours_out is None:
                ours_out = out.clone()
                log(f"    (max diff vs ours: against {label}'s output)")
            diffs[label] = (out - ours_out).abs().max().item()
            errs[label] = error_vs_reference(out, batch, refs)
            good[label] = call
            host[label] = host_us(call, dev, calls=10)
            err, ok = errs[label]
            log(
                f"    {first_s[label]:.2f} s, host {host[label]:.0f} us per call, max diff vs ours "
                f"{diffs[label]:.3g}, err vs fp32 {err:.3g} ({'ok' if ok else 'OUT OF TOLERANCE'})"
            )
            if host[label] > head_start_us:
                log(f"    WARNING: host time above the {head_start_us:g} us head start: its GPU time "
                    "includes launch gaps (raise VLLM_BENCH_HEAD_START_US)")  # fmt: skip
            del out
        except Exception as e:  # noqa: BLE001 - report and go on
            log(f"    FAILED {type(e).__name__}: {e}"[:400])
    del ours_out
    log(f"  timing {len(good)} implementations interleaved, {reps} rounds ...")
    times = gpu_ms_interleaved(good, dev, head_start_us=head_start_us, reps=reps) or {}
    ours_ms = times.get("ours paged")
    rows = []
    for label, ms in times.items():
        tflops, kv_tbs = flops / (ms * 1e-3) / 1e12, kv_bytes / (ms * 1e-3) / 1e12
        rel = ms / ours_ms if ours_ms else float("nan")
        rows.append((name, label, ms * 1e3, tflops, kv_tbs, rel, first_s[label], host[label], diffs[label],
                     *errs[label]))  # fmt: skip
        log(f"  {label}: {ms * 1e3:.1f} us GPU, {tflops:.0f} TFLOP/s, {kv_tbs:.2f} TB/s K/V, {rel:.3f}x ours")
    verdict(name, times)
    return rows


def verdict(name: str, times: dict) -> None:
    """Item 4's test on this batch: ours paged at most the best FA3 row and the best FA4 row (the FA3
    rows may be on the ragged copy: see fa3_impls); then ours ragged K/V against the peers' ragged rows."""
    for ours_label, peer_kind in (("ours paged", ""), ("ours ragged K/V", "ragged K/V")):
        ours = times.get(ours_label)
        if ours is None:
            continue
        parts, holds, missing = [], True, False
        for peer in ("FA3", "FA4"):
            peer_rows = {k: v for k, v in times.items() if k.startswith(peer + " ") and peer_kind in k}
            if not peer_rows:
                parts.append(f"{peer} not timed")
                missing = True
                continue
            best = min(peer_rows, key=peer_rows.get)
            parts.append(f"{peer} best: {best} {peer_rows[best] * 1e3:.1f} us")
            holds = holds and ours <= peer_rows[best]
        state = "FAILS" if not holds else ("INCOMPLETE" if missing else "HOLDS")
        log(f"  item 4 on {name}: {ours_label} {ours * 1e3:.1f} us; {'; '.join(parts)} -> {state}")


def main(argv: list[str]) -> None:
    page_sizes = [int(a) for a in argv] or [int(os.environ.get("VLLM_BENCH_PAGE_SIZE", "16"))]
    reps = int(os.environ.get("BENCH_REPS", "30"))
    head_start_us = float(os.environ.get("VLLM_BENCH_HEAD_START_US", "1000"))
    order = os.environ.get("VLLM_BENCH_ORDER", "decode_first")
    pool_fill = os.environ.get("VLLM_BENCH_POOL_FILL", "randn")
    dev = torch.device("cuda")
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; seed {SEED}, order {order}, pages "
        f"{page_sizes}, pool fill {pool_fill}, {reps} rounds, head start {head_start_us:g} us")  # fmt: skip
    lens_q, lens_k, kinds = vllm_mixed_lengths(SEED, order=order)
    pre = [(q, k) for q, k, kind in zip(lens_q, lens_k, kinds, strict=True) if kind == "prefill"]
    dec = [k for k, kind in zip(lens_k, kinds, strict=True) if kind == "decode"]
    log(f"prefill chunks (queries, keys): {pre}")
    log(f"decode rows: {len(dec)}, keys {min(dec)}..{max(dec)}, mean {sum(dec) / len(dec):.0f}")
    workloads = [("mixed", list(range(len(lens_q))))]
    if os.environ.get("VLLM_BENCH_PARTS", "0") == "1":
        workloads += [("decode only", [b for b, kind in enumerate(kinds) if kind == "decode"]),
                      ("prefill only", [b for b, kind in enumerate(kinds) if kind == "prefill"])]  # fmt: skip
    table = []
    with torch.no_grad():
        for page_size in page_sizes:
            for wname, picks in workloads:
                name = f"{wname} page {page_size}"
                picked = ([lens_q[b] for b in picks], [lens_k[b] for b in picks], [kinds[b] for b in picks])
                batch = build_batch(*picked, page_size, device=dev, pool_fill=pool_fill)
                table += run_batch(name, batch, reps, head_start_us)
                del batch
                torch.cuda.empty_cache()
    log("\n| batch | impl | GPU us | TFLOP/s | K/V TB/s | x ours | first call s | host us | "
        "max diff vs ours | err vs fp32 | ok |")  # fmt: skip
    log("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, label, us, tf, tbs, rel, first, host, diff, err, ok in table:
        log(f"| {name} | {label} | {us:.1f} | {tf:.0f} | {tbs:.2f} | {rel:.3f} | {first:.2f} | {host:.0f} | "
            f"{diff:.3g} | {err:.3g} | {'ok' if ok else 'NO'} |")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
