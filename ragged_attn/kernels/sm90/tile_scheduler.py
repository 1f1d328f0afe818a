"""Which tile each persistent CTA of the sm_90a forward computes, and which (query head, 64-row
block) each MMA warpgroup of a tile owns.

The kernel launches at most one CTA per SM (`num_ctas`, the run-time SM count). Each CTA's
producer warp 0 takes its tiles from a tile counter (forward.py `next_tile`), decodes each one
here with the whole warp and hands the decoded tile to the MMA warpgroups (and, for paged K/V, to
the producer warps that gather beside it) through smem. Nothing is read back and the launch is
CUDA-graph capturable; the producer runs ahead by as many K/V stages as the pipelines hold.

Units and items (GQA packing at warpgroup granularity, `pack_r`):
- A tile belongs to one sequence and one *unit*: a K/V head when the class packs GQA groups
  (pack_r = H_q / H_kv), else a query head (pack_r = 1). A unit's *items* are its (64-row block,
  query head) pairs, row block first: item i is row block i // pack_r of query head
  unit * pack_r + i % pack_r, so a sequence has pack_r * ceil(len_q / 64) items per unit.
- Tile p of a (sequence, unit) is items [W p, W p + W), W = tile_m / 64 MMA warpgroups, one item
  each: every warpgroup of a tile reads the same K/V head, and its rows lie within one row block
  of its siblings'. With pack_r = 1 this is the (m_block, head) tile of tile_m rows.
  Measured gain: tile_config.py (short batches leave a 192-row tile's third warpgroup idle when a
  sequence's row blocks are not a multiple of three; packed, the next query head's blocks fill it).

Row packing (`row_mult`, FlashAttention 3's PackGQA at row granularity; a run-time choice of the
classes with TileConfig.pack_rows, never with block packing, never with a padded LSE):
- A unit is a K/V head; its g = H_q / H_kv query heads' rows of a sequence with len_q queries form
  a packed row space of len_q * g rows: packed row m is token m // g of query head unit * g + m % g.
  A tile is tile_m consecutive packed rows (warpgroup w: rows [tile_m p + 64 w, ... + 64)), so a
  sequence has ceil(g len_q / tile_m) tiles per unit (`row_mult` = g multiplies len_q wherever the
  order counts rows; pack_r stays 1). A decode row (len_q 1) with g = 4 is 4 rows of one block
  whose K/V loads every query head of the group shares.
- Packed order: first(b) = g cu_seqlens_q[b] // tile_m + b (k = 1: the tiles ceil(g len / tile_m)
  are at most floor(g cu[b + 1] / tile_m) - floor(g cu[b] / tile_m) + 1).

Linear order (split-KV splits fastest, then units, then a sequence's slots, then sequences):
- split-KV (a launch's run-time num_splits = S; S = 1 is the order without splits): linear index
  t = split + S * u, where u is the index of the order below; a tile's S splits are consecutive, so a
  sequence's splits start together and each takes its share of the tile's key blocks
  (block_info.BlockInfo.for_split). With S = 1 nothing is divided.
- "per sequence": u = unit + U * (slot + tiles_max * b), tiles_max = ceil(pack_r * ceil(q_rows /
  64) / W) slots for every sequence, q_rows = max(max_seqlen_q, lse_s_max) (padded LSE rows need
  them);
- "packed" (no padded LSE, and fewer slots): u = unit + U * slot_lin; sequence b owns the slots [first(b), first(b + 1)),
  first(b) = pack_r * cu_seqlens_q[b] // tile_m + k * b with k = (pack_r + 2 W - 2) // W, which
  hold its tiles (`slot_slack`: why k suffices); b is found by a search over cu_seqlens_q.
Slot j < tiles_q of a sequence is its (j+1)-th tile from the end, so the costliest causal tiles
come first and the cheap first tiles form the tail (longest-first). Slots past a sequence's tiles
hold nothing (packed) or only padded LSE rows (per sequence).

Tail split (TileConfig.tail_split; a run-time choice per launch, tail_split.py): the launch's last
T tiles of the order above (u >= U0 = N - T, N its tiles) are each taken S times, pieces fastest:
linear index t >= U0 is piece (t - U0) mod S of tile u = U0 + (t - U0) // S, which visits that
share of the tile's key blocks (BlockInfo.for_split's shares); the launch then has N + T (S - 1)
linear indices. T = 0: the order above. Never with split-KV or row packing (`tail_tile`).

Batch order (TileConfig.batch_order; a run-time choice per launch, split_kv.choose_batch_order):
the sequences of the linear order are the batch's sorted by key length, longest first, ties in the
caller's order (`batch_order_ref`), so the longest sequences' costliest tiles start first: position
v of the order takes the place of b above (first(v) over the sorted q-row prefix, which
forward.py `sort_batch` writes to smem in each CTA's prologue), and the decoded tile's batch_idx is
the caller's index of position v. 2 to batch_order sequences; otherwise the caller's order.

Stream mix (TileConfig.stream_mix, with the batch order): the sort's key ranks streaming sequences
(at most one 64-row block of query rows, row-packed rows counted: decode and spec-decode rows, each
of whose tiles reads its K/V once from HBM for a few rows of math) before the others, each kind by
key length; their tiles then hold the linear indices [0, A) of the sorted order (A: forward.py
`mix_bound`, per launch), and the tile counter's position t deals streaming tile floor(t A / N)
where floor((t + 1) A / N) passes it, else the others' tile A + t - floor(t A / N) (`mixed_tile`,
N the launch's linear tiles). Every prefix of the dealing holds its share of each kind, so some SMs
stream K/V while the others do math, instead of the whole GPU doing one and then the other (vLLM's
mixed batch: ~1045 us of decode rows at 4.4 TB/s, then ~615 us of prefill chunks). No streaming
sequence, or nothing else: A = 0, the batch order's own dealing. Twins: `batch_order_ref`,
`mix_bound_ref`, `mixed_tile_ref`.

Long sequences (K/V of all query heads > L2_KV_BYTES) re-deal their (unit, slot) tiles in L2
groups of query heads: G heads take all their tiles, G heads per slot, before the next G start
(a partial last group allowed). G = L2_KV_BYTES / (one head's K/V bytes) query heads rounded down
to whole GQA groups (`l2_group`): under GQA this is fewer heads than FlashAttention 3's dense
scheduler groups, which counts K/V heads and multiplies by the GQA ratio (TileConfig
l2_kv_head_groups builds that count, for measurement). TileConfig.l2_group_max caps G (d192 8,
d128 16 query heads; at least one whole GQA group): inside a group a head's next row tile comes G linear indices after its last,
so a large group of short heads (DeepSeek 4 x 512: 102 heads) saw part of its K/V leave L2 between
its row tiles (ncu, H100: 288.7 MB of DRAM reads for 268.4 MB of tensors; capped, 4 x 512 ran
0.156 -> 0.137 ms). TileConfig.l2_group_always (d192) deals every sequence with keys in such
groups, not only those past L2_KV_BYTES (16 x 256 at 128 heads: its row tiles had run a wave apart;
0.242 -> 0.236 ms). Measured on an
H200, 2026-11-30 (d128 causal, non-persistent grid): 2 x 8192 at 64/8 heads 593 -> 615 TFLOP/s;
DeepSeek 1 x 16384 (128/128, d 192/128) 502 -> 663; short batches unchanged.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, const_expr

from .seqlen_info import SeqlenInfo
from .slot_math import PACK_MIN_SAVING, ROW_BLOCK, slot_slack  # noqa: F401 (re-exported)

L2_KV_BYTES = 32 << 20  # K/V bytes of the heads grouped to share L2 (H100/H200: 50 MiB of L2)


TAIL_PIECE_BITS = 4  # a tail tile's handed-over word: (tail index << 8) | (piece << 4) | (pieces - 1)
TAIL_MAX_PIECES = 1 << TAIL_PIECE_BITS
TAIL_MAX_TILES = 1 << 22  # tail tiles a launch takes at most (the word's index stays a positive int32)


@cute.jit
def tail_tile(t: Int64, tail_start: Int64, pieces: Int32):
    """(u, word, piece, count) of linear index t under the tail split (module docstring): u the
    index of the order without it, piece and count (1 below tail_start: the whole tile) the key-block
    share to visit, word 0 for a whole tile, else (tail index << 8) | (piece << 4) | (pieces - 1)
    (non-zero: pieces >= 2), which travels to the MMA warpgroups (`tail_word_fields`)."""
    u = t
    word = Int32(0)
    piece = Int32(0)
    count = Int32(1)
    if t >= tail_start:
        d = t - tail_start
        idx = d // Int64(pieces)
        piece = Int32(d - idx * Int64(pieces))
        u = tail_start + idx
        count = pieces
        word = (Int32(idx) << (2 * TAIL_PIECE_BITS)) | (piece << TAIL_PIECE_BITS) | (pieces - 1)
    return u, word, piece, count


@cute.jit
def tail_word_fields(word: Int32):
    """(tail index, piece, pieces) of a non-zero `tail_tile` word."""
    mask = Int32(TAIL_MAX_PIECES - 1)
    return word >> (2 * TAIL_PIECE_BITS), (word >> TAIL_PIECE_BITS) & mask, (word & mask) + 1


def tail_tile_ref(t: int, tail_start: int, pieces: int):
    """Pure-Python twin of `tail_tile` (and of `tail_word_fields` on its word), for tests."""
    if t < tail_start:
        return t, 0, 0, 1
    idx, piece = divmod(t - tail_start, pieces)
    word = (idx << (2 * TAIL_PIECE_BITS)) | (piece << TAIL_PIECE_BITS) | (pieces - 1)
    return tail_start + idx, word, piece, pieces


@cute.jit
def total_tiles(
    num_units: Int32, total_q: Int32, batch: Int32, tiles_max: Int32, packed: Int32, pack_r: Int32,
    tile_m: cutlass.Constexpr[int], num_splits: Int32 = 1, row_mult: Int32 = 1,
) -> Int64:  # fmt: skip
    """Number of linear tile indices, num_splits per (unit, slot) (64-bit: units * slots may pass 2**31).
    row_mult: packed rows per token (row packing: g; else 1)."""
    num_wg = tile_m // ROW_BLOCK
    slots = (
        Int64(pack_r) * Int64(row_mult) * Int64(total_q) // Int64(tile_m)
        + Int64(batch) * Int64(slot_slack(pack_r, num_wg))
    )
    if packed == 0:
        slots = Int64(tiles_max) * Int64(batch)
    return slots * Int64(num_units) * Int64(num_splits)


# Stream mix (TileConfig.stream_mix; forward.py sort_batch, mix_bound, mixed_tile): a sequence
# streams where its query rows (row-packed rows counted) fit one 64-row block, so each of its tiles
# reads its K/V once from HBM for few rows of math (decode and spec-decode rows); the batch order's
# key sets this bit over the key length (clamped below it) so they rank first.
STREAM_KEY_BIT = 1 << 30


@cute.jit
def streaming_rows(row_mult: Int32) -> Int32:
    """The most query tokens a streaming sequence has: ROW_BLOCK // row_mult (rows = tokens * g
    where the launch packs rows)."""
    return Int32(ROW_BLOCK) // row_mult


@cute.jit
def first_slot(cu_q: Int32, b: Int32, pack_r: Int32, tile_m: cutlass.Constexpr[int], row_mult: Int32 = 1) -> Int64:
    """first(b) of the packed order (module docstring), 64-bit; 32-bit arithmetic without packing
    (a 64-bit division costs a call per search probe). row_mult: row packing's g (else 1)."""
    first = Int64(cu_q // tile_m + b)
    if pack_r != 1:
        first = Int64(pack_r) * Int64(cu_q) // Int64(tile_m) + Int64(b) * Int64(slot_slack(pack_r, tile_m // ROW_BLOCK))
    if row_mult != 1:  # row packing (pack_r 1): k = 1
        first = Int64(row_mult) * Int64(cu_q) // Int64(tile_m) + Int64(b)
    return first


@cute.jit
def sequence_of_slot_warp(
    mCuSeqlensQ: cute.Tensor, slot: Int64, pack_r: Int32, tile_m: cutlass.Constexpr[int], row_mult: Int32 = 1,
    batch=None,
) -> Int32:  # fmt: skip
    """The last b in [0, B - 1] whose first packed slot first(b) is <= slot (0 when none is),
    found by the 32 lanes of a warp together, every lane returning it. Each round probes 32
    evenly spaced positions of [lo, hi] at once (one load each) and keeps the gap between the last
    that passes and the first that fails: B <= 33 sequences take one round, B <= 1057 two. The
    first slots increase with b, so the passing probes are a prefix of the lanes. mCuSeqlensQ: the
    q-row prefix (cu_seqlens_q, or the batch order's sorted prefix in smem with `batch` = B; None:
    B is its length - 1)."""
    lane = Int32(cute.arch.lane_idx())
    lo = Int32(0)
    hi = cute.size(mCuSeqlensQ.shape[0]) - 2
    if const_expr(batch is not None):
        hi = batch - 1
    while lo < hi:
        step = (hi - lo + 31) // 32
        probe = cutlass.min(lo + (lane + 1) * step, hi)
        passes = first_slot(Int32(mCuSeqlensQ[probe]), probe, pack_r, tile_m, row_mult) <= slot
        count = Int32(cute.arch.popc(cute.arch.vote_ballot_sync(passes)))
        new_lo = lo
        if count > 0:
            new_lo = cutlass.min(lo + count * step, hi)
        if count < 32:
            hi = cutlass.min(lo + (count + 1) * step, hi) - 1
        lo = new_lo
    return lo


@cute.jit
def sequence_and_offset(
    mPrefix: cute.Tensor, slot_lin: Int64, pack_r: Int32, tile_m: cutlass.Constexpr[int], row_mult: Int32 = 1,
    batch=None, sOrder=None,
):  # fmt: skip
    """(b, rel): the sequence whose packed slots hold slot_lin and slot_lin - first(v), which is < 0
    where slot_lin lies before the sequence's first slot (no tile). v: its position in the q-row
    prefix mPrefix (`sequence_of_slot_warp`): cu_seqlens_q, where b = v; or the batch order's sorted
    prefix (with `batch` = B and sOrder), where b = sOrder[v]."""
    v = sequence_of_slot_warp(mPrefix, slot_lin, pack_r, tile_m, row_mult, batch)
    b = v
    if const_expr(sOrder is not None):
        b = Int32(sOrder[v])
    return b, slot_lin - first_slot(Int32(mPrefix[v]), v, pack_r, tile_m, row_mult)


@cute.jit
def tile_item(unit: Int32, tile: Int32, w, pack_r: Int32, num_wg: cutlass.Constexpr[int]):
    """(row_block, head_idx) of warpgroup w's item in tile `tile` of `unit` (module docstring)."""
    row_block = tile * num_wg + w
    head_idx = unit
    if pack_r != 1:  # no division on the unpacked path
        item = row_block
        row_block = item // pack_r
        head_idx = unit * pack_r + (item - row_block * pack_r)
    return row_block, head_idx


@cute.jit
def kv_head(unit: Int32, pack_r: Int32, ratio: Int32, row_mult: Int32 = 1) -> Int32:
    """The K/V head every item of a unit's tiles reads: the unit itself when the launch packs GQA
    groups (pack_r = ratio, or row packing: row_mult = ratio), else the unit's query head's group,
    unit // ratio."""
    head = unit
    if pack_r * row_mult == 1:
        head = unit // ratio
    return head


@cute.jit
def item_shift(pack_r: Int32, packed: Int32, len_q: Int32, num_wg: cutlass.Constexpr[int]) -> Int32:
    """How many items a packed sequence's tiles start before its item 0 (0 <= shift < W): its
    tile p holds items [W p - shift, W p - shift + W), so the partial tile is the first (the
    cheapest rows, under causal masks) rather than the last. Only where the launch packs GQA groups
    in the packed order (pack_r > 1, no padded LSE); else 0. Measured: tile_config.py."""
    shift = Int32(0)
    if packed != 0 and pack_r != 1:
        items = pack_r * ((len_q + (ROW_BLOCK - 1)) // ROW_BLOCK)
        shift = (num_wg - items % num_wg) % num_wg
    return shift


@cute.jit
def tile_items(
    unit: Int32, tile: Int32, pack_r: Int32, num_wg: cutlass.Constexpr[int], shift: Int32 = 0, past_end: Int32 = 0
):  # fmt: skip
    """Every warpgroup's item of tile `tile` and their row span, flat: (row_block_0, head_0, ...,
    row_block_{W-1}, head_{W-1}, row_lo, row_hi), as `tile_item` gives them, with one division: a
    tile's items are consecutive, so the query head steps by one and wraps to the group's first
    head and the next row block (the producer warp's latency per tile shows on the shortest
    batches). With `shift` (item_shift) the first tile's first warpgroups may hold no item: they
    get row block `past_end` (the sequence's row blocks: no rows, like items past the end); the row
    span covers the real items only."""
    first = tile * num_wg - shift  # < 0 only for tile 0 of a shifted sequence
    start = cutlass.max(first, 0)
    row_block = start
    head_idx = unit
    if pack_r != 1:  # no division on the unpacked path
        row_block = start // pack_r
        head_idx = unit * pack_r + (start - row_block * pack_r)
    row_lo = row_block * ROW_BLOCK
    first_head = unit * pack_r
    words = ()
    for w in cutlass.range_constexpr(num_wg):
        if cutlass.const_expr(w > 0):
            if first + w > 0:  # the item before this one is real: step from it
                head_idx = head_idx + 1
                if head_idx == first_head + pack_r:
                    head_idx = first_head
                    row_block = row_block + 1
        shown = row_block
        if first + w < 0:
            shown = past_end
        words = words + (shown, head_idx)
    return words + (row_lo, (row_block + 1) * ROW_BLOCK)


@cute.jit
def tile_rows(tile: Int32, pack_r: Int32, num_wg: cutlass.Constexpr[int]):
    """(row_lo, row_hi): the query rows [row_lo, row_hi) that span the row blocks of every item of
    tile `tile` (not clipped to len_q)."""
    first = tile * num_wg
    row_lo = first * ROW_BLOCK
    row_hi = (first + num_wg) * ROW_BLOCK
    if pack_r != 1:
        row_lo = (first // pack_r) * ROW_BLOCK
        row_hi = ((first + num_wg - 1) // pack_r + 1) * ROW_BLOCK
    return row_lo, row_hi


@cute.jit
def l2_group(fit: Int32, ratio: Int32, kv_head_groups: cutlass.Constexpr[bool]) -> Int32:
    """Query heads per L2 group, from `fit` = L2_KV_BYTES / (one head's K/V bytes of the sequence):
    `fit` query heads rounded down to whole GQA groups, at least one (as if each query head read
    K/V of its own); kv_head_groups: `fit` K/V heads, at least one, times the GQA ratio (FA3's dense
    scheduler's count: a GQA group's query heads share one K/V head's bytes)."""
    if const_expr(kv_head_groups):
        return cutlass.max(fit, 1) * ratio
    return cutlass.max(fit // ratio, 1) * ratio


@cute.jit
def decode_tile(
    t: Int64,
    num_units: Int32,
    pack_r: Int32,
    ratio: Int32,  # H_q / H_kv
    tiles_max: Int32,
    packed: Int32,
    mCuSeqlensQ: cute.Tensor,  # (B + 1,) int32
    mCuSeqlensK: cute.Tensor,
    mSeqUsedQ: cute.Tensor,
    mSeqUsedK: cute.Tensor,
    use_seqused_q: Int32,
    use_seqused_k: Int32,
    tile_m: cutlass.Constexpr[int],
    token_bytes: cutlass.Constexpr[int],  # (d_qk + d_v) * element bytes: one token's K and V of one head
    kv_head_groups: cutlass.Constexpr[bool] = False,  # L2 groups counted in K/V heads (`l2_group`)
    num_splits: Int32 = 1,  # split-KV splits per (unit, slot): the fastest digit of t
    row_mult: Int32 = 1,  # row packing: g = H_q / H_kv packed rows per token (pack_r 1); else 1
    order=None,  # TileConfig.batch_order: (sorted, sPrefix, sOrder) of `sort_batch`; None: the caller's order
    group_max: cutlass.Constexpr[int] = 0,  # TileConfig.l2_group_max: cap on `fit` before GQA rounding (0: none)
    group_always: cutlass.Constexpr[bool] = False,  # TileConfig.l2_group_always: every sequence with keys
):
    """(unit, tile, batch_idx, has_rows, seqlen, split) of linear tile index t (see the module);
    has_rows == 0: nothing to compute (at most padded LSE rows past len_q to fill); split: which of
    the tile's num_splits key-block shares (0 without split-KV). A whole warp calls it with the same
    t: the 32 lanes find the sequence together (`sequence_of_slot_warp`), one load latency per 32x
    narrowing instead of one per halving. With `order` and its sorted flag set, the order's
    position v takes the place of b in the linear order (the sorted q-row prefix in smem stands
    for cu_seqlens_q) and batch_idx = sOrder[v]."""
    num_wg = tile_m // ROW_BLOCK
    split = Int32(0)
    t_unsplit = t
    if num_splits != 1:  # no division on the unsplit path
        t_unsplit = t // Int64(num_splits)
        split = Int32(t - t_unsplit * Int64(num_splits))
    unit_x = Int32(t_unsplit % Int64(num_units))
    slot_lin = t_unsplit // Int64(num_units)
    has_slot = Int32(1)
    batch_idx = Int32(0)
    slot = Int32(0)
    if packed != 0:
        # The last sequence whose first slot is <= slot (0 when there is none).
        if const_expr(order is None):
            batch_idx, rel = sequence_and_offset(mCuSeqlensQ, slot_lin, pack_r, tile_m, row_mult)
        else:
            sorted_flag, sPrefix, sOrder = order[:3]
            rel = Int64(0)
            if sorted_flag != 0:
                batch = cute.size(mCuSeqlensQ.shape[0]) - 1
                batch_idx, rel = sequence_and_offset(sPrefix, slot_lin, pack_r, tile_m, row_mult, batch, sOrder)
            else:
                batch_idx, rel = sequence_and_offset(mCuSeqlensQ, slot_lin, pack_r, tile_m, row_mult)
        slot = Int32(rel)
        if rel < Int64(0):
            has_slot = Int32(0)
            slot = Int32(0)
    else:
        batch_idx = Int32(slot_lin // Int64(tiles_max))
        slot = Int32(slot_lin - Int64(batch_idx) * Int64(tiles_max))
        if const_expr(order is not None):
            if order[0] != 0:
                batch_idx = Int32(order[2][batch_idx])
    seqlen = SeqlenInfo.create(batch_idx, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, mSeqUsedK, use_seqused_q, use_seqused_k)
    row_blocks = (seqlen.len_q * row_mult + (ROW_BLOCK - 1)) // ROW_BLOCK
    tiles_q = (pack_r * row_blocks + (num_wg - 1)) // num_wg
    unit = unit_x
    if slot < tiles_q:
        heads_counted = num_units * pack_r  # query heads, each counted with its own K/V
        if const_expr(kv_head_groups):
            heads_counted = heads_counted // ratio  # K/V heads
        if row_mult != 1:
            heads_counted = num_units  # row packing: a unit reads one K/V head for its g query heads
        if const_expr(group_always):
            grouped = seqlen.len_k > 0
        else:
            grouped = Int64(seqlen.len_k) * Int64(heads_counted * token_bytes) > Int64(L2_KV_BYTES)
        if grouped:
            # L2 groups: a bijection of the sequence's tile-holding (unit, slot) pairs, in the
            # order units-fastest ranks them (`l2_group`).
            head_bytes = Float32(seqlen.len_k) * Float32(token_bytes)
            fit = Int32(Float32(L2_KV_BYTES) / head_bytes)
            if const_expr(group_max):
                fit = cutlass.min(fit, Int32(group_max))
            group = l2_group(fit, ratio, kv_head_groups) // pack_r
            if row_mult != 1:
                group = cutlass.max(fit, 1)  # units (K/V heads) whose K/V fit
            rank = unit_x + num_units * slot
            per_group = group * tiles_q
            g = rank // per_group
            rest = rank - g * per_group
            units_here = cutlass.min(group, num_units - g * group)
            slot = rest // units_here
            unit = g * group + rest - slot * units_here
    # Slot j < tiles_q is the (j+1)-th tile from the end; any other slot is a tile index past
    # len_q (padded LSE rows only), so each tile is visited exactly once.
    tile = slot
    if slot < tiles_q:
        tile = tiles_q - 1 - slot
    # Rows to compute: not so for a packed slot before the sequence's first (slot < 0) or past its
    # tiles, nor for a per-sequence slot past len_q (padded LSE rows only).
    has_rows = has_slot
    if tile >= tiles_q:
        has_rows = Int32(0)
    return unit, tile, batch_idx, has_rows, seqlen, split


def launch_schedule_ref(
    lens_q, lens_k, num_heads, num_heads_kv, tile_m, pack, lse_s_max=0, token_bytes=512, num_splits=1,
    pack_rows=False,
):  # fmt: skip
    """Pure-Python twin of the launch's tile counts (forward.py __call__): (num_units, pack_r,
    tiles_max, packed, num_tiles) for sequences of lengths lens_q (cu_seqlens_q their prefix sums).
    pack: the class may pack GQA groups ("always": pack whatever it saves, for tests of the cover).
    num_splits: split-KV splits per (unit, slot) (num_tiles counts each). pack_rows: the launch
    packs rows (module docstring; H_q / H_kv > 1, no padded LSE; `pack` is then ignored): units are
    K/V heads, pack_r 1, rows per token g (`row_mult_ref`)."""
    if pack_rows and row_mult_ref(num_heads, num_heads_kv, pack_rows, lse_s_max) != 1:
        g = num_heads // num_heads_kv
        num_wg = tile_m // ROW_BLOCK
        q_rows = max(lens_q, default=0)
        tiles_max = -(-g * q_rows // tile_m)
        batch = len(lens_q)
        slots = g * sum(lens_q) // tile_m + batch
        packed = int(slots < tiles_max * batch)
        num_tiles = (slots if packed else tiles_max * batch) * num_heads_kv * num_splits
        return num_heads_kv, 1, tiles_max, packed, num_tiles
    if pack is True:
        _, _, _, _, unpacked = launch_schedule_ref(lens_q, lens_k, num_heads, num_heads_kv, tile_m, False, lse_s_max)
        _, _, _, _, packed = launch_schedule_ref(lens_q, lens_k, num_heads, num_heads_kv, tile_m, "always", lse_s_max)
        keep, of = PACK_MIN_SAVING
        pack = "always" if packed * of <= unpacked * (of - keep) else False
    num_wg = tile_m // ROW_BLOCK
    pack_r = num_heads // num_heads_kv if pack else 1
    num_units = num_heads // pack_r
    q_rows = max(max(lens_q, default=0), lse_s_max)
    tiles_max = -(-pack_r * -(-q_rows // ROW_BLOCK) // num_wg)
    batch = len(lens_q)
    slots = pack_r * sum(lens_q) // tile_m + batch * slot_slack(pack_r, num_wg)
    packed = int(lse_s_max == 0 and slots < tiles_max * batch)
    num_tiles = (slots if packed else tiles_max * batch) * num_units * num_splits
    return num_units, pack_r, tiles_max, packed, num_tiles


def row_mult_ref(num_heads, num_heads_kv, pack_rows, lse_s_max=0):
    """Packed rows per token of a launch: g = H_q / H_kv where it packs rows (asked for, g > 1, no
    padded LSE), else 1 (forward.py __call__)."""
    g = num_heads // num_heads_kv
    return g if pack_rows and g > 1 and lse_s_max == 0 else 1


def batch_order_ref(lens_k, batch_order: int, lens_q=None, row_mult: int = 1, stream_mix: bool = False):
    """Pure-Python twin of the kernel's batch order (forward.py `sort_batch`): the sequences by key
    length, longest first, ties in the caller's order (a stable sort), for a batch of 2 to
    batch_order sequences; None (the caller's order) otherwise. stream_mix (TileConfig.stream_mix,
    with lens_q and the launch's row_mult): streaming sequences (`is_streaming_ref`) first, each
    kind by key length (clamped below STREAM_KEY_BIT)."""
    if not batch_order or not 2 <= len(lens_k) <= batch_order:
        return None
    if not stream_mix:
        return sorted(range(len(lens_k)), key=lambda b: -lens_k[b])
    return sorted(
        range(len(lens_k)),
        key=lambda b: (-is_streaming_ref(lens_q[b], row_mult), -min(lens_k[b], STREAM_KEY_BIT - 1)),
    )


def is_streaming_ref(len_q: int, row_mult: int = 1) -> int:
    """1 where a sequence streams (TileConfig.stream_mix): its len_q tokens (times row_mult packed
    rows each) fit one 64-row block (`streaming_rows`)."""
    return int(len_q <= ROW_BLOCK // row_mult)


def mix_bound_ref(lens_q, order, cu, row_mult, num_units, pack_r, tiles_max, packed, num_tiles, tile_m, num_splits):
    """Pure-Python twin of forward.py `mix_bound`: the linear bound of the streaming sequences' tiles
    in the sorted order (0 where none or all stream, or past 2**31 - 1 tiles). Like the other twins
    it takes cu_seqlens_q[0] = 0; the kernel's prefix starts at cu_seqlens_q[0], and its bound is
    first(count) of that prefix, the same boundary in its own slot numbering."""
    count = sum(is_streaming_ref(lens_q[b], row_mult) for b in order)
    if count in (0, len(order)) or num_tiles > 2**31 - 1:
        return 0
    if packed:
        slots = first_slot_ref(cu[count], count, pack_r, tile_m, row_mult)
    else:
        slots = count * tiles_max
    return slots * num_units * num_splits


def first_slot_ref(cu_q: int, v: int, pack_r: int, tile_m: int, row_mult: int = 1) -> int:
    """Pure-Python twin of `first_slot`: first(v) of the packed order over q-row prefix value cu_q
    (row packing has pack_r 1, whose slack is 1)."""
    return pack_r * row_mult * cu_q // tile_m + v * slot_slack(pack_r, tile_m // ROW_BLOCK)


def mixed_tile_ref(t: int, bound: int, num_tiles: int) -> int:
    """Pure-Python twin of forward.py `mixed_tile`: the sorted order's tile that dealing position t
    takes when its first `bound` linear indices are the streaming sequences' tiles."""
    if bound == 0:
        return t
    before = t * bound // num_tiles
    return before if (t + 1) * bound // num_tiles > before else bound + t - before


def decode_tile_ref(
    t, lens_q, lens_k, num_heads, num_heads_kv, tile_m, pack, lse_s_max=0, token_bytes=512, kv_head_groups=False,
    num_splits=1, pack_rows=False, batch_order=0, stream_mix=False, group_max=0, group_always=False,
):  # fmt: skip
    """Pure-Python twin of `decode_tile` (with the launch's counts): (unit, tile, batch_idx,
    has_rows, pack_r, split), for tests. With row packing (pack_rows; `row_mult_ref` > 1) tile is
    the unit's tile of tile_m packed rows (module docstring). batch_order: TileConfig.batch_order
    (`batch_order_ref`: the linear order's sequences sorted by key length). stream_mix:
    TileConfig.stream_mix (dealing position t, `mixed_tile_ref`, where the batch is sorted);
    "sort": its order of sequences without the dealing permutation (tests)."""
    num_wg = tile_m // ROW_BLOCK
    num_units, pack_r, tiles_max, packed, num_tiles = launch_schedule_ref(
        lens_q, lens_k, num_heads, num_heads_kv, tile_m, pack, lse_s_max, token_bytes, num_splits, pack_rows
    )
    ratio = num_heads // num_heads_kv
    row_mult = row_mult_ref(num_heads, num_heads_kv, pack_rows, lse_s_max)
    sorted_order = batch_order_ref(lens_k, batch_order, lens_q, row_mult, bool(stream_mix))
    order = sorted_order or list(range(len(lens_q)))
    cu = [0]  # the q-row prefix in the linear order's sequence order
    for b in order:
        cu.append(cu[-1] + lens_q[b])
    if stream_mix is True and sorted_order is not None:
        t = mixed_tile_ref(t, mix_bound_ref(lens_q, order, cu, row_mult, num_units, pack_r, tiles_max, packed,
                                            num_tiles, tile_m, num_splits), num_tiles)  # fmt: skip
    t, split = divmod(t, num_splits)
    unit_x, slot_lin = t % num_units, t // num_units
    has_slot = 1
    if packed:
        firsts = [first_slot_ref(cu[v], v, pack_r, tile_m, row_mult) for v in range(len(lens_q))]
        v = max([i for i, f in enumerate(firsts) if f <= slot_lin], default=0)
        slot = slot_lin - firsts[v]
        if slot < 0:
            has_slot, slot = 0, 0
    else:
        v, slot = slot_lin // tiles_max, slot_lin % tiles_max
    b = order[v]
    tiles_q = -(-pack_r * -(-lens_q[b] * row_mult // ROW_BLOCK) // num_wg)
    unit = unit_x
    heads_counted = num_units * pack_r // (ratio if kv_head_groups else 1)
    if row_mult != 1:
        heads_counted = num_units
    grouped = lens_k[b] > 0 if group_always else lens_k[b] * heads_counted * token_bytes > L2_KV_BYTES
    if slot < tiles_q and grouped:
        fit = int(L2_KV_BYTES / (lens_k[b] * token_bytes))
        if group_max:
            fit = min(fit, group_max)
        group = (max(fit, 1) * ratio if kv_head_groups else max(fit // ratio, 1) * ratio) // pack_r
        if row_mult != 1:
            group = max(fit, 1)
        rank = unit_x + num_units * slot
        g, rest = divmod(rank, group * tiles_q)
        units_here = min(group, num_units - g * group)
        slot, u = divmod(rest, units_here)
        unit = g * group + u
    tile = tiles_q - 1 - slot if slot < tiles_q else slot
    has_rows = int(has_slot and tile < tiles_q)
    return unit, tile, b, has_rows, pack_r, split


def item_shift_ref(pack_r, packed, len_q, num_wg):
    """Pure-Python twin of `item_shift`."""
    if not packed or pack_r == 1:
        return 0
    return -(pack_r * -(-len_q // ROW_BLOCK)) % num_wg


def tile_items_ref(unit, tile, pack_r, num_wg, shift=0, past_end=0):
    """Pure-Python twin of `tile_items` (its stepping, not tile_item's division), for tests."""
    first = tile * num_wg - shift
    row_block, head_idx = divmod(max(first, 0), pack_r)
    head_idx += unit * pack_r
    row_lo = row_block * ROW_BLOCK
    words = []
    for w in range(num_wg):
        if w > 0 and first + w > 0:
            head_idx += 1
            if head_idx == unit * pack_r + pack_r:
                head_idx, row_block = unit * pack_r, row_block + 1
        words += [past_end if first + w < 0 else row_block, head_idx]
    return tuple(words) + (row_lo, (row_block + 1) * ROW_BLOCK)


def tile_item_ref(unit, tile, w, pack_r, num_wg, shift=0, past_end=0):
    """Pure-Python twin of `tile_item` with `item_shift`'s shift: (row_block, head_idx); an item
    before the sequence's first (shifted tile 0) is (past_end, the unit's first query head)."""
    item = tile * num_wg + w - shift
    if item < 0:
        return past_end, unit * pack_r
    return item // pack_r, unit * pack_r + item % pack_r
