"""tools/probe_clocks.py's reading of nvidia-smi's CSV samples (the GPU part runs on the device)."""

from __future__ import annotations

import datetime
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import probe_clocks


def test_samples_parse_nvidia_smi_rows(tmp_path):
    rng = random.Random(3)
    t0 = datetime.datetime(2026, 12, 7, 19, 20, 1, 123000)
    want, lines = [], []
    for i in range(20):
        t = t0 + datetime.timedelta(milliseconds=20 * i)
        mhz, watts = rng.randint(1400, 1980), round(rng.uniform(300, 700), 2)
        lines.append(f"{t.strftime('%Y/%m/%d %H:%M:%S.%f')[:-3]}, {mhz} MHz, {watts:.2f} W")
        want.append((t.timestamp(), float(mhz), watts))
    lines.insert(5, "timestamp, clocks.current.sm [MHz], power.draw.instant [W]")  # a header line
    lines.insert(9, f"{t0.strftime('%Y/%m/%d %H:%M:%S.%f')[:-3]}, 1980 MHz, [N/A]")  # no power reading
    lines.append("2026/12/07 19:20")  # a line cut short as the sampler stops
    path = tmp_path / "smi.csv"
    path.write_text("\n".join(lines) + "\n")
    got = probe_clocks._samples(str(path))
    assert len(got) == len(want)
    for (t, mhz, w), (t2, mhz2, w2) in zip(got, want):
        assert abs(t - t2) < 1e-3 and mhz == mhz2 and abs(w - w2) < 1e-9
