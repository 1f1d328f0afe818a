"""One launch of each implementation of issue 10's rows inside a cudaProfilerStart/Stop window, for
`ncu --profile-from-start off` (the rows of tools/bench_issue10.py; each call warmed up twice first).
The order of the profiled calls is printed, so the report's kernels can be named.
Usage: ncu --clock-control none --profile-from-start off --set full -o REPORT \\
           python tools/ncu_issue10.py ROW_SUBSTRING [IMPL_SUBSTRING ...]
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_issue10 import ROWS, make_impls


def profile_calls(name: str, calls: dict) -> None:
    """Each call warmed up twice, then launched once inside a cudaProfilerStart/Stop window; the
    order is printed ("profiled: NAME | LABEL") so the report's kernels can be named."""
    for label, call in calls.items():
        call(), call()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        call()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        print(f"profiled: {name} | {label}", flush=True)


def main():
    row, wanted = sys.argv[1], sys.argv[2:]
    dev = torch.device("cuda")
    for name, lens, hq, hkv, d, causal in ROWS:
        if row not in name:
            continue
        impls, *_, bufs = make_impls(lens, hq, hkv, d, causal, dev)
        profile_calls(name, {label: call for label, call in impls.items() if not wanted or label in wanted})
        del bufs, impls


if __name__ == "__main__":
    main()
