"""The tail split on the host: which of a launch's last tiles run in pieces, and their workspace.

A persistent launch of N equal tiles on C CTAs takes ceil(N / C) tile times where N / C would do:
with r = N mod C > 0, the last r tiles run alone while C - r CTAs idle (1 x 16384 no mask at 32
query heads: 4,096 128 x 128 tiles on an H200's 132 SMs leave 4 tiles, ~190 us each, to the last
wave: 3.1% of the launch; docs/benchmarks/2026-12-07-h200-issue10-session28 section 5). A class
with TileConfig.tail_split takes those r tiles in S pieces each (tile_scheduler.py "Tail split";
each piece a share of the tile's key blocks, merged by the tile's last piece: tail_merge.py), so
the CTAs that finish the last whole wave share them and the launch ends ~(1 - 1/S) tile times
sooner (with r S <= C the pieces make one short wave: the tail costs 1/S of a tile time).

Rules (`choose_tail_split`, host integers only, no device read, CUDA-graph capturable):
1. Equal tiles only: a no-mask class (causal and window tiles differ, and their order already
   ends on the cheapest), every sequence of the same length (total_q == B max_seqlen_q and
   total_k == B max_seqlen_k, no seqused_k), the launch's tiles per sequence (not packed by
   cu_seqlens_q: `launch_tiles`), no split-KV, no padded LSE.
2. At least one whole wave (N >= C: fewer tiles are split-KV's case, split_kv.choose_num_splits)
   and 0 < r <= C / 2 (above, S would be 1).
3. S = min(16, C // r, key blocks // MIN_PIECE_BLOCKS): the r S pieces fit one wave, and each
   piece keeps at least MIN_PIECE_BLOCKS key blocks (a piece pays a tile's fixed costs: its first
   K/V loads, Q, the merge); S < 2: no split.
4. The workspace, allocated per launch from torch's caching allocator (capturable): fp32 slots of
   (r x MMA warpgroups x S) x `tail_merge.slot_floats(d_v)` (1 x 16384, 32 heads, d128: 4.3 MB)
   and int32 counters (r x MMA warpgroups) zeroed per launch, which the launch leaves 0.
H100, session 29 (docs/benchmarks/2026-12-07-h100-issue10-session29 section 5): correct, and the
last wave shrinks, but the launches are not faster (the nolse class 1.8-4.7% slower on the long
rows, rows without pieces 11-21% slower): no class ships with TileConfig.tail_split.
"""

from __future__ import annotations

import dataclasses
import functools

from .split_kv import unsplit_tiles
from .tail_merge import slot_floats
from .tile_scheduler import TAIL_MAX_PIECES

MIN_PIECE_BLOCKS = 4  # key blocks a piece visits at least (rule 3)


@dataclasses.dataclass(frozen=True)
class TailClass:
    """What launch_forward needs to know of a class with TileConfig.tail_split: its mask family,
    O envelope d_v (the workspace's slots) and tile (the tile count); `force` = (tail_tiles,
    tail_pieces) replaces `choose_tail_split` (tests, benchmarks)."""

    mask: str
    d_v: int
    tile_m: int
    tile_n: int
    force: tuple | None = None


def tail_class(layout_class, config=None, force=None) -> TailClass | None:
    """The TailClass of a layout class whose tile config (`config`, else the class's own) has
    tail_split, else None."""
    from .tile_config import tile_config

    cfg = config if config is not None else tile_config(layout_class)
    if not cfg.tail_split:
        return None
    return TailClass(layout_class.mask, layout_class.d_v, cfg.tile_m, cfg.tile_n, force)


def launch_tiles(batch: int, total_q: int, max_seqlen_q: int, h_q: int, tile_m: int) -> tuple[int, bool]:
    """(N, packed): the kernel's tile count for a launch without split-KV, GQA or row packing
    (split_kv.unsplit_tiles), and whether its slots are packed by cu_seqlens_q (fewer than the
    per-sequence slots, ceil(max_seqlen_q / tile_m) of each sequence and head)."""
    tiles = unsplit_tiles(batch, total_q, max_seqlen_q, h_q, h_q, tile_m, False)
    row_blocks = -(-max_seqlen_q // 64)
    per_sequence = -(-row_blocks // (tile_m // 64)) * batch * h_q
    return tiles, tiles < per_sequence


@functools.lru_cache(maxsize=256)
def choose_tail_split(
    mask: str, batch: int, total_q: int, max_seqlen_q: int, total_k: int, max_seqlen_k: int, h_q: int,
    num_ctas: int, tile_m: int, tile_n: int, num_splits: int = 1, lse_s_max: int = 0, seqused_k: bool = False,
) -> tuple[int, int]:  # fmt: skip
    """(tail_tiles, tail_pieces) by the module's rules; (0, 1) where the launch takes no tail split.
    Lengths in tokens; num_ctas the persistent CTAs (the SM count)."""
    none = (0, 1)
    if mask != "none" or num_splits != 1 or lse_s_max != 0 or seqused_k or batch < 1 or num_ctas < 2:
        return none
    if max_seqlen_q < 1 or max_seqlen_k < 1 or total_q != batch * max_seqlen_q or total_k != batch * max_seqlen_k:
        return none
    tiles, packed = launch_tiles(batch, total_q, max_seqlen_q, h_q, tile_m)
    if packed or tiles < num_ctas:
        return none
    rest = tiles % num_ctas
    if rest == 0 or 2 * rest > num_ctas:
        return none
    key_blocks = -(-max_seqlen_k // tile_n)
    pieces = min(TAIL_MAX_PIECES, num_ctas // rest, key_blocks // MIN_PIECE_BLOCKS)
    return (rest, pieces) if pieces >= 2 else none


def tail_arguments(tail: TailClass, q, *, batch, max_seqlen_q, total_k, max_seqlen_k, seqused_k, num_ctas, lse_s_max):
    """The four trailing arguments of a tail_split class's compiled function (launch.py
    COMPILED_ARGS_TAIL): (tail_tiles, tail_pieces, workspace, counters) for this launch, the
    workspace and zeroed counters allocated on q's device and current stream (rule 4); one-element
    stand-ins where it takes no tail split. max_seqlen_k None: no split (the rules need it)."""
    import torch

    tiles, pieces = tail.force if tail.force is not None else (0, 1)
    if tail.force is None and max_seqlen_k is not None:
        tiles, pieces = choose_tail_split(
            tail.mask, batch, q.shape[0], max_seqlen_q, total_k, max_seqlen_k, q.shape[1], num_ctas, tail.tile_m,
            tail.tile_n, 1, lse_s_max, seqused_k is not None,
        )  # fmt: skip
    rows = max(tiles, 0) * (tail.tile_m // 64)
    work = torch.empty((max(rows * pieces * slot_floats(tail.d_v), 1),), dtype=torch.float32, device=q.device)
    counts = torch.zeros((max(rows, 1),), dtype=torch.int32, device=q.device)
    return tiles, pieces, work, counts


def tail_makespan_ref(tiles: int, num_ctas: int, tail_tiles: int, pieces: int) -> float:
    """The launch's length in tile times under a greedy dealing of equal tiles (each CTA takes the
    next index when it is free), the tail's pieces 1 / pieces of a tile each: the model of the
    module docstring, for tests (tools/schedule_sim.py's `makespan` without the tail split)."""
    import heapq

    free = [0.0] * num_ctas
    work = [1.0] * (tiles - tail_tiles) + [1.0 / pieces] * (tail_tiles * pieces)
    for w in work:
        t = heapq.heappop(free)
        heapq.heappush(free, t + w)
    return max(free)
