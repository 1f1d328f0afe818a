"""ncu driver for the kernel-switch cost (tools/probe_kernel_switch.py): a bf16 GEMM, the paged kernel
twice, the GEMM again, the ragged kernel twice, each launch synchronized, no L2 flush. Profile the
attention launches with application replay, so that each profiled launch follows what it follows
in the run (kernel replay would put every pass after the previous pass of the same kernel):

    ncu --replay-mode application --cache-control none --clock-control none -k regex:RaggedForwardSm90 \\
        --section WarpStateStats --section LaunchStats --metrics gpu__time_duration.sum \\
        python tools/ncu_kernel_switch_driver.py

Launches in order: paged after GEMM, paged after paged, ragged after GEMM, ragged after ragged.
Env as tools/bench_paged_sm90.py (PAGED_BENCH_LENS, PAGED_BENCH_D, RAGGED_ATTN_SM90_PREBUILT); page 16.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench_paged_sm90 as bp  # noqa: E402


def main():
    dev = torch.device("cuda")
    lens, q, k, v, cu, used, common, flops, pools = bp.make_problem(dev)
    ragged_call, paged_call = bp.launches(q, k, v, cu, used, common)
    kvp, vvp, table = pools(16)
    paged, ragged = paged_call(bp.kernel("paged"), kvp, vvp, table), ragged_call(bp.kernel("ragged"))
    a = torch.randn(8192, 4096, device=dev, dtype=torch.bfloat16)
    w = torch.randn(4096, 6144, device=dev, dtype=torch.bfloat16)
    for call in (lambda: a @ w, paged, paged, lambda: a @ w, ragged, ragged):
        call()
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
