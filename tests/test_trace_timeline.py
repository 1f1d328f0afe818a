"""tools/trace_timeline.py's reading of the trace build's stamps (kernels/sm90/trace.py), on a
synthetic buffer: the two 16-bit halves, the timer's wrap, CTAs without stamps, the summary."""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import trace_timeline

from ragged_attn.kernels.sm90 import trace as tr


def write(buf: torch.Tensor, cta: int, event: int, ns: int) -> None:
    """What trace.stamp writes: the low 32 bits of the timer as two exact fp32 halves."""
    ns %= 2**32
    at = (cta * tr.TRACE_EVENTS + event) * 2
    buf[at], buf[at + 1] = float(ns >> 16), float(ns & 0xFFFF)


def test_events_are_distinct_and_in_range():
    per_tile = (
        tr.EV_DECODED, tr.EV_TAKEN, tr.EV_Q_READY, tr.EV_MAIN_DONE, tr.EV_TILE_DONE, tr.EV_LOADS_ISSUED, tr.EV_NEXT_KNOWN,
    )  # fmt: skip
    slots = {tr.EV_ENTRY, tr.EV_INIT, tr.EV_MMA_EXIT, tr.EV_PRODUCER_EXIT}
    for first in per_tile:
        slots |= set(range(first, first + tr.TRACE_TILES))
    assert len(slots) == 4 + 7 * tr.TRACE_TILES == tr.TRACE_EVENTS
    assert slots == set(range(tr.TRACE_EVENTS))


def test_decode_relative_to_first_entry_across_the_wrap():
    grid = 3
    buf = torch.full((grid * tr.TRACE_EVENTS * 2 + 10,), float("nan"))
    t0 = 2**32 - 1500  # the first entry 1.5 us before the low 32 bits wrap
    write(buf, 0, tr.EV_ENTRY, t0 + 200)
    write(buf, 1, tr.EV_ENTRY, t0)
    write(buf, 1, tr.EV_MMA_EXIT, t0 + 9000)  # past the wrap
    t = trace_timeline.decode_stamps(buf, grid)
    assert t.shape == (grid, tr.TRACE_EVENTS)
    assert t[1, tr.EV_ENTRY] == 0 and t[0, tr.EV_ENTRY] == 200 and t[1, tr.EV_MMA_EXIT] == 9000
    assert torch.isnan(t[2, tr.EV_ENTRY])  # a CTA the launch did not have
    assert torch.isnan(t[0, tr.EV_MMA_EXIT])


def test_summary_first_tile_and_exits():
    grid = 2
    runs = []
    for gpu_ms in (0.020, 0.022, 0.021):
        buf = torch.full((grid * tr.TRACE_EVENTS * 2,), float("nan"))
        for cta, entry in ((0, 5000), (1, 5400)):
            write(buf, cta, tr.EV_ENTRY, entry)
            write(buf, cta, tr.EV_INIT, entry + 300)
            write(buf, cta, tr.EV_DECODED, entry + 1300)
            write(buf, cta, tr.EV_TAKEN, entry + 1500)
            write(buf, cta, tr.EV_Q_READY, entry + 2500)
            write(buf, cta, tr.EV_MAIN_DONE, entry + 6500)
            write(buf, cta, tr.EV_TILE_DONE, entry + 7000)
            write(buf, cta, tr.EV_TAKEN + 1, entry + 6600)
            write(buf, cta, tr.EV_Q_READY + 1, entry + 6800)
            write(buf, cta, tr.EV_TILE_DONE + 1, entry + 11000)
            write(buf, cta, tr.EV_LOADS_ISSUED, entry + 4000)
            write(buf, cta, tr.EV_NEXT_KNOWN, entry + 4700)
            write(buf, cta, tr.EV_DECODED + 1, entry + 5200)
            write(buf, cta, tr.EV_MMA_EXIT, entry + 12000)
            write(buf, cta, tr.EV_PRODUCER_EXIT, entry + 11500)
        runs.append((gpu_ms, trace_timeline.decode_stamps(buf, grid)))
    text = "\n".join(trace_timeline.summarize(runs))
    assert "GPU time 21.00 us; stamps span 12.40 us" in text
    assert "entry: last CTA 0.40 us after the first" in text
    assert "tile 0 Q ready" in text and "2.50 us after its entry" in text
    assert (
        "tile 1: stores-to-stores   4.00 us; MMA wg 0 idle after tile 0's stores -0.40 (taken) +  0.20 (Q) us"
        in text
    )
    assert (
        "producer: tile 0's loads issued  3.00 us before its stores; then next index  0.70, decode  0.50 us"
        in text
    )
    assert "MMA exit: first 12.00, median 12.00, last 12.40 us" in text  # torch: the lower middle


def test_parse_row_rejects_an_unknown_mask():
    assert trace_timeline.parse_row("4x512:32/8:128:nomask") == ([512] * 4, 32, 8, 128, False)
    with pytest.raises(SystemExit, match="mask"):
        trace_timeline.parse_row("4x512:32/8:128:window")
