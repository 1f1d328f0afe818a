"""Does the launch before a timed launch move its time? The suites' GPU-only medians
(ragged_attn.bench.timing.gpu_ms_interleaved) interleave the systems round by round; until
2026-12-08 each round started one further along the list, so every system ran after the same
other system in every round (serving-full: ours always after cuDNN's padded SDPA, FA4 always after
ours). This tool times the named workloads of a suite both ways, order "rotate" (the old rounds) and
"balanced" (the Williams rounds the harness uses now: each system after every other equally often),
and prints each system's median per order and, from the balanced rounds, its median by the system
that ran just before it.

Each system's first call is followed by the device's persisting-L2 limit (a set-aside some library
may reserve, which would shrink the L2 the kernels after it see).

Usage: python tools/probe_order.py WORKLOAD [WORKLOAD ...] [--suite serving-full]
       [--systems ragged_attn,fa4,fa3,cudnn,torch-varlen,sdpa-cudnn] [--reps 30] [--rest-us 2700]
(the suites rest 3 x the slowest system's host time before each launch, >= 200 us: ~2,700 us on
1 x 16384, where FA3 needs ~900 us of Python a call)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ragged_attn.bench.peers import make_systems
from ragged_attn.bench.timing import gpu_ms_interleaved
from ragged_attn.bench.workloads import make_inputs, named_workloads


def persisting_l2() -> str:
    """The device's persisting-L2 set-aside (cudaLimitPersistingL2CacheSize, bytes): a library that
    reserves one leaves less L2 to every kernel after it (our L2 groups assume the whole L2)."""
    try:
        import cuda.bindings.runtime as rt

        err, value = rt.cudaDeviceGetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize)
        return f"{value} B" if err == rt.cudaError_t.cudaSuccess else f"unknown ({err})"
    except Exception as e:  # noqa: BLE001 - a probe's side note, never its failure
        return f"unknown ({type(e).__name__})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "workloads", nargs="+", help="workload names of the suite, e.g. llama3-8b/1x16384-full"
    )
    parser.add_argument("--suite", default="serving-full")
    parser.add_argument("--systems", default="ragged_attn,fa4,fa3,cudnn,torch-varlen,sdpa-cudnn")
    parser.add_argument("--reps", type=int, default=30, help="rounds per order")
    parser.add_argument("--rest-us", type=float, default=2700.0, help="sleep before each launch, us")
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    try:
        workloads = named_workloads(args.suite, args.workloads)
    except ValueError as e:
        raise SystemExit(str(e)) from e
    systems = make_systems(args.systems.split(","), "cute")
    print(f"{torch.cuda.get_device_name(device)}; {args.reps} rounds an order, rest {args.rest_us:.0f} us")
    for w in workloads:
        name = w.name
        inp = make_inputs(w, device, 0)
        calls = {}
        for s in systems:
            why = s.availability(device)
            if why is not None:
                print(f"{name}: {s.name} skipped ({why})")
                continue
            try:
                s.setup(w, inp)
                calls[s.name] = s.bind(w, inp)[0]
                calls[s.name]()
                torch.cuda.synchronize(device)
                print(f"{name}: persisting-L2 limit after {s.name}'s first call: {persisting_l2()}")
            except Exception as e:  # noqa: BLE001 - report and go on without it
                print(f"{name}: {s.name} failed ({type(e).__name__}: {str(e)[:160]})")
                calls.pop(s.name, None)
        torch.cuda.synchronize(device)
        tf = {}
        launches = {}
        for order in ("rotate", "balanced", "rotate", "balanced"):
            log = []
            ms = gpu_ms_interleaved(calls, device, args.rest_us, reps=args.reps, order=order, launches=log)
            for n, t in ms.items():
                tf.setdefault((order, n), []).append(w.flops / (t * 1e-3) / 1e12)
            launches.setdefault(order, []).extend(log)
        print(f"\n{name}: TFLOP/s (median of each run; two runs an order, interleaved rotate / balanced)")
        print("| system | rotate | balanced | the one before it (rotate) |")
        print("|---|---|---|---|")
        for n in calls:
            prev = {p for m, p, _ in launches["rotate"] if m == n and p is not None and p != n}
            r = " / ".join(f"{x:.1f}" for x in tf[("rotate", n)])
            b = " / ".join(f"{x:.1f}" for x in tf[("balanced", n)])
            print(f"| {n} | {r} | {b} | {', '.join(sorted(prev))} |")
        print(f"\n{name}, balanced rounds: TFLOP/s by the system that ran just before (rows: timed system)")
        names = list(calls)
        print("| timed \\ before | " + " | ".join(names) + " |")
        print("|---" * (len(names) + 1) + "|")
        for n in names:
            cells = []
            for p in names:
                ts = [t for m, q, t in launches["balanced"] if m == n and q == p]
                cells.append(
                    f"{w.flops / (statistics.median(ts) * 1e-3) / 1e12:.1f} ({len(ts)})" if ts else "-"
                )
            print(f"| {n} | " + " | ".join(cells) + " |")
        del inp, calls
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
