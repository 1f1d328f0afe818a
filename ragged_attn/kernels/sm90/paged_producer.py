"""The producer warpgroup of the paged classes (a mixin of forward.RaggedForwardSm90): warp 0 decodes
and hands over each tile as in the ragged class; all 128 threads then bring the tile's key blocks
from the page pools, last block first (paged_kv.py: the cp.async row gather, and TMA boxes where the
page size allows: `box_kind`, `box_block`), on `PipelineCpAsync` stage barriers that both kinds of
writer signal.

Attributes the mixin reads (set by RaggedForwardSm90.__init__): dtype, d_qk, d_v, tile_n, q_first,
page_tma, page_tma_small, page_box_warps, page_box_crossing, page_crossing_k_box, page_tma_rows, page_prefetch, l2_hints,
bytes_k, bytes_v, and
forward.py's schedule methods and producer.py's `load_q`."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import Int32, const_expr
from cutlass.cutlass_dsl import if_generate

from .block_info import BlockInfo
from .paged_kv import BOX_ROWS, PagedKV
from .seqlen_info import SeqlenInfo
from .tile_scheduler import kv_head


class PipelineCpAsyncWarpRelease(pipeline.PipelineCpAsync):
    """TileConfig.paged_warp_release: a paged K/V stage pipeline whose consumers (the MMA warps)
    release a stage from lane 0 of each warp, as PipelineTmaAsync's consumers do (create it with a
    consumer group counting warps), instead of PipelineCpAsync's arrive from every thread. The
    producers' side is PipelineCpAsync's."""

    @staticmethod
    def create(**kwargs) -> PipelineCpAsyncWarpRelease:
        base = pipeline.PipelineCpAsync.create(**kwargs)
        return PipelineCpAsyncWarpRelease(
            base.sync_object_full, base.sync_object_empty, base.num_stages, base.producer_mask, base.consumer_mask
        )

    def consumer_release(self, state: pipeline.PipelineState, *, loc=None, ip=None) -> None:
        """Lane 0 of the calling warp arrives on the stage's empty barrier (the warp's reads of it
        are complete: the MMA warpgroups release after waiting for the GEMMs that read it)."""
        if_generate(
            cute.arch.lane_idx() == 0,
            lambda: self.sync_object_empty.arrive(state.index, self.consumer_mask, loc=loc, ip=ip),
        )


class PagedProducer:
    """The paged classes' K/V loads (`load_paged`) and the box test the MMA warpgroups share (`box_kind`)."""

    @cute.jit
    def load_paged(
        self,
        q_tma,  # (tma_Q, tma_Qw, tma_atom_Qw): load_q
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
        sched,
        mask_numbers,
        handoff,
        lse_args,
        warp_idx: Int32,
        boxes,  # (tma_atom_Kb, tma_Kb, tma_atom_Vb, tma_Vb, then page_tma_small's four): box copies, else Nones
    ):
        """Producer warpgroup of the paged class, on the dynamic schedule of the ragged one: warp 0
        takes the tickets, decodes each tile (the whole warp searches cu_seqlens_q) and hands it
        to the MMA warpgroups and to producer warps 1-3 through the tile pipeline (a tile without
        query rows only gets its padded LSE rows' -inf, from warp 0); then all 128 threads gather
        the tile's key blocks (`load_paged_tile`). Past the last tile, go = 0 stops everyone."""
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.num_stages)
        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.q_stages)
        loads = (
            q_tma, mK, mV, mPageTable, sQ, sK, sV, tma_atom_Q, gather_copy, pipe_q, pipe_k, pipe_v, warp_idx, sched, boxes,
        )  # fmt: skip
        if warp_idx == 0:
            self.producer_walk(sched, mask_numbers, handoff, lse_args, self.load_paged_tile, loads, q_state, kv_state)
        else:
            self.reader_walk(handoff, mask_numbers, self.load_paged_tile, loads, q_state, kv_state, sched=sched)
        cute.arch.cp_async_wait_group(0)

    @cute.jit
    def load_paged_tile(
        self, loads, seqlen: SeqlenInfo, block_info: BlockInfo, tile: Int32, unit: Int32, batch_idx: Int32,
        q_state, kv_state, items=(),
    ):  # fmt: skip
        """All 128 producer threads: gather each key block's K and V rows of one tile (last block
        first, as the MMA warpgroups consume), or with page_tma, where the page size allows, let
        warp 0 bring the blocks wholly inside len_k as TMA boxes (paged_kv.py); warp 0 issues Q's
        TMA first (q_first) or after its share of the first K block. Returns (q_state, kv_state)."""
        q_tma, mK, mV, mPageTable, sQ, sK, sV, tma_atom_Q, gather_copy, pipe_q, pipe_k, pipe_v, warp_idx, sched, boxes = loads
        pack_r, ratio, row_mult = sched[2], sched[3], sched[12]
        tidx = cute.arch.thread_idx()[0]  # 0 .. 127: the producer warpgroup is warpgroup 0
        # q_first: Q's TMA before anything else of the tile (the gather's page divisor and first
        # page-table reads come after it).
        if const_expr(self.q_first and self.traces_q(items)):
            if warp_idx == 0:
                self.load_q(q_tma, sQ, tma_atom_Q, pipe_q, q_state, seqlen, tile, unit, pack_r, items, sched[12])
        head_kv = kv_head(unit, pack_r, ratio, row_mult)
        kv = PagedKV.create(
            mK, mV, mPageTable, batch_idx, head_kv, seqlen.len_k, tidx, gather_copy,
            self.dtype, self.tile_n, self.d_qk, self.d_v, self.page_tma if self.page_tma else BOX_ROWS,
            self.page_box_warps, self.page_tma_rows,
            self.kv_policy(seqlen.len_q, row_mult, pack_r, ratio) if const_expr(self.l2_hints and self.page_tma) else None,
        )  # fmt: skip
        box_ok = self.box_kind(mK, mV)
        n_block_min, n_block_max = block_info.n_block_range()
        n_blocks = n_block_max - n_block_min
        if n_blocks > 0:
            self.fetch_block_pages(kv, box_ok, n_block_max - 1, seqlen.len_k)
        # Without q_first, Q goes after warp 0's share of block 0's K (or alone when the tile sees
        # no key).
        if const_expr(not self.q_first and self.traces_q(items)):
            if n_blocks <= 0:
                if warp_idx == 0:
                    self.load_q(q_tma, sQ, tma_atom_Q, pipe_q, q_state, seqlen, tile, unit, pack_r, items, sched[12])
        for i in cutlass.range(n_blocks, unroll=1):
            n_block = n_block_max - 1 - i
            block = (loads, kv, box_ok, head_kv, i, n_blocks, n_block, seqlen, tile, unit, q_state, kv_state, items)
            if const_expr(self.page_tma_small):
                kind = self.box_block(box_ok, n_block, seqlen.len_k)
                if kind == 1:
                    self.load_paged_block(block, 1)
                elif kind == 2:
                    self.load_paged_block(block, 2)
                else:
                    self.load_crossing_or_gathered(block, kind)
            elif const_expr(self.page_tma):
                kind = self.box_block(box_ok, n_block, seqlen.len_k)
                if kind == 1:
                    self.load_paged_block(block, True)
                else:
                    self.load_crossing_or_gathered(block, kind)
            else:
                self.load_paged_block(block, False)
            kv_state.advance()
        q_state.advance()
        return q_state, kv_state

    def traces_q(self, items) -> bool:
        """Whether this walk's copy of the tile loads traces Q's load (issued by warp 0 alone, at
        run time): warp 0's walk, which has the decoded items; with pack_gqa not producer warps 1-3's
        (`read_tiles` gives them no items, and a packed tile's Q load needs each warpgroup's)."""
        return not (self.pack_gqa and items is None)

    @cute.jit
    def load_crossing_or_gathered(self, block, kind: Int32):
        """A block `box_block` did not give whole boxes: with page_box_crossing, kind 3 (the block
        crossing len_k, its whole runs by boxes); with page_crossing_k_box, kind 4 (the crossing
        block's K by its page_tma box, its V gathered); else the gather."""
        if const_expr(self.page_crossing_k_box):
            if kind == 4:
                self.load_paged_block(block, 4)
            else:
                self.load_paged_block(block, 0)
        elif const_expr(self.page_box_crossing):
            if kind == 3:
                self.load_paged_block(block, 3)
            else:
                self.load_paged_block(block, 0)
        else:
            self.load_paged_block(block, 0)

    @cute.jit
    def load_paged_block(self, block, by_box: cutlass.Constexpr[int]):
        """Block i of a paged tile (key block n_block): K then V, by the 128 threads' cp.async
        gather, or (by_box: a block wholly inside len_k) by warp 0's TMA boxes, page_tma's (1) or
        page_tma_small's (2); the next block's page-table reads start before the stage waits, Q
        goes after K where not q_first."""
        loads, kv, box_ok, head_kv, i, n_blocks, n_block, seqlen, tile, unit, q_state, kv_state, items = block
        q_tma, mK, mV, mPageTable, sQ, sK, sV, tma_atom_Q, gather_copy, pipe_q, pipe_k, pipe_v, warp_idx, sched, boxes = loads
        page, slot = None, None
        if const_expr(by_box):
            page, slot = kv.box_pages[0], kv.box_slots[0]  # read before the next block's fetch replaces them
        if const_expr(by_box == 0 or by_box == 3 or by_box == 4):
            kv.resolve_rows(n_block)
        if const_expr(self.page_prefetch and by_box == 0):
            kv.prefetch_rows()  # the gathered block's rows into L2 before the stage acquire
        if i + 1 < n_blocks:
            self.fetch_block_pages(kv, box_ok, n_block - 1, seqlen.len_k)  # in flight during the waits
        stage = (kv, kv_state, n_block, head_kv, warp_idx, page, slot)
        box = boxes[4:] if const_expr(by_box == 2 or by_box == 3) else boxes[:4]
        if const_expr(self.page_prefetch and (by_box == 1 or by_box == 2)):
            # K's and V's boxes into L2 before K's stage acquire (TileConfig.page_prefetch)
            small = self.page_tma_small if const_expr(by_box == 2) else 0
            kv.prefetch_boxes(box[0], self.box_head(box[1], head_kv), sK[None, None, 0], self.d_qk, warp_idx, page, slot, small)
            kv.prefetch_boxes(box[2], self.box_head(box[3], head_kv), sV[None, None, 0], self.d_v, warp_idx, page, slot, small)
        # page_crossing_k_box (by_box 4): K by the page_tma box, V by the gather
        self.load_paged_stage(stage, pipe_k, sK, box[0], box[1], self.bytes_k, self.d_qk, True, 1 if by_box == 4 else by_box)
        if const_expr(not self.q_first and self.traces_q(items)):
            if i == 0:
                if warp_idx == 0:
                    self.load_q(q_tma, sQ, tma_atom_Q, pipe_q, q_state, seqlen, tile, unit, sched[2], items, sched[12])
        self.load_paged_stage(stage, pipe_v, sV, box[2], box[3], self.bytes_v, self.d_v, False, 0 if by_box == 4 else by_box)

    @cute.jit
    def load_paged_stage(
        self, stage, pipe, sX, box_atom, box_coords, nbytes: cutlass.Constexpr[int], d: cutlass.Constexpr[int],
        is_k: cutlass.Constexpr[bool], by_box: cutlass.Constexpr[int],
    ):  # fmt: skip
        """One K or V stage of `load_paged_block`: acquire it, then warp 0's TMA boxes (by_box 1:
        page_tma's, 2: page_tma_small's; the box's expected bytes on the stage barrier) or the 128
        threads' cp.async gather, committed."""
        kv, kv_state, n_block, head_kv, warp_idx, page, slot = stage
        pipe.producer_acquire(kv_state)
        if const_expr(by_box == 3):
            # The crossing block (page_box_crossing): its whole runs by boxes, the rest gathered.
            chunks = (kv.len_k - n_block * self.tile_n) // self.page_tma_small
            kv.load_boxes_covered(
                box_atom, self.box_head(box_coords, head_kv), sX[None, None, kv_state.index],
                pipe.producer_get_barrier(kv_state), d, warp_idx, page, slot, self.page_tma_small, chunks,
            )  # fmt: skip
            kv.load(n_block, sX[None, None, kv_state.index], is_k, chunks * self.page_tma_small)
            cute.arch.cp_async_commit_group()
            pipe.producer_commit(kv_state)
        elif const_expr(by_box):
            kv.load_boxes(
                box_atom, self.box_head(box_coords, head_kv), sX[None, None, kv_state.index],
                pipe.producer_get_barrier(kv_state), nbytes, d, warp_idx, page, slot,
                self.page_tma_small if const_expr(by_box == 2) else 0,
            )  # fmt: skip
        else:
            kv.load(n_block, sX[None, None, kv_state.index], is_k)
            cute.arch.cp_async_commit_group()
            pipe.producer_commit(kv_state)

    @cute.jit
    def box_kind(self, mK: cute.Tensor, mV: cute.Tensor) -> Int32:
        """How this launch's pools bring the key blocks wholly inside len_k (the producer's
        `box_block`, and the MMA warpgroups' fences with fence_gathered_only): 1 page_tma's boxes,
        2 page_tma_small's, 0 the gather. Boxes need a page size that is a multiple of a box and
        pools as wide as the class (page_tma_rows: pages that are contiguous runs of rows too)."""
        box_ok = Int32(0)
        if const_expr(self.page_tma):
            box_ok = Int32(
                (cute.size(mK.shape[1]) % self.page_tma == 0)
                & (cute.size(mK.shape[3]) == self.d_qk)
                & (cute.size(mV.shape[3]) == self.d_v)
            )
        rows_ok = Int32(1)
        if const_expr(self.page_tma_rows):
            ps = cute.size(mK.shape[1])
            rows_ok = Int32(
                (mK.layout.stride[0] == ps * mK.layout.stride[1]) & (mV.layout.stride[0] == ps * mV.layout.stride[1])
            )
            box_ok = box_ok * rows_ok
        if const_expr(self.page_tma_small):
            small_ok = Int32(
                (cute.size(mK.shape[1]) % self.page_tma_small == 0)
                & (cute.size(mK.shape[3]) == self.d_qk)
                & (cute.size(mV.shape[3]) == self.d_v)
            )
            box_ok = box_ok + (1 - box_ok) * small_ok * rows_ok * 2
        return box_ok

    def box_head(self, box_coords: cute.Tensor, head_kv: Int32) -> cute.Tensor:
        """One K/V head's box coordinates: (page_size, d, num_pages), or the rows view's (64, 8,
        d / 64, row groups) (page_tma_rows)."""
        if const_expr(self.page_tma_rows):
            return box_coords[None, None, None, None, head_kv]
        return box_coords[None, None, head_kv, None]

    @cute.jit
    def box_block(self, box_ok: Int32, n_block: Int32, len_k: Int32) -> Int32:
        """Non-zero where key block n_block arrives as TMA boxes (box_ok's kind: 1 page_tma's, 2
        page_tma_small's): page_tma, box_ok, and wholly inside len_k."""
        by_box = Int32(0)
        if const_expr(self.page_tma):
            by_box = box_ok * Int32((n_block + 1) * self.tile_n <= len_k)
        if const_expr(self.page_crossing_k_box):
            # 4: the block crossing len_k, where the pool takes page_tma's boxes (its K by one)
            crossing = Int32((n_block * self.tile_n < len_k) & ((n_block + 1) * self.tile_n > len_k) & (box_ok == 1))
            by_box = by_box + crossing * 4
        if const_expr(self.page_box_crossing):
            # 3: the block crossing len_k with at least one whole small run inside it
            rows = len_k - n_block * self.tile_n
            crossing = Int32((rows < self.tile_n) & (rows >= self.page_tma_small) & (box_ok != 0))
            by_box = by_box + crossing * 3
        return by_box

    @cute.jit
    def fetch_block_pages(self, kv: PagedKV, box_ok: Int32, n_block: Int32, len_k: Int32):
        """Start the page-table reads of key block n_block: its boxes' pages (`box_block`) or this
        thread's gather rows'."""
        if const_expr(self.page_tma_small):
            kind = self.box_block(box_ok, n_block, len_k)
            if kind == 1:
                kv.fetch_box_pages(n_block)
            elif kind == 2:
                kv.fetch_box_pages(n_block, self.page_tma_small)
            else:
                if const_expr(self.page_box_crossing):
                    if kind == 3:  # the crossing block: its runs' boxes and the rest's rows
                        kv.fetch_box_pages(n_block, self.page_tma_small)
                if const_expr(self.page_crossing_k_box):
                    if kind == 4:  # the crossing block: K's box page, then V's rows
                        kv.fetch_box_pages(n_block)
                kv.fetch_pages(n_block)
        elif const_expr(self.page_tma):
            kind = self.box_block(box_ok, n_block, len_k)
            if kind == 1:
                kv.fetch_box_pages(n_block)
            else:
                if const_expr(self.page_crossing_k_box):
                    if kind == 4:
                        kv.fetch_box_pages(n_block)
                kv.fetch_pages(n_block)
        else:
            kv.fetch_pages(n_block)
