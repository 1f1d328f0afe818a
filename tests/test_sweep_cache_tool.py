"""tools/sweep_cache.py: it fills a disk cache with the sweep's classes, so the GPU sweep that reads it
compiles nothing (its prewarm finds every entry). Run in a fresh process, as on the CPU box."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("cutlass")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(*args):
    env = {k: v for k, v in os.environ.items() if k not in ("RAGGED_ATTN_DISK_CACHE", "RAGGED_ATTN_CACHE_DIR")}
    env["CUTE_DSL_ARCH"] = "sm_90a"
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "sweep_cache.py"), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_sweep_cache_holds_every_class_of_the_sweep(tmp_path):
    from ragged_attn.compile_cache import CompileCache
    from tests.sweep_cases import DEFAULT_SEED, draw, expected_class

    first = _run(str(tmp_path), "--size", "2", "--jobs", "2")
    assert first.returncode == 0, first.stderr[-2000:]
    classes = {expected_class(draw(DEFAULT_SEED, i)) for i in range(2)}
    cache = CompileCache(tmp_path)
    for lc in classes:
        assert cache.entry_paths(lc).meta_path.exists(), lc.name
    assert f"{len(classes)} classes of the 2-problem sweep" in first.stdout
    assert f"{len(classes)} compiled" in first.stdout
    again = _run(str(tmp_path), "--size", "2", "--jobs", "2")
    assert again.returncode == 0 and "0 compiled" in again.stdout, again.stdout + again.stderr[-2000:]


def test_sweep_cache_refuses_a_single_job(tmp_path):
    result = _run(str(tmp_path), "--jobs", "1")
    assert result.returncode == 2 and "--jobs: expected at least 2" in result.stderr
