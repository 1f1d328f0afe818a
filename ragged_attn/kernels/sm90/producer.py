"""The producer warp of the sm_90a forward kernel (a mixin of forward.RaggedForwardSm90): Q by TMA
(one box per tile, or per MMA warpgroup's item with GQA packing) or by the cp.async row gather of
row packing, and the ragged class's K/V key blocks by TMA, last block first, on the K/V stages that
run on across tiles (`load_tile`). The paged classes' K/V: paged_producer.py.

Attributes the mixin reads (set by RaggedForwardSm90.__init__): dtype, d_qk, tile_m, tile_n,
num_stages, q_stages, q_first, pack_gqa, pack_rows, l2_hints, bytes_q / bytes_k / bytes_v, and the schedule
methods of forward.py (`producer_walk`, `items_of`)."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import Int32, Int64, const_expr
from cutlass._mlir.dialects import nvvm as _nvvm
from cutlass.cute.nvgpu import cpasync
from cutlass.cutlass_dsl import dsl_user_op

from .block_info import BlockInfo
from .seqlen_info import SeqlenInfo
from .tile_scheduler import ROW_BLOCK, kv_head


@dsl_user_op
def cp_async_mbarrier_arrive_inc(mbar_ptr, *, loc=None, ip=None) -> None:
    """cp.async.mbarrier.arrive.shared::cta.b64 (without .noinc): the mbarrier's pending count
    goes up by one now and down by one once this thread's earlier cp.async copies have landed (no
    net change; PTX ISA), so a phase that counts one arrival can wait on a warp's copies."""
    _nvvm.cp_async_mbarrier_arrive(mbar_ptr.to_llvm_ptr(loc=loc, ip=ip), noinc=False, loc=loc, ip=ip)


# L2 eviction priorities of a TMA load's cache_policy operand (TileConfig.l2_hints): the encoded
# policies of CUTLASS's CacheHintSm90 (cute/arch/copy_sm90_tma.hpp), as createpolicy would make them.
L2_EVICT_NORMAL = 0x1000000000000000
L2_EVICT_FIRST = 0x12F0000000000000
L2_EVICT_LAST = 0x14F0000000000000


def cache_hint(policy) -> dict:
    """cute.copy's keyword for an L2 cache_policy operand: {} for None (the DSL's default policy)."""
    return {} if policy is None else {"cache_policy": policy}


class TmaProducer:
    """The producer warp's Q loads and the ragged class's K/V loads."""

    def q_hint(self) -> dict:
        """cute.copy's cache_policy for a Q load: with l2_hints 1 EVICT_FIRST (a tile's Q is read
        once), 2 EVICT_NORMAL; else nothing (the DSL's policy 0)."""
        if const_expr(self.l2_hints == 2):
            return cache_hint(Int64(L2_EVICT_NORMAL))
        return cache_hint(Int64(L2_EVICT_FIRST) if const_expr(self.l2_hints == 1) else None)

    @cute.jit
    def kv_policy(self, len_q: Int32, row_mult, pack_r, ratio) -> Int64:
        """A tile's K/V cache_policy with l2_hints 1: EVICT_FIRST where one tile alone reads its K/V
        (the sequence has at most one 64-row block of query rows, row-packed rows counted, and the
        tile's unit holds its K/V head's whole GQA group: row_mult x pack_r >= ratio, as with row
        packing), else EVICT_LAST (row tiles and the group's query heads re-read it); with 2,
        EVICT_NORMAL."""
        policy = Int64(L2_EVICT_NORMAL)
        if const_expr(self.l2_hints == 1):
            alone = Int64(((len_q * row_mult) <= ROW_BLOCK) & ((row_mult * pack_r) >= ratio))
            policy = Int64(L2_EVICT_LAST) + alone * Int64(L2_EVICT_FIRST - L2_EVICT_LAST)
        return policy

    @cute.jit
    def load(
        self,
        q_tma,  # (tma_Q, tma_Qw, tma_atom_Qw): load_q
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
        sched,
        mask_numbers,
        handoff,
        lse_args,
    ):
        """Producer warp: for each of this CTA's tiles, decode it (the whole warp searches
        cu_seqlens_q) and hand the decoded tile to the MMA warpgroups, then load K of its last key
        block, Q (once the MMA warpgroups released the previous tile's Q), V and the other blocks,
        last first. The K/V stages run on across tiles, so the next tile's first blocks load while
        the MMA warpgroups finish the current one. A tile without query rows (per-sequence slots
        past len_q) only gets its padded LSE rows' -inf, written here. Then the next index
        (`next_tile`); past the last, a tile with go = 0 tells the MMA warpgroups to stop."""
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.num_stages)
        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.q_stages)
        loads = (q_tma, tma_K, tma_V, sQ, sK, sV, tma_atom_Q, tma_atom_K, tma_atom_V, pipe_q, pipe_k, pipe_v, sched)
        self.producer_walk(sched, mask_numbers, handoff, lse_args, self.load_tile, loads, q_state, kv_state)
        if const_expr(self.pack_rows):
            cute.arch.cp_async_wait_group(0)  # the Q row gathers have landed before the warp exits

    @cute.jit
    def load_q(
        self, q_tma, sQ, tma_atom_Q, pipe_q, q_state, seqlen: SeqlenInfo, tile: Int32, unit: Int32, pack_r: Int32,
        items=(), row_mult=1,
    ):  # fmt: skip
        """Q of a tile into Q buffer q_state.index: one TMA load of tile_m rows of one head
        (unpacked), or (packed, q_tma's per-warpgroup atom) one load per MMA warpgroup of its
        item's 64 rows (a row block of one query head, tile_scheduler.tile_item) into its slice,
        all on that stage's barrier (whose transaction count is the whole buffer's). Rows past
        len_q arrive too (the next sequence's, or zeros past the tensor): nothing stores them."""
        tma_Q, tma_Qw, tma_atom_Qw, mQ = q_tma
        if const_expr(self.pack_rows and not isinstance(row_mult, int)):
            # Row packing possible (run-time row_mult); the constant 1 (the walks' unsplit,
            # unpacked copy) takes the TMA paths below.
            self.load_q_rows_or_tile(q_tma, sQ, tma_atom_Q, pipe_q, q_state, seqlen, tile, unit, row_mult, pack_r, items)
        elif const_expr(self.pack_gqa):
            pipe_q.producer_acquire(q_state)
            if pack_r != 1:
                self.load_q_items(tma_Qw, sQ, tma_atom_Qw, pipe_q, q_state, seqlen, items)
            else:
                self.load_q_tile(tma_Q, sQ, tma_atom_Q, pipe_q, q_state, seqlen, tile, unit)
        else:
            pipe_q.producer_acquire(q_state)
            self.load_q_tile(tma_Q, sQ, tma_atom_Q, pipe_q, q_state, seqlen, tile, unit)

    @cute.jit
    def load_q_rows_or_tile(
        self, q_tma, sQ, tma_atom_Q, pipe_q, q_state, seqlen: SeqlenInfo, tile: Int32, unit: Int32, row_mult: Int32,
        pack_r: Int32, items,
    ):  # fmt: skip
        """Q of a tile of a pack_rows class (the whole producer warp 0; the Q stage's full barrier
        counts one arrival, as every class's): row packing (row_mult > 1) gathers the tile's
        packed rows that exist (`gather_q_rows`), each lane arriving through
        cp.async.mbarrier.arrive without .noinc (it adds its own pending arrival, taken when its
        copies land: no net change) and lane 0 then arriving once (after a warp sync, so every
        lane's increment precedes it); else Q by TMA exactly as the classes without row packing
        (producer_acquire: lane 0 arrives expecting the stage's bytes)."""
        tma_Q, tma_Qw, tma_atom_Qw, mQ = q_tma
        if row_mult != 1:
            pipe_q.sync_object_empty.wait(q_state.index, q_state.phase)
            bar = pipe_q.producer_get_barrier(q_state)
            self.gather_q_rows(mQ, sQ[None, None, q_state.index], seqlen, tile, unit, row_mult)
            cute.arch.cp_async_commit_group()
            cp_async_mbarrier_arrive_inc(bar)
            cute.arch.sync_warp()
            if cute.arch.lane_idx() == 0:
                cute.arch.mbarrier_arrive(bar)
        else:
            pipe_q.producer_acquire(q_state)
            if const_expr(self.pack_gqa):
                if pack_r != 1:
                    self.load_q_items(tma_Qw, sQ, tma_atom_Qw, pipe_q, q_state, seqlen, items)
                else:
                    self.load_q_tile(tma_Q, sQ, tma_atom_Q, pipe_q, q_state, seqlen, tile, unit)
            else:
                self.load_q_tile(tma_Q, sQ, tma_atom_Q, pipe_q, q_state, seqlen, tile, unit)

    @cute.jit
    def gather_q_rows(self, mQ: cute.Tensor, sQ_stage: cute.Tensor, seqlen: SeqlenInfo, tile: Int32, unit: Int32, g: Int32):
        """Producer warp 0: cp.async the packed rows [tile * tile_m, min((tile + 1) * tile_m, g len_q))
        of K/V head `unit` into the Q stage sQ_stage (tile_m, d_qk): packed row m is token m // g of
        query head unit * g + m % g (tile_scheduler.py). Rows past g len_q are not loaded where a
        whole pass of rows lies past it (their stale contents stay in their own rows of S, P and O,
        which are never stored), zero-filled in the last pass; columns past the real head dim are
        zero-filled (they meet K's zero columns: 0, never 0 * NaN)."""
        elems = 128 // self.dtype.width
        elem_bytes = self.dtype.width // 8
        chunks = self.d_qk // elems
        tpr = next(t for t in (8, 4, 2, 1) if chunks % t == 0)
        rows_per_pass = 32 // tpr
        assert self.tile_m % rows_per_pass == 0
        atom = cute.make_copy_atom(
            cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), self.dtype, num_bits_per_copy=128
        )
        thr_layout = cute.make_ordered_layout((rows_per_pass, tpr), order=(1, 0))
        tiled_copy = cute.make_tiled_copy_tv(atom, thr_layout, cute.make_layout((1, elems)))
        thr_copy = tiled_copy.get_slice(cute.arch.lane_idx())
        # This lane's row of a pass and its columns (the same in every pass).
        tXcX = thr_copy.partition_S(cute.make_identity_tensor((rows_per_pass, self.d_qk)))
        row_in_pass = tXcX[0, 0, 0][0]
        d_real = cute.size(mQ.shape[2])
        first = tile * self.tile_m
        rows_here = cutlass.min(seqlen.len_q * g - first, self.tile_m)
        # Passes of rows_per_pass rows while a row of the pass exists (a run-time loop: the
        # producer warp's 24-32 registers hold one pass's addresses).
        for m in cutlass.range((rows_here + rows_per_pass - 1) // rows_per_pass, unroll=1):
            tXsX = thr_copy.partition_D(cute.local_tile(sQ_stage, (rows_per_pass, self.d_qk), (m, 0)))
            row_in_tile = m * rows_per_pass + row_in_pass
            exists = row_in_tile < rows_here
            p = first + cutlass.min(row_in_tile, rows_here - 1)  # an existing row's address
            tok = p // g
            head = unit * g + (p - tok * g)
            row_addr = (mQ.iterator + cute.crd2idx((seqlen.offset_q + tok, head, 0), mQ.layout)).toint()
            for k in cutlass.range_constexpr(cute.size(tXsX, mode=[2])):
                col = tXcX[0, 0, k][1]
                src_ptr = cute.make_ptr(
                    self.dtype, row_addr + Int64(col * elem_bytes), cute.AddressSpace.gmem, assumed_align=16
                )
                src = cute.make_tensor(src_ptr, tXsX[None, 0, k].layout)
                pred = cute.make_fragment_like(tXsX[(0, None), 0, k], cutlass.Boolean)
                pred.fill(exists & (col < d_real))
                cute.copy(tiled_copy, src, tXsX[None, 0, k], pred=pred)

    @cute.jit
    def load_q_tile(self, tma_Q, sQ, tma_atom_Q, pipe_q, q_state, seqlen: SeqlenInfo, tile: Int32, head_idx: Int32):
        """One TMA load of rows tile * tile_m .. of query head head_idx (an unpacked tile)."""
        gQ = cute.local_tile(
            cute.domain_offset((seqlen.offset_q, 0), tma_Q[None, None, head_idx]), (self.tile_m, self.d_qk), (tile, 0)
        )
        tQsQ, tQgQ = cpasync.tma_partition(
            tma_atom_Q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2)
        )
        cute.copy(
            tma_atom_Q, tQgQ, tQsQ[None, q_state.index], tma_bar_ptr=pipe_q.producer_get_barrier(q_state), **self.q_hint()
        )  # fmt: skip

    @cute.jit
    def load_q_items(self, tma_Q, sQ, tma_atom_Q, pipe_q, q_state, seqlen: SeqlenInfo, items):
        """One TMA load per MMA warpgroup of its item's 64 rows (a packed tile; items: the tile's
        `items_of` words)."""
        sQ_stage = sQ[None, None, q_state.index]
        for w in cutlass.range_constexpr(self.num_mma_warpgroups):
            row_block, head_idx = items[2 * w], items[2 * w + 1]
            gQ = cute.local_tile(
                cute.domain_offset((seqlen.offset_q, 0), tma_Q[None, None, head_idx]),
                (ROW_BLOCK, self.d_qk),
                (row_block, 0),
            )
            tQsQ, tQgQ = cpasync.tma_partition(
                tma_atom_Q, 0, cute.make_layout(1),
                cute.group_modes(cute.local_tile(sQ_stage, (ROW_BLOCK, self.d_qk), (w, 0)), 0, 2),
                cute.group_modes(gQ, 0, 2),
            )  # fmt: skip
            cute.copy(tma_atom_Q, tQgQ, tQsQ, tma_bar_ptr=pipe_q.producer_get_barrier(q_state), **self.q_hint())

    @cute.jit
    def load_tile(
        self, loads, seqlen: SeqlenInfo, block_info: BlockInfo, tile: Int32, unit: Int32, batch_idx: Int32,
        q_state, kv_state, items=(), ticket_args=None, ahead=None,
    ):  # fmt: skip
        """Producer warp 0 (ragged): TMA loads of one tile's key blocks, last first, and Q after
        the first block's K (or alone when the tile sees no key). Returns (q_state, kv_state);
        with ticket_args = (num_tiles, mTileCounter) (TileConfig.ticket_early) also the next
        tile's ticket, taken ticket_early blocks before the end of the loads (at the first block
        of a tile with fewer, after them of a tile with none). ahead = (sched, mask_numbers,
        splits, q_issued) (TileConfig.q_ahead): a tile of at least ticket_early + 2 blocks decodes
        its successor after the K load of the block where it took the ticket and, if that one has
        query rows, issues its Q into the next Q buffer there (`q_issued` != 0: this tile's own Q
        was issued so by its predecessor); then returns (q_state, kv_state, ticket, q_next), q_next
        1 where it did."""
        q_tma, tma_K, tma_V, sQ, sK, sV, tma_atom_Q, tma_atom_K, tma_atom_V, pipe_q, pipe_k, pipe_v, sched = loads
        pack_r, ratio, row_mult = sched[2], sched[3], sched[12]
        head_kv = kv_head(unit, pack_r, ratio, row_mult)
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
        tKsK, tKgK = cpasync.tma_partition(
            tma_atom_K, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2), cute.group_modes(gK, 0, 2)
        )
        tVsV, tVgV = cpasync.tma_partition(
            tma_atom_V, 0, cute.make_layout(1), cute.group_modes(sV, 0, 2), cute.group_modes(gV, 0, 2)
        )
        n_block_min, n_block_max = block_info.n_block_range()
        n_blocks = n_block_max - n_block_min
        policy = self.kv_policy(seqlen.len_q, row_mult, pack_r, ratio) if const_expr(self.l2_hints) else None
        # Block i (i = 0 .. n_blocks - 1) is key block n_block_max - 1 - i; Q goes after block 0's K
        # (or alone when the tile sees no key; before it with q_first).
        own_q = Int32(1)
        if const_expr(ahead is not None):
            own_q = Int32(ahead[3] == 0)  # its predecessor issued this tile's Q
        if const_expr(self.q_first):
            if own_q != 0:
                self.load_q(q_tma, sQ, tma_atom_Q, pipe_q, q_state, seqlen, tile, unit, pack_r, items, sched[12])
        else:
            if n_blocks <= 0:
                if own_q != 0:
                    self.load_q(q_tma, sQ, tma_atom_Q, pipe_q, q_state, seqlen, tile, unit, pack_r, items, sched[12])
        if const_expr(ticket_args is not None):
            ticket = Int32(0)
            ticket_at = cutlass.max(n_blocks - self.ticket_early, 0)
        if const_expr(ahead is not None):
            q_next = Int32(0)
        for i in cutlass.range(n_blocks, unroll=1):
            n_block = n_block_max - 1 - i
            if const_expr(ticket_args is not None):
                if i == ticket_at:  # in flight during this block's stage waits
                    ticket = self.take_ticket(*ticket_args)
            self.load_kv_stage(pipe_k, tma_atom_K, tKgK, tKsK, n_block, kv_state, policy)
            if const_expr(not self.q_first):
                if i == 0:
                    if own_q != 0:
                        self.load_q(q_tma, sQ, tma_atom_Q, pipe_q, q_state, seqlen, tile, unit, pack_r, items, sched[12])
            if const_expr(ahead is not None):
                # A tile of at least ticket_early + 2 blocks: its successor's Q, between this block's K
                # and V (the ticket's atomic was in flight during K's stage wait). Two blocks in, the
                # previous tile, whose release frees that Q buffer, has long passed its last S GEMM.
                if i == ticket_at and i >= 2:
                    q_next = self.load_next_q(loads, ahead, ticket_args[0], ticket, q_state)
            self.load_kv_stage(pipe_v, tma_atom_V, tVgV, tVsV, n_block, kv_state, policy)
            kv_state.advance()
        q_state.advance()
        if const_expr(ticket_args is not None):
            if n_blocks <= 0:
                ticket = self.take_ticket(*ticket_args)
            if const_expr(ahead is not None):
                return q_state, kv_state, ticket, q_next
            return q_state, kv_state, ticket
        return q_state, kv_state

    @cute.jit
    def load_next_q(self, loads, ahead, num_tiles: Int64, ticket: Int32, q_state) -> Int32:
        """TileConfig.q_ahead, inside a tile's loads: the tile the ticket (lane 0's) gives, decoded
        as walk_tiles will decode it, gets its Q into the next Q buffer if it has query rows
        (q_stages 2: the buffer of the tile before this one, which releases it after its last S
        GEMM, or after its mainloop without early_q_release). Returns 1 where it did."""
        q_tma, _, _, sQ, _, _, tma_atom_Q, _, _, pipe_q, _, _, _ = loads
        sched_a, mask_numbers, splits = ahead[:3]
        issued = Int32(0)
        t_next = Int64(cute.arch.shuffle_sync(ticket, 0)) + Int64(cute.arch.grid_dim()[0])
        # (above 2**31 - 1 tiles no ticket is taken: walk_tiles strides statically, nothing ahead)
        if t_next < num_tiles and num_tiles <= Int64(2**31 - 1):
            t_dealt = t_next
            if const_expr(self.stream_mix):
                t_dealt = self.mixed_tile(t_next, num_tiles, sched_a[13])
            unit, tile, _, has_rows, seqlen, _, items, _ = self.tile_at(t_dealt, sched_a, mask_numbers, splits)
            if has_rows != 0:
                q_next_state = q_state.clone()
                q_next_state.advance()
                self.load_q(q_tma, sQ, tma_atom_Q, pipe_q, q_next_state, seqlen, tile, unit, sched_a[2], items, sched_a[12])
                issued = Int32(1)
        return issued

    @cute.jit
    def load_kv_stage(self, pipe, tma_atom, src: cute.Tensor, dst: cute.Tensor, n_block: Int32, kv_state, policy=None):
        """One K or V stage of `load_tile`: acquire it, then key block n_block's TMA copy (src: the
        partitioned global blocks, dst: the stages) into stage kv_state.index, on the stage's barrier.
        (The block's slice is taken after the acquire, as the code it replaced did: the same object.)
        policy: the copy's L2 cache_policy (`kv_policy`), or None for the default."""
        pipe.producer_acquire(kv_state)
        cute.copy(
            tma_atom, src[None, n_block], dst[None, kv_state.index], tma_bar_ptr=pipe.producer_get_barrier(kv_state),
            **cache_hint(policy),
        )  # fmt: skip
