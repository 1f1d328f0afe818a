"""`python -m ragged_attn`: unknown options of `info` and a reader that goes away (newcomer trial).

`info --json` and `info --bogus` printed the facts and exited 0; `aot build --list | head` ended in
a BrokenPipeError traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ragged_attn.__main__ import BROKEN_PIPE_STATUS, main

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("argv", [["--json"], ["--bogus"], ["extra"]], ids=["json", "bogus", "positional"])
def test_info_rejects_unknown_arguments(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(["info", *argv])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "", "info printed its facts despite the bad argument"
    assert "python -m ragged_attn info" in captured.err and argv[0] in captured.err
    assert "unrecognized arguments" in captured.err


def test_info_help_exits_zero(capsys):
    with pytest.raises(SystemExit) as info:
        main(["info", "--help"])
    assert info.value.code == 0
    assert "usage: python -m ragged_attn info" in capsys.readouterr().out


def test_info_without_arguments_prints_its_facts(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for key in ("ragged_attn:", "torch:", "backends:", "cache directory:"):
        assert key in out, f"{key!r} missing from {out!r}"


def test_info_names_each_prebuilt_directory_and_why_it_serves_nothing(capsys, monkeypatch, tmp_path):
    """A newcomer checking that their AOT directory is picked up gets an answer from `info`."""
    monkeypatch.setattr("ragged_attn.prebuilt.search_dirs", lambda: [])
    assert main(["info"]) == 0
    assert "prebuilt: none (set RAGGED_ATTN_AOT_DIR" in capsys.readouterr().out
    monkeypatch.undo()
    empty, stale = tmp_path / "empty", tmp_path / "stale"
    empty.mkdir()
    stale.mkdir()
    (stale / "manifest.json").write_text('{"format": "something else"}')
    monkeypatch.setenv("RAGGED_ATTN_AOT_DIR", os.pathsep.join([str(empty), str(stale)]))
    assert main(["info"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "prebuilt:" in ln)
    assert f"{empty}: 0 classes (no manifest.json in {empty})" in line
    assert f"{stale}: 0 classes ({stale / 'manifest.json'}: manifest format 'something else'" in line


def _run_into_a_closed_pipe(*argv: str) -> subprocess.CompletedProcess:
    """Run `python -m ragged_attn ARGV` with stdout a pipe nobody reads (what `| head` leaves
    once head has exited): every write gets EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "ragged_attn", *argv], stdout=write_end, stderr=subprocess.PIPE, text=True,
            cwd=ROOT, timeout=300, check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)


@pytest.mark.parametrize("argv", [["aot", "build", "--list"], ["info"]], ids=["aot-list", "info"])
def test_a_closed_pipe_ends_the_command_quietly(argv):
    done = _run_into_a_closed_pipe(*argv)
    assert done.returncode == BROKEN_PIPE_STATUS, done.stderr
    assert done.stderr == "", f"expected no traceback, got {done.stderr!r}"


def test_aot_list_into_head_prints_the_first_classes_without_a_traceback():
    """The newcomer's pipeline itself (`head` is in coreutils; skipped where it is missing)."""
    if shutil.which("head") is None:
        pytest.skip("no head(1) on PATH")
    done = subprocess.run(
        f"{sys.executable} -m ragged_attn aot build --list | head -n 2", shell=True, capture_output=True,
        text=True, cwd=ROOT, timeout=300, check=False,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("sm_90a-") for line in lines), done.stdout
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr


def _bench_error(argv, capsys, tmp_path) -> str:
    with pytest.raises(SystemExit) as info:
        main(["bench", *argv])
    assert info.value.code == 2, "a bad bench argument must exit 2 (argparse's usage error), not 0 or 1"
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.err


@pytest.mark.parametrize(
    "device,words",
    [("nope", "expected a torch device"), ("meta", "expected cuda or cpu")]
    + ([] if __import__("torch").cuda.is_available() else [("cuda", "sees no CUDA GPU")]),
)  # fmt: skip
def test_bench_names_a_bad_device(device, words, capsys, tmp_path):
    """Session 21's adversarial pass: these were tracebacks (torch.device's RuntimeError, CUDA's
    AssertionError) with status 1, before any suite ran."""
    err = _bench_error(["--device", device, "--out", str(tmp_path)], capsys, tmp_path)
    assert "--device" in err and words in err and repr(device) in err


def test_bench_merge_names_unreadable_inputs(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    (tmp_path / "empty").mkdir()
    for inputs, words in (([str(tmp_path / "missing")], "No such file"), ([str(bad)], "bad.json: not a suite JSON"),
                          ([str(tmp_path / "empty")], "no suite results")):  # fmt: skip
        err = _bench_error(["merge", *inputs, "--out", str(tmp_path / "out")], capsys, tmp_path)
        assert "python -m ragged_attn bench merge: error: inputs:" in err and words in err


def test_bench_help_lists_merge(capsys):
    with pytest.raises(SystemExit) as info:
        main(["bench", "--help"])
    assert info.value.code == 0
    assert "python -m ragged_attn bench merge PATH" in capsys.readouterr().out
