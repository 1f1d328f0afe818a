"""TileConfig.trace_timeline: a diagnostic build (never a shipped class's) whose threads stamp the
global nanosecond timer at named points of each CTA's life into the LSE buffer, in place of the
LSE (the class must have one; its LSE is then not written). tools/trace_timeline.py launches it
and reads the stamps back.

Layout: CTA c's event e at floats 2 * (c * TRACE_EVENTS + e) (the timer's bits 31..16) and that + 1
(bits 15..0), both exact in fp32; the buffer needs 2 * TRACE_EVENTS * grid floats, and events a
launch does not reach keep what the caller wrote there (NaN, say). The low 32 bits of the timer
wrap every 4.29 s: differences within a launch are exact modulo 2**32 ns.

Events (per tile ones indexed by the tile's order in its CTA, the last slot holding tiles >=
TRACE_TILES - 1):
- EV_ENTRY: thread 0 at the kernel's first instruction; EV_INIT: thread 0 after the barriers'
  init wait (pipeline.pipeline_init_wait).
- EV_DECODED + k: producer warp 0 (lane 0) has decoded its k-th tile, before handing it over;
  EV_LOADS_ISSUED + k: it has issued the tile's loads (the last K/V stage acquired); EV_NEXT_KNOWN
  + k: it holds the index of its next tile (the tile counter's ticket back).
- EV_TAKEN + k, EV_Q_READY + k, EV_MAIN_DONE + k, EV_TILE_DONE + k: MMA warpgroup 0's thread 0 at
  its k-th tile's start (handed over), after Q's wait, after the key-block loop, after the
  epilogue's stores were issued.
- EV_MMA_EXIT: the same thread after its walk and its last O store's read of sO;
  EV_PRODUCER_EXIT: producer warp 0 (lane 0) after its walk (the stop handed over)."""

from __future__ import annotations

import cutlass.cute as cute
from cutlass import Float32, Int32

TRACE_TILES = 8
EV_ENTRY = 0
EV_INIT = 1
EV_DECODED = 2
EV_TAKEN = EV_DECODED + TRACE_TILES
EV_Q_READY = EV_TAKEN + TRACE_TILES
EV_MAIN_DONE = EV_Q_READY + TRACE_TILES
EV_TILE_DONE = EV_MAIN_DONE + TRACE_TILES
EV_LOADS_ISSUED = EV_TILE_DONE + TRACE_TILES
EV_NEXT_KNOWN = EV_LOADS_ISSUED + TRACE_TILES
EV_MMA_EXIT = EV_NEXT_KNOWN + TRACE_TILES
EV_PRODUCER_EXIT = EV_MMA_EXIT + 1
TRACE_EVENTS = EV_PRODUCER_EXIT + 1


@cute.jit
def stamp(mTrace: cute.Tensor, event: Int32):
    """The calling thread writes the timer's low 32 bits as CTA blockIdx.x's `event`."""
    t = cute.arch.globaltimer_lo()
    at = (Int32(cute.arch.block_idx()[0]) * TRACE_EVENTS + event) * 2
    mTrace[at] = Float32((t >> 16) & 0xFFFF)
    mTrace[at + 1] = Float32(t & 0xFFFF)


@cute.jit
def stamp_tile(mTrace: cute.Tensor, first: int, k: Int32):
    """`stamp` of per-tile event `first` + k (tiles past the last slot share it)."""
    kk = k
    if kk > TRACE_TILES - 1:
        kk = Int32(TRACE_TILES - 1)
    stamp(mTrace, first + kk)
