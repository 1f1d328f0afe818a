"""ragged_attn.bench.timing.gpu_ms_interleaved: every implementation timed in every round."""

from __future__ import annotations

import collections

import pytest

torch = pytest.importorskip("torch")

from ragged_attn.bench.timing import balanced_orders, gpu_ms_interleaved


@pytest.mark.parametrize("n", range(1, 10))
def test_balanced_orders_put_each_implementation_after_every_other_equally_often(n):
    rows = balanced_orders(n)
    assert len(rows) == (2 * n if n % 2 and n > 1 else n)
    assert all(sorted(row) == list(range(n)) for row in rows)  # every round runs each one once
    after = collections.Counter((row[i], row[i + 1]) for row in rows for i in range(n - 1))
    assert set(after) == {(a, b) for a in range(n) for b in range(n) if a != b}
    assert len(set(after.values())) <= 1  # every ordered pair equally often
    at = collections.Counter((x, i) for row in rows for i, x in enumerate(row))
    assert len(at) == n * n and len(set(at.values())) == 1  # every position equally often


def test_interleaved_refuses_an_unknown_order():
    with pytest.raises(ValueError, match="order: expected 'balanced' or 'rotate', got 'random'"):
        gpu_ms_interleaved({"a": lambda: None}, torch.device("cpu"), head_start_us=10, order="random")


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

    launches = []
    times = gpu_ms_interleaved({"small": small, "large": large}, dev, head_start_us=50, reps=7, launches=launches)
    assert set(times) == {"small", "large"}
    assert calls == {"small": 8, "large": 8}  # one warm-up call each, then one per round
    assert 0 < times["small"] < times["large"]
    assert len(launches) == 14 and launches[0][1] is None
    assert all(prev == launches[i - 1][0] for i, (_, prev, _) in enumerate(launches) if i)
    assert sorted(t for name, _, t in launches if name == "small")[3] == pytest.approx(times["small"])
