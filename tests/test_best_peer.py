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


def test_best_peer_skips_failed_and_missing_systems(tmp_path, capsys):
    rng = random.Random(7)
    fast, slow, ours = (rng.uniform(100, 800) for _ in range(3))
    fast, slow = max(fast, slow), min(fast, slow)
    result = {
        "suite": "serving-full",
        "workloads": [
            {"workload": {"name": "a/4x512-full"}, "systems": {
                "ragged_attn": record(ours), "fa4": record(slow), "sdpa-cudnn": record(fast),
                "fa3": record(fast * 2, status="wrong"), "torch-varlen": {"status": "n/a"},
            }},
            {"workload": {"name": "b/untimed"}, "systems": {"ragged_attn": {"status": "ok"}, "fa4": record(fast)}},
            {"workload": {"name": "c/ours-failed"}, "systems": {"ragged_attn": {"status": "error"}, "fa4": record(1)}},
            {"workload": {"name": "d/alone"}, "systems": {"ragged_attn": record(ours)}},
        ],
    }  # fmt: skip
    assert best_peer.rows(result) == [("a/4x512-full", ours, "sdpa-cudnn", fast)]
    path = tmp_path / "serving-full.json"
    path.write_text(json.dumps(result))
    assert best_peer.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{ours / fast:.3f}" in out
    assert ("<1" in out) == (ours < fast)
