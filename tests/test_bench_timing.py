"""ragged_attn.bench.timing.gpu_ms_interleaved: every implementation timed in every round."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ragged_attn.bench.timing import gpu_ms_interleaved


def test_interleaved_is_none_on_cpu_and_calls_nothing():
    calls = []
    assert gpu_ms_interleaved({"a": lambda: calls.append("a")}, torch.device("cpu"), head_start_us=10) is None
    assert calls == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_interleaved_times_each_implementation_every_round():
    dev = torch.device("cuda")
    x = torch.randn(2048, 2048, device=dev)
    calls = {"small": 0, "large": 0}

    def small():
        calls["small"] += 1
        return x[:256, :256] @ x[:256, :256]

    def large():
        calls["large"] += 1
        return x @ x

    times = gpu_ms_interleaved({"small": small, "large": large}, dev, head_start_us=50, reps=7)
    assert set(times) == {"small", "large"}
    assert calls == {"small": 8, "large": 8}  # one warm-up call each, then one per round
    assert 0 < times["small"] < times["large"]
