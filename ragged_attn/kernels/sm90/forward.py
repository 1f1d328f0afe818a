"""The sm_90a ragged attention forward kernel: TMA loads, WGMMA, fp32 online softmax.

Structure (one CTA = one (m_block, query head, sequence) tile; FA4's Hopper forward taught it):
- 3 warpgroups, 384 threads. Warpgroup 0 is the producer: its warp 0 issues TMA loads of Q
  (1-stage pipeline) and of K and V (two `PipelineTmaAsync`s, `num_stages` deep), walking the key
  blocks from the last one down. Warpgroups 1 and 2 each own 64 of the tile_m = 128 query rows:
  S = Q K^T (SS WGMMA), mask on boundary blocks, online softmax, O += P V (RS WGMMA, P stays in
  registers), then the epilogue (O through smem, 128-bit row- and column-predicated stores; LSE
  per row). Tiles per class: tile_config.py (tile_m = 128, tile_n 80..128).
- Grid (H_q, tile slots): per sequence (tiles_max = ceil(max(max_seqlen_q, lse_s_max) / tile_m)
  slots each, grid (H_q, tiles_max, B)) or packed (total_q // tile_m + B slots in all, sequence b
  from cu_seqlens_q[b] // tile_m + b on, found by binary search), whichever has fewer slots; packed
  only without a padded LSE. Heads vary fastest and a sequence's slots run from its last tile
  down: the costliest causal tiles start first and the cheap first tiles fill the tail. Long
  sequences (K/V of all heads > 32 MiB) deal their tiles out in L2 groups of query heads. An idle
  packed CTA leaves right after the search; a per-sequence tile past len_q computes nothing and
  only writes -inf into padded LSE rows [len_q, lse_s_max).
- Non-packed GQA: query head h reads key/value head h // (H_q // H_kv), the ratio read from the
  tensor extents at run time.
- Every number is run time (lengths, heads, strides, scale, window, alignment, LSE addressing,
  the real head dims); compile-time choices are only those of the `LayoutClass` (dims, dtypes,
  mask family, LSE, KV) and its tile config (tile_config.py).
- Paged KV (class kv="paged"): K/V come from page pools through a page table. The whole producer
  warpgroup gathers K/V rows with cp.async (paged_kv.py) into the same smem tiles, signalling
  `PipelineCpAsync`s instead of the TMA pipelines; Q still arrives by TMA (warp 0) and the MMA
  warpgroups are unchanged but for a proxy fence after each K/V wait. NHD and HND pools are one
  class (strides); the page size is the pool's run-time extent.
- Envelopes: the class's d_qk, d_v size the smem tiles; the tensors' head dims may be smaller
  (multiples of 8). TMA descriptors carry the real extents, so Q/K/V columns past them arrive as
  zeros (they add 0 to Q K^T and to the unused O columns), and the O store skips them.

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

from .block_info import UNBOUNDED, BlockInfo
from .epilogue import lse_index, store_tile
from .mask import apply_mask
from .paged_kv import PRODUCER_THREADS, PagedKV, make_gather_copy
from .seqlen_info import SeqlenInfo
from .softmax import OnlineSoftmax, acc_as_operand_a, acc_rows_view, rescale_rows
from .tile_config import SMEM_CAPACITY, TileConfig, o_aliases_q, smem_bytes

LOG2_E = math.log2(math.e)
EPILOGUE_BARRIER_ID = 1  # named barrier over the MMA threads; id 0 is __syncthreads
SCHED_BARRIER_BASE = 2  # ids 2, 3: ping-pong between the two MMA warpgroups
GRID_YZ_MAX = 65535  # CUDA's limit on gridDim.y and gridDim.z
L2_KV_BYTES = 32 << 20  # K/V bytes of the heads grouped to share L2 (H100/H200: 50 MiB of L2)


def make_smem_layout(dtype, rows: int, cols: int, stages: Optional[int] = None):
    """K-major swizzled smem layout for a (rows, cols[, stages]) WGMMA operand tile."""
    kind = sm90_helpers.get_smem_layout_atom(LayoutEnum.ROW_MAJOR, dtype, cols)
    atom = warpgroup.make_smem_layout_atom(kind, dtype)
    if stages is None:
        return cute.tile_to_shape(atom, (rows, cols), (0, 1))
    return cute.tile_to_shape(atom, (rows, cols, stages), (0, 1, 2))


class RaggedForwardSm90:
    """One instance per layout class; `__call__` is the `@cute.jit` host entry."""

    num_mma_warpgroups = 2
    producer_regs = 24
    mma_regs = 240  # 24 * 128 + 240 * 256 = 64512 <= 65536 registers per SM
    # Paged: all 128 producer threads gather with 64-bit row addresses (FA4's cp.async budget).
    producer_regs_paged = 40
    mma_regs_paged = 232  # 40 * 128 + 232 * 256 = 64512

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
    ):
        """d_qk, d_v: the class's head dims (the smem boxes); the tensors' own head dims are run
        time and may be smaller (an envelope: TMA zero-fills the columns past them, the O store
        skips them)."""
        assert mask in ("none", "causal", "window")
        assert config.tile_m == 64 * self.num_mma_warpgroups
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
        self.paged = paged
        if paged:
            self.producer_regs = self.producer_regs_paged
            self.mma_regs = self.mma_regs_paged
        self.tile_m = config.tile_m
        self.tile_n = config.tile_n
        self.num_stages = config.num_stages
        self.pingpong = config.pingpong
        self.overlap = config.overlap
        self.o_aliases_q = alias
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
        mPageTable: Optional[cute.Tensor],  # paged: (B, max_pages) int32; ragged: None
        stream: cuda.CUstream,
    ):
        # Sequence first, head last, as TMA wants: (total, d, h).
        mQt = cute.make_tensor(mQ.iterator, cute.select(mQ.layout, mode=[0, 2, 1]))

        sQ_layout = make_smem_layout(self.dtype, self.tile_m, self.d_qk)
        sK_layout = make_smem_layout(self.dtype, self.tile_n, self.d_qk, self.num_stages)
        sV_layout = make_smem_layout(self.dtype, self.tile_n, self.d_v, self.num_stages)
        sO_layout = make_smem_layout(self.out_dtype, self.tile_m, self.d_v)

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
        tma_atom_Q, tma_Q = cpasync.make_tiled_tma_atom(load_op, mQt, sQ_layout, (self.tile_m, self.d_qk))
        if const_expr(self.paged):
            # The pools themselves go to the kernel; one cp.async tiled copy serves K and V.
            tma_K, tma_V = mK, mV
            tma_atom_K = make_gather_copy(self.dtype, self.d_qk, self.d_v, self.tile_n)
            tma_atom_V = tma_atom_K
        else:
            mKt = cute.make_tensor(mK.iterator, cute.select(mK.layout, mode=[0, 2, 1]))
            mVt = cute.make_tensor(mV.iterator, cute.select(mV.layout, mode=[0, 2, 1]))
            tma_atom_K, tma_K = cpasync.make_tiled_tma_atom(
                load_op, mKt, cute.select(sK_layout, mode=[0, 1]), (self.tile_n, self.d_qk)
            )
            tma_atom_V, tma_V = cpasync.make_tiled_tma_atom(
                load_op, mVt, cute.select(sV_layout, mode=[0, 1]), (self.tile_n, self.d_v)
            )
        self.bytes_q = cute.size_in_bytes(self.dtype, sQ_layout)
        self.bytes_k = cute.size_in_bytes(self.dtype, cute.select(sK_layout, mode=[0, 1]))
        self.bytes_v = cute.size_in_bytes(self.dtype, cute.select(sV_layout, mode=[0, 1]))

        # O: smem -> registers -> 128-bit global stores; `threads_per_row` threads cover up to 64
        # columns (one 128-byte swizzle row of 16-bit elements) and divide the row's chunks.
        elems = 128 // self.out_dtype.width
        chunks = self.d_v // elems
        threads_per_row = next(t for t in (8, 4, 2, 1) if chunks % t == 0)
        o_thr_layout = cute.make_ordered_layout(
            (self.num_mma_threads // threads_per_row, threads_per_row), order=(1, 0)
        )
        gmem_tiled_copy_O = cute.make_tiled_copy_tv(
            cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.out_dtype, num_bits_per_copy=128),
            o_thr_layout,
            cute.make_layout((1, elems)),
        )

        SharedStorage = self.storage_struct(sQ_layout, sK_layout, sV_layout, sO_layout)
        assert SharedStorage.size_in_bytes() == self.smem_planned, "tile_config.smem_bytes is out of date"

        # Tile slots per query head. "Per sequence": the grid is (H_q, tiles_max, B), every sequence
        # gets tiles_max slots (padded LSE rows need them). "Packed" (no padded LSE, and fewer slots):
        # sequence b owns the slots [cu_seqlens_q[b] // tile_m + b, that of b + 1), which holds its
        # ceil(len_q / tile_m) tiles; total_q // tile_m + B slots in all, folded over grid y and z
        # (y <= 65535). Either way x is the head, so the hardware hands out every head of a slot
        # before the next slot, a sequence's slots in order, and slot j of a sequence is its
        # (j+1)-th tile from the end: the costliest causal tiles first, the cheap ones as the tail.
        q_rows = cutlass.max(max_seqlen_q, lse_s_max)
        tiles_max = q_rows // self.tile_m + Int32(q_rows % self.tile_m != 0)  # ceil without overflow near 2**31
        slots = cute.size(mQ.shape[0]) // self.tile_m + batch
        fewer = Int32(Int64(slots) < Int64(tiles_max) * Int64(batch))
        packed = Int32(lse_s_max == 0) * cutlass.max(fewer, Int32(tiles_max > GRID_YZ_MAX))
        slots_y = cutlass.min(slots, Int32(GRID_YZ_MAX))
        grid_y = packed * slots_y + (1 - packed) * tiles_max
        grid_z = packed * ((slots + (slots_y - 1)) // slots_y) + (1 - packed) * batch
        scale_log2 = softmax_scale * Float32(LOG2_E)
        self.kernel(
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
            tma_atom_Q,
            tma_atom_K,
            tma_atom_V,
            packed,
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
        ).launch(
            grid=[cute.size(mQ.shape[1]), grid_y, grid_z],
            block=[self.num_threads, 1, 1],
            stream=stream,
            min_blocks_per_mp=1,
        )

    def storage_struct(self, sQ_layout, sK_layout, sV_layout, sO_layout):
        """The shared-memory struct (plain Python at trace time): barriers, Q, K and V stages, and
        O's staging buffer unless it aliases Q's (see tile_config.o_aliases_q)."""
        def buf(dtype, layout):
            return cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(layout)], 1024]

        fields = {
            "mbar_q": cute.struct.MemRange[cutlass.Int64, 2],
            "mbar_k": cute.struct.MemRange[cutlass.Int64, 2 * self.num_stages],
            "mbar_v": cute.struct.MemRange[cutlass.Int64, 2 * self.num_stages],
            "sQ": buf(self.dtype, sQ_layout),
            "sK": buf(self.dtype, sK_layout),
            "sV": buf(self.dtype, sV_layout),
        }
        if not self.o_aliases_q:
            fields["sO"] = buf(self.out_dtype, sO_layout)
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
        tma_atom_Q: cute.CopyAtom,
        tma_atom_K: cute.CopyAtom,  # paged: the cp.async gather copy (also tma_atom_V)
        tma_atom_V: cute.CopyAtom,
        packed: Int32,  # 1: tile slots packed by sequence (see __call__), 0: tiles_max per sequence
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
    ):
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        # x = query head, y (and z when packed) = tile slot, z = sequence otherwise (see __call__).
        head_x, slot, batch_idx = cute.arch.block_idx()
        num_heads, num_y, _ = cute.arch.grid_dim()
        head_x = Int32(head_x)
        num_heads = Int32(num_heads)
        slot = Int32(slot)
        batch_idx = Int32(batch_idx)
        has_tile = Int32(1)
        if packed != 0:
            slot = slot + Int32(num_y) * batch_idx
            # The last sequence whose first slot is <= slot: binary search over cu_seqlens_q.
            num_seqs = cute.size(mCuSeqlensQ.shape[0]) - 1
            lo = Int32(0)
            hi = num_seqs - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if Int32(mCuSeqlensQ[mid]) // self.tile_m + mid <= slot:
                    lo = mid
                else:
                    hi = mid - 1
            batch_idx = lo
            start = Int32(mCuSeqlensQ[lo])
            slot = slot - (start // self.tile_m + lo)  # may be < 0: no tile
            # Slots past the sequence's tiles hold nothing (no padded LSE in packed mode): such a
            # CTA leaves before it sets up shared memory and barriers.
            len_q = Int32(mCuSeqlensQ[lo + 1]) - start
            if use_seqused_q != 0:
                len_q = Int32(mSeqUsedQ[lo])
            if slot < 0:
                has_tile = Int32(0)
            if slot * self.tile_m >= len_q:
                has_tile = Int32(0)
        if has_tile != 0:
            if warp_idx == 0:
                cpasync.prefetch_descriptor(tma_atom_Q)
                if const_expr(not self.paged):
                    cpasync.prefetch_descriptor(tma_atom_K)
                    cpasync.prefetch_descriptor(tma_atom_V)

            smem = cutlass.memory.SmemAllocator()
            storage = smem.allocate(SharedStorage)
            one_warp = pipeline.CooperativeGroup(pipeline.Agent.Thread, 1)
            # PipelineTmaAsync.consumer_release arrives once per consumer warp.
            mma_warps = pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_mma_threads // 32)
            pipe_q = pipeline.PipelineTmaAsync.create(
                barrier_storage=storage.mbar_q.data_ptr(),
                num_stages=1,
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
                pipe_k = pipeline.PipelineCpAsync.create(
                    barrier_storage=storage.mbar_k.data_ptr(),
                    num_stages=self.num_stages,
                    producer_group=producer_threads,
                    consumer_group=mma_threads,
                    defer_sync=True,
                )
                pipe_v = pipeline.PipelineCpAsync.create(
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

            seqlen = SeqlenInfo.create(
                batch_idx, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, mSeqUsedK, use_seqused_q, use_seqused_k
            )
            # L2 grouping, for sequences with len_k * H_q * (d_qk + d_v) bytes > L2_KV_BYTES: the
            # sequence's (head, slot) CTAs, in the order the hardware hands them out (head fastest), are
            # re-dealt group by group: G query heads take all their tiles, G heads per slot, before the
            # next G heads start. G = L2_KV_BYTES / (one head's K/V bytes), counted in query heads as
            # FlashAttention 3's LPT scheduler counts them, rounded down to whole GQA groups (at least
            # one). A bijection of the tile-holding CTAs [0, H_q * tiles_q); slots past tiles_q keep
            # their place (so a packed CTA knows it is idle from cu_seqlens_q alone). Shorter
            # sequences keep slot-major order over every head, with no arithmetic on the way to the
            # first load. Measured on an H200,
            # 2026-11-30 (d128 causal, GPU-only TFLOP/s): 2 x 8192 at 64/8 heads 593 -> 615 with groups
            # of 8 heads; DeepSeek 1 x 16384 (128/128, d 192/128) 502 -> 663; short batches unchanged.
            head_idx = head_x
            token_bytes = (self.d_qk + self.d_v) * (self.dtype.width // 8)
            tiles_q = (seqlen.len_q + (self.tile_m - 1)) // self.tile_m
            if slot >= 0:
                if slot < tiles_q:
                    if Int64(seqlen.len_k) * Int64(num_heads * token_bytes) > Int64(L2_KV_BYTES):
                        ratio = num_heads // cute.size(tma_K.shape[2])  # H_kv: mode 2 of the TMA view / pool
                        head_bytes = Float32(seqlen.len_k) * Float32(token_bytes)
                        group = cutlass.max(Int32(Float32(L2_KV_BYTES) / head_bytes) // ratio, 1) * ratio
                        rank = head_x + num_heads * slot
                        per_group = group * tiles_q
                        g = rank // per_group
                        rest = rank - g * per_group
                        heads_here = cutlass.min(group, num_heads - g * group)
                        slot = rest // heads_here
                        head_idx = g * group + rest - slot * heads_here
            # Slot j < tiles_q is the (j+1)-th tile from the end; any other slot gets a tile index past
            # len_q (padded LSE rows only, when there are any), so each tile is visited exactly once.
            m_block = slot
            if slot < tiles_q:
                m_block = tiles_q - 1 - slot
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
            block_info = BlockInfo(
                self.tile_m,
                self.tile_n,
                self.has_left,
                self.has_right,
                m_block,
                seqlen.len_q,
                seqlen.len_k,
                off,
                left,
                right,
            )
            tile_valid = m_block * self.tile_m < seqlen.len_q
            pipeline.pipeline_init_wait()

            if warp_idx < 4:
                cute.arch.setmaxregister_decrease(self.producer_regs)
                if const_expr(self.paged):
                    if tile_valid:
                        self.load_paged(
                            tma_Q, tma_K, tma_V, mPageTable, sQ, sK, sV, tma_atom_Q, tma_atom_K,
                            pipe_q, pipe_k, pipe_v, seqlen, block_info, m_block, head_idx, batch_idx, warp_idx,
                        )
                else:
                    if warp_idx == 0:
                        if tile_valid:
                            self.load(
                                tma_Q, tma_K, tma_V, sQ, sK, sV, tma_atom_Q, tma_atom_K, tma_atom_V,
                                pipe_q, pipe_k, pipe_v, seqlen, block_info, m_block, head_idx,
                            )
            else:
                cute.arch.setmaxregister_increase(self.mma_regs)
                tidx = cute.arch.thread_idx()[0] - 128
                if tile_valid:
                    self.mma(
                        tiled_mma_qk, tiled_mma_pv, gmem_tiled_copy_O, sQ, sK, sVt, sO, mO, mLSE,
                        pipe_q, pipe_k, pipe_v, seqlen, block_info, tidx, m_block, head_idx, batch_idx,
                        scale_log2, lse_s_max, lse_s_b, lse_s_tok, lse_s_row, lse_s_h, lse_scale,
                    )
                else:
                    if const_expr(self.has_lse):
                        # Padded LSE rows of a tile past len_q: only -inf to write.
                        if tidx < self.tile_m:
                            row = m_block * self.tile_m + tidx
                            if row < lse_s_max:
                                idx = lse_index(seqlen, batch_idx, head_idx, row, lse_s_b, lse_s_tok, lse_s_row, lse_s_h)
                                mLSE[idx] = -Float32.inf

    # ------------------------------------------------------------------ producer warp
    @cute.jit
    def load(
        self,
        tma_Q: cute.Tensor,
        tma_K: cute.Tensor,
        tma_V: cute.Tensor,
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sV: cute.Tensor,
        tma_atom_Q: cute.CopyAtom,
        tma_atom_K: cute.CopyAtom,
        tma_atom_V: cute.CopyAtom,
        pipe_q: pipeline.PipelineTmaAsync,
        pipe_k: pipeline.PipelineTmaAsync,
        pipe_v: pipeline.PipelineTmaAsync,
        seqlen: SeqlenInfo,
        block_info: BlockInfo,
        m_block: Int32,
        head_idx: Int32,
    ):
        ratio = cute.size(tma_Q.shape[2]) // cute.size(tma_K.shape[2])
        head_kv = head_idx // ratio
        gQ = cute.local_tile(
            cute.domain_offset((seqlen.offset_q, 0), tma_Q[None, None, head_idx]),
            (self.tile_m, self.d_qk),
            (m_block, 0),
        )
        gK = cute.local_tile(
            cute.domain_offset((seqlen.offset_k, 0), tma_K[None, None, head_kv]),
            (self.tile_n, self.d_qk),
            (None, 0),
        )
        gV = cute.local_tile(
            cute.domain_offset((seqlen.offset_k, 0), tma_V[None, None, head_kv]),
            (self.tile_n, self.d_v),
            (None, 0),
        )
        tQsQ, tQgQ = cpasync.tma_partition(
            tma_atom_Q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2)
        )
        tKsK, tKgK = cpasync.tma_partition(
            tma_atom_K, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2), cute.group_modes(gK, 0, 2)
        )
        tVsV, tVgV = cpasync.tma_partition(
            tma_atom_V, 0, cute.make_layout(1), cute.group_modes(sV, 0, 2), cute.group_modes(gV, 0, 2)
        )
        n_block_min, n_block_max = block_info.n_block_range()
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.num_stages)
        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        has_blocks = n_block_max > n_block_min
        if has_blocks:
            pipe_k.producer_acquire(kv_state)
            cute.copy(
                tma_atom_K,
                tKgK[None, n_block_max - 1],
                tKsK[None, kv_state.index],
                tma_bar_ptr=pipe_k.producer_get_barrier(kv_state),
            )
        pipe_q.producer_acquire(q_state)
        cute.copy(tma_atom_Q, tQgQ, tQsQ, tma_bar_ptr=pipe_q.producer_get_barrier(q_state))
        if has_blocks:
            pipe_v.producer_acquire(kv_state)
            cute.copy(
                tma_atom_V,
                tVgV[None, n_block_max - 1],
                tVsV[None, kv_state.index],
                tma_bar_ptr=pipe_v.producer_get_barrier(kv_state),
            )
            kv_state.advance()
            for i in cutlass.range(n_block_max - 1 - n_block_min, unroll=1):
                n_block = n_block_max - 2 - i
                pipe_k.producer_acquire(kv_state)
                cute.copy(
                    tma_atom_K,
                    tKgK[None, n_block],
                    tKsK[None, kv_state.index],
                    tma_bar_ptr=pipe_k.producer_get_barrier(kv_state),
                )
                pipe_v.producer_acquire(kv_state)
                cute.copy(
                    tma_atom_V,
                    tVgV[None, n_block],
                    tVsV[None, kv_state.index],
                    tma_bar_ptr=pipe_v.producer_get_barrier(kv_state),
                )
                kv_state.advance()

    @cute.jit
    def load_paged(
        self,
        tma_Q: cute.Tensor,
        mK: cute.Tensor,  # (num_pages, page_size, H_kv, d_qk)
        mV: cute.Tensor,  # (num_pages, page_size, H_kv, d_v)
        mPageTable: cute.Tensor,  # (B, max_pages) int32
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sV: cute.Tensor,
        tma_atom_Q: cute.CopyAtom,
        gather_copy: cute.TiledCopy,
        pipe_q: pipeline.PipelineTmaAsync,
        pipe_k: pipeline.PipelineCpAsync,
        pipe_v: pipeline.PipelineCpAsync,
        seqlen: SeqlenInfo,
        block_info: BlockInfo,
        m_block: Int32,
        head_idx: Int32,
        batch_idx: Int32,
        warp_idx: Int32,
    ):
        """Producer warpgroup of the paged class: warp 0 issues Q's TMA, then all 128 threads
        gather each key block's K and V rows (last block first, as the MMA warpgroups consume)."""
        if warp_idx == 0:
            gQ = cute.local_tile(
                cute.domain_offset((seqlen.offset_q, 0), tma_Q[None, None, head_idx]),
                (self.tile_m, self.d_qk),
                (m_block, 0),
            )
            tQsQ, tQgQ = cpasync.tma_partition(
                tma_atom_Q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2)
            )
            q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
            pipe_q.producer_acquire(q_state)
            cute.copy(tma_atom_Q, tQgQ, tQsQ, tma_bar_ptr=pipe_q.producer_get_barrier(q_state))
        ratio = cute.size(tma_Q.shape[2]) // cute.size(mK.shape[2])
        tidx = cute.arch.thread_idx()[0]  # 0 .. 127: the producer warpgroup is warpgroup 0
        kv = PagedKV.create(
            mK, mV, mPageTable, batch_idx, head_idx // ratio, seqlen.len_k, tidx, gather_copy,
            self.dtype, self.tile_n, self.d_qk, self.d_v,
        )  # fmt: skip
        n_block_min, n_block_max = block_info.n_block_range()
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.num_stages)
        for i in cutlass.range(n_block_max - n_block_min, unroll=1):
            n_block = n_block_max - 1 - i
            kv.resolve_rows(n_block)
            pipe_k.producer_acquire(kv_state)
            kv.load(n_block, sK[None, None, kv_state.index], True)
            cute.arch.cp_async_commit_group()
            pipe_k.producer_commit(kv_state)
            pipe_v.producer_acquire(kv_state)
            kv.load(n_block, sV[None, None, kv_state.index], False)
            cute.arch.cp_async_commit_group()
            pipe_v.producer_commit(kv_state)
            kv_state.advance()
        cute.arch.cp_async_wait_group(0)

    # ------------------------------------------------------------------ MMA warpgroups
    @cute.jit
    def mma(
        self,
        tiled_mma_qk: cute.TiledMma,
        tiled_mma_pv: cute.TiledMma,
        gmem_tiled_copy_O: cute.TiledCopy,
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sVt: cute.Tensor,
        sO: cute.Tensor,
        mO: cute.Tensor,
        mLSE: Optional[cute.Tensor],
        pipe_q: pipeline.PipelineTmaAsync,
        pipe_k: pipeline.PipelineTmaAsync,
        pipe_v: pipeline.PipelineTmaAsync,
        seqlen: SeqlenInfo,
        block_info: BlockInfo,
        tidx: Int32,
        m_block: Int32,
        head_idx: Int32,
        batch_idx: Int32,
        scale_log2: Float32,
        lse_s_max: Int32,
        lse_s_b: Int64,
        lse_s_tok: Int64,
        lse_s_row: Int64,
        lse_s_h: Int64,
        lse_scale: Float32,
    ):
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

        softmax = OnlineSoftmax(scale_log2, cute.size(acc_rows_view(acc_O), mode=[0]))
        softmax.reset()
        acc_O.fill(0.0)

        n_block_min, n_block_max = block_info.n_block_range()
        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        pipe_q.consumer_wait(q_state)
        # Ping-pong: the two warpgroups take turns issuing GEMMs (named barrier per warpgroup), so
        # one warpgroup's softmax overlaps the other's tensor-core work.
        mask_args = (
            tScS, m_block, self.tile_m, self.tile_n, self.has_left, self.has_right,
            seqlen.len_k, block_info.off, block_info.left, block_info.right,
        )
        if const_expr(self.overlap):
            self.mainloop_overlap(
                tiled_mma_qk, tiled_mma_pv, tSrQ, tSrK, tOrVt, tOrP, acc_O, acc_S_shape, softmax,
                pipe_k, pipe_v, block_info, n_block_min, n_block_max, wg_idx, mask_args,
            )
        else:
            self.sched_begin(wg_idx)
            kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.num_stages)
            for i in cutlass.range(n_block_max - n_block_min, unroll=1):
                n_block = n_block_max - 1 - i
                # S = Q K^T
                self.kv_wait(pipe_k, kv_state)
                acc_S = cute.make_rmem_tensor(acc_S_shape, Float32)
                self.gemm(tiled_mma_qk, acc_S, tSrQ, tSrK[None, None, None, kv_state.index], False, wait=False)
                self.sched_pass(wg_idx)
                warpgroup.wait_group(0)
                pipe_k.consumer_release(kv_state)
                self.mask_softmax(acc_S, n_block, block_info, softmax, tOrP, acc_O, mask_args, True)
                # O += P V
                self.kv_wait(pipe_v, kv_state)
                self.sched_wait(wg_idx)
                self.gemm(tiled_mma_pv, acc_O, tOrP, tOrVt[None, None, None, kv_state.index], True)
                pipe_v.consumer_release(kv_state)
                kv_state.advance()
            self.sched_pass(wg_idx)

        row_scale = softmax.finalize()
        rescale_rows(acc_O, row_scale)
        store_tile(
            acc_O, softmax.row_sum, tiled_mma_pv, gmem_tiled_copy_O, sO, mO, mLSE, seqlen, tidx,
            m_block, head_idx, batch_idx, lse_s_max, lse_s_b, lse_s_tok, lse_s_row, lse_s_h, lse_scale,
            self.tile_m, self.d_v, self.out_dtype, self.has_lse, self.num_mma_threads, EPILOGUE_BARRIER_ID,
            self.o_aliases_q,
        )

    @cute.jit
    def mask_softmax(self, acc_S, n_block, block_info, softmax, tOrP, acc_O, mask_args, rescale: cutlass.Constexpr[bool]):
        """Mask (boundary blocks only), online softmax, P -> 16-bit A fragment, O rescale."""
        tScS, m_block, tile_m, tile_n, has_left, has_right, len_k, off, left, right = mask_args
        if block_info.needs_mask(n_block):
            apply_mask(acc_S, tScS, m_block, n_block, tile_m, tile_n, has_left, has_right, len_k, off, left, right)
        row_scale = softmax.step(acc_S)
        if const_expr(rescale):
            tOrP.store(acc_as_operand_a(acc_S).load().to(self.dtype))
            rescale_rows(acc_O, row_scale)
        return row_scale

    @cute.jit
    def mainloop_overlap(
        self, tiled_mma_qk, tiled_mma_pv, tSrQ, tSrK, tOrVt, tOrP, acc_O, acc_S_shape, softmax,
        pipe_k, pipe_v, block_info, n_block_min, n_block_max, wg_idx, mask_args,
    ):
        """Intra-warpgroup overlap: the softmax of block n runs while O += P V of block n + 1 is
        on the tensor cores. Prologue: S and P of the first block; each step issues S of the next
        block and P V of the previous one, softmaxes the new S under the PV GEMM; epilogue: last PV.
        Scheduling barriers bracket each step's GEMM issue (n - 1 waits and passes per warpgroup)."""
        if n_block_max > n_block_min:
            kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.num_stages)
            if const_expr(self.pingpong):
                if wg_idx == 0:
                    cute.arch.barrier_arrive(barrier_id=SCHED_BARRIER_BASE, number_of_threads=self.num_mma_threads)
            self.kv_wait(pipe_k, kv_state)
            acc_S = cute.make_rmem_tensor(acc_S_shape, Float32)
            self.gemm(tiled_mma_qk, acc_S, tSrQ, tSrK[None, None, None, kv_state.index], False)
            pipe_k.consumer_release(kv_state)
            self.mask_softmax(acc_S, n_block_max - 1, block_info, softmax, tOrP, acc_O, mask_args, False)
            tOrP.store(acc_as_operand_a(acc_S).load().to(self.dtype))
            for i in cutlass.range(n_block_max - 1 - n_block_min, unroll=1):
                n_block = n_block_max - 2 - i
                v_state = kv_state.clone()
                kv_state.advance()
                self.kv_wait(pipe_k, kv_state)
                self.sched_wait(wg_idx)
                acc_S2 = cute.make_rmem_tensor(acc_S_shape, Float32)
                self.gemm(tiled_mma_qk, acc_S2, tSrQ, tSrK[None, None, None, kv_state.index], False, wait=False)
                self.kv_wait(pipe_v, v_state)
                self.gemm(tiled_mma_pv, acc_O, tOrP, tOrVt[None, None, None, v_state.index], True, wait=False)
                self.sched_pass(wg_idx)
                warpgroup.wait_group(1)  # S done, PV may still run
                pipe_k.consumer_release(kv_state)
                row_scale = self.mask_softmax(acc_S2, n_block, block_info, softmax, tOrP, acc_O, mask_args, False)
                warpgroup.wait_group(0)
                pipe_v.consumer_release(v_state)
                tOrP.store(acc_as_operand_a(acc_S2).load().to(self.dtype))
                rescale_rows(acc_O, row_scale)
            self.kv_wait(pipe_v, kv_state)
            self.gemm(tiled_mma_pv, acc_O, tOrP, tOrVt[None, None, None, kv_state.index], True)
            pipe_v.consumer_release(kv_state)

    @cute.jit
    def kv_wait(self, pipe, state):
        """Wait for a K or V stage. Paged stages are written by cp.async (generic proxy): fence
        them into the async proxy before WGMMA reads them."""
        pipe.consumer_wait(state)
        if const_expr(self.paged):
            cute.arch.fence_view_async_shared()

    @cute.jit
    def gemm(
        self,
        tiled_mma: cute.TiledMma,
        acc: cute.Tensor,
        tCrA: cute.Tensor,
        tCrB: cute.Tensor,
        accumulate: cutlass.Constexpr[bool],
        wait: cutlass.Constexpr[bool] = True,
    ):
        """acc (+)= A B over the K modes of one warpgroup's fragments; `wait`: block until done."""
        warpgroup.fence()
        atom = cute.make_mma_atom(tiled_mma.op)  # fresh atom: its ACCUMULATE field is mutated
        atom.set(warpgroup.Field.ACCUMULATE, accumulate)
        for k in cutlass.range_constexpr(cute.size(tCrA.shape[2])):
            cute.gemm(atom, acc, tCrA[None, None, k], tCrB[None, None, k], acc)
            atom.set(warpgroup.Field.ACCUMULATE, True)
        warpgroup.commit_group()
        if const_expr(wait):
            warpgroup.wait_group(0)

    # Warpgroup scheduling barriers (ids SCHED_BARRIER_BASE + wg): a warpgroup waits on its own
    # barrier before issuing GEMMs and, once issued, arrives on the other's. Each warpgroup makes
    # n_blocks + 1 waits and n_blocks + 1 passes per tile; warpgroup 0 pre-arrives once.
    @cute.jit
    def sched_begin(self, wg_idx: Int32):
        if const_expr(self.pingpong):
            if wg_idx == 0:
                cute.arch.barrier_arrive(barrier_id=SCHED_BARRIER_BASE, number_of_threads=self.num_mma_threads)
            self.sched_wait(wg_idx)

    @cute.jit
    def sched_wait(self, wg_idx: Int32):
        if const_expr(self.pingpong):
            cute.arch.barrier(barrier_id=SCHED_BARRIER_BASE + wg_idx, number_of_threads=self.num_mma_threads)

    @cute.jit
    def sched_pass(self, wg_idx: Int32):
        if const_expr(self.pingpong):
            cute.arch.barrier_arrive(
                barrier_id=SCHED_BARRIER_BASE + 1 - wg_idx, number_of_threads=self.num_mma_threads
            )
