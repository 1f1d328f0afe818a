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
