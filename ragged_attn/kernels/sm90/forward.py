"""The sm_90a ragged attention forward kernel: TMA loads, WGMMA, fp32 online softmax.

Structure (FA4's Hopper forward taught the tile; FA3's varlen scheduler the persistent loop):
- Persistent: at most one CTA per SM (`num_ctas`, the run-time SM count); each takes
  (unit, tile, sequence) tiles from a tile counter until none is left (tile_scheduler.py: the
  linear order, longest-first, L2 head groups, and GQA packing: a unit is a K/V head whose query
  heads' 64-row blocks fill the tile's warpgroups one each, or a query head; `next_tile` here: the
  counter, which every launch leaves at 0). Ragged K/V: warp 0 of the producer warpgroup takes
  each ticket, decodes the tile (the whole warp searches cu_seqlens_q) and hands the decoded tile
  (unit, tile, sequence, offsets, lengths; with GQA packing also each warpgroup's item and the
  items' row span, so the MMA warps divide by nothing) to the MMA warpgroups (and, paged, to the
  other three producer warps, which gather K/V beside it) through a 2-slot smem pipeline; warp 1
  prefetches the cu_seqlens lines at the start. Q arrives in one TMA load per tile, or with
  packing one per MMA warpgroup (its item's rows).
- 3 or 4 warpgroups, 384 or 512 threads (2 or 3 MMA warpgroups: tile_m 128 or 192). Warpgroup 0 is the producer: its warp 0 issues TMA loads of Q
  (`q_stages` buffers: 2 where O has its own buffer) and of K and V (two `PipelineTmaAsync`s,
  `num_stages` deep), walking the key blocks from the last one down. The K/V stages run on across
  tiles: the next tile's first K/V blocks and its Q (in the other Q buffer, or once every MMA
  warpgroup released Q after its last S GEMM: `early_q_release`) load while the current tile's
  last block and epilogue run. Each MMA warpgroup owns 64 of the tile_m query
  rows: S = Q K^T (SS WGMMA), mask on boundary blocks, online softmax, O += P V (RS WGMMA, P
  stays in registers), then its own epilogue (its O rows through smem behind its own named
  barrier, then one TMA store when all 64 rows lie below len_q, else 128-bit row- and
  column-predicated stores; LSE per row). The warpgroups take turns
  issuing GEMMs (ping-pong, a ring of named barriers, one turn per key block); a warpgroup skips
  the tile's key blocks none of its own rows sees (causal diagonals, window edges, rows past len_q): it
  releases their K/V stages and passes their turns (mainloop.py, `mainloop_idle`). Tiles per class:
  tile_config.py (tile_m 128 or 192, tile_n 80..192).
- Tile slots: per sequence (tiles_max = ceil(max(max_seqlen_q, lse_s_max) / tile_m) slots each)
  or packed (total_q // tile_m + B slots in all, sequence b from cu_seqlens_q[b] // tile_m + b on,
  found by binary search), whichever has fewer; packed only without a padded LSE. A slot without
  query rows computes nothing and only gets -inf in its padded LSE rows [len_q, lse_s_max).
- GQA: query head h reads key/value head h // (H_q // H_kv), the ratio read from the tensor
  extents at run time; with GQA packing (TileConfig.pack_gqa, classes whose warpgroups store their
  own O) a tile's warpgroups may hold different query heads of one K/V head.
- Every number is run time (lengths, heads, strides, scale, window, alignment, LSE addressing,
  the real head dims); compile-time choices are only those of the `LayoutClass` (dims, dtypes,
  mask family, LSE, KV) and its tile config (tile_config.py).
- Paged KV (class kv="paged"): K/V come from page pools through a page table. The whole producer
  warpgroup gathers K/V rows with cp.async (paged_kv.py) into the same smem tiles, signalling
  `PipelineCpAsync`s instead of the TMA pipelines; with TileConfig.page_tma (the d64 .. d192
  classes: 128, and page_tma_small 16) a key block wholly inside len_k of a pool whose page size is
  a multiple of a box arrives by TMA boxes instead (warp 0's one 128-key box, or 16-key boxes from
  the four producer warps, page_box_warps), on the same stage barriers. Q still arrives by TMA (warp 0) and
  the MMA warpgroups are unchanged but for a proxy fence after each K/V wait. NHD and HND pools are
  one class (strides); the page size is the pool's run-time extent.
- Split-KV (run-time `num_splits` = S; S = 1 is the kernel without splits): each tile of the order
  above is taken S times, split s visiting its share of the tile's key blocks (tile_scheduler.py:
  splits fastest in the linear order; block_info.py `for_split`), and stores its normalised O and
  its LSE into rows s * total_q + ... of a split-major workspace that `mO` / `mLSE` then address
  (seqlen_info.py offset_o; the O TMA descriptor covers S * total_q rows); the launch path merges the
  S partial results (kernels/sm90/split_kv.py). A share without a key a row sees gives that row
  O = 0, LSE = -inf (rule 2), which the merge reads as no contribution.
- Envelopes: the class's d_qk, d_v size the smem tiles; the tensors' head dims may be smaller
  (multiples of 8). TMA descriptors carry the real extents, so Q/K/V columns past them arrive as
  zeros (they add 0 to Q K^T and to the unused O columns), and the O store skips them.

Modules: this one holds the host side (descriptors, the launch's tile counts), the kernel's
prologue (barriers, pipelines, the batch order), the persistent schedule (tickets, decode, the
hand-over to the MMA warpgroups) and the MMA warpgroups' per-tile driver (`mma_tile`); the
warpgroups' work is in mixins: producer.py (Q loads, the ragged K/V TMA loads), paged_producer.py
(the paged classes' K/V), mainloop.py (the MMA warpgroups' key-block loops), with epilogue.py (O and
LSE stores), tile_scheduler.py and block_info.py (the tile and block arithmetic).

Contract rules for this module (tests/gpu/test_kernel_sm90.py checks them):
1. Rows past len_q are never stored; key columns past len_k never reach the softmax.
2. Fully masked rows (len_k = 0, window misses) give O = 0 and LSE = -inf, never NaN.
3. Padded LSE rows in [len_q, lse_s_max) hold -inf after the launch.
4. Output columns past the real d_v are never written.
"""

from __future__ import annotations

import math
from typing import Optional

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_helpers
from cutlass import Float32, Int32, Int64, const_expr
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

from . import trace
from .block_info import UNBOUNDED, BlockInfo
from .epilogue import lse_index, store_tile, turn_threads
from .mainloop import SCHED_BARRIER_BASE, MmaMainloops
from .paged_kv import PRODUCER_THREADS, make_gather_copy, make_page_box_tma, make_page_rows_tma
from .paged_producer import PagedProducer, PipelineCpAsyncWarpRelease
from .producer import TmaProducer
from .seqlen_info import SeqlenInfo
from .softmax import OnlineSoftmax, acc_rows_view, rescale_rows
from .tail_merge import merge_piece
from .tile_config import SMEM_CAPACITY, TileConfig, o_aliases_q, smem_bytes, tile_words
from .tile_scheduler import (
    PACK_MIN_SAVING,
    ROW_BLOCK,
    STREAM_KEY_BIT,
    decode_tile,
    first_slot,
    item_shift,
    slot_slack,
    streaming_rows,
    TAIL_MAX_PIECES,
    TAIL_MAX_TILES,
    tail_tile,
    tail_word_fields,
    tile_item,
    tile_items,
    tile_rows,
    total_tiles,
)  # fmt: skip

LOG2_E = math.log2(math.e)


EPILOGUE_BARRIER_ID = 1  # named barrier over the MMA threads; id 0 is __syncthreads
EPILOGUE_WG_BARRIER_BASE = 5  # ids 5 .. 7: one MMA warpgroup's own epilogue (wg_epilogue)
O_TURN_BARRIER_BASE = 8  # ids 8 .. 10: an MMA warpgroup's turn at the shared O block (o_turns)
ORDER_BARRIER_ID = 11  # the producer warpgroup's steps of the batch order (sort_batch)
REGISTERS_PER_SM = 65536
TILE_STAGES = 2  # decoded tiles the producer warp may hand the MMA warpgroups ahead
# One handed-over tile, Int32 words: go (0: no tile left, else 1 + the tile's split-KV split), unit, tile, batch_idx, offset_q,
# offset_k, len_q, len_k (tile_scheduler.py: a unit is a query head, or a K/V head with GQA packing);
# classes with GQA packing add each MMA warpgroup's item (row block, query head) and the row span of
# the tile's items (tile_config.tile_words): the MMA warps then divide by nothing between tiles.
TILE_WORDS = 8


def make_smem_layout(dtype, rows: int, cols: int, stages: Optional[int] = None, col_first: bool = False):
    """K-major swizzled smem layout for a (rows, cols[, stages]) WGMMA operand tile; col_first
    (TileConfig.page_tma_rows): the swizzle atoms tile columns first, so each 8-row group's bands
    sit side by side (WGMMA's stride between 8-row groups grows to cols / 64 KiB)."""
    kind = sm90_helpers.get_smem_layout_atom(LayoutEnum.ROW_MAJOR, dtype, cols)
    atom = warpgroup.make_smem_layout_atom(kind, dtype)
    order = (1, 0, 2) if col_first else (0, 1, 2)
    if stages is None:
        return cute.tile_to_shape(atom, (rows, cols), order[:2])
    return cute.tile_to_shape(atom, (rows, cols, stages), order)


class RaggedForwardSm90(TmaProducer, PagedProducer, MmaMainloops):
    """One instance per layout class; `__call__` is the `@cute.jit` host entry."""

    producer_regs = 24
    # Paged: all 128 producer threads gather with 64-bit row addresses (FA4's cp.async budget).
    producer_regs_paged = 40

    def __init__(
        self,
        dtype,
        out_dtype,
        d_qk: int,
        d_v: int,
        mask: str,
        has_lse: bool,
        config: TileConfig = TileConfig(),
        paged: bool = False,
        softcap: bool = False,
        sinks: bool = False,
    ):
        """d_qk, d_v: the class's head dims (the smem boxes); the tensors' own head dims are run
        time and may be smaller (an envelope: TMA zero-fills the columns past them, the O store
        skips them)."""
        assert mask in ("none", "causal", "window")
        # One MMA warpgroup per 64 query rows: 2 (tile_m 128) or 3 (tile_m 192).
        self.num_mma_warpgroups = config.tile_m // 64
        alias = o_aliases_q(config, d_qk, d_v)
        self.smem_planned = smem_bytes(config, d_qk, d_v, o_separate=not alias)
        if self.smem_planned > SMEM_CAPACITY or (alias and d_v > d_qk):
            raise ValueError(
                f"RaggedForwardSm90: {config} for d ({d_qk}, {d_v}) needs {self.smem_planned} B of smem "
                f"(at most {SMEM_CAPACITY})"
            )
        self.dtype = dtype
        self.out_dtype = out_dtype
        self.d_qk = d_qk
        self.d_v = d_v
        self.mask = mask
        self.has_lse = has_lse
        # trace.py: timer stamps in the LSE buffer instead of the LSE (a diagnostic build)
        self.trace = config.trace_timeline
        if self.trace and not has_lse:
            raise ValueError("RaggedForwardSm90: TileConfig.trace_timeline needs a class with LSE (its buffer holds the stamps)")
        self.paged = paged
        # Issue 14: scores soft-capped (tanh) before the mask; a per-head sink in the softmax
        # denominator. Such a class is entered through `call_ext` (run-time mSinks, softcap).
        self.softcap = softcap
        self.sinks = sinks
        if paged:
            self.producer_regs = self.producer_regs_paged
            if config.page_tma:
                # The box coordinates need more than 40 (40 spills; 48 too at d32/d64/d96/d192/d256);
                # 56 leaves the MMA warpgroups 224, as 48 would (the launch's pool, below).
                self.producer_regs = 56
        if config.producer_regs:
            self.producer_regs = config.producer_regs
        # What the producer warpgroup leaves, split over the MMA warpgroups (setmaxnreg takes
        # multiples of 8, at most 240): 24 -> 240 with 2 MMA warpgroups, 160 with 3 (FA3's split
        # for 192-row tiles); paged 40 -> 232, 152; paged with page_tma 56 -> 224.
        # The pool is what the launch allocated, not the SM's 65536: one CTA of num_threads gets
        # floor(65536 / num_threads) registers per thread rounded down to 8 (168 at 384 threads),
        # and setmaxnreg.inc waits until the pool holds what it asks for, forever if it never will
        # (session 9: a producer at 48 with MMA warpgroups at 232 asked 1024 registers too many
        # and hung on the H200).
        threads = 128 * (1 + self.num_mma_warpgroups)  # self.num_threads
        pool = REGISTERS_PER_SM // threads // 8 * 8 * threads
        spare = (pool - 128 * self.producer_regs) // (128 * self.num_mma_warpgroups)
        self.mma_regs = min(240, spare // 8 * 8)
        self.tile_m = config.tile_m
        self.tile_n = config.tile_n
        self.num_stages = config.num_stages
        self.pingpong = config.pingpong
        self.overlap = config.overlap
        self.o_aliases_q = alias
        self.turn_first_gemm = config.turn_first_gemm and config.pingpong
        self.wg_epilogue = config.wg_epilogue and not alias  # O in Q's buffer: every warpgroup's GEMMs first
        self.tma_o_store = config.tma_o_store and self.wg_epilogue
        # Warpgroups skip the key blocks their own rows do not see: with the overlapped mainloop,
        # when its ping-pong turns are one per block (turn_first_gemm) or there are none.
        self.wg_skip = config.wg_skip and self.overlap and (self.turn_first_gemm or not self.pingpong)
        # Q released after each warpgroup's last S GEMM (the overlapped, skipping mainloop), not
        # after the tile's mainloop; O in Q's buffer keeps Q until the epilogue has read O back.
        self.early_q_release = config.early_q_release and self.wg_skip and not alias
        # GQA packing (tile_scheduler.py): each warpgroup's item may be another query head's rows,
        # so each warpgroup stores its own O and LSE (wg_epilogue) and masks with its own rows.
        self.pack_gqa = config.pack_gqa and self.wg_epilogue and self.wg_skip
        # Row packing (tile_scheduler.py; run-time per launch, `row_mult`): each warpgroup stores
        # its own rows (wg_epilogue) and masks with its own rows' tokens (wg_skip).
        self.pack_rows = config.pack_rows and self.wg_epilogue and self.wg_skip and not sinks
        self.q_stages = config.q_stages
        # O staged 64 rows at a time, the warpgroups taking the buffer in turns (tile_config.py).
        self.o_turns = config.o_turns and self.wg_epilogue
        self.o_rows = 64 if self.o_turns else self.tile_m  # sO's rows
        self.o_turn_every_thread = config.o_turn_every_thread  # epilogue.pass_o_turn: every thread passes
        self.l2_kv_head_groups = config.l2_kv_head_groups
        self.l2_group_max = config.l2_group_max
        self.l2_group_always = config.l2_group_always
        self.q_first = config.q_first  # load_tile and load_paged_tile
        self.l2_hints = config.l2_hints  # L2 eviction priorities of the TMA loads (producer.py)
        self.page_tma = config.page_tma if paged else 0  # load_paged_tile: whole blocks by TMA boxes of this many keys
        self.page_tma_small = config.page_tma_small if paged else 0  # the second box, for the other page sizes
        self.page_box_warps = config.page_box_warps  # producer warps issuing a block's boxes
        self.page_prefetch = config.page_prefetch and paged  # boxes prefetched into L2 before the stage acquire
        self.page_box_crossing = config.page_box_crossing and paged  # the crossing block's whole runs by boxes too
        self.page_crossing_k_box = config.page_crossing_k_box and paged  # the crossing block's K by its page_tma box
        self.paged_warp_release = config.paged_warp_release and paged  # K/V stages released once per MMA warp
        # One instruction per box over the rows view: head dims of whole 64-column bands only (d96
        # classes keep d / 64 instructions per box; a variant run over every class stays valid).
        self.page_tma_rows = config.page_tma_rows and paged and d_qk % 64 == 0 and d_v % 64 == 0
        self.paged_consumer_fence = config.paged_consumer_fence  # mainloop.kv_wait: fence cp.async-written stages
        # mainloop.kv_wait: fence only the stages the gather wrote (TileConfig.paged_fence_gathered_only)
        self.fence_gathered_only = (
            config.paged_fence_gathered_only and paged and config.paged_consumer_fence and config.page_tma != 0
        )
        self.ticket_early = 0 if paged else config.ticket_early  # load_tile takes the next ticket (ragged)
        self.q_ahead = config.q_ahead and not paged  # load_tile issues the next tile's Q there too
        self.batch_order = config.batch_order  # sort_batch: 2 .. batch_order sequences dealt longest first
        # sort_batch ranks streaming rows first, walk_tiles deals their tiles among the others'
        self.stream_mix = bool(config.stream_mix and config.batch_order)
        self.tile_words = tile_words(config)  # > TILE_WORDS: the items travel with the tile
        # The launch's last tiles in pieces, merged by their last piece (tail_merge.py); entered
        # through `call_tail`.
        self.tail_split = config.tail_split
        if self.tail_split and (
            paged or sinks or softcap or self.pack_gqa or self.pack_rows or not self.wg_epilogue or self.stream_mix
        ):  # fmt: skip
            raise ValueError(
                f"RaggedForwardSm90: {config}: tail_split needs a ragged class without sinks (each piece would count the "
                "sink) or softcap (its entry is call_ext), one row block per warpgroup, wg_epilogue and no stream_mix"
            )
        if alias and self.q_stages != 1:
            raise ValueError(f"RaggedForwardSm90: {config}: O in Q's buffer needs q_stages == 1")
        if self.wg_skip and self.pingpong and self.num_stages < 2:
            # An idle warpgroup waits for block i's V before passing turn i; with one stage that V
            # waits for its successor's release of block i - 1, which waits for that turn (found by
            # a turn/stage model, 2026-12-02). No shipped config has one stage.
            raise ValueError(f"RaggedForwardSm90: {config}: wg_skip with ping-pong needs num_stages >= 2")
        self.has_right = mask in ("causal", "window")
        self.has_left = mask == "window"
        self.num_mma_threads = 128 * self.num_mma_warpgroups
        self.num_threads = 128 + self.num_mma_threads

    # ------------------------------------------------------------------ host side
    @cute.jit
    def __call__(
        self,
        mQ: cute.Tensor,  # (total_q, H_q, d_qk)
        mK: cute.Tensor,  # ragged (total_k, H_kv, d_qk); paged (num_pages, page_size, H_kv, d_qk)
        mV: cute.Tensor,  # ragged (total_k, H_kv, d_v); paged (num_pages, page_size, H_kv, d_v)
        mO: cute.Tensor,  # (total_q, H_q, d_v)
        mLSE: Optional[cute.Tensor],  # (span,) fp32, addressed through the lse_s_* strides
        mCuSeqlensQ: cute.Tensor,  # (B + 1,) int32
        mCuSeqlensK: cute.Tensor,  # (B + 1,) int32 (paged: key lengths unless seqused_k; else a dummy)
        mSeqUsedQ: cute.Tensor,  # (B,) int32 or a dummy
        mSeqUsedK: cute.Tensor,  # (B,) int32 or a dummy
        use_seqused_q: Int32,
        use_seqused_k: Int32,
        batch: Int32,
        max_seqlen_q: Int32,
        lse_s_max: Int32,  # padded LSE rows per sequence (0 unless the LSE layout is padded)
        softmax_scale: Float32,
        window_left: Int32,  # < 0: unbounded (window family only)
        window_right: Int32,  # < 0: unbounded (window family only)
        bottom_right: Int32,  # != 0: off = len_k - len_q, else 0
        lse_s_b: Int64,
        lse_s_tok: Int64,
        lse_s_row: Int64,
        lse_s_h: Int64,
        lse_scale: Float32,  # ln 2 for natural-log LSE, 1.0 for log2
        num_ctas: Int32,  # persistent CTAs at most: the GPU's SM count
        mTileCounter: cute.Tensor,  # (1,) int32 tile counter: 0 before the launch, left 0 after it
        mPageTable: Optional[cute.Tensor],  # paged: (B, max_pages) int32; ragged: None
        num_splits: Int32,  # split-KV splits (>= 1): mO / mLSE address num_splits * total_q rows
        pack_rows: Int32,  # != 0: pack rows where the class can (TileConfig.pack_rows, H_q > H_kv, no padded LSE)
        batch_order: Int32,  # != 0: deal the batch longest first where the class can (TileConfig.batch_order)
        stream: cuda.CUstream,
    ):
        """num_splits > 1: mO is split 0's (total_q, H_q, d_v) view of a (num_splits, total_q, H_q,
        d_v) buffer whose other splits follow it (its rows s * total_q + r are split s's row r), and
        the LSE strides address token rows of a (num_splits, total_q, H_q) buffer the same way
        (lse_s_max 0); the caller merges the splits (kernels/sm90/split_kv.py)."""
        self.host(
            mQ, mK, mV, mO, mLSE, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, mSeqUsedK, use_seqused_q, use_seqused_k,
            batch, max_seqlen_q, lse_s_max, softmax_scale, window_left, window_right, bottom_right,
            lse_s_b, lse_s_tok, lse_s_row, lse_s_h, lse_scale, num_ctas, mTileCounter, mPageTable, num_splits, pack_rows,
            batch_order, stream, None, None,
        )  # fmt: skip

    @cute.jit
    def call_ext(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mO: cute.Tensor,
        mLSE: Optional[cute.Tensor],
        mCuSeqlensQ: cute.Tensor,
        mCuSeqlensK: cute.Tensor,
        mSeqUsedQ: cute.Tensor,
        mSeqUsedK: cute.Tensor,
        use_seqused_q: Int32,
        use_seqused_k: Int32,
        batch: Int32,
        max_seqlen_q: Int32,
        lse_s_max: Int32,
        softmax_scale: Float32,
        window_left: Int32,
        window_right: Int32,
        bottom_right: Int32,
        lse_s_b: Int64,
        lse_s_tok: Int64,
        lse_s_row: Int64,
        lse_s_h: Int64,
        lse_scale: Float32,
        num_ctas: Int32,
        mTileCounter: cute.Tensor,
        mPageTable: Optional[cute.Tensor],
        num_splits: Int32,
        pack_rows: Int32,
        batch_order: Int32,
        mSinks: Optional[cute.Tensor],  # sinks class: (H_q,) fp32 sink logits (natural log); else None
        softcap: Float32,  # softcap class: the cap (> 0); else ignored
        stream: cuda.CUstream,
    ):
        """The host entry of a class with softcap or sinks (issue 14): `__call__`'s arguments and
        then mSinks and softcap, before the stream. The other classes keep `__call__`, whose
        signature (and so compiled object) does not change. A sinks class runs with num_splits 1
        (each split would count the sink; the launch path never splits it)."""
        self.host(
            mQ, mK, mV, mO, mLSE, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, mSeqUsedK, use_seqused_q, use_seqused_k,
            batch, max_seqlen_q, lse_s_max, softmax_scale, window_left, window_right, bottom_right,
            lse_s_b, lse_s_tok, lse_s_row, lse_s_h, lse_scale, num_ctas, mTileCounter, mPageTable, num_splits, pack_rows,
            batch_order, stream, mSinks, softcap,
        )  # fmt: skip

    @cute.jit
    def call_tail(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mO: cute.Tensor,
        mLSE: Optional[cute.Tensor],
        mCuSeqlensQ: cute.Tensor,
        mCuSeqlensK: cute.Tensor,
        mSeqUsedQ: cute.Tensor,
        mSeqUsedK: cute.Tensor,
        use_seqused_q: Int32,
        use_seqused_k: Int32,
        batch: Int32,
        max_seqlen_q: Int32,
        lse_s_max: Int32,
        softmax_scale: Float32,
        window_left: Int32,
        window_right: Int32,
        bottom_right: Int32,
        lse_s_b: Int64,
        lse_s_tok: Int64,
        lse_s_row: Int64,
        lse_s_h: Int64,
        lse_scale: Float32,
        num_ctas: Int32,
        mTileCounter: cute.Tensor,
        mPageTable: Optional[cute.Tensor],
        num_splits: Int32,
        pack_rows: Int32,
        batch_order: Int32,
        tail_tiles: Int32,  # the launch's last tiles taken in pieces (0: none; at most its tiles and 2**22)
        tail_pieces: Int32,  # pieces per tail tile, 2 .. 16 (tile_scheduler.TAIL_MAX_PIECES)
        mTailWork: cute.Tensor,  # (n,) fp32: tail_tiles x MMA warpgroups x tail_pieces slots (tail_merge.slot_floats)
        mTailCount: cute.Tensor,  # (tail_tiles x MMA warpgroups,) int32, 0 before the launch, left 0 after it
        stream: cuda.CUstream,
    ):
        """The host entry of a class with TileConfig.tail_split: `__call__`'s arguments and then the
        tail split's four, before the stream (tile_scheduler.py "Tail split", tail_merge.py). The
        pieces run where the launch does not split K/V and its LSE is not padded (else tail_tiles
        counts as 0)."""
        self.host(
            mQ, mK, mV, mO, mLSE, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, mSeqUsedK, use_seqused_q, use_seqused_k,
            batch, max_seqlen_q, lse_s_max, softmax_scale, window_left, window_right, bottom_right,
            lse_s_b, lse_s_tok, lse_s_row, lse_s_h, lse_scale, num_ctas, mTileCounter, mPageTable, num_splits, pack_rows,
            batch_order, stream, None, None, (tail_tiles, tail_pieces, mTailWork, mTailCount),
        )  # fmt: skip

    @cute.jit
    def host(
        self, mQ, mK, mV, mO, mLSE, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, mSeqUsedK, use_seqused_q, use_seqused_k,
        batch, max_seqlen_q, lse_s_max, softmax_scale, window_left, window_right, bottom_right,
        lse_s_b, lse_s_tok, lse_s_row, lse_s_h, lse_scale, num_ctas, mTileCounter, mPageTable, num_splits, pack_rows,
        batch_order, stream, mSinks, softcap, tail=None,
    ):  # fmt: skip
        """The host side of the entries (`__call__`: mSinks and softcap None; `call_tail`: tail =
        (tail_tiles, tail_pieces, mTailWork, mTailCount))."""
        if const_expr(self.tail_split != (tail is not None)):
            raise ValueError("RaggedForwardSm90: a class with TileConfig.tail_split is entered through call_tail, only it")
        # Sequence first, head last, as TMA wants: (total, d, h).
        mQt = cute.make_tensor(mQ.iterator, cute.select(mQ.layout, mode=[0, 2, 1]))

        sQ_layout = make_smem_layout(self.dtype, self.tile_m, self.d_qk, self.q_stages)
        sK_layout = make_smem_layout(self.dtype, self.tile_n, self.d_qk, self.num_stages, self.page_tma_rows)
        sV_layout = make_smem_layout(self.dtype, self.tile_n, self.d_v, self.num_stages, self.page_tma_rows)
        sO_layout = make_smem_layout(self.out_dtype, self.o_rows, self.d_v)

        tiled_mma_qk = sm90_helpers.make_trivial_tiled_mma(
            self.dtype,
            self.dtype,
            cute.nvgpu.OperandMajorMode.K,
            cute.nvgpu.OperandMajorMode.K,
            Float32,
            atom_layout_mnk=(self.tile_m // 64, 1, 1),
            tiler_mn=(64, self.tile_n),
        )
        tiled_mma_pv = sm90_helpers.make_trivial_tiled_mma(
            self.dtype,
            self.dtype,
            cute.nvgpu.OperandMajorMode.K,
            cute.nvgpu.OperandMajorMode.MN,
            Float32,
            atom_layout_mnk=(self.tile_m // 64, 1, 1),
            tiler_mn=(64, self.d_v),
            a_source=warpgroup.OperandSource.RMEM,
        )

        load_op = cpasync.CopyBulkTensorTileG2SOp()
        tma_atom_Kb, tma_Kb, tma_atom_Vb, tma_Vb = None, None, None, None  # paged with page_tma
        tma_atom_Kb2, tma_Kb2, tma_atom_Vb2, tma_Vb2 = None, None, None, None  # and with page_tma_small
        tma_atom_Q, tma_Q = cpasync.make_tiled_tma_atom(
            load_op, mQt, cute.select(sQ_layout, mode=[0, 1]), (self.tile_m, self.d_qk)
        )
        tma_atom_Qw, tma_Qw = None, None
        if const_expr(self.pack_gqa):
            # Packed tiles: one warpgroup's 64 rows per load (its item: a row block of one query
            # head), into its slice of the tile's buffer (same swizzle).
            sQ_wg_layout = cute.composition(
                cute.select(sQ_layout, mode=[0, 1]), cute.make_layout((ROW_BLOCK, self.d_qk), stride=(1, self.tile_m))
            )
            tma_atom_Qw, tma_Qw = cpasync.make_tiled_tma_atom(load_op, mQt, sQ_wg_layout, (ROW_BLOCK, self.d_qk))
        if const_expr(self.paged):
            # The pools themselves go to the kernel; one cp.async tiled copy serves K and V.
            tma_K, tma_V = mK, mV
            tma_atom_K = make_gather_copy(self.dtype, self.d_qk, self.d_v, self.tile_n)
            tma_atom_V = tma_atom_K
            box_tma = make_page_rows_tma if const_expr(self.page_tma_rows) else make_page_box_tma
            if const_expr(self.page_tma):
                tma_atom_Kb, tma_Kb = box_tma(mK, sK_layout, self.tile_n, self.d_qk, self.page_tma)
                tma_atom_Vb, tma_Vb = box_tma(mV, sV_layout, self.tile_n, self.d_v, self.page_tma)
            if const_expr(self.page_tma_small):
                tma_atom_Kb2, tma_Kb2 = box_tma(mK, sK_layout, self.tile_n, self.d_qk, self.page_tma_small)
                tma_atom_Vb2, tma_Vb2 = box_tma(mV, sV_layout, self.tile_n, self.d_v, self.page_tma_small)
        else:
            mKt = cute.make_tensor(mK.iterator, cute.select(mK.layout, mode=[0, 2, 1]))
            mVt = cute.make_tensor(mV.iterator, cute.select(mV.layout, mode=[0, 2, 1]))
            tma_atom_K, tma_K = cpasync.make_tiled_tma_atom(
                load_op, mKt, cute.select(sK_layout, mode=[0, 1]), (self.tile_n, self.d_qk)
            )
            tma_atom_V, tma_V = cpasync.make_tiled_tma_atom(
                load_op, mVt, cute.select(sV_layout, mode=[0, 1]), (self.tile_n, self.d_v)
            )
        self.bytes_q = cute.size_in_bytes(self.dtype, cute.select(sQ_layout, mode=[0, 1]))
        self.bytes_k = cute.size_in_bytes(self.dtype, cute.select(sK_layout, mode=[0, 1]))
        self.bytes_v = cute.size_in_bytes(self.dtype, cute.select(sV_layout, mode=[0, 1]))

        # O: smem -> registers -> 128-bit global stores; `threads_per_row` threads cover up to 64
        # columns (one 128-byte swizzle row of 16-bit elements) and divide the row's chunks.
        elems = 128 // self.out_dtype.width
        chunks = self.d_v // elems
        threads_per_row = next(t for t in (8, 4, 2, 1) if chunks % t == 0)
        store_threads = 128 if self.wg_epilogue else self.num_mma_threads
        o_thr_layout = cute.make_ordered_layout((store_threads // threads_per_row, threads_per_row), order=(1, 0))
        gmem_tiled_copy_O = cute.make_tiled_copy_tv(
            cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.out_dtype, num_bits_per_copy=128),
            o_thr_layout,
            cute.make_layout((1, elems)),
        )

        tma_atom_O, tma_O = None, None
        if const_expr(self.tma_o_store):
            # One warpgroup's 64 rows of sO (a slice of the tile's layout, same swizzle) per store.
            # (num_splits * total_q, d_v, H_q): split s's rows follow split s - 1's (split-KV workspace).
            mOt = cute.make_tensor(
                mO.iterator,
                cute.make_layout(
                    (mO.shape[0] * num_splits, mO.shape[2], mO.shape[1]), stride=(mO.stride[0], mO.stride[2], mO.stride[1])
                ),
            )
            sO_wg_layout = cute.composition(sO_layout, cute.make_layout((64, self.d_v), stride=(1, self.o_rows)))
            tma_atom_O, tma_O = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileS2GOp(), mOt, sO_wg_layout, (64, self.d_v)
            )

        SharedStorage = self.storage_struct(sQ_layout, sK_layout, sV_layout, sO_layout)
        assert SharedStorage.size_in_bytes() == self.smem_planned, "tile_config.smem_bytes is out of date"

        # Tile slots per unit (a query head, or a K/V head with GQA packing), per sequence
        # (tiles_max each, padded LSE rows need them) or packed by cu_seqlens_q, whichever is
        # fewer; packed only without a padded LSE (tile_scheduler.py). GQA packing is a run-time
        # choice: taken where it saves at least PACK_MIN_SAVING of the tiles. One persistent CTA
        # per SM walks them.
        num_heads = cute.size(mQ.shape[1])
        num_heads_kv = cute.size(mK.shape[2]) if const_expr(self.paged) else cute.size(mK.shape[1])
        total_q = cute.size(mQ.shape[0])
        pack_r = Int32(1)
        tiles_max, packed, num_tiles = self.tile_counts(
            pack_r, num_heads, total_q, batch, max_seqlen_q, lse_s_max, num_splits
        )  # fmt: skip
        if const_expr(self.pack_gqa):
            ratio = num_heads // num_heads_kv
            tiles_max_p, packed_p, num_tiles_p = self.tile_counts(
                ratio, num_heads, total_q, batch, max_seqlen_q, lse_s_max, num_splits
            )  # fmt: skip
            if num_tiles_p * Int64(PACK_MIN_SAVING[1]) <= num_tiles * Int64(PACK_MIN_SAVING[1] - PACK_MIN_SAVING[0]):
                pack_r = ratio
                tiles_max, packed, num_tiles = tiles_max_p, packed_p, num_tiles_p
        row_mult = Int32(1)
        if const_expr(self.pack_rows):
            # Row packing where the launch asks for it (launch.py chooses) and it means something.
            ratio_r = num_heads // num_heads_kv
            rows_max = Int64(cutlass.max(total_q, max_seqlen_q))
            if pack_rows != 0 and ratio_r > 1 and lse_s_max == 0 and Int64(ratio_r) * rows_max < Int64(2**31 - 1):
                row_mult = ratio_r
                pack_r = Int32(1)  # rows, not blocks, of the group's query heads
                tiles_max, packed, num_tiles = self.tile_counts(
                    1, num_heads, total_q, batch, max_seqlen_q, lse_s_max, num_splits, row_mult
                )  # fmt: skip
        tail_start, tail_pieces = None, None
        if const_expr(tail is not None):
            # The last `taken` tiles in tail_pieces pieces each (tile_scheduler.py "Tail split").
            tail_tiles, tail_pieces, mTailWork, mTailCount = tail
            # (at most 2**22 tail tiles: a piece's handed-over word keeps its index in 23 bits)
            taken = cutlass.min(cutlass.min(Int64(cutlass.max(tail_tiles, 0)), num_tiles), Int64(TAIL_MAX_TILES))
            if num_splits != 1 or lse_s_max != 0 or tail_pieces < 2 or tail_pieces > TAIL_MAX_PIECES:
                taken = Int64(0)
            tail_start = num_tiles - taken
            num_tiles = num_tiles + taken * Int64(tail_pieces - 1)
            if taken == Int64(0):
                tail_pieces = Int32(1)  # the kernel's `tail_launch` test: no pieces
        grid_x = Int32(cutlass.min(num_tiles, Int64(cutlass.max(num_ctas, 1))))
        scale_log2 = softmax_scale * Float32(LOG2_E)
        softcap_mult = None
        if const_expr(self.softcap):
            # y = tanh(S * softmax_scale / softcap); the softmax then works on softcap * y.
            softcap_mult = softmax_scale / softcap
            scale_log2 = softcap * Float32(LOG2_E)
        kernel_args = (
            tma_Q,
            tma_K,
            tma_V,
            mO,
            mLSE,
            mCuSeqlensQ,
            mCuSeqlensK,
            mSeqUsedQ,
            mSeqUsedK,
            mPageTable,
            mTileCounter,
            tma_atom_Q,
            tma_atom_K,
            tma_atom_V,
            tma_atom_O,
            tma_O,
            tma_atom_Qw,
            tma_Qw,
            tma_atom_Kb,
            tma_Kb,
            tma_atom_Vb,
            tma_Vb,
            tma_atom_Kb2,
            tma_Kb2,
            tma_atom_Vb2,
            tma_Vb2,
            packed,
            tiles_max,
            num_tiles,
            pack_r,
            row_mult,
            mQ if const_expr(self.pack_rows) else None,
            num_splits,
            batch_order,
            num_heads // num_heads_kv,
            use_seqused_q,
            use_seqused_k,
            lse_s_max,
            scale_log2,
            window_left,
            window_right,
            bottom_right,
            lse_s_b,
            lse_s_tok,
            lse_s_row,
            lse_s_h,
            lse_scale,
            sQ_layout,
            sK_layout,
            sV_layout,
            sO_layout,
            tiled_mma_qk,
            tiled_mma_pv,
            gmem_tiled_copy_O,
            SharedStorage,
        )
        if const_expr(self.softcap or self.sinks):
            launched = self.kernel(*kernel_args, mSinks, softcap_mult)
        elif const_expr(tail is not None):
            launched = self.kernel(*kernel_args, None, None, tail_start, tail_pieces, mTailWork, mTailCount)
        else:
            launched = self.kernel(*kernel_args)
        launched.launch(
            grid=[grid_x, 1, 1],
            block=[self.num_threads, 1, 1],
            stream=stream,
            min_blocks_per_mp=1,
        )

    @cute.jit
    def tile_counts(
        self, pack_r: Int32, num_heads: Int32, total_q: Int32, batch: Int32, max_seqlen_q: Int32, lse_s_max: Int32,
        num_splits: Int32, row_mult=None,
    ):  # fmt: skip
        """(tiles_max, packed, num_tiles) of the linear tile order with pack_r query heads per unit
        and num_splits split-KV splits per tile (tile_scheduler.py; its launch_schedule_ref is the
        Python twin). row_mult: row packing's g (units are K/V heads; pack_r 1, no padded LSE)."""
        num_wg = self.num_mma_warpgroups
        q_rows = cutlass.max(max_seqlen_q, lse_s_max)
        if const_expr(row_mult is None):
            row_blocks = q_rows // ROW_BLOCK + Int32(q_rows % ROW_BLOCK != 0)  # ceil without overflow near 2**31
            tiles_max = Int32((Int64(pack_r) * Int64(row_blocks) + Int64(num_wg - 1)) // Int64(num_wg))
            slots = Int64(pack_r) * Int64(total_q) // Int64(self.tile_m) + Int64(batch) * Int64(slot_slack(pack_r, num_wg))
            fewer = Int32(slots < Int64(tiles_max) * Int64(batch))
            packed = Int32(lse_s_max == 0) * fewer
            num_tiles = total_tiles(num_heads // pack_r, total_q, batch, tiles_max, packed, pack_r, self.tile_m, num_splits)
        else:
            tiles_max = Int32((Int64(row_mult) * Int64(q_rows) + Int64(self.tile_m - 1)) // Int64(self.tile_m))
            slots = Int64(row_mult) * Int64(total_q) // Int64(self.tile_m) + Int64(batch)
            packed = Int32(slots < Int64(tiles_max) * Int64(batch))
            num_tiles = total_tiles(
                num_heads // row_mult, total_q, batch, tiles_max, packed, Int32(1), self.tile_m, num_splits, row_mult
            )  # fmt: skip
        return tiles_max, packed, num_tiles

    def storage_struct(self, sQ_layout, sK_layout, sV_layout, sO_layout):
        """The shared-memory struct (plain Python at trace time): barriers, Q, K and V stages, and
        O's staging buffer unless it aliases Q's (see tile_config.o_aliases_q)."""
        def buf(dtype, layout):
            return cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(layout)], 1024]

        fields = {
            "mbar_tile": cute.struct.MemRange[cutlass.Int64, 2 * TILE_STAGES],
            "tile_words": cute.struct.MemRange[Int32, self.tile_words * TILE_STAGES],
            "mbar_q": cute.struct.MemRange[cutlass.Int64, 2 * self.q_stages],
            "mbar_k": cute.struct.MemRange[cutlass.Int64, 2 * self.num_stages],
            "mbar_v": cute.struct.MemRange[cutlass.Int64, 2 * self.num_stages],
        }
        if self.tail_split:  # merge_piece: whether each MMA warpgroup finished its row block's last piece
            fields["tail_last"] = cute.struct.MemRange[Int32, self.num_mma_warpgroups]
        fields |= {
            "sQ": buf(self.dtype, sQ_layout),
            "sK": buf(self.dtype, sK_layout),
            "sV": buf(self.dtype, sV_layout),
        }
        if not self.o_aliases_q:
            fields["sO"] = buf(self.out_dtype, sO_layout)
        if self.batch_order:  # sort_batch's sorted q-row prefix and order
            if self.stream_mix:  # the streaming tiles' linear bound (sort_batch, mixed_tile)
                fields["order_mix"] = cute.struct.MemRange[Int64, 1]
            fields["order_prefix"] = cute.struct.MemRange[Int32, self.batch_order + 1]
            fields["order"] = cute.struct.MemRange[cutlass.Int16, self.batch_order]
        return cute.struct(type("SharedStorage", (), {"__annotations__": fields}))

    # ------------------------------------------------------------------ device side
    @cute.kernel
    def kernel(
        self,
        tma_Q: cute.Tensor,  # TMA coordinates over (total_q, d_qk, H_q)
        tma_K: cute.Tensor,  # TMA coordinates over (total_k, d_qk, H_kv); paged: the K pool
        tma_V: cute.Tensor,  # TMA coordinates over (total_k, d_v, H_kv); paged: the V pool
        mO: cute.Tensor,  # (total_q, H_q, d_v)
        mLSE: Optional[cute.Tensor],
        mCuSeqlensQ: cute.Tensor,
        mCuSeqlensK: cute.Tensor,
        mSeqUsedQ: cute.Tensor,
        mSeqUsedK: cute.Tensor,
        mPageTable: Optional[cute.Tensor],
        mTileCounter: cute.Tensor,  # (1,) int32, 0 at launch and again after it
        tma_atom_Q: cute.CopyAtom,
        tma_atom_K: cute.CopyAtom,  # paged: the cp.async gather copy (also tma_atom_V)
        tma_atom_V: cute.CopyAtom,
        tma_atom_O: Optional[cute.CopyAtom],  # tma_o_store: one warpgroup's 64 O rows per store
        tma_O: Optional[cute.Tensor],  # tma_o_store: TMA coordinates over (total_q, d_v, H_q)
        tma_atom_Qw: Optional[cute.CopyAtom],  # pack_gqa: TMA of one warpgroup's 64 Q rows
        tma_Qw: Optional[cute.Tensor],  # pack_gqa: TMA coordinates over (total_q, d_qk, H_q)
        tma_atom_Kb: Optional[cute.CopyAtom],  # paged with page_tma: TMA of one 16-key box of K
        tma_Kb: Optional[cute.Tensor],  # paged with page_tma: box coordinates (page_size, d_qk, H_kv, num_pages)
        tma_atom_Vb: Optional[cute.CopyAtom],
        tma_Vb: Optional[cute.Tensor],
        tma_atom_Kb2: Optional[cute.CopyAtom],  # paged with page_tma_small: the smaller boxes
        tma_Kb2: Optional[cute.Tensor],
        tma_atom_Vb2: Optional[cute.CopyAtom],
        tma_Vb2: Optional[cute.Tensor],
        packed: Int32,  # 1: tile slots packed by sequence, 0: tiles_max per sequence (tile_scheduler.py)
        tiles_max: Int32,
        num_tiles: Int64,  # linear tile indices in all
        pack_r: Int32,  # query heads per unit: H_q / H_kv with GQA packing, else 1 (tile_scheduler.py)
        row_mult: Int32,  # packed rows per token: H_q / H_kv with row packing, else 1 (tile_scheduler.py)
        mQ: Optional[cute.Tensor],  # pack_rows classes: (total_q, H_q, d_qk) for the Q row gather; else None
        num_splits: Int32,  # split-KV splits per tile (1: none; tile_scheduler.py, block_info.py)
        batch_order: Int32,  # != 0: the launch asks for the batch order (sort_batch; TileConfig.batch_order)
        ratio: Int32,  # H_q / H_kv, divided on the host: a kernel parameter the producer warp reads
        # from the constant bank (computed in the kernel, its 24 registers rematerialized the
        # division in every tile, beside kv_head's own)
        use_seqused_q: Int32,
        use_seqused_k: Int32,
        lse_s_max: Int32,
        scale_log2: Float32,
        window_left: Int32,
        window_right: Int32,
        bottom_right: Int32,
        lse_s_b: Int64,
        lse_s_tok: Int64,
        lse_s_row: Int64,
        lse_s_h: Int64,
        lse_scale: Float32,
        sQ_layout: cute.ComposedLayout,
        sK_layout: cute.ComposedLayout,
        sV_layout: cute.ComposedLayout,
        sO_layout: cute.ComposedLayout,
        tiled_mma_qk: cute.TiledMma,
        tiled_mma_pv: cute.TiledMma,
        gmem_tiled_copy_O: cute.TiledCopy,
        SharedStorage: cutlass.Constexpr,
        mSinks: Optional[cute.Tensor] = None,  # sinks class: (H_q,) fp32 sink logits; else None
        softcap_mult: Optional[Float32] = None,  # softcap class: softmax_scale / softcap; else None
        tail_start: Optional[Int64] = None,  # tail_split: the first linear index of the pieces
        tail_pieces: Optional[Int32] = None,  # tail_split: pieces per tail tile
        mTailWork: Optional[cute.Tensor] = None,  # tail_split: the pieces' fp32 workspace (tail_merge.py)
        mTailCount: Optional[cute.Tensor] = None,  # tail_split: each tail row block's arrived pieces
    ):
        """The device side of every class. A class without softcap or sinks launches it without the
        last two arguments (left at None: its compiled objects stay as before issue 14)."""
        if const_expr(self.trace):
            if cute.arch.thread_idx()[0] == 0:
                trace.stamp(mLSE, trace.EV_ENTRY)
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            cpasync.prefetch_descriptor(tma_atom_Q)
            if const_expr(self.pack_gqa):
                cpasync.prefetch_descriptor(tma_atom_Qw)
            if const_expr(not self.paged):
                cpasync.prefetch_descriptor(tma_atom_K)
                cpasync.prefetch_descriptor(tma_atom_V)
            if const_expr(self.page_tma):
                cpasync.prefetch_descriptor(tma_atom_Kb)
                cpasync.prefetch_descriptor(tma_atom_Vb)
            if const_expr(self.page_tma_small):
                cpasync.prefetch_descriptor(tma_atom_Kb2)
                cpasync.prefetch_descriptor(tma_atom_Vb2)
        if const_expr(self.tma_o_store):
            if warp_idx % 4 == 0 and warp_idx >= 4:  # the warp of each MMA warpgroup that stores O
                cpasync.prefetch_descriptor(tma_atom_O)
        if warp_idx == 1:
            # The first tile's decode (warp 0) searches cu_seqlens_q, then reads cu_seqlens_k and
            # seqused: bring their lines towards this SM now, so the second dependent read
            # does not go to DRAM (a launch's first tiles wait on it).
            self.prefetch_lines(mCuSeqlensQ)
            self.prefetch_lines(mCuSeqlensK)
            if use_seqused_q != 0:
                self.prefetch_lines(mSeqUsedQ)
            if use_seqused_k != 0:
                self.prefetch_lines(mSeqUsedK)

        smem = cutlass.memory.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        one_warp = pipeline.CooperativeGroup(pipeline.Agent.Thread, 1)
        # PipelineTmaAsync.consumer_release arrives once per consumer warp.
        mma_warps = pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_mma_threads // 32)
        # Decoded tiles, producer warp 0 -> MMA warpgroups (and, paged, producer warps 1-3).
        tile_readers = self.num_mma_threads + (PRODUCER_THREADS - 32 if const_expr(self.paged) else 0)
        pipe_tile = pipeline.PipelineAsync.create(
            barrier_storage=storage.mbar_tile.data_ptr(),
            num_stages=TILE_STAGES,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, tile_readers),
            defer_sync=True,
        )
        sTile = storage.tile_words.get_tensor(cute.make_layout((self.tile_words, TILE_STAGES)))
        pipe_q = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar_q.data_ptr(),
            num_stages=self.q_stages,
            # One arrival (row packing's gather too: load_q_rows_or_tile).
            producer_group=one_warp,
            consumer_group=mma_warps,
            tx_count=self.bytes_q,
            defer_sync=True,
        )
        if const_expr(self.paged):
            # cp.async producers: every producer thread arrives (cp.async.mbarrier.arrive.noinc);
            # PipelineCpAsync.consumer_release arrives from every consumer thread.
            producer_threads = pipeline.CooperativeGroup(pipeline.Agent.Thread, PRODUCER_THREADS)
            mma_threads = pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_mma_threads)
            kv_pipeline = pipeline.PipelineCpAsync
            if const_expr(self.paged_warp_release):  # one arrive per MMA warp (TileConfig.paged_warp_release)
                mma_threads = mma_warps
                kv_pipeline = PipelineCpAsyncWarpRelease
            pipe_k = kv_pipeline.create(
                barrier_storage=storage.mbar_k.data_ptr(),
                num_stages=self.num_stages,
                producer_group=producer_threads,
                consumer_group=mma_threads,
                defer_sync=True,
            )
            pipe_v = kv_pipeline.create(
                barrier_storage=storage.mbar_v.data_ptr(),
                num_stages=self.num_stages,
                producer_group=producer_threads,
                consumer_group=mma_threads,
                defer_sync=True,
            )
        else:
            pipe_k = pipeline.PipelineTmaAsync.create(
                barrier_storage=storage.mbar_k.data_ptr(),
                num_stages=self.num_stages,
                producer_group=one_warp,
                consumer_group=mma_warps,
                tx_count=self.bytes_k,
                defer_sync=True,
            )
            pipe_v = pipeline.PipelineTmaAsync.create(
                barrier_storage=storage.mbar_v.data_ptr(),
                num_stages=self.num_stages,
                producer_group=one_warp,
                consumer_group=mma_warps,
                tx_count=self.bytes_v,
                defer_sync=True,
            )
        pipeline.pipeline_init_arrive()

        sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
        sK = storage.sK.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)
        sV = storage.sV.get_tensor(sV_layout.outer, swizzle=sV_layout.inner)
        if const_expr(self.o_aliases_q):  # written only after every MMA warpgroup is done with sQ
            sO = storage.sQ.get_tensor(sO_layout.outer, swizzle=sO_layout.inner, dtype=self.out_dtype)
        else:
            sO = storage.sO.get_tensor(sO_layout.outer, swizzle=sO_layout.inner)
        # V^T view (d_v, tile_n, stages) for the B operand of O += P V.
        sVt = cute.composition(
            sV, cute.make_ordered_layout((self.d_v, self.tile_n, self.num_stages), order=(1, 0, 2))
        )
        if const_expr(not self.pack_gqa):
            pack_r = 1  # a trace-time constant: the unpacked classes' item arithmetic folds away
        if const_expr(not self.pack_rows):
            row_mult = 1  # likewise for row packing
        sched = (
            num_tiles, cute.size(tma_Q.shape[2]) // pack_r // row_mult if const_expr(self.pack_rows) else cute.size(tma_Q.shape[2]) // pack_r,
            pack_r, ratio, tiles_max, packed,
            mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, mSeqUsedK, use_seqused_q, use_seqused_k, row_mult,
        )  # fmt: skip
        # Split-KV: (num_splits, total_q), read by the tile decode, the block ranges and the stores.
        splits = (num_splits, cute.size(tma_Q.shape[0]))
        if const_expr(self.tail_split):  # the walks' copy without split-KV reads the tail split from here
            sLast = storage.tail_last.get_tensor(cute.make_layout((self.num_mma_warpgroups,)))
            splits = splits + ((tail_start, tail_pieces, mTailWork, mTailCount, sLast),)
        handoff = (pipe_tile, sTile, mTileCounter, pack_r, splits, row_mult)
        q_tma = (tma_Q, tma_Qw, tma_atom_Qw, mQ)  # the producer's Q loads (load_q)
        lse_args = (mLSE, lse_s_max, lse_s_b, lse_s_tok, lse_s_row, lse_s_h)
        mask_numbers = (window_left, window_right, bottom_right)
        pipeline.pipeline_init_wait()
        if const_expr(self.trace):
            if cute.arch.thread_idx()[0] == 0:
                trace.stamp(mLSE, trace.EV_INIT)

        if warp_idx < 4:
            if const_expr(self.batch_order):
                # Before the register split: the MMA warpgroups wait for their first tile anyway.
                order = self.sort_batch(
                    storage, mCuSeqlensQ, mCuSeqlensK, mSeqUsedK, use_seqused_k, warp_idx, batch_order, sched, num_splits
                )  # fmt: skip
                sched_p = sched + (order,)
            else:
                sched_p = sched
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if const_expr(self.paged):
                self.load_paged(
                    q_tma, tma_K, tma_V, mPageTable, sQ, sK, sV, tma_atom_Q, tma_atom_K,
                    pipe_q, pipe_k, pipe_v, sched_p, mask_numbers, handoff, lse_args, warp_idx,
                    (tma_atom_Kb, tma_Kb, tma_atom_Vb, tma_Vb, tma_atom_Kb2, tma_Kb2, tma_atom_Vb2, tma_Vb2),
                )  # fmt: skip
            else:
                if warp_idx == 0:
                    self.load(
                        q_tma, tma_K, tma_V, sQ, sK, sV, tma_atom_Q, tma_atom_K, tma_atom_V,
                        pipe_q, pipe_k, pipe_v, sched_p, mask_numbers, handoff, lse_args,
                    )  # fmt: skip
        else:
            cute.arch.setmaxregister_increase(self.mma_regs)
            kv_boxed = None  # every paged stage wait fences
            if const_expr(self.fence_gathered_only):
                kv_boxed = Int32(self.box_kind(tma_K, tma_V) != 0)  # whole blocks come by TMA boxes
            self.mma(
                tiled_mma_qk, tiled_mma_pv, gmem_tiled_copy_O, (tma_atom_O, tma_O), sQ, sK, sVt, sO, mO, mLSE,
                pipe_q, pipe_k, pipe_v, mask_numbers, handoff,
                scale_log2, lse_s_max, lse_s_b, lse_s_tok, lse_s_row, lse_s_h, lse_scale, mSinks, softcap_mult,
                kv_boxed,
            )  # fmt: skip

    # ------------------------------------------------------------------ the persistent schedule
    @cute.jit
    def sort_batch(
        self, storage, mCuSeqlensQ, mCuSeqlensK, mSeqUsedK, use_seqused_k, warp_idx, wanted: Int32, sched=None,
        num_splits=1,
    ):  # fmt: skip
        """TileConfig.batch_order: the producer warpgroup (all 128 threads; warp 0 decodes the
        tiles after it) writes the batch's sequences in the order the linear tile order deals them,
        longest first by key length (ties in the caller's order: FA3's LPT order of varlen batches,
        made here in each CTA's prologue instead of a prepare kernel), and their q-row prefix in that
        order. Returns (sorted, sPrefix, sOrder) for `decode_tile`: sorted 1 where the launch asks
        for it (`wanted` != 0: split_kv.choose_batch_order, host integers) and 2 <= B <=
        batch_order, then sOrder[v] = the caller's index of position v and sPrefix[v] =
        cu_seqlens_q[0] + the q-row spans (cu_seqlens_q gaps) of positions before v; else 0 and
        the caller's order. Ranks by counting (each thread compares its sequences' keys with all B,
        one smem broadcast per key), the prefix by warp 0 (a chunk per lane, a shuffle scan).
        TileConfig.stream_mix: the key ranks streaming sequences (`streaming_rows`) before the
        others, and warp 0 writes the linear bound of their tiles to sMix[0] (`mix_bound`), which
        `mixed_tile` reads; the order tuple then carries sMix as its fourth entry."""
        sPrefix = storage.order_prefix.get_tensor(cute.make_layout((self.batch_order + 1,)))
        sOrder = storage.order.get_tensor(cute.make_layout((self.batch_order,)))
        tidx = Int32(cute.arch.thread_idx()[0])
        batch = cute.size(mCuSeqlensQ.shape[0]) - 1
        per = (self.batch_order + PRODUCER_THREADS - 1) // PRODUCER_THREADS  # sequences per thread
        sorted_flag = Int32(0)
        if wanted != 0 and batch > 1 and batch <= self.batch_order:
            sorted_flag = Int32(1)
            # Key lengths into sPrefix (SeqlenInfo's precedence: seqused_k, else the cu_seqlens_k gap).
            for i in cutlass.range_constexpr(per):
                b = tidx + i * PRODUCER_THREADS
                if b < batch:
                    len_k = Int32(mCuSeqlensK[b + 1]) - Int32(mCuSeqlensK[b])
                    if use_seqused_k != 0:
                        len_k = Int32(mSeqUsedK[b])
                    if const_expr(self.stream_mix):
                        # Streaming sequences first: bit 30 over the key length (clamped below it).
                        span_q = Int32(mCuSeqlensQ[b + 1]) - Int32(mCuSeqlensQ[b])
                        len_k = cutlass.min(len_k, Int32(STREAM_KEY_BIT - 1))
                        if span_q <= streaming_rows(sched[12]):
                            len_k = len_k + Int32(STREAM_KEY_BIT)
                    sPrefix[b] = len_k
            cute.arch.barrier(barrier_id=ORDER_BARRIER_ID, number_of_threads=PRODUCER_THREADS)
            rKey = cute.make_rmem_tensor(per, Int32)
            rRank = cute.make_rmem_tensor(per, Int32)
            for i in cutlass.range_constexpr(per):
                rKey[i] = Int32(-1)
                rRank[i] = Int32(0)
                if tidx + i * PRODUCER_THREADS < batch:
                    rKey[i] = sPrefix[tidx + i * PRODUCER_THREADS]
            for j in cutlass.range(batch, unroll=4):
                key_j = sPrefix[j]
                for i in cutlass.range_constexpr(per):
                    tie_before = Int32(key_j == rKey[i]) * Int32(j < tidx + i * PRODUCER_THREADS)
                    rRank[i] = rRank[i] + Int32(key_j > rKey[i]) + tie_before
            cute.arch.barrier(barrier_id=ORDER_BARRIER_ID, number_of_threads=PRODUCER_THREADS)
            for i in cutlass.range_constexpr(per):
                b = tidx + i * PRODUCER_THREADS
                if b < batch:
                    sOrder[rRank[i]] = cutlass.Int16(b)
                    sPrefix[rRank[i] + 1] = Int32(mCuSeqlensQ[b + 1]) - Int32(mCuSeqlensQ[b])
            if tidx == 0:
                sPrefix[0] = Int32(mCuSeqlensQ[0])
            cute.arch.barrier(barrier_id=ORDER_BARRIER_ID, number_of_threads=PRODUCER_THREADS)
            if warp_idx == 0:  # inclusive prefix of sPrefix[0 .. B]
                n = batch + 1
                chunk = (n + 31) // 32
                lo = tidx * chunk
                hi = cutlass.min(lo + chunk, n)
                total = Int32(0)
                for i in cutlass.range(lo, hi):
                    total = total + sPrefix[i]
                incl = total
                for k in cutlass.range_constexpr(5):
                    up = cute.arch.shuffle_sync_up(incl, 1 << k)
                    if tidx >= (1 << k):
                        incl = incl + up
                run = incl - total
                for i in cutlass.range(lo, hi):
                    run = run + sPrefix[i]
                    sPrefix[i] = run
                cute.arch.sync_warp()
                if const_expr(self.stream_mix):
                    self.mix_bound(storage, sPrefix, batch, sched, num_splits)
        if const_expr(self.stream_mix):
            return sorted_flag, sPrefix, sOrder, storage.order_mix.get_tensor(cute.make_layout((1,)))
        return sorted_flag, sPrefix, sOrder

    @cute.jit
    def mix_bound(self, storage, sPrefix: cute.Tensor, batch: Int32, sched, num_splits: Int32):
        """TileConfig.stream_mix, producer warp 0 after sort_batch's scan: the streaming sequences
        (ranked first) hold the linear indices [0, A) of the sorted order; sMix[0] = A (0 where none
        or all stream: then `mixed_tile` keeps the order). The 32 lanes count the streaming
        positions (their q-row spans, the sorted prefix's gaps) and sum them by shuffles."""
        num_tiles, num_units, pack_r, _, tiles_max, packed = sched[:6]
        row_mult = sched[12]
        lane = cute.arch.lane_idx()
        limit = streaming_rows(row_mult)
        count = Int32(0)
        for i in cutlass.range(lane, batch, 32):
            count = count + Int32(sPrefix[i + 1] - sPrefix[i] <= limit)
        for k in cutlass.range_constexpr(5):
            count = count + cute.arch.shuffle_sync_bfly(count, offset=1 << k)
        slots = Int64(count) * Int64(tiles_max)
        if packed != 0:
            slots = first_slot(Int32(sPrefix[count]), count, pack_r, self.tile_m, row_mult)
        bound = slots * Int64(num_units) * Int64(num_splits)
        if count == 0 or count == batch or num_tiles > Int64(2**31 - 1):
            bound = Int64(0)
        if lane == 0:
            sMix = storage.order_mix.get_tensor(cute.make_layout((1,)))
            sMix[0] = bound
        cute.arch.sync_warp()

    @cute.jit
    def mixed_tile(self, t: Int64, num_tiles: Int64, order) -> Int64:
        """TileConfig.stream_mix: the sorted order's tile that dealing position t takes. With A =
        sMix[0] streaming tiles of N = num_tiles (0 < A < N), position t takes streaming tile
        floor(t A / N) where floor((t + 1) A / N) passes it (A of the N positions, evenly spread),
        else the others' tile A + t - floor(t A / N): a bijection of [0, N) that keeps each kind's
        own order (tile_scheduler.mixed_tile_ref)."""
        sorted_flag, _, _, sMix = order
        t_mixed = t
        if sorted_flag != 0:
            a = sMix[0]
            if a != Int64(0):
                before = t * a // num_tiles
                if (t + Int64(1)) * a // num_tiles > before:
                    t_mixed = before
                else:
                    t_mixed = a + t - before
        return t_mixed

    @cute.jit
    def prefetch_lines(self, mArr: cute.Tensor):
        """One warp: prefetch the 128-byte lines of a small int32 array (the first 4096
        elements) into L1, one line per lane and pass."""
        lane = cute.arch.lane_idx()
        n = cute.size(mArr.shape[0])
        for k in cutlass.range_constexpr(4):
            i = (lane + 32 * k) * 32
            if i < n:
                cute.arch.prefetch((mArr.iterator + i).llvm_ptr, cache_level="L1")

    @cute.jit
    def tile_at(self, t: Int64, sched, mask_numbers, splits):
        """Decode linear tile index t (tile_scheduler.py) into (unit, tile, batch_idx, has_rows,
        seqlen, block_info, items, split); a whole warp decodes t together. items: `items_of`'s
        words, computed once here for the hand-over, the block range and the Q loads. seqlen and
        block_info are split `split`'s (its output rows, its share of the key blocks)."""
        _, num_units, pack_r, ratio, tiles_max, packed, cu_q, cu_k, used_q, used_k, flag_q, flag_k, row_mult = sched[:13]
        order = sched[13] if const_expr(len(sched) > 13) else None  # sort_batch's, with TileConfig.batch_order
        num_splits, total_q = splits[:2]
        # The tail split (TileConfig.tail_split) in the walks' copy without split-KV only.
        tail = splits[2] if const_expr(len(splits) > 2 and isinstance(num_splits, int)) else None
        if const_expr(tail is not None):
            t, tail_word, piece, pieces = tail_tile(t, tail[0], tail[1])
        unit, tile, batch_idx, has_rows, seqlen, split = decode_tile(
            t, num_units, pack_r, ratio, tiles_max, packed, cu_q, cu_k, used_q, used_k, flag_q, flag_k,
            self.tile_m, (self.d_qk + self.d_v) * (self.dtype.width // 8), self.l2_kv_head_groups, num_splits,
            row_mult, order, self.l2_group_max, self.l2_group_always,
        )  # fmt: skip
        if const_expr(not isinstance(num_splits, int)):  # the constant 1: no split
            seqlen = seqlen.for_split(split, total_q)
        items = self.items_of(unit, tile, pack_r, seqlen, packed)
        rows = None
        if const_expr(len(items) > 0):
            rows = (items[-2], items[-1])
        block_info = self.block_info_of(tile, pack_r, seqlen, mask_numbers, rows, split, num_splits, row_mult)
        if const_expr(tail is not None):
            # A piece's share of the key blocks (a whole tile: pieces 1); its word travels as `go`.
            block_info = block_info.for_split(piece, pieces, split_flag=False)
            split = tail_word
        return unit, tile, batch_idx, has_rows, seqlen, block_info, items, split

    @cute.jit
    def block_info_of(
        self, tile: Int32, pack_r: Int32, seqlen: SeqlenInfo, mask_numbers, rows, split: Int32, num_splits: Int32,
        row_mult=1,
    ) -> BlockInfo:  # fmt: skip
        """The key-block arithmetic of a sequence's tile `tile` (block_info.py) over the rows its
        warpgroups' items span (tile_scheduler.tile_rows, or `rows` = (row_lo, row_hi) as handed
        over; None: tile_rows), visiting split `split`'s share of the key blocks (`for_split`:
        computed here, once per tile)."""
        window_left, window_right, bottom_right = mask_numbers
        off = Int32(0)
        if const_expr(self.has_right):
            if bottom_right != 0:
                off = seqlen.len_k - seqlen.len_q
        left = Int32(UNBOUNDED)
        right = Int32(0)
        if const_expr(self.mask == "window"):
            if window_left >= 0:
                left = window_left
            right = Int32(UNBOUNDED)
            if window_right >= 0:
                right = window_right
        if const_expr(rows is None):
            row_lo, row_hi = tile_rows(tile, pack_r, self.num_mma_warpgroups)
        else:
            row_lo, row_hi = rows
        if const_expr(self.pack_rows):
            if row_mult != 1:  # packed rows -> the tokens of the tile's first and last rows
                row_lo = row_lo // row_mult
                row_hi = (row_hi - 1) // row_mult + 1
        block_info = BlockInfo(
            self.tile_n, self.has_left, self.has_right, row_lo, row_hi, seqlen.len_q, seqlen.len_k, off, left, right,
        )  # fmt: skip
        return block_info.for_split(split, num_splits)

    def unsplit_unpacked(self, sched, handoff, loads):
        """(sched, handoff, loads) of a launch without split-KV and without row packing, their
        num_splits and row_mult the trace-time constant 1 (the walks' fast copy, `producer_walk`)."""
        sched_1 = None if sched is None else sched[:12] + (1,) + sched[13:]
        handoff_1 = handoff[:4] + ((1,) + tuple(handoff[4][1:]), 1)
        loads_1 = tuple(sched_1 if sched is not None and x is sched else x for x in loads)
        return sched_1, handoff_1, loads_1

    @cute.jit
    def producer_walk(self, sched, mask_numbers, handoff, lse_args, load_one, loads, q_state, kv_state):
        """`walk_tiles` twice behind one run-time test of the launch: without split-KV and row
        packing (num_splits == 1, row_mult == 1) the copy traced with both the constant 1, whose
        per-tile code is the kernel's without either (no split arithmetic, main's Q barrier
        protocol, block ranges and stores); else the general copy."""
        sched_1, handoff_1, loads_1 = self.unsplit_unpacked(sched, handoff, loads)
        if self.general_launch(handoff) == 0:
            if const_expr(self.tail_split):
                # A third copy (`tail_launch`): a launch without pieces runs the class's code without
                # the tail split, instruction for instruction.
                if self.tail_launch(handoff) != 0:
                    self.walk_tiles(sched_1, mask_numbers, handoff_1, lse_args, load_one, loads_1, q_state, kv_state)
                else:
                    handoff_0 = self.without_tail(handoff_1)
                    self.walk_tiles(sched_1, mask_numbers, handoff_0, lse_args, load_one, loads_1, q_state, kv_state)
            else:
                self.walk_tiles(sched_1, mask_numbers, handoff_1, lse_args, load_one, loads_1, q_state, kv_state)
        else:
            self.walk_tiles(sched, mask_numbers, handoff, lse_args, load_one, loads, q_state, kv_state)

    @cute.jit
    def tail_launch(self, handoff) -> Int32:
        """TileConfig.tail_split: non-zero where the launch takes pieces (its tail_pieces, which the
        host sets to 1 where it takes none)."""
        return Int32(handoff[4][2][1] != 1)

    def without_tail(self, handoff):
        """The handoff without the tail split's entry: the walks then trace the class's code without it."""
        return handoff[:4] + (tuple(handoff[4][:2]),) + handoff[5:]

    @cute.jit
    def general_launch(self, handoff) -> Int32:
        """Non-zero where the launch splits K/V or packs rows (the walks' general copy)."""
        general = Int32(handoff[4][0] != 1)
        if const_expr(self.pack_rows):
            general = general + Int32(handoff[5] != 1)
        return general

    @cute.jit
    def walk_tiles(self, sched, mask_numbers, handoff, lse_args, load_one, loads, q_state, kv_state):
        """Producer warp 0's walk over this CTA's tiles, ragged and paged alike: decode each
        ticket's tile (the whole warp), hand a tile with query rows over (`hand_over`) and load it
        with `load_one(loads, seqlen, block_info, tile, unit, batch_idx, q_state, kv_state, items)
        -> (q_state, kv_state)` (`load_tile` or `load_paged_tile`), or write a row-less tile's
        padded LSE -inf; then the next ticket (`next_tile`). Past the last, a tile with go = 0
        tells the readers to stop."""
        pipe_tile, sTile, mTileCounter, pack_r, splits = handoff[:5]
        tile_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, TILE_STAGES)
        num_tiles = sched[0]
        lane = cute.arch.lane_idx()
        t = Int64(cute.arch.block_idx()[0])
        if const_expr(self.ticket_early):
            ticket = Int32(0)  # the next tile's ticket, taken by load_one
        # q_ahead in the walk's copy without split-KV and row packing only (their constant 1s): in
        # the general copy the next tile's decode spilled the producer's 24 registers (d128 causal).
        q_ahead = self.q_ahead and isinstance(splits[0], int) and isinstance(sched[12], int)
        if const_expr(q_ahead):
            q_issued = Int32(0)  # the tile t's Q was issued by its predecessor's loads
        while t < num_tiles:
            t_dealt = t
            if const_expr(self.stream_mix):
                t_dealt = self.mixed_tile(t, num_tiles, sched[13])
            unit, tile, batch_idx, has_rows, seqlen, block_info, items, split = self.tile_at(
                t_dealt, sched, mask_numbers, splits
            )  # fmt: skip
            if has_rows != 0:
                if const_expr(self.trace):
                    if lane == 0:
                        trace.stamp_tile(lse_args[0], trace.EV_DECODED, q_state.count)
                go = split + 1  # non-zero: a tile; the readers recover its split
                tile_state = self.hand_over(pipe_tile, sTile, tile_state, go, unit, tile, batch_idx, seqlen, items)
                extra = {}  # TileConfig.ticket_early / q_ahead: load_one also returns the ticket / q_issued
                if const_expr(self.ticket_early):
                    extra["ticket_args"] = (num_tiles, mTileCounter)
                if const_expr(q_ahead):
                    extra["ahead"] = (sched, mask_numbers, splits, q_issued)
                loaded = load_one(loads, seqlen, block_info, tile, unit, batch_idx, q_state, kv_state, items, **extra)
                q_state, kv_state = loaded[:2]
                if const_expr(self.ticket_early):
                    ticket = loaded[2]
                if const_expr(q_ahead):
                    q_issued = loaded[3]
                if const_expr(self.trace):
                    if lane == 0:
                        trace.stamp_tile(lse_args[0], trace.EV_LOADS_ISSUED, q_state.count - 1)
            else:
                self.fill_padded_lse(lse_args, seqlen, batch_idx, unit, tile, pack_r, lane, 32)
                if const_expr(self.ticket_early):
                    ticket = self.take_ticket(num_tiles, mTileCounter)
                if const_expr(q_ahead):
                    q_issued = Int32(0)  # a tile without rows issues nothing ahead
            # The ticket after this tile's loads: taken earlier (at the tile's decode), it cost 4 x
            # 512 d128 6% (a CTA claims its next tile before it has room for it; H200, session 5).
            # TileConfig.ticket_early: taken inside the tile's last loads (load_tile).
            if const_expr(self.ticket_early):
                t = self.next_tile(t, ticket, num_tiles, mTileCounter)
            else:
                t = self.next_tile(t, self.take_ticket(num_tiles, mTileCounter), num_tiles, mTileCounter)
            if const_expr(self.trace):
                if lane == 0:
                    trace.stamp_tile(lse_args[0], trace.EV_NEXT_KNOWN, cutlass.max(q_state.count - 1, 0))
        none = SeqlenInfo(Int32(0), Int32(0), Int32(0), Int32(0))
        tile_state = self.hand_over(
            pipe_tile, sTile, tile_state, Int32(0), Int32(0), Int32(0), Int32(0), none, self.items_of(Int32(0), Int32(0), pack_r)
        )  # fmt: skip
        if const_expr(self.trace):
            if lane == 0:
                trace.stamp(lse_args[0], trace.EV_PRODUCER_EXIT)

    @cute.jit
    def reader_walk(self, handoff, mask_numbers, run_one, run_args, q_state, kv_state, wg_idx=None, sched=None):
        """`read_tiles` twice behind the test of `producer_walk`: the copy without split-KV and
        row packing (trace-time constants) and the general one. sched: the schedule tuple
        run_args holds (the paged producer warps' loads), else None."""
        _, handoff_1, run_args_1 = self.unsplit_unpacked(sched, handoff, run_args)
        if self.general_launch(handoff) == 0:
            if const_expr(self.tail_split):  # three copies, as producer_walk's
                if self.tail_launch(handoff) != 0:
                    self.read_tiles(handoff_1, mask_numbers, run_one, run_args_1, q_state, kv_state, wg_idx)
                else:
                    handoff_0 = self.without_tail(handoff_1)
                    self.read_tiles(handoff_0, mask_numbers, run_one, run_args_1, q_state, kv_state, wg_idx)
            else:
                self.read_tiles(handoff_1, mask_numbers, run_one, run_args_1, q_state, kv_state, wg_idx)
        else:
            self.read_tiles(handoff, mask_numbers, run_one, run_args, q_state, kv_state, wg_idx)

    @cute.jit
    def read_tiles(self, handoff, mask_numbers, run_one, run_args, q_state, kv_state, wg_idx=None):
        """The walk of everyone who reads the handed-over tiles (the MMA warpgroups; paged, also
        producer warps 1-3): `run_one(run_args, seqlen, block_info, tile, unit, batch_idx,
        q_state, kv_state, item) -> (q_state, kv_state)` (`mma_tile` or `load_paged_tile`) per
        tile, until one with go = 0. item: MMA warpgroup wg_idx's (row_block, head_idx) as handed
        over (classes with GQA packing), else None."""
        pipe_tile, sTile, _, pack_r, splits, row_mult = handoff
        num_splits, total_q = splits[:2]
        # The tail split (the MMA warpgroups of the copy without split-KV): go - 1 is the tile's word.
        tail = None
        if const_expr(len(splits) > 2 and isinstance(num_splits, int) and wg_idx is not None):
            tail = splits[2]
        tile_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, TILE_STAGES)
        go, unit, tile, batch_idx, seqlen, item, rows, tile_state = self.take_over(pipe_tile, sTile, tile_state, wg_idx)
        if const_expr(tail is not None):
            # A CTA's tickets rise, so its whole tiles (go 1) all come before its tail pieces (go - 1
            # the piece's word): two loops (in one loop behind a per-tile test, ptxas gave the
            # interior loop 20 more instructions; with two, 7: a launch without pieces takes the
            # copy traced without them, `tail_launch`).
            while go == 1:
                block_info = self.block_info_of(tile, pack_r, seqlen, mask_numbers, rows, 0, 1)
                q_state, kv_state = run_one(run_args, seqlen, block_info, tile, unit, batch_idx, q_state, kv_state, item)
                go, unit, tile, batch_idx, seqlen, item, rows, tile_state = self.take_over(pipe_tile, sTile, tile_state, wg_idx)
            while go != 0:
                tail_idx, piece, pieces = tail_word_fields(go - 1)
                block_info = self.block_info_of(tile, pack_r, seqlen, mask_numbers, rows, piece, pieces)
                q_state, kv_state = run_one(
                    run_args, seqlen, block_info, tile, unit, batch_idx, q_state, kv_state, item,
                    tail=(tail_idx, piece, pieces) + tuple(tail[2:]),
                )  # fmt: skip
                go, unit, tile, batch_idx, seqlen, item, rows, tile_state = self.take_over(pipe_tile, sTile, tile_state, wg_idx)
        while go != 0:
            split = 0
            split_seqlen = seqlen
            if const_expr(not isinstance(num_splits, int)):  # else the constant 1: no split
                split = go - 1  # the tile's split-KV split (0 without split-KV)
                split_seqlen = seqlen.for_split(split, total_q)  # its output rows
            if const_expr(self.pack_rows and wg_idx is not None):
                # The MMA warpgroups of a class with row packing trace the tile twice behind one
                # run-time test (mma_tile): the unpacked copy, block range included, is the code of
                # the class without row packing.
                if row_mult != 1:
                    block_info = self.block_info_of(tile, pack_r, split_seqlen, mask_numbers, rows, split, num_splits, row_mult)
                    q_state, kv_state = run_one(
                        run_args, split_seqlen, block_info, tile, unit, batch_idx, q_state, kv_state, item, row_mult
                    )  # fmt: skip
                else:
                    block_info = self.block_info_of(tile, pack_r, split_seqlen, mask_numbers, rows, split, num_splits)
                    q_state, kv_state = run_one(run_args, split_seqlen, block_info, tile, unit, batch_idx, q_state, kv_state, item)
            else:
                block_info = self.block_info_of(tile, pack_r, split_seqlen, mask_numbers, rows, split, num_splits, row_mult)
                q_state, kv_state = run_one(run_args, split_seqlen, block_info, tile, unit, batch_idx, q_state, kv_state, item)
            go, unit, tile, batch_idx, seqlen, item, rows, tile_state = self.take_over(pipe_tile, sTile, tile_state, wg_idx)

    @cute.jit
    def take_ticket(self, num_tiles: Int64, mTileCounter: cute.Tensor) -> Int32:
        """Lane 0 of the producer warp takes a ticket f from the tile counter (every lane returns
        a value; only lane 0's is the ticket, read by `next_tile`). None above 2**31 - 1 tiles."""
        f = Int32(0)
        if num_tiles <= Int64(2**31 - 1):
            if cute.arch.lane_idx() == 0:
                f = Int32(cute.arch.atomic_add(mTileCounter.iterator, Int32(1), sem="relaxed", scope="gpu"))
        return f

    @cute.jit
    def next_tile(self, t: Int64, ticket: Int32, num_tiles: Int64, mTileCounter: cute.Tensor) -> Int64:
        """The producer warp's next tile index. Dynamic: the ticket f lane 0 took
        (`take_ticket`) gives tile f + gridDim.x (the first gridDim.x tiles are the CTAs' own).
        Every tile taken costs one ticket, so a launch takes exactly num_tiles tickets, 0 ..
        num_tiles - 1; whoever takes the last one puts the counter back to 0 for the next launch
        on the stream. Above 2**31 - 1 tiles (tickets are int32) the static stride t + gridDim.x."""
        grid = Int64(cute.arch.grid_dim()[0])
        nt = t + grid
        if num_tiles <= Int64(2**31 - 1):
            f = ticket
            if cute.arch.lane_idx() == 0:
                if Int64(f) == num_tiles - 1:
                    mTileCounter[0] = Int32(0)
            f = cute.arch.shuffle_sync(f, 0)
            nt = Int64(f) + grid
        return nt

    @cute.jit
    def items_of(self, unit: Int32, tile: Int32, pack_r: Int32, seqlen=None, packed=None):
        """The words a packing class hands over beside the tile: each MMA warpgroup's item
        (row_block, head_idx), then the row span (row_lo, row_hi) of them all
        (tile_scheduler.tile_items: tile_item's values with one division, shifted by item_shift
        where the launch packs, so a sequence's partial tile is its first); () for the other
        classes. seqlen and packed: the tile's sequence and the launch's order (None: no shift)."""
        words = ()
        if const_expr(self.tile_words > TILE_WORDS):
            if const_expr(seqlen is None):
                words = tile_items(unit, tile, pack_r, self.num_mma_warpgroups)
            else:
                shift = item_shift(pack_r, packed, seqlen.len_q, self.num_mma_warpgroups)
                past_end = (seqlen.len_q + (ROW_BLOCK - 1)) // ROW_BLOCK
                words = tile_items(unit, tile, pack_r, self.num_mma_warpgroups, shift, past_end)
        return words

    @cute.jit
    def hand_over(
        self, pipe_tile, sTile: cute.Tensor, tile_state, go: Int32, unit: Int32, tile: Int32,
        batch_idx: Int32, seqlen: SeqlenInfo, items,
    ):  # fmt: skip
        """Producer warp -> MMA warpgroups: one decoded tile (`tile_words` words: TILE_WORDS, then
        `items_of`'s) through the tile pipeline's slots, so the MMA warpgroups never read
        cu_seqlens (a search's dependent global loads between two of their tiles) nor divide by
        the GQA ratio."""
        pipe_tile.producer_acquire(tile_state)
        if cute.arch.lane_idx() == 0:
            i = tile_state.index
            words = (go, unit, tile, batch_idx, seqlen.offset_q, seqlen.offset_k, seqlen.len_q, seqlen.len_k) + items
            for w in cutlass.range_constexpr(self.tile_words):
                sTile[w, i] = words[w]
        pipe_tile.producer_commit(tile_state)
        tile_state.advance()
        return tile_state

    @cute.jit
    def take_over(self, pipe_tile, sTile: cute.Tensor, tile_state, wg_idx=None):
        """Readers: the next decoded tile, (go, unit, tile, batch_idx, seqlen, item, rows,
        tile_state); item = MMA warpgroup wg_idx's (row_block, head_idx) and rows = (row_lo,
        row_hi) where the class hands them over (else None; rows also for the paged producer
        warps 1-3 of a pack_gqa class)."""
        pipe_tile.consumer_wait(tile_state)
        i = tile_state.index
        go, unit, tile, batch_idx = sTile[0, i], sTile[1, i], sTile[2, i], sTile[3, i]
        seqlen = SeqlenInfo(sTile[4, i], sTile[5, i], sTile[6, i], sTile[7, i])
        item, rows = None, None
        # The paged producer warps 1-3 (wg_idx None) of a GQA-packed class take the rows too: a
        # packed tile's items may start before its unshifted first item (tile_scheduler.item_shift),
        # so tile_rows alone would give them another block range than warp 0 loads.
        if const_expr(self.tile_words > TILE_WORDS and (wg_idx is not None or self.pack_gqa)):
            if const_expr(wg_idx is not None):
                item = (sTile[TILE_WORDS + 2 * wg_idx, i], sTile[TILE_WORDS + 1 + 2 * wg_idx, i])
            rows = (sTile[self.tile_words - 2, i], sTile[self.tile_words - 1, i])
        pipe_tile.consumer_release(tile_state)
        tile_state.advance()
        return go, unit, tile, batch_idx, seqlen, item, rows, tile_state

    @cute.jit
    def fill_padded_lse(
        self, lse_args, seqlen, batch_idx, unit, tile, pack_r, first: Int32, step: cutlass.Constexpr[int]
    ):  # fmt: skip
        """-inf into the padded LSE rows of a tile past len_q: of each warpgroup's item (a row
        block of one query head), rows first, first + step, ... that are < lse_s_max (none when
        lse_s_max is 0)."""
        if const_expr(self.has_lse and not self.trace):
            mLSE, lse_s_max, lse_s_b, lse_s_tok, lse_s_row, lse_s_h = lse_args
            for w in cutlass.range_constexpr(self.num_mma_warpgroups):
                row_block, head_idx = tile_item(unit, tile, w, pack_r, self.num_mma_warpgroups)
                for r in cutlass.range_constexpr((ROW_BLOCK + step - 1) // step):
                    row_in_block = first + r * step
                    row = row_block * ROW_BLOCK + row_in_block
                    if row_in_block < ROW_BLOCK:
                        if row < lse_s_max:
                            idx = lse_index(seqlen, batch_idx, head_idx, row, lse_s_b, lse_s_tok, lse_s_row, lse_s_h)
                            mLSE[idx] = -Float32.inf

    # ------------------------------------------------------------------ MMA warpgroups
    @cute.jit
    def mma(
        self,
        tiled_mma_qk: cute.TiledMma,
        tiled_mma_pv: cute.TiledMma,
        gmem_tiled_copy_O: cute.TiledCopy,
        o_tma,  # (tma_atom_O, tma_O), both None without tma_o_store
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sVt: cute.Tensor,
        sO: cute.Tensor,
        mO: cute.Tensor,
        mLSE: Optional[cute.Tensor],
        pipe_q: pipeline.PipelineTmaAsync,
        pipe_k: pipeline.PipelineTmaAsync,
        pipe_v: pipeline.PipelineTmaAsync,
        mask_numbers,
        handoff,
        scale_log2: Float32,
        lse_s_max: Int32,
        lse_s_b: Int64,
        lse_s_tok: Int64,
        lse_s_row: Int64,
        lse_s_h: Int64,
        lse_scale: Float32,
        mSinks=None,  # sinks class: (H_q,) fp32
        softcap_mult=None,  # softcap class: softmax_scale / softcap
        kv_boxed=None,  # fence_gathered_only: Int32 1 where whole key blocks come by TMA boxes
    ):
        """MMA warpgroups: `mma_tile` for each decoded tile the producer warp hands over, until one
        with go = 0 (tiles without query rows never come: the producer fills their padded LSE)."""
        tidx = cute.arch.thread_idx()[0] - 128
        wg_idx = cute.arch.make_warp_uniform(tidx // 128)
        thr_mma_qk = tiled_mma_qk.get_slice(tidx)
        wg_mma_qk = tiled_mma_qk.get_slice(wg_idx * 128)
        wg_mma_pv = tiled_mma_pv.get_slice(wg_idx * 128)
        tSrQ = wg_mma_qk.make_fragment_A(wg_mma_qk.partition_A(sQ))
        tSrK = wg_mma_qk.make_fragment_B(wg_mma_qk.partition_B(sK))
        tOrVt = wg_mma_pv.make_fragment_B(wg_mma_pv.partition_B(sVt))
        tOrP = wg_mma_pv.make_fragment_A(wg_mma_pv.partition_shape_A((self.tile_m, self.tile_n)))
        acc_O = cute.make_rmem_tensor(wg_mma_pv.partition_shape_C((self.tile_m, self.d_v)), Float32)
        acc_S_shape = wg_mma_qk.partition_shape_C((self.tile_m, self.tile_n))
        tScS = thr_mma_qk.partition_C(cute.make_identity_tensor((self.tile_m, self.tile_n)))

        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.q_stages)
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.num_stages)
        # Ping-pong: the two warpgroups take turns issuing GEMMs (named barrier per warpgroup), so
        # one warpgroup's softmax overlaps the other's tensor-core work. Warpgroup 0's turn token,
        # given once: every tile then makes as many waits as passes per warpgroup.
        if const_expr(self.pingpong):
            if wg_idx == 0:
                cute.arch.barrier_arrive(barrier_id=SCHED_BARRIER_BASE, number_of_threads=256)
        frags = (tSrQ, tSrK, tOrVt, tOrP, acc_O, acc_S_shape, tScS)
        o_turn = None
        if const_expr(self.o_turns):
            # sO holds 64 rows: each warpgroup's stmatrix partition is a one-warpgroup P V MMA's.
            # The last warpgroup's storing warp (o_turn_every_thread: all its threads, as each pass)
            # gives warpgroup 0 the first turn.
            mma_o = sm90_helpers.make_trivial_tiled_mma(
                self.dtype, self.dtype, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.MN, Float32,
                atom_layout_mnk=(1, 1, 1), tiler_mn=(64, self.d_v), a_source=warpgroup.OperandSource.RMEM,
            )  # fmt: skip
            o_turn = (mma_o, O_TURN_BARRIER_BASE, self.num_mma_warpgroups, self.o_turn_every_thread)
            if wg_idx == self.num_mma_warpgroups - 1:
                if const_expr(self.o_turn_every_thread):
                    cute.arch.barrier_arrive(barrier_id=O_TURN_BARRIER_BASE, number_of_threads=turn_threads(True))
                else:
                    if tidx % 128 < 32:
                        cute.arch.barrier_arrive(barrier_id=O_TURN_BARRIER_BASE, number_of_threads=turn_threads(False))
        out_args = (
            gmem_tiled_copy_O, o_tma, sO, mO, mLSE, lse_s_max, lse_s_b, lse_s_tok, lse_s_row, lse_s_h, lse_scale, o_turn,
        )  # fmt: skip

        run_args = (
            tiled_mma_qk, tiled_mma_pv, frags, out_args, pipe_q, pipe_k, pipe_v, scale_log2, tidx, wg_idx, handoff[3],
            handoff[5], kv_boxed,
        )  # fmt: skip
        if const_expr(self.softcap or self.sinks):
            run_args = run_args + (mSinks, softcap_mult)
        self.reader_walk(handoff, mask_numbers, self.mma_tile, run_args, q_state, kv_state, wg_idx)
        if const_expr(self.o_turns):
            if wg_idx == 0:  # the turn the last epilogue passed on: every arrival meets its wait
                cute.arch.barrier(barrier_id=O_TURN_BARRIER_BASE, number_of_threads=turn_threads(self.o_turn_every_thread))
        if const_expr(self.tma_o_store):
            if tidx % 128 < 32:  # this warpgroup's last O store has read sO before the CTA exits
                cute.arch.cp_async_bulk_wait_group(0, read=True)
        if const_expr(self.trace):
            if tidx == 0:
                trace.stamp(mLSE, trace.EV_MMA_EXIT)

    @cute.jit
    def mma_tile(
        self, run_args, seqlen: SeqlenInfo, block_info: BlockInfo, tile: Int32, unit: Int32, batch_idx: Int32,
        q_state, kv_state, item=None, row_mult=None, tail=None,
    ):  # fmt: skip
        """One tile with query rows on the MMA warpgroups: wait for Q, run the key blocks, release
        Q (after the mainloop, or after the epilogue has read O back when O's buffer is Q's), then
        the epilogue. Each warpgroup computes its own item (a row block of one query head,
        tile_scheduler.tile_item; `item`, as handed over, where the class hands it over). row_mult:
        None, or (row packing, > 1) the packed rows per token: then row0 counts packed rows and
        head_idx is the unit's K/V head, and the tile masks, skips and stores by row tokens. A class
        with row packing traces both (reader_walk, behind one run-time test of the launch's
        row_mult): the unpacked copy is the class's code without row packing, so its interior loop
        is the same SASS instruction for instruction (traced once with run-time tests, the row
        tokens and the warpgroups' token ranges moved ptxas's P V wait 40 instructions into the
        softmax of d128 causal). tail: None, or a tail piece's (tail index, piece, pieces, mTailWork,
        mTailCount, sLast): its O goes through `merge_piece`, and only the last piece stores the rows.
        Returns (q_state, kv_state)."""
        tiled_mma_qk, tiled_mma_pv, frags, out_args, pipe_q, pipe_k, pipe_v, scale_log2, tidx, wg_idx, pack_r = (
            run_args[:11]
        )  # fmt: skip
        kv_boxed = run_args[12]
        mSinks, softcap_mult = None, None
        if const_expr(self.softcap or self.sinks):
            mSinks, softcap_mult = run_args[13:]
        if const_expr(item is None):
            row_block, head_idx = tile_item(unit, tile, wg_idx, pack_r, self.num_mma_warpgroups)
        else:
            row_block, head_idx = item
        # The sequence row of tile row 0 as this warpgroup sees it (its rows are row0 + 64 wg_idx ..);
        # without GQA packing, tile * tile_m for every warpgroup.
        row0 = (row_block - wg_idx) * ROW_BLOCK
        tSrQ_stages, tSrK, tOrVt, tOrP, acc_O, acc_S_shape, tScS = frags
        tSrQ = tSrQ_stages[None, None, None, q_state.index]
        gmem_tiled_copy_O, o_tma, sO, mO, mLSE, lse_s_max, lse_s_b, lse_s_tok, lse_s_row, lse_s_h, lse_scale, o_turn = out_args
        if const_expr(self.trace):
            if tidx == 0:
                trace.stamp_tile(mLSE, trace.EV_TAKEN, q_state.count)
        softmax = OnlineSoftmax(scale_log2, cute.size(acc_rows_view(acc_O), mode=[0]))
        softmax.reset()
        acc_O.fill(0.0)
        pipe_q.consumer_wait(q_state)
        if const_expr(self.trace):
            if tidx == 0:
                trace.stamp_tile(mLSE, trace.EV_Q_READY, q_state.count)
        if const_expr(row_mult is not None):
            cute.arch.fence_view_async_shared()  # the Q rows came by cp.async (generic proxy)
        mask_args = (
            tScS, row0, self.tile_n, self.has_left, self.has_right,
            seqlen.len_k, block_info.off, block_info.left, block_info.right,
        )  # fmt: skip
        if const_expr(self.softcap):
            mask_args = mask_args + (softcap_mult,)
        if const_expr(row_mult is not None):
            mask_args = mask_args + (self.row_tokens(tScS, row0, row_mult),)
        q_release = (pipe_q, q_state) if const_expr(self.early_q_release) else None
        kv_state = self.tile_mainloop(
            tiled_mma_qk, tiled_mma_pv, tSrQ, tSrK, tOrVt, tOrP, acc_O, acc_S_shape, softmax,
            pipe_k, pipe_v, block_info, seqlen.len_q, row0, wg_idx, mask_args, kv_state, q_release, row_mult,
            kv_boxed,
        )  # fmt: skip
        if const_expr(self.trace):
            if tidx == 0:
                trace.stamp_tile(mLSE, trace.EV_MAIN_DONE, q_state.count)
        if const_expr(not self.o_aliases_q and not self.early_q_release):
            pipe_q.consumer_release(q_state)  # every GEMM reading sQ is done
        sink_log2 = None
        if const_expr(self.sinks):
            sink_log2 = mSinks[head_idx] * Float32(LOG2_E)  # the head's sink logit, log2 domain
        row_scale = softmax.finalize(sink_log2)
        rescale_rows(acc_O, row_scale)
        store_seqlen = seqlen
        if const_expr(tail is not None):
            tail_idx, piece, pieces, mTailWork, mTailCount, sLast = tail
            last = merge_piece(
                acc_O, softmax.row_sum, mTailWork, mTailCount, sLast, tail_idx, piece, pieces, wg_idx,
                tidx - wg_idx * 128, self.num_mma_warpgroups, EPILOGUE_WG_BARRIER_BASE + wg_idx,
            )  # fmt: skip
            # Not the last piece: the epilogue's barriers and turns as ever, no row stored.
            store_seqlen = SeqlenInfo(seqlen.offset_q, seqlen.offset_k, seqlen.len_q * last, seqlen.len_k, seqlen.offset_o)
        store_tile(
            acc_O, softmax.row_sum, tiled_mma_pv, gmem_tiled_copy_O, sO, mO, mLSE, store_seqlen, tidx,
            row0, head_idx, batch_idx, lse_s_max, lse_s_b, lse_s_tok, lse_s_row, lse_s_h, lse_scale,
            self.tile_m, self.d_v, self.out_dtype, self.has_lse and not self.trace, self.num_mma_threads,
            EPILOGUE_BARRIER_ID, self.o_aliases_q, pipe_q, q_state, self.wg_epilogue, wg_idx, EPILOGUE_WG_BARRIER_BASE,
            o_tma, o_turn, row_mult,
        )  # fmt: skip
        if const_expr(self.trace):
            if tidx == 0:
                trace.stamp_tile(mLSE, trace.EV_TILE_DONE, q_state.count)
        q_state.advance()
        return q_state, kv_state

    @cute.jit
    def row_tokens(self, tScS: cute.Tensor, row0: Int32, row_mult: Int32):
        """The tokens of this thread's rows of the S accumulator under row packing (packed row m
        is token m // row_mult): one division per owned row per tile, for the mask
        (mask.apply_mask's `rows`)."""
        coord_mn = acc_rows_view(tScS)
        toks = ()
        for r in cutlass.range_constexpr(cute.size(coord_mn, mode=[0])):
            toks = toks + ((row0 + coord_mn[r, 0][0]) // row_mult,)
        return toks
