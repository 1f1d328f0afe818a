"""CPU checks of tools/cold_start_aot.py (issue 13 item 4): the --dry-run plan, the no-CUDA exit and
the markdown table built from child records. The measurement itself runs on the GPU machine."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "cold_start_aot.py"
CLASSES = ROOT / "tools" / "aot_smoke_classes.txt"


def _names() -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in CLASSES.read_text().splitlines())
    return [line for line in lines if line]


def _tool():
    spec = importlib.util.spec_from_file_location("_cold_start_aot", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )


def test_dry_run_lists_the_classes_and_both_modes(tmp_path):
    proc = _run("--aot-dir", str(tmp_path / "aot"), "--classes", str(CLASSES), "--repeats", "2", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    names = _names()
    assert len(names) == 8
    for name in names:
        assert f"class {name}" in out
    assert "mode prebuilt [timed]" in out and "mode jit disk cache [timed]" in out
    assert "mode warm [warm-up" in out
    lines = out.splitlines()
    prebuilt_cmd = lines[lines.index("  mode prebuilt [timed]:") + 1]
    jit_cmd = lines[lines.index("  mode jit disk cache [timed]:") + 1]
    assert f"RAGGED_ATTN_AOT_DIR={tmp_path / 'aot'}" in prebuilt_cmd and "--child prebuilt" in prebuilt_cmd
    assert "-u RAGGED_ATTN_AOT_DIR" in jit_cmd and "RAGGED_ATTN_CACHE_DIR=" in jit_cmd
    assert "2 fresh processes per mode" in out
    assert "does not serve 8" in out  # no manifest there: said, not crashed


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA exit")
def test_without_cuda_it_exits_with_a_message(tmp_path):
    proc = _run("--aot-dir", str(tmp_path))
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stderr and "Traceback" not in proc.stderr


def test_table_from_records():
    tool = _tool()
    names = _names()[:3]

    def rec(mode, first, further_ms, info, imported):
        return {
            "mode": mode,
            "import_s": first / 2,
            "first_s": first,
            "further_s": {n: further_ms / 1e3 for n in names[1:]},
            "info": info,
            "cutlass": {"before_import": False, "imported": imported, "attempts": []},
            "ok": dict.fromkeys(names, True),
            "errors": dict.fromkeys(names, "max |out-ref| 0"),
        }

    pre = {"prebuilt_hits": 3, "compiles": 0, "disk_hits": 0}
    jit = {"prebuilt_hits": 0, "compiles": 0, "disk_hits": 3}
    records = {
        "prebuilt": [rec("prebuilt", t, 2.0, pre, False) for t in (0.2, 0.25, 0.1)],
        "jit disk cache": [rec("jit disk cache", t, 40.0, jit, True) for t in (3.0, 3.5, 2.5)],
        "warm": [rec("warm", 12.0, 2500.0, {"prebuilt_hits": 0, "compiles": 3, "disk_hits": 0}, True)],
    }
    for mode, recs in records.items():
        for r in recs:
            assert tool._row_checks(mode, r, 3) == []
    meta = {"gpu": "H200", "torch": "2.x", "torch_cuda": "12.x", "dsl": "4.8.1", "tvm_ffi": "0.1"}
    meta.update(date="today", classes=names)
    text = tool.table(records, 3, 3, meta)
    assert "| prebuilt | 0.200 | 2.00 | 3 | no |" in text
    assert "| jit disk cache | 3.000 | 40.00 | 3 | yes |" in text
    assert "import + first call < 0.3 s: met (0.200 s); further class < 5.0 ms: met (2.00 ms)" in text
    for name in names:
        assert f"| {name} |" in text
    bad = rec("prebuilt", 0.2, 2.0, {"prebuilt_hits": 2, "compiles": 0, "disk_hits": 0}, True)
    assert len(tool._row_checks("prebuilt", bad, 3)) == 2
