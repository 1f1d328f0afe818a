"""One launch each of ours on tools/bench_paged_sm90.py's longtail14 batch, ragged K/V and paged
K/V at PAGE_SIZE (default 64), inside a cudaProfilerStart/Stop window, for
`ncu --profile-from-start off` (each warmed up twice first; the order is printed).
Usage: ncu --clock-control none --profile-from-start off --set full -o REPORT \\
           python tools/ncu_paged_sm90.py [PAGE_SIZE]
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_paged_sm90 import kernel, launches, make_problem  # noqa: E402
from ncu_issue10 import profile_calls  # noqa: E402


def main():
    ps = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    _, q, k, v, cu, used, common, _, pools = make_problem("cuda")
    kp, vp, table = pools(ps)
    ragged_call, paged_call = launches(q, k, v, cu, used, common)
    calls = {"ragged": ragged_call(kernel("ragged")), f"paged page {ps}": paged_call(kernel("paged"), kp, vp, table)}
    profile_calls("longtail14", calls)


if __name__ == "__main__":
    main()
