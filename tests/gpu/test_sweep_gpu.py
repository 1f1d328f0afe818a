"""Seeded random correctness sweep of the public API on the GPU, against the reference backend.

Each problem is its own case (`test_sweep[case17]`), drawn from the seed and its index alone
(tests/sweep_cases.py: `draw`), so a failure names a problem that reproduces on its own:

    python -m pytest "tests/gpu/test_sweep_gpu.py::test_sweep[case17]"

Environment:
    RAGGED_ATTN_SWEEP        number of problems (default 300: a few minutes on an H200 once the
                             kernels are compiled); the full gate runs 3000
    RAGGED_ATTN_SWEEP_SEED   the seed (default tests.sweep_cases.DEFAULT_SEED)
    RAGGED_ATTN_SWEEP_JOBS   processes that compile the selected cases' layout classes into the
                             disk cache before the first case (default min(16, CPUs); 0 or 1 compiles
                             each class in this process when a case first needs it). Compiles
                             nothing when the disk cache is off (RAGGED_ATTN_DISK_CACHE=0).

Problems span batch 1..300, lengths 0..8192 (empty sequences, rows before, between and after
sequences through cu_seqlens offsets and seqused_q / seqused_k), every head-dim class and envelope
dims, fp16 and bf16, GQA ratios 1..16, causal bottom-right and top-left, windows, ragged and paged
KV (NHD and HND, page sizes 1..256, NaN in every pool slot no sequence uses), every LSE layout and
base and no LSE, caller buffers (NaN-poisoned) and buffers the call allocates, `attention` and
`Plan.run`. What each case checks: tests/sweep_cases.py's module docstring. The last test checks
that the sweep compiled (or loaded) at most one kernel per layout class.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
import torch

import ragged_attn
from ragged_attn.backends import split_kv_sibling
from tests.sweep_cases import (
    DEFAULT_SEED,
    DEFAULT_SIZE,
    draw,
    expected_class,
    prewarm,
    run_and_check,
    sweep_classes,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="needs a CUDA GPU (sm_90a)",
    ),
]

SIZE = int(os.environ.get("RAGGED_ATTN_SWEEP", str(DEFAULT_SIZE)))
SEED = int(os.environ.get("RAGGED_ATTN_SWEEP_SEED", str(DEFAULT_SEED)))
JOBS = int(os.environ.get("RAGGED_ATTN_SWEEP_JOBS", str(min(16, os.cpu_count() or 1))))

# Per layout class, over this sweep: kernels compiled (here or by prewarm's processes) and kernels
# this process took from outside its memory (compiled or loaded from disk).
COMPILED: Counter = Counter()
LOADED: Counter = Counter()
CLASSES: set = set()
START: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _prewarmed_classes(request):
    """Compile the selected cases' classes into the disk cache in parallel processes, once."""
    indices = [
        item.callspec.params["index"]
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec") and "index" in item.callspec.params
    ]
    classes = sweep_classes(SEED, indices)
    CLASSES.update(classes)
    START["classes"] = len(ragged_attn.cache_info().classes)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    report = prewarm(classes, max(1, JOBS // workers))
    COMPILED.update({lc: n for lc, (n, _) in report.items()})
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    if reporter is not None and report:
        seconds = max(s for _, s in report.values())
        reporter.write_line(
            f"\nsweep: {len(indices)} problems (seed {SEED}) over {len(classes)} layout classes; "
            f"{sum(n for n, _ in report.values())} compiled by {min(JOBS, len(report))} processes, "
            f"longest {seconds:.1f} s"
        )
    yield


@pytest.mark.parametrize("index", range(SIZE), ids=[f"case{i}" for i in range(SIZE)])
def test_sweep(index):
    p = draw(SEED, index)
    lc = expected_class(p, arch="sm_90a")
    # A call may also take the class's split-KV sibling (backends.split_kv_sibling: the same class
    # with an LSE, whose kernel runs the split launches of a class without one).
    allowed = {lc, split_kv_sibling(lc)}
    before = ragged_attn.cache_info()
    run_and_check(p, "cuda")
    after = ragged_attn.cache_info()
    compiled = after.compiles - before.compiles
    loaded = compiled + after.disk_hits - before.disk_hits + after.prebuilt_hits - before.prebuilt_hits
    new = after.classes[len(before.classes) :]
    if compiled == len(new):  # each class taken in was compiled here
        COMPILED.update(new)
    else:
        COMPILED[lc] += compiled
    LOADED.update(new)
    assert set(new) <= allowed and loaded == len(new), (
        f"{p.describe()}\nthis case took {loaded} kernels from outside memory (compiled {compiled}) for "
        f"the classes {[c.name for c in new]}; expected at most one each of {sorted(c.name for c in allowed)}, "
        f"none already in memory"
    )


def test_sweep_compiles_at_most_one_kernel_per_class():
    """Across the sweep (prewarm's processes included), no layout class compiled or loaded twice."""
    twice = {lc.name: n for lc, n in COMPILED.items() if n > 1}
    assert not twice, f"classes compiled more than once: {twice}"
    twice = {lc.name: n for lc, n in LOADED.items() if n > 1}
    assert not twice, f"classes loaded into this process more than once: {twice}"
    new = ragged_attn.cache_info().classes[START.get("classes", 0) :]
    twice = {lc.name: n for lc, n in Counter(new).items() if n > 1}
    assert not twice, f"the compile cache took these classes in more than once: {twice}"
    foreign = sorted(lc.name for lc in set(new) - CLASSES)
    assert not foreign, f"kernels of classes no sweep problem maps to (expected_class is wrong?): {foreign}"
