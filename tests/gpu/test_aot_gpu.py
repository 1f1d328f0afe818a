"""Prebuilt kernels on the GPU with the CuTe DSL import blocked (issue 13, "done when").

The directory: RAGGED_ATTN_AOT_TEST_DIR (built beforehand, e.g. on a CPU box with
`python -m ragged_attn aot build --out DIR --classes serving`), else the classes of
RAGGED_ATTN_AOT_TEST_CLASSES (`serving` by default, or a FILE) built here into a temporary
directory (needs the cute extra; ~1-2 min for the serving set with 8 jobs). Every class is run in a
fresh process that refuses `cutlass` imports (tests/gpu/aot_run_classes.py) against the reference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="needs a CUDA GPU (sm_90a)",
    ),
]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def aot_dir(tmp_path_factory):
    given = os.environ.get("RAGGED_ATTN_AOT_TEST_DIR")
    if given:
        return Path(given)
    pytest.importorskip("cutlass.cute")
    from ragged_attn import aot

    out = tmp_path_factory.mktemp("aot")
    classes = aot.resolve_classes(os.environ.get("RAGGED_ATTN_AOT_TEST_CLASSES", "serving"))
    aot.build(classes, out, jobs=max(1, min(8, (os.cpu_count() or 2) // 2)))
    return out


def test_every_prebuilt_class_runs_with_the_dsl_import_blocked(aot_dir, tmp_path):
    names = [e["name"] for e in json.loads((aot_dir / "manifest.json").read_text())["classes"]]
    env = {
        **os.environ,
        "RAGGED_ATTN_AOT_DIR": str(aot_dir),
        "RAGGED_ATTN_CACHE_DIR": str(tmp_path / "cache"),
    }
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "gpu" / "aot_run_classes.py")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["attempts"] == [], f"cutlass import attempted: {result['attempts']}"
    bad = {n: result["errors"][n] for n in names if not result["ok"][n]}
    assert not bad, f"{len(bad)} of {len(names)} classes off the reference: {bad}"
    assert result["info"] == [len(names), 0, 0]
    further = result["times_s"]["further"]
    print(
        f"\nprebuilt, {len(names)} classes: import ragged_attn {result['times_s']['import']:.3f} s, "
        f"first call {result['times_s']['first_call']:.3f} s, further classes median "
        f"{sorted(further)[len(further) // 2] * 1e3 if further else float('nan'):.1f} ms"
    )
    assert not (tmp_path / "cache").exists()
