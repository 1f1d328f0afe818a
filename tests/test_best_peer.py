"""tools/best_peer.py: ours against the fastest peer that ran, from a suite JSON's records."""

from __future__ import annotations

import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import best_peer


def record(tflops, status="ok"):
    return {"status": status, "gpu_tflops": tflops}


def result_with(ours, fast, slow):
    return {
        "suite": "serving-full",
        "workloads": [
            {"workload": {"name": "a/4x512-full"}, "systems": {
                "ragged_attn": record(ours), "fa4": record(slow), "sdpa-cudnn": record(fast),
                "fa3": record(fast * 2, status="wrong"), "torch-varlen": {"status": "n/a"},
                "cudnn": {"status": "ok"},  # timed, but without a GPU-only time
            }},
            {"workload": {"name": "b/untimed"}, "systems": {"ragged_attn": {"status": "ok"}, "fa4": record(fast)}},
            {"workload": {"name": "c/ours-failed"}, "systems": {"ragged_attn": {"status": "error"}, "fa4": record(fast)}},
            {"workload": {"name": "d/alone"}, "systems": {"ragged_attn": record(ours)}},
        ],
    }  # fmt: skip


def test_best_peer_rows_and_report(tmp_path, capsys):
    rng = random.Random(7)
    for ours_ahead in (True, False):
        slow, fast = sorted(rng.uniform(100, 800) for _ in range(2))
        ours = fast * rng.uniform(1.01, 1.3) if ours_ahead else fast * rng.uniform(0.7, 0.99)
        result = result_with(ours, fast, slow)
        assert best_peer.rows(result) == [
            ("a/4x512-full", ours, "sdpa-cudnn", fast),
            ("b/untimed", None, "fa4", fast),
            ("c/ours-failed", None, "fa4", fast),
        ]
        path = tmp_path / "serving-full.json"
        path.write_text(json.dumps(result))
        assert best_peer.main([str(path)]) == 0
        lines = capsys.readouterr().out.splitlines()
        row = next(line for line in lines if line.startswith("a/4x512-full"))
        assert f"{ours / fast:.3f}" in row
        assert row.endswith("<1") == (not ours_ahead)
        failed = next(line for line in lines if line.startswith("c/ours-failed"))
        assert "ours: no GPU-only time" in failed


def test_rounding_decides_the_flag(tmp_path, capsys):
    result = result_with(ours=740.0 * 0.9996, fast=740.0, slow=500.0)  # 0.9996 prints as 1.000
    path = tmp_path / "s.json"
    path.write_text(json.dumps(result))
    best_peer.main([str(path)])
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("a/4x512-full"))
    assert "1.000" in row and not row.endswith("<1")
