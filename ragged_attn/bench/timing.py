"""Timing: device median, host microseconds per call, first-call seconds.

Rules (METHOD.md): warm up before timing; median of many; never time zeros; rotate among input
sets so that the L2 does not hold them (`triton.testing.do_bench` also flushes the L2 before each
call); synchronize before reading a host clock. On a machine without CUDA (the CI smoke test) a
plain perf_counter median stands in for do_bench.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence

import torch

# do_bench budgets, milliseconds (its warmup/rep arguments are times, not counts)
WARMUP_MS = 10
REP_MS = 60
HOST_CALLS = 20  # calls timed on the host clock for "host us per call"
L2_ROTATE_BYTES = 256 << 20  # input sets together span >= 5x the H200's 50 MiB L2
MAX_SETS = 8
SLEEP_CYCLES_PER_US = 1980  # H200 max SM clock 1980 MHz; a slower clock only lengthens the head start


def num_input_sets(bytes_per_set: int, on_cuda: bool) -> int:
    """How many input sets to rotate: enough to span L2_ROTATE_BYTES, 2..MAX_SETS (1 on CPU)."""
    if not on_cuda:
        return 1
    return max(2, min(MAX_SETS, -(-L2_ROTATE_BYTES // max(1, bytes_per_set))))


class Rotator:
    """A zero-argument callable that calls fns[0], fns[1], ... in turn."""

    def __init__(self, fns: Sequence[Callable[[], object]]):
        self.fns = list(fns)
        self.i = 0

    def __call__(self):
        fn = self.fns[self.i]
        self.i = (self.i + 1) % len(self.fns)
        return fn()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def first_call(fn: Callable[[], object], device: torch.device) -> tuple[float, object]:
    """Seconds of the first call, synchronized (includes compile / graph build when not cached)."""
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - t0, out


def host_us(fn: Callable[[], object], device: torch.device, calls: int = HOST_CALLS) -> float:
    """Median microseconds the host spends inside one call (launch path; the GPU is drained
    before each call so that a full launch queue never blocks the host)."""
    times = []
    for _ in range(calls):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    _sync(device)
    return statistics.median(times) * 1e6


def gpu_ms(fn: Callable[[], object], device: torch.device, head_start_us: float, reps: int = 30) -> float | None:
    """Median milliseconds of the device work alone: before each timed call the GPU is handed a
    `torch.cuda._sleep` of head_start_us (after an L2 flush), so the host has queued the call
    before the GPU reaches the start event and launch latency stays out (METHOD.md: small
    launches). do_bench's median includes the host's launch time whenever that exceeds the ~0.1 ms
    of its own L2 flush; this one does not. None on CPU."""
    if device.type != "cuda":
        return None
    flush = torch.empty(L2_ROTATE_BYTES, dtype=torch.uint8, device=device)
    cycles = int(head_start_us * SLEEP_CYCLES_PER_US)
    fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush.zero_()
        torch.cuda._sleep(cycles)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize(device)
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def balanced_orders(n: int) -> list[list[int]]:
    """Round orders of n implementations balanced for the one that runs just before (a Williams
    design, the crossover trials' answer to carry-over): over the rows returned (n for even n, 2n
    for odd n > 1) each implementation follows every other one equally often inside the rounds (once
    for even n, twice for odd n) and holds every position equally often. Row 0 is 0, 1, n-1, 2,
    n-2, ...; row i adds i to each entry mod n; odd n adds the rows reversed."""
    if n <= 0:
        return []
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(x + i) % n for x in first] for i in range(n)]
    if n % 2 and n > 1:
        rows += [row[::-1] for row in rows]
    return rows


def gpu_ms_interleaved(
    fns: Mapping[str, Callable[[], object]], device: torch.device, head_start_us: float, reps: int = 30,
    order: str = "balanced", launches: list | None = None,
) -> dict[str, float] | None:
    """`gpu_ms` for several implementations at once, interleaved: each of the `reps` rounds calls
    every implementation once (each after its own L2 flush and sleep head start), so clock and power
    drift during a run (the H200 settles from ~1.98 to ~1.6 GHz under long tensor-core loads) falls
    on all of them alike. order "balanced" (default): the rounds cycle through `balanced_orders`, so
    each implementation runs after every other one equally often; "rotate": round r starts r
    further along the list, which puts each implementation after the same one in every round (the
    harness's order until 2026-12-08: a power or code state the one before leaves, e.g. a hotter
    kernel's, fell on one system only). `launches`, when given, receives (name, name of the launch
    before it or None, ms) for every timed launch. Returns {name: median milliseconds}; None on CPU."""
    if order not in ("balanced", "rotate"):
        raise ValueError(f"gpu_ms_interleaved: order: expected 'balanced' or 'rotate', got {order!r}")
    if device.type != "cuda":
        return None
    names = list(fns)
    n = len(names)
    rows = balanced_orders(n) if order == "balanced" else [[(r + j) % n for j in range(n)] for r in range(n)]
    flush = torch.empty(L2_ROTATE_BYTES, dtype=torch.uint8, device=device)
    cycles = int(head_start_us * SLEEP_CYCLES_PER_US)
    for name in names:
        fns[name]()
    timed = []  # (name, the launch before it, start, end)
    before = None
    for r in range(reps):
        for j in rows[r % len(rows)]:
            name = names[j]
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            flush.zero_()
            torch.cuda._sleep(cycles)
            start.record()
            fns[name]()
            end.record()
            timed.append((name, before, start, end))
            before = name
    torch.cuda.synchronize(device)
    ms = [(name, prev, s.elapsed_time(e)) for name, prev, s, e in timed]
    if launches is not None:
        launches.extend(ms)
    return {name: statistics.median(t for m, _, t in ms if m == name) for name in names}


def device_ms(fn: Callable[[], object], device: torch.device) -> tuple[float, str]:
    """Median milliseconds per call and the method used ("do_bench" or "perf_counter")."""
    if device.type == "cuda":
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median")), "do_bench"
    times = []
    fn()
    for _ in range(5):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, "perf_counter"
