"""`python -m ragged_attn`: unknown options of `info` (newcomer trial: `info --json` and
`info --bogus` printed the facts and exited 0).
"""

from __future__ import annotations

import pytest

from ragged_attn.__main__ import main


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
