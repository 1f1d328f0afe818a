"""The adapters accept every call of the APIs they replace: signatures against recorded ones.

The records (tests/signatures/*.json) come from each release's own source; see
tests/signatures/README.md for how to refresh them. "Accepts every call" means: each of the
recorded parameters exists in ours with the same name and default, and binds the same way
(positional parameters at the same position; keyword-only ones by keyword); parameters of ours
that the record lacks are keyword-only with defaults, so no call of theirs can reach them.
"""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import pytest

from ragged_attn.compat import flash_attn, flash_attn_cute, flashinfer, torch_varlen

RECORDS = Path(__file__).parent / "signatures"
_NO_DEFAULT = object()


def _record(name: str) -> dict:
    return json.loads((RECORDS / name).read_text())


def _default(text):
    return _NO_DEFAULT if text is None else ast.literal_eval(text)


def _ours(fn) -> list[inspect.Parameter]:
    return list(inspect.signature(fn).parameters.values())


def _theirs(record: dict) -> list[tuple[str, str, object]]:
    return [(p["name"], p["kind"], _default(p["default"])) for p in record["parameters"]]


def _as_row(p: inspect.Parameter):
    return (p.name, p.kind.name, _NO_DEFAULT if p.default is inspect.Parameter.empty else p.default)


def _assert_extras_unreachable(extras: list[inspect.Parameter], label: str) -> None:
    for p in extras:
        assert p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not inspect.Parameter.empty, (
            f"{label}: extra parameter {p.name} must be keyword-only with a default, got {p.kind.name}"
        )


@pytest.mark.parametrize(
    "fn,record",
    [
        (flashinfer.cudnn_batch_prefill_with_kv_cache, "flashinfer-python-0.7.2.json"),
        (flash_attn.flash_attn_varlen_func, "flash-attn-2.8.3.json"),
        (flash_attn_cute.flash_attn_varlen_func, "flash-attn-4-4.0.0b36.json"),
    ],
    ids=["flashinfer-0.7.2", "flash-attn-2.8.3", "flash-attn-4-4.0.0b36"],
)
def test_adapter_signature_is_the_recorded_one(fn, record):
    rec = _record(record)
    theirs = _theirs(rec)
    ours = _ours(fn)
    label = f"{rec['library']} {rec['version']} {rec['function']}"
    assert len(ours) >= len(theirs), f"{label}: ours has {len(ours)} parameters, theirs {len(theirs)}"
    for i, (want, got) in enumerate(zip(theirs, ours)):
        assert _as_row(got) == want, f"{label}: parameter {i} is {_as_row(got)}, recorded {want}"
    _assert_extras_unreachable(ours[len(theirs):], label)


def test_flash_attn_accepts_fa4_keywords_with_fa4_defaults():
    """Every FA4 varlen keyword is a keyword of the FA2-ordered adapter; FA4-only ones keep FA4's defaults."""
    fa2 = {p["name"] for p in _record("flash-attn-2.8.3.json")["parameters"]}
    ours = inspect.signature(flash_attn.flash_attn_varlen_func).parameters
    for name, _, default in _theirs(_record("flash-attn-4-4.0.0b36.json")):
        assert name in ours, f"FA4 keyword {name} is missing"
        assert ours[name].kind is not inspect.Parameter.POSITIONAL_ONLY, f"{name} cannot be passed by keyword"
        if name not in fa2:
            assert ours[name].kind is inspect.Parameter.KEYWORD_ONLY, f"FA4-only {name} must be keyword-only"
            assert ours[name].default == default, f"{name}: default {ours[name].default!r}, FA4's {default!r}"


@pytest.mark.parametrize("version", ["2.10.0", "2.11.0", "2.12.0", "2.13.0"])
def test_torch_varlen_binds_every_recorded_signature(version):
    rec = _record(f"torch-{version}.json")
    ours = _ours(torch_varlen.varlen_attn)
    by_name = {p.name: (i, p) for i, p in enumerate(ours)}
    recorded = {p["name"] for p in rec["parameters"]}
    positional_kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    for i, (name, kind, default) in enumerate(_theirs(rec)):
        assert name in by_name, f"torch {version}: {name} is missing"
        j, p = by_name[name]
        got_default = _NO_DEFAULT if p.default is inspect.Parameter.empty else p.default
        assert got_default == default, f"torch {version}: {name} default {got_default!r}, torch's {default!r}"
        if kind == "POSITIONAL_OR_KEYWORD":
            assert j == i and p.kind in positional_kinds, f"torch {version}: {name} must be positional parameter {i}"
        else:
            assert p.kind is not inspect.Parameter.POSITIONAL_ONLY, f"torch {version}: {name} must take a keyword"
    for p in ours:  # what a torch call of this version cannot name must not be required
        if p.name not in recorded:
            assert p.default is not inspect.Parameter.empty, f"torch {version}: {p.name} would be required"


def test_records_name_their_version_and_refresh_command():
    for path in sorted(RECORDS.glob("*.json")):
        rec = json.loads(path.read_text())
        assert rec["version"] in path.name and rec["library"] in rec["refresh"], path.name
        assert "tests.signatures.record" in rec["refresh"] and rec["parameters"], path.name
