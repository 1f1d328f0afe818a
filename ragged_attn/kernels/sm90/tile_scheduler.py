"""Which (query head, m_block, sequence) tile each persistent CTA of the sm_90a forward computes.

The kernel launches at most one CTA per SM (`num_ctas`, the run-time SM count). Each CTA's
producer warp 0 takes its tiles from a tile counter (forward.py `next_tile`), decodes each one
here with the whole warp and hands the decoded tile to the MMA warpgroups (and, for paged K/V, to
the producer warps that gather beside it) through smem. Nothing is read back and the launch is
CUDA-graph capturable; the producer runs ahead by as many K/V stages as the pipelines hold.

Linear order (heads fastest, then a sequence's slots, then sequences):
- "per sequence": t = head + H_q * (slot + tiles_max * b), tiles_max = ceil(max(max_seqlen_q,
  lse_s_max) / tile_m) slots for every sequence (padded LSE rows need them);
- "packed" (no padded LSE, and fewer slots): sequence b owns the slots
  [cu_seqlens_q[b] // tile_m + b, that of b + 1), which hold its ceil(len_q / tile_m) tiles;
  total_q // tile_m + B slots in all; b is found by a binary search over cu_seqlens_q.
Slot j < tiles_q of a sequence is its (j+1)-th tile from the end, so the costliest causal tiles
come first and the cheap first tiles form the tail (longest-first). Slots past a sequence's tiles
hold nothing (packed) or only padded LSE rows (per sequence).

Long sequences (K/V of all query heads > L2_KV_BYTES) re-deal their (head, slot) tiles in L2
groups of query heads: G heads take all their tiles, G heads per slot, before the next G start
(FlashAttention 3's LPT count, whole GQA groups, a partial last group allowed). Measured on an
H200, 2026-11-30 (d128 causal, non-persistent grid): 2 x 8192 at 64/8 heads 593 -> 615 TFLOP/s;
DeepSeek 1 x 16384 (128/128, d 192/128) 502 -> 663; short batches unchanged.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64

from .seqlen_info import SeqlenInfo

L2_KV_BYTES = 32 << 20  # K/V bytes of the heads grouped to share L2 (H100/H200: 50 MiB of L2)


@cute.jit
def total_tiles(num_heads: Int32, total_q: Int32, batch: Int32, tiles_max: Int32, packed: Int32, tile_m: cutlass.Constexpr[int]) -> Int64:
    """Number of linear tile indices (64-bit: H_q * slots may pass 2**31)."""
    slots = Int64(total_q // tile_m + batch)
    if packed == 0:
        slots = Int64(tiles_max) * Int64(batch)
    return slots * Int64(num_heads)


@cute.jit
def sequence_of_slot_warp(mCuSeqlensQ: cute.Tensor, slot: Int32, tile_m: cutlass.Constexpr[int]) -> Int32:
    """The last b in [0, B - 1] whose first packed slot cu_seqlens_q[b] // tile_m + b is <= slot
    (0 when none is), found by the 32 lanes of a warp together, every lane returning it. Each round
    probes 32 evenly spaced positions of [lo, hi] at once (one load each) and keeps the gap between
    the last that passes and the first that fails: B <= 33 sequences take one round, B <= 1057 two.
    The first slots increase with b, so the passing probes are a prefix of the lanes."""
    lane = Int32(cute.arch.lane_idx())
    lo = Int32(0)
    hi = cute.size(mCuSeqlensQ.shape[0]) - 2
    while lo < hi:
        step = (hi - lo + 31) // 32
        probe = cutlass.min(lo + (lane + 1) * step, hi)
        passes = Int32(mCuSeqlensQ[probe]) // tile_m + probe <= slot
        count = Int32(cute.arch.popc(cute.arch.vote_ballot_sync(passes)))
        new_lo = lo
        if count > 0:
            new_lo = cutlass.min(lo + count * step, hi)
        if count < 32:
            hi = cutlass.min(lo + (count + 1) * step, hi) - 1
        lo = new_lo
    return lo


@cute.jit
def decode_tile(
    t: Int64,
    num_heads: Int32,
    num_heads_kv: Int32,
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
):
    """(head_idx, m_block, batch_idx, has_rows, seqlen) of linear tile index t (see the module);
    has_rows == 0: nothing to compute (at most padded LSE rows past len_q to fill). A whole warp
    calls it with the same t: the 32 lanes find the sequence together (`sequence_of_slot_warp`),
    one load latency per 32x narrowing instead of one per halving."""
    head_x = Int32(t % Int64(num_heads))
    slot_lin = t // Int64(num_heads)
    has_slot = Int32(1)
    batch_idx = Int32(0)
    slot = Int32(0)
    if packed != 0:
        slot = Int32(slot_lin)
        # The last sequence whose first slot is <= slot (0 when there is none).
        lo = sequence_of_slot_warp(mCuSeqlensQ, slot, tile_m)
        batch_idx = lo
        slot = slot - (Int32(mCuSeqlensQ[lo]) // tile_m + lo)  # may be < 0: no tile
        if slot < 0:
            has_slot = Int32(0)
            slot = Int32(0)
    else:
        batch_idx = Int32(slot_lin // Int64(tiles_max))
        slot = Int32(slot_lin - Int64(batch_idx) * Int64(tiles_max))
    seqlen = SeqlenInfo.create(batch_idx, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, mSeqUsedK, use_seqused_q, use_seqused_k)
    tiles_q = (seqlen.len_q + (tile_m - 1)) // tile_m
    head_idx = head_x
    if slot < tiles_q:
        if Int64(seqlen.len_k) * Int64(num_heads * token_bytes) > Int64(L2_KV_BYTES):
            # L2 groups: a bijection of the sequence's tile-holding (head, slot) pairs, in the
            # order heads-fastest ranks them. G = L2_KV_BYTES / (one head's K/V bytes) query
            # heads, rounded down to whole GQA groups (at least one).
            ratio = num_heads // num_heads_kv
            head_bytes = Float32(seqlen.len_k) * Float32(token_bytes)
            group = cutlass.max(Int32(Float32(L2_KV_BYTES) / head_bytes) // ratio, 1) * ratio
            rank = head_x + num_heads * slot
            per_group = group * tiles_q
            g = rank // per_group
            rest = rank - g * per_group
            heads_here = cutlass.min(group, num_heads - g * group)
            slot = rest // heads_here
            head_idx = g * group + rest - slot * heads_here
    # Slot j < tiles_q is the (j+1)-th tile from the end; any other slot is a tile index past
    # len_q (padded LSE rows only), so each tile is visited exactly once.
    m_block = slot
    if slot < tiles_q:
        m_block = tiles_q - 1 - slot
    # Rows to compute: not so for a packed slot before the sequence's first (slot < 0) or past its
    # tiles, nor for a per-sequence slot past len_q (padded LSE rows only).
    has_rows = has_slot
    if m_block * tile_m >= seqlen.len_q:
        has_rows = Int32(0)
    return head_idx, m_block, batch_idx, has_rows, seqlen
