"""`python -m ragged_attn aot build` refusing what it cannot build or write, before any compile:
another DSL release, an --out whose manifest.json or <class>.so is a directory, an --out that takes
no file, a --classes file nested too deep; and two builds into one --out keeping each other's
classes (the manifest lock). Each refusal is one line naming the path, exit 2 for bad input and 1
for the file system, and leaves no temp file. The real compile + link (and an --out with a comma
and a space) is tests/test_aot_build.py's.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from ragged_attn import aot, backends

REPO_ROOT = Path(__file__).resolve().parents[1]
CLASS = "sm_90a-d32x32-bf16-bf16-none-nolse-ragged"


@pytest.fixture
def class_file(tmp_path) -> Path:
    path = tmp_path / "one.txt"
    path.write_text(CLASS + "\n")
    return path


@pytest.fixture
def fresh_dsl_check():
    """`backends.cute_import_error` is cached per process: forget it before and after the test."""
    backends.cute_import_error.cache_clear()
    yield
    backends.cute_import_error.cache_clear()


def no_compile(job):
    raise AssertionError(f"compiled {job[0].name}; the build should have been refused first")


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def temp_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_another_dsl_release_is_refused_with_the_jit_paths_reason(
    tmp_path, class_file, monkeypatch, capsys, fresh_dsl_check
):
    real_version = importlib.metadata.version

    def version(name):
        return "4.9.0" if name == "nvidia-cutlass-dsl" else real_version(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(aot.builder, "_build_one", no_compile)
    reason = backends.cute_import_error()
    assert reason is not None and "4.9.0" in reason
    out = tmp_path / "out"
    assert aot.main(["build", "--out", str(out), "--classes", str(class_file), "--jobs", "1"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert reason in line, line
    assert not (out / "manifest.json").exists()
    with pytest.raises(aot.DslUnavailable, match="nvidia-cutlass-dsl 4.9.0 is installed"):
        aot.build([aot.parse_class_name(CLASS)], out)


@pytest.mark.cute
@pytest.mark.parametrize("slot", ["manifest.json", f"{CLASS}.so"])
def test_a_directory_where_an_output_file_belongs_is_named_before_compiling(
    tmp_path, class_file, monkeypatch, capsys, slot
):
    pytest.importorskip("cutlass.cute")
    monkeypatch.setattr(aot.builder, "_build_one", no_compile)
    out = tmp_path / "out"
    (out / slot / "x").mkdir(parents=True)
    assert aot.main(["build", "--out", str(out), "--classes", str(class_file), "--jobs", "1"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert f"{out / slot} is a directory" in line, line
    assert temp_files(out) == [] and (out / slot / "x").is_dir()


def _out_taking_no_file(tmp_path: Path) -> Path:
    """A directory this process cannot create a file in: mode 0555 for a user, sysfs for root."""
    if os.geteuid() != 0:
        out = tmp_path / "ro"
        out.mkdir(mode=0o555)
        return out
    out = Path("/sys/kernel")
    try:
        fd, probe = tempfile.mkstemp(dir=out)
    except OSError:
        return out
    os.close(fd)
    os.unlink(probe)
    pytest.skip("no directory here refuses files to root")


@pytest.mark.cute
def test_an_out_that_takes_no_file_is_named_before_compiling(tmp_path, class_file, monkeypatch, capsys):
    pytest.importorskip("cutlass.cute")
    monkeypatch.setattr(aot.builder, "_build_one", no_compile)
    out = _out_taking_no_file(tmp_path)
    assert aot.main(["build", "--out", str(out), "--classes", str(class_file), "--jobs", "1"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert f"--out {out} takes no new file" in line, line


def test_a_classes_file_nested_too_deep_is_bad_input(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    assert aot.main(["build", "--out", str(tmp_path / "out"), "--classes", str(deep)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"--classes {deep}" in line and "nested too deep" in line, line
    assert not (tmp_path / "out").exists()


def test_a_failed_manifest_write_leaves_no_temp_file(tmp_path):
    out = tmp_path / "out"
    (out / "manifest.json").mkdir(parents=True)
    with pytest.raises(OSError):
        aot.write_manifest(out, {"format": "ragged_attn-aot"}, [])
    assert [p for p in temp_files(out) if p.endswith(".tmp")] == []


# Two builds into one --out, each of another class. The compile + link is replaced by a stand-in
# library (this is about the manifest), and reading the kept entries is slowed, so both builds
# have read the old manifest before either writes: without the lock the second write drops the
# first build's class.
RACE_WORKER = textwrap.dedent(
    """
    import hashlib, sys, time
    from pathlib import Path
    from ragged_attn import aot

    out, name = Path(sys.argv[1]), sys.argv[2]

    def fake_build_one(job):
        lc = job[0]
        data = f"library of {lc.name}".encode()
        (out / f"{lc.name}.so").write_bytes(data)
        return {"layout_class": lc.as_dict(), "name": lc.name, "library": f"{lc.name}.so",
                "function_name": aot.function_name(lc), "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(), "cudart": "static",
                "compile_seconds": 0.0, "link_seconds": 0.0}

    read_kept = aot.builder._kept_entries

    def slow_kept_entries(*args):
        kept = read_kept(*args)
        time.sleep(1.5)
        return kept

    # replaced where build() and write_manifest() look them up: ragged_attn/aot/builder.py
    aot.builder._build_one = fake_build_one
    aot.builder._kept_entries = slow_kept_entries
    aot.builder.dsl_unavailable = lambda: None
    aot.builder.toolchain = lambda cudart: {"cudart_version": "12.9"}
    aot.build([aot.parse_class_name(name)], out, jobs=1)
    """
)


def test_two_builds_into_one_out_keep_both_classes(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    names = [CLASS, "sm_90a-d64x64-fp16-fp16-causal-lse-paged"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE_WORKER, str(out), name], env=env, stderr=subprocess.PIPE, text=True
        )
        for name in names
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(e["name"] for e in manifest["classes"]) == sorted(names)
    assert [p for p in temp_files(out) if p.endswith(".tmp")] == []
