"""tools/ncu_barrier_waits.py on a small ncu source-page CSV written here (no GPU, no ncu)."""

from __future__ import annotations

import csv
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import ncu_barrier_waits  # noqa: E402

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"]


def _write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "kernel_x"])
        w.writerow(HEADER)
        w.writerows(rows)


def test_each_first_check_gets_its_branch_samples_and_retry_count(tmp_path):
    rows = [
        ["0x100", "      SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4+0x80], R2", "3", "40"],
        ["0x110", "      IMAD R1, R1, 2, RZ", "7", "40"],
        ["0x120", "@!P0  BRA 0x900", "30", "40"],
        ["0x130", "      SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR4+0xa0], R2", "0", "0"],  # never ran
        ["0x140", "@!P1  BRA 0x910", "0", "0"],
        ["0x150", "      HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ", "60", "40"],
        ["0x900", "      SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R5+URZ+0x80], R3", "0", "17"],
        ["0x910", "      SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [R5+URZ+0xa0], R3", "0", "0"],
    ]
    path = tmp_path / "k.csv"
    _write(path, rows)
    got = ncu_barrier_waits.waits(ncu_barrier_waits.read(str(path)))
    # The first check that ran; 0x130 never ran, and the retry loop's TRYWAIT (0x900) has no
    # `@!P0 BRA` after it in this file, so it is no first check.
    assert [g[0] for g in got] == ["0x100"]
    address, executed, operand, share, retries = got[0]
    assert executed == 40 and operand.startswith("P0, [UR4+0x80]")
    assert abs(share - 30 / 100) < 1e-12  # the branch's samples over all 100
    assert retries == 17  # the retry path's executions
