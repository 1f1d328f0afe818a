"""Split-KV on the host: how many splits a launch takes, and the workspace and merge around them.

Rows with few queries over many keys (decode rows and chunked-prefill tails, as vLLM's V1 engine
sends them in one varlen call) leave most SMs idle when one tile owns a sequence's whole key range.
With `num_splits` = S > 1 the persistent kernel takes each tile S times, split s visiting its share
of the tile's key blocks (tile_scheduler.py, block_info.py `for_split`), and stores its normalised O
and its LSE into a workspace; `run_splits` then merges the S partial results into the caller's
out and LSE (ragged_attn.merge.merge_states: a row's result is sum_s w_s O_s, w_s = exp(lse_s -
lse), lse = log sum_s exp(lse_s); a split whose LSE is -inf saw no key of the row and contributes
nothing). S is a run-time argument of every class's one compiled kernel; S = 1 is the kernel
without splits (nothing is divided, nothing is allocated).

Rules (tests/test_split_kv.py; tests/gpu/test_split_kv_gpu.py on a GPU):
1. S comes from host integers only (`choose_num_splits`: batch, total_q, max_seqlen_q,
   max_seqlen_k, H_q, H_kv, the SM count, the class's tile): no device read, CUDA-graph capturable.
2. S > 1 only where `split_allowed`: no sinks (each split would count the sink), and for a class
   that produces an LSE a token- or head-major one (an (total_q, H_q) view; a padded LSE keeps
   S = 1). Ragged K/V and page pools alike: a paged class's producer loads the pages of the same
   key blocks (BlockInfo.n_block_range, the split's share) as a ragged class loads rows.
   A class without an LSE (the common vLLM call) cannot write the partial LSEs the merge needs: its
   split launches run the kernel of its LSE sibling (`lse_sibling`: the same class with lse=True,
   its own class compiled once like any other), which writes a token-major workspace LSE that is
   merged and discarded; the caller gets only out. The sibling is fetched (compile_cache.get_kernel)
   at the first call that splits: where it is neither in memory, on disk nor prebuilt that call
   compiles it and stalls for the compile (ragged_attn.aot builds both siblings of each shape).
3. num_splits * total_q < 2**31 (the kernel's output rows are int32): `max_splits_for_rows`.
4. The workspace, allocated per launch from torch's caching allocator (capturable): O partials
   (S, total_q, H_q, d_v) in out's dtype (the kernel's O stores are in the class's out dtype; each
   partial is rounded once before the float32 merge, within the tests' tolerance; FlashAttention 3
   keeps float32 partials) and LSE partials (S, total_q, H_q) float32 filled with -inf, so that rows
   outside every sequence (never written by the kernel) merge to O = 0, LSE = -inf without reading
   uninitialised memory; a caller's out / LSE keeps those rows (`run_splits`' `inside`).
"""

from __future__ import annotations

import dataclasses
import functools
import math

# At most 16 splits: with 8 query heads of one decode row (8 tiles) on an H200's 132 SMs the
# wave rule below asks for 14; more would only add workspace traffic for the merge.
MAX_SPLITS = 16
# FlashAttention 3's thresholds (hopper/heuristics.h `num_splits_heuristic`, read 2026-12-03):
FILL_FRACTION = 0.8  # no split once the tiles fill this fraction of the SMs
MIN_KEY_BLOCKS = 5  # no split over fewer key blocks (FA3: never when n_blocks <= 4)
EFFICIENCY_SHARE = 0.85  # the fewest splits whose wave efficiency is this share of the best
SPLIT_LSE_LAYOUTS = ("token_major", "head_major")  # LSE layouts that are a (total_q, H_q) view
INT32_ROWS = 2**31 - 1


def row_packed_tiles(batch: int, total_q: int, max_seqlen_q: int, h_q: int, h_kv: int, tile_m: int) -> int:
    """The kernel's linear tile count without splits where the launch packs rows (forward.py
    `tile_counts` with row_mult = g = H_q / H_kv; tile_scheduler.py): per-sequence slots or packed
    by cu_seqlens_q, whichever is fewer, one unit per K/V head."""
    g = h_q // h_kv
    tiles_max = -(-g * max_seqlen_q // tile_m)
    slots = g * total_q // tile_m + batch
    return min(slots, tiles_max * batch) * h_kv


# Row packing's rule, from H200 measurements (tools/bench_pack_rows.py, pack_rows forced off and on,
# interleaved; docs/benchmarks/2026-12-04-h200-issue10-session13): a packed tile costs 2.6-2.9
# unpacked ones over one key block (32 x 64 and 64 x 32 at 32/8 heads: 512 packed tiles 0.0358 ms,
# 1024 / 2048 unpacked 0.0272 / 0.0497 ms) and ~1.4-1.9 over prefill rows (longtail14, 100 x 300,
# uniform14: 17% / 17% / 7% fewer tiles, 1.28-1.59x slower packed), so fewer tiles alone do not pay;
# what pays is K/V blocks shared by a group's rows over many keys. Pack where the packed tiles are at
# most 3/10 of the unpacked ones (decode rows 0.25: 0.45x the time; spec-decode 16 x 4 over 2048
# keys 0.56x; 64 x 32 0.72x), or at most 2/3 of them over at least PACK_ROWS_LONG_KEYS keys (vLLM's
# mixed batch, 0.52 of the tiles over up to 32k keys: 0.58x). 32 x 64 (0.50, one key block) ran
# 1.32x slower packed and no longer packs. Between one block and 2,048 keys at 0.3-0.67: unmeasured.
PACK_ROWS_ALWAYS = (3, 10)  # packed / unpacked tiles at most this: pack
PACK_ROWS_LONG = (2, 3)  # at most this, with max_seqlen_k >= PACK_ROWS_LONG_KEYS: pack
PACK_ROWS_LONG_KEYS = 2048


@functools.lru_cache(maxsize=256)
def choose_pack_rows(
    batch: int, total_q: int, max_seqlen_q: int, h_q: int, h_kv: int, tile_m: int = 128, lse_s_max: int = 0,
    max_seqlen_k: int | None = None,
) -> int:  # fmt: skip
    """1 where a launch of a class with row packing (TileConfig.pack_rows) should pack rows, else 0,
    from host integers only (no device read): GQA (H_q > H_kv), no padded LSE, g * total_q and
    g * max_seqlen_q below 2**31 (the kernel's packed rows are int32), and the row-packed tiles at
    most 3/10 of the unpacked ones (PACK_ROWS_ALWAYS: decode and speculative-decoding rows, one tile
    per K/V head instead of one per query head), or at most 2/3 of them where max_seqlen_k (keys,
    the longest sequence's; None: not known) is at least PACK_ROWS_LONG_KEYS (vLLM's mixed batch:
    48% fewer tiles, decode rows over thousands of keys). Prefill rows do not pack (about the same
    tiles, each dearer: Q gathered by one warp, O stored row by row, a mask per row's token), nor
    short rows over one or a few key blocks (each packed tile costs 2.6-2.9 unpacked ones there).
    Cached (a call's integers repeat from step to step)."""
    if h_kv <= 0 or h_q <= h_kv or h_q % h_kv or lse_s_max != 0 or batch <= 0 or total_q <= 0:
        return 0
    g = h_q // h_kv
    if g * max(total_q, max_seqlen_q) >= INT32_ROWS:
        return 0
    unpacked = unsplit_tiles(batch, total_q, max_seqlen_q, h_q, h_kv, tile_m, False)
    packed = row_packed_tiles(batch, total_q, max_seqlen_q, h_q, h_kv, tile_m)
    num, den = PACK_ROWS_ALWAYS
    if packed * den <= unpacked * num:
        return 1
    num, den = PACK_ROWS_LONG
    long_keys = max_seqlen_k is not None and max_seqlen_k >= PACK_ROWS_LONG_KEYS
    return int(long_keys and packed * den <= unpacked * num)


# The batch order's rule (TileConfig.batch_order: a launch's sequences dealt longest first by key
# length), H200, session 14 (docs/benchmarks/2026-12-04-h200-issue10-session14): it pays where tiles
# of unequal cost outnumber the CTAs (vLLM's decode rows 1176 -> 1046 us, its mixed batch with the
# chunks first 1814 -> 1678, decode rows first 1694 -> 1679, the chunks alone 672 -> 660), and its
# prologue (the lengths read, ranked and summed in each CTA before the first tile) costs ~2 us a
# launch, 4-6% of short uniform batches (4 x 512 d128 0.0304 -> 0.0323 ms, 64 x 128 0.0546 ->
# 0.0568, 16 x 256 0.0385 -> 0.0402) where no order helps; mixed14 within +-0.6%. So: two or more
# sequences, more tiles than CTAs (as launched: row packing and splits counted), and at least
# BATCH_ORDER_KEYS keys in the longest sequence (a launch of a few waves over long keys runs ~0.1 ms
# and more, where 2 us is 1-2%; between 2,048 and 4,096 keys: unmeasured).
BATCH_ORDER_KEYS = 4096


@functools.lru_cache(maxsize=256)
def choose_batch_order(
    batch: int, total_q: int, max_seqlen_q: int, max_seqlen_k: int | None, h_q: int, h_kv: int, num_ctas: int,
    pack_rows: int = 0, num_splits: int = 1, tile_m: int = 128,
) -> int:  # fmt: skip
    """1 where a launch of a class with the batch order (TileConfig.batch_order) should deal its
    sequences longest first, else 0, from host integers only (no device read): at least two
    sequences, max_seqlen_k (keys of the longest sequence; None: not known, the caller's order) at
    least BATCH_ORDER_KEYS, and more tiles than num_ctas (one tile per CTA needs no order): the
    launch's `unsplit_tiles` (unpacked, or row-packed where pack_rows) times num_splits (GQA block
    packing is not counted: it packs the 192-row classes' short rows, never over long keys alone).
    Cached (a call's integers repeat)."""
    if batch < 2 or max_seqlen_k is None or max_seqlen_k < BATCH_ORDER_KEYS or h_kv <= 0 or h_q % h_kv:
        return 0
    tiles = unsplit_tiles(batch, total_q, max_seqlen_q, h_q, h_kv, tile_m, False, pack_rows) * num_splits
    return int(tiles > num_ctas)


def unsplit_tiles(
    batch: int, total_q: int, max_seqlen_q: int, h_q: int, h_kv: int, tile_m: int, pack_gqa: bool,
    pack_rows: int = 0,
) -> int:  # fmt: skip
    """The kernel's linear tile count without splits (forward.py `tile_counts`, token-row LSE:
    lse_s_max 0), from host integers: per-sequence slots or packed by cu_seqlens_q, whichever is
    fewer; with GQA packing where the class packs and it saves PACK_MIN_SAVING of the tiles; with
    row packing (pack_rows: the launch packs rows, `choose_pack_rows`) `row_packed_tiles`."""
    from .slot_math import PACK_MIN_SAVING, ROW_BLOCK, slot_slack  # no DSL: the launch path needs none

    if pack_rows and h_kv > 0 and h_q > h_kv:
        return row_packed_tiles(batch, total_q, max_seqlen_q, h_q, h_kv, tile_m)
    num_wg = tile_m // ROW_BLOCK

    def count(pack_r: int) -> int:
        row_blocks = -(-max_seqlen_q // ROW_BLOCK)
        tiles_max = -(-pack_r * row_blocks // num_wg)
        slots = pack_r * total_q // tile_m + batch * slot_slack(pack_r, num_wg)
        return min(slots, tiles_max * batch) * (h_q // pack_r)

    tiles = count(1)
    ratio = h_q // h_kv
    if pack_gqa and ratio > 1:
        packed = count(ratio)
        keep, of = PACK_MIN_SAVING
        if packed * of <= tiles * (of - keep):
            tiles = packed
    return tiles


def max_splits_for_rows(total_q: int) -> int:
    """The most splits whose workspace rows (num_splits * total_q) the kernel's int32 row offsets reach."""
    return INT32_ROWS // max(total_q, 1)


def wave_split_count(tiles: int, key_blocks: int, sm_count: int, max_splits: int = MAX_SPLITS) -> int:
    """FlashAttention 3's rule (hopper/heuristics.h `num_splits_heuristic`; written anew here): 1
    when the tiles already fill FILL_FRACTION of the SMs or the keys are fewer than MIN_KEY_BLOCKS
    blocks; else, over S = 1 .. min(max_splits, sm_count, key_blocks), the wave efficiency
    e(S) = w / ceil(w) of w = tiles * S / sm_count waves, and the fewest S with e(S) >=
    EFFICIENCY_SHARE * max e. (FA3 also splits a long non-causal key range of a full grid when one
    K/V head passes 50 MB of L2; this kernel's L2 head groups serve that case: not taken.)"""
    if tiles <= 0 or sm_count <= 0 or tiles >= FILL_FRACTION * sm_count or key_blocks < MIN_KEY_BLOCKS:
        return 1
    limit = max(1, min(max_splits, sm_count, key_blocks))
    efficiency = []
    for s in range(1, limit + 1):
        waves = tiles * s / sm_count
        efficiency.append(waves / math.ceil(waves))
    best = max(efficiency)
    return next(s for s, e in enumerate(efficiency, start=1) if e >= EFFICIENCY_SHARE * best)


@functools.lru_cache(maxsize=256)
def choose_num_splits(
    batch: int, total_q: int, max_seqlen_q: int, max_seqlen_k, h_q: int, h_kv: int, sm_count: int,
    tile_m: int, tile_n: int, pack_gqa: bool = False, pack_rows: bool = False,
) -> int:  # fmt: skip
    """Split-KV splits for one launch of a class that may split (`split_allowed`), from host
    integers only (no device read: CUDA-graph capturable): `wave_split_count` over the kernel's
    unsplit tile count (`unsplit_tiles`) and the key blocks of the longest key range
    (ceil(max_seqlen_k / tile_n)), capped by MAX_SPLITS and `max_splits_for_rows`. pack_rows: the
    class packs rows (TileConfig.pack_rows): the tiles are then those of `choose_pack_rows`' choice
    for the launch. max_seqlen_k None
    (the call did not say): 1. Cached (a call's integers repeat from step to step)."""
    if max_seqlen_k is None or batch <= 0 or total_q <= 0 or max_seqlen_q <= 0 or h_kv <= 0:
        return 1
    rows = choose_pack_rows(batch, total_q, max_seqlen_q, h_q, h_kv, tile_m, 0, max_seqlen_k) if pack_rows else 0
    tiles = unsplit_tiles(batch, total_q, max_seqlen_q, h_q, h_kv, tile_m, pack_gqa, rows)
    key_blocks = -(-max_seqlen_k // tile_n)
    cap = min(MAX_SPLITS, max_splits_for_rows(total_q))
    return wave_split_count(tiles, key_blocks, sm_count, cap)


def split_allowed(layout_class, lse_layout: str) -> bool:
    """Whether launches of `layout_class` may split (rule 2). lse_layout: the call's LSE layout,
    read only for a class that writes an LSE (a class without one splits through `lse_sibling`)."""
    if layout_class.sinks:
        return False
    return not layout_class.lse or lse_layout in SPLIT_LSE_LAYOUTS


def lse_sibling(layout_class):
    """The class whose kernel serves `layout_class`'s split launches: the class itself when it
    writes an LSE, else the same LayoutClass with lse=True (rule 2; its own compiled kernel)."""
    if layout_class.lse:
        return layout_class
    return dataclasses.replace(layout_class, lse=True)


@functools.cache
def _positions() -> dict:
    from .launch import COMPILED_ARGS

    return {name: i for i, name in enumerate(COMPILED_ARGS)}


def run_splits(compiled, args, num_splits: int, out, lse_rows, lse_base_is_log2: bool, inside=None):
    """Launch `compiled` with num_splits > 1 into a fresh workspace and merge the splits.

    compiled: an LSE class's compiled function: the call's own class, or for a class without an
    LSE its `lse_sibling`'s (then args' lse_flat is None and lse_rows is None: the merged LSE is
    discarded, only out is written).

    args: the compiled function's arguments for this launch without splits (COMPILED_ARGS order,
    then a -softcap class's sinks and cap), out among them; their out, lse_flat, lse_s_max, LSE
    strides and num_splits are replaced here. out: (total_q, H_q, d_v) the call's output;
    lse_rows: its LSE as a (total_q, H_q) float32 view (token-major, or a head-major buffer
    transposed). The kernel writes split s's O and LSE (in the call's base: `lse_base_is_log2`)
    into rows s * total_q + ... of the workspace (module docstring, rule 4); merge_states then writes
    out and lse_rows (None: no caller's LSE, the merged one is dropped). inside: None when every row of out and lse_rows may be written (buffers made
    for this call), else a bool (total_q,) tensor of the rows inside the sequences
    (launch.rows_inside): only those are written, the others keep the caller's values. Torch ops
    on the current stream only; no device-to-host read.
    """
    import torch

    from ragged_attn.merge import merge_states

    total_q, h_q, d_v = out.shape
    ws_o = torch.empty((num_splits, total_q, h_q, d_v), dtype=out.dtype, device=out.device)
    ws_lse = torch.full((num_splits, total_q, h_q), -math.inf, dtype=torch.float32, device=out.device)
    pos = _positions()
    args = list(args)
    args[pos["out"]] = ws_o[0]  # split 0's rows; the kernel's O descriptor covers all splits'
    args[pos["lse_flat"]] = ws_lse.view(-1)
    args[pos["lse_s_max"]] = 0
    lse_strides = (0, h_q, h_q, 1)  # token rows (s_b, s_tok, s_row, s_h): split s at s * total_q
    for name, value in zip(("lse_s_b", "lse_s_tok", "lse_s_row", "lse_s_h"), lse_strides):
        args[pos[name]] = value
    args[pos["num_splits"]] = num_splits
    compiled(*args)
    parts_o, parts_lse = ws_o.permute(1, 0, 2, 3), ws_lse.permute(1, 0, 2)  # (total_q, S, H_q, ...)
    base = "log2" if lse_base_is_log2 else "ln"
    if inside is None:
        merge_states(parts_o, parts_lse, lse_base=base, out=out, s_out=lse_rows)
        return
    merged_o, merged_lse = merge_states(parts_o, parts_lse, lse_base=base)
    out.copy_(torch.where(inside[:, None, None], merged_o, out))
    if lse_rows is not None:
        lse_rows.copy_(torch.where(inside[:, None], merged_lse, lse_rows))
