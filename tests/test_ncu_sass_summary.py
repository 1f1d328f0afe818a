"""tools/ncu_sass_summary.py --span on a small ncu source-page CSV written here (no GPU, no ncu)."""

from __future__ import annotations

import csv
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import ncu_sass_summary

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed", "stall_selected",
          "stall_wait", "stall_barrier"]  # fmt: skip


def _kernel(tmp_path, rows):
    path = tmp_path / "k.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "kernel_x"])
        w.writerow(HEADER)
        w.writerows(rows)
    (kernel,) = ncu_sass_summary.read_kernels(str(path))
    return kernel


def test_span_cycles_per_iteration_do_not_depend_on_how_samples_are_spread(tmp_path):
    # A 4-instruction loop run 100 times: 40 samples, 10 of them issuing (selected), so a warp
    # spends 40 / 10 = 4 cycles per issued instruction, 16 per iteration.
    loop = [
        ["0x100", "      HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], RZ", "10", "100", "2", "8", "0"],
        ["0x110", "      FMNMX R1, R2, R3, !PT", "10", "100", "3", "2", "5"],
        ["0x120", "      MUFU.EX2 R4, R4", "10", "100", "3", "7", "0"],
        ["0x130", "@!P0  BRA 0x100", "10", "100", "2", "8", "0"],
    ]
    tail = [["0x140", "      EXIT", "5", "8", "0", "5", "0"]]
    lines = ncu_sass_summary.span(_kernel(tmp_path, loop + tail), 0, 3)
    assert lines[0] == "span 0-3: 100 iterations, 4.0 instructions each, 40 samples"
    assert "~ 16 " in lines[1]
    assert lines[2].startswith("  stall shares: wait 62.5%, selected 25.0%, barrier 12.5%")
    # The same loop sampled a third as often (more warps resident): the same cycles per iteration.
    thinned = [[a, s, str(int(n) / 3), e, str(int(sel) / 3), str(int(w) / 3), str(int(b) / 3)]
               for a, s, n, e, sel, w, b in loop]  # fmt: skip
    assert "~ 16 " in ncu_sass_summary.span(_kernel(tmp_path, thinned), 0, 3)[1]


def test_span_without_issued_samples_or_lines_says_so(tmp_path):
    rows = [["0x100", "@!P0  BRA 0x100", "6", "50", "0", "6", "0"]]
    kernel = _kernel(tmp_path, rows)
    assert "n/a" in ncu_sass_summary.span(kernel, 0, 0)[1]
    assert ncu_sass_summary.span(kernel, 5, 9) == ["span 5-9: no lines"]
