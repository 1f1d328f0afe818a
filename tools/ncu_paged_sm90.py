"""One launch each of ours on tools/bench_paged_sm90.py's longtail14 batch, ragged K/V and paged
K/V at PAGE_SIZE (default 64), inside a cudaProfilerStart/Stop window, for
`ncu --profile-from-start off` (each warmed up twice first; the order is printed).
Usage: ncu --clock-control none --profile-from-start off --set full -o REPORT \\
           python tools/ncu_paged_sm90.py [PAGE_SIZE]
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_paged_sm90 import kernel, make_problem  # noqa: E402

from ragged_attn.kernels.sm90 import launch_forward  # noqa: E402


def main():
    ps = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    lens, q, k, v, cu, used, common, _, pools = make_problem("cuda")
    kp, vp, table = pools(ps)
    ragged, paged = kernel("ragged"), kernel("paged")
    calls = {
        "ragged": lambda: launch_forward(ragged, q=q, k=k, v=v, cu_seqlens_k=cu, seqused_k=None, **common),
        f"paged page {ps}": lambda: launch_forward(
            paged, q=q, k=kp, v=vp, cu_seqlens_k=None, seqused_k=used, page_table=table, kv_layout="NHD", **common
        ),
    }
    for label, call in calls.items():
        call(), call()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        call()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        print(f"profiled: longtail14 | {label}", flush=True)


if __name__ == "__main__":
    main()
