"""tools/probe_order.py's CPU-side parts (its timing runs on the device)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import probe_order


def test_unknown_workloads_are_named_before_any_gpu_work():
    with pytest.raises(SystemExit, match=r"workloads: \['llama3-8b/nope'\] not in suite 'serving-full'"):
        probe_order.main(["llama3-8b/1x16384-full", "llama3-8b/nope"])


def test_persisting_l2_is_a_side_note_that_never_raises():
    note = probe_order.persisting_l2()
    assert isinstance(note, str)
    assert note.endswith(" B") or note.startswith("unknown (")
