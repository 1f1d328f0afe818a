"""Three launches of one longtail14 kernel (tools/bench_paged_sm90.py's batch) for ncu to profile.

    ncu --clock-control none --section WarpStateStats --section SourceCounters \
        -k regex:RaggedForwardSm90 --launch-skip 1 --launch-count 1 -o OUT \
        python3 tools/ncu_paged_driver.py WHICH

WHICH: "ragged" (this tree's ragged kernel), "paged" (this tree's paged kernel, page $NCU_PAGE, default 16), or a
variant folder name under RAGGED_ATTN_SM90_PREBUILT (that folder's paged kernel, page $NCU_PAGE).
NCU_IN_ORDER=1: the pool's pages in order (bench_paged_sm90's PAGED_BENCH_IN_ORDER pools) instead of
shuffled; NCU_WINDOW=W / NCU_SPREAD=F: bench_paged_sm90's PAGED_BENCH_WINDOW / PAGED_BENCH_SPREAD
pools (pages shuffled within runs of W, or drawn from a pool F times the batch's pages); to set them side by side (page 16's shuffled-pool loss, session 16), e.g. with
`--cache-control none --section MemoryWorkloadAnalysis_Tables --metrics
dram__bytes_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum`.
PAGED_BENCH_LENS applies as in bench_paged_sm90.py. Then `ncu -i OUT.ncu-rep --page source --csv
--print-source sass > OUT.csv` and tools/ncu_barrier_waits.py OUT.csv.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))


def main(which: str) -> None:
    import torch

    import bench_paged_sm90 as bench

    lens, q, k, v, cu, used, common, flops, pools = bench.make_problem("cuda")
    ragged_call, paged_call = bench.launches(q, k, v, cu, used, common)
    if which == "ragged":
        fn = ragged_call(bench.kernel("ragged"))
    else:
        kernel = bench.kernel("paged") if which == "paged" else bench.kernel("paged", which)
        if kernel is None:
            sys.exit(f"ncu_paged_driver: no paged kernel {which!r} under RAGGED_ATTN_SM90_PREBUILT")
        in_order = os.environ.get("NCU_IN_ORDER", "0") == "1"
        window, spread = int(os.environ.get("NCU_WINDOW", "0")), int(os.environ.get("NCU_SPREAD", "1"))
        pool = pools(int(os.environ.get("NCU_PAGE", "16")), in_order=in_order, window=window, spread=spread)
        fn = paged_call(kernel, *pool)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    print("ncu_paged_driver: done", which)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "paged")
