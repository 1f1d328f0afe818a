"""The MMA warpgroups' mainloops of the sm_90a forward kernel (a mixin of RaggedForwardSm90).

Per tile each MMA warpgroup runs `tile_mainloop`: S = Q K^T (SS WGMMA), mask on boundary blocks,
online softmax, O += P V (RS WGMMA, P in registers), over the key blocks its own 64 query rows
see, last block first; blocks no row of the warpgroup sees (and tiles where it holds no row) it
only keeps step through (`mainloop_idle`): it waits for and releases their K/V stages and passes
their ping-pong turns. Ping-pong: the warpgroups take turns issuing GEMMs through a ring of named
barriers (ids SCHED_BARRIER_BASE + warpgroup), one turn per key block.

Contract rules (tests/gpu/test_kernel_sm90.py: the idle_warpgroups_* and window cases):
1. Every MMA warp releases every K/V stage of every tile, whatever it computes.
2. Per tile every warpgroup takes as many turns as it passes, so the ring starts each tile at
   warpgroup 0.
3. An idle warpgroup takes turn i only after releasing block i's stages: a sibling's turn i + 1
   may wait for block i + 2, whose stage needs those releases first.

Attributes the mixin reads (set by RaggedForwardSm90.__init__): dtype, paged, pingpong, overlap,
turn_first_gemm, wg_skip, num_mma_warpgroups, paged_consumer_fence, fence_gathered_only, tile_n.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .mask import apply_mask
from .softmax import rescale_rows, store_p

SCHED_BARRIER_BASE = 2  # ids 2 .. 4: ping-pong turns of the MMA warpgroups (one id each)


class MmaMainloops:
    """The mainloop methods of the forward kernel's MMA warpgroups."""

    @cute.jit
    def tile_mainloop(
        self, tiled_mma_qk, tiled_mma_pv, tSrQ, tSrK, tOrVt, tOrP, acc_O, acc_S_shape, softmax,
        pipe_k, pipe_v, block_info, len_q: Int32, row0: Int32, wg_idx: Int32, mask_args, kv_state,
        q_release=None, row_mult=None, kv_boxed=None,
    ):
        """One MMA warpgroup's key blocks of a tile: the mainloop over the blocks its own 64 rows
        see and, for the others, `mainloop_idle`, so that every warpgroup releases every K/V stage
        and takes as many ping-pong turns as its siblings. Returns the K/V state of the next tile.
        q_release = (pipe_q, q_state) (overlapped mainloop with wg_skip only): the warpgroup
        releases Q as soon as its last S GEMM is done, or at once when it computes no block, so
        the producer loads the next tile's Q under this tile's last softmax, P V and epilogue;
        None: the caller releases Q after the mainloop. row0: the sequence row of tile row 0 for this
        warpgroup (its own 64 rows are row0 + 64 wg_idx ..; tile_scheduler.py's items). kv_boxed:
        None (every paged stage wait fences), or with fence_gathered_only Int32 1 where the launch's
        whole key blocks come by TMA boxes (`kv_wait`)."""
        n_block_min, n_block_max = block_info.n_block_range()
        # A warpgroup whose 64 rows all lie past len_q (a sequence's partial last tile) only
        # keeps step: it releases each K/V stage and passes its turns, issuing no GEMM.
        wg_row_first = row0 + 64 * wg_idx
        wg_has_rows = wg_row_first < len_q
        if const_expr(row_mult is not None):  # row packing: len_q * row_mult packed rows
            wg_has_rows = wg_row_first < len_q * row_mult
        if const_expr(self.wg_skip):
            # Per warpgroup: the tile's key blocks that none of its own rows sees (causal
            # and right windows: the last blocks, for the lower warpgroups of a diagonal
            # tile; left windows: the first blocks, for the upper ones) it only keeps step
            # through, one turn each; the mainloop runs on the blocks between.
            if n_block_max > n_block_min:
                wg_max = n_block_min
                wg_min = n_block_min
                if wg_has_rows:
                    if const_expr(row_mult is None):
                        wg_max = cutlass.max(block_info.n_block_max_rows(wg_row_first, 64), n_block_min)
                        wg_min = cutlass.min(cutlass.max(block_info.n_block_min_rows(wg_row_first), n_block_min), wg_max)
                    else:
                        # The tokens of the warpgroup's first and last packed rows.
                        tok_first = wg_row_first // row_mult
                        tok_last = (cutlass.min(wg_row_first + 64, len_q * row_mult) - 1) // row_mult
                        wg_max = cutlass.max(block_info.n_block_max_last(tok_last), n_block_min)
                        wg_min = cutlass.min(cutlass.max(block_info.n_block_min_rows(tok_first), n_block_min), wg_max)
                if const_expr(q_release is not None):
                    if wg_max <= wg_min:  # no S GEMM of this warpgroup reads Q
                        q_release[0].consumer_release(q_release[1])
                skip = n_block_max - wg_max
                if skip > 0:
                    kv_state = self.mainloop_idle(pipe_k, pipe_v, skip, skip, wg_idx, kv_state)
                if wg_max > wg_min:
                    kv_state = self.mainloop_overlap(
                        tiled_mma_qk, tiled_mma_pv, tSrQ, tSrK, tOrVt, tOrP, acc_O, acc_S_shape, softmax,
                        pipe_k, pipe_v, block_info, wg_min, wg_max, wg_idx, mask_args, kv_state, q_release,
                        kv_boxed,
                    )  # fmt: skip
                rest = wg_min - n_block_min
                if rest > 0:
                    kv_state = self.mainloop_idle(pipe_k, pipe_v, rest, rest, wg_idx, kv_state)
            else:
                if const_expr(q_release is not None):
                    q_release[0].consumer_release(q_release[1])
        elif const_expr(self.overlap):
            if n_block_max > n_block_min:
                if wg_has_rows:
                    kv_state = self.mainloop_overlap(
                        tiled_mma_qk, tiled_mma_pv, tSrQ, tSrK, tOrVt, tOrP, acc_O, acc_S_shape, softmax,
                        pipe_k, pipe_v, block_info, n_block_min, n_block_max, wg_idx, mask_args, kv_state,
                        None, kv_boxed,
                    )  # fmt: skip
                else:
                    turns = n_block_max - n_block_min - 1
                    if const_expr(self.turn_first_gemm):
                        turns += 1
                    kv_state = self.mainloop_idle(pipe_k, pipe_v, n_block_max - n_block_min, turns, wg_idx, kv_state)
        else:
            if wg_has_rows:
                kv_state = self.mainloop_plain(
                    tiled_mma_qk, tiled_mma_pv, tSrQ, tSrK, tOrVt, tOrP, acc_O, acc_S_shape, softmax,
                    pipe_k, pipe_v, block_info, n_block_min, n_block_max, wg_idx, mask_args, kv_state,
                )  # fmt: skip
            else:
                kv_state = self.mainloop_idle(
                    pipe_k, pipe_v, n_block_max - n_block_min, n_block_max - n_block_min + 1, wg_idx, kv_state
                )  # fmt: skip
        return kv_state

    @cute.jit
    def mainloop_plain(
        self, tiled_mma_qk, tiled_mma_pv, tSrQ, tSrK, tOrVt, tOrP, acc_O, acc_S_shape, softmax,
        pipe_k, pipe_v, block_info, n_block_min, n_block_max, wg_idx, mask_args, kv_state,
    ):
        """One GEMM pair per key block, no overlap inside a warpgroup (tools' comparisons only).
        Per tile each warpgroup waits n + 1 times and passes n + 1 times (see sched_wait)."""
        self.sched_wait(wg_idx)
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
        return kv_state

    @cute.jit
    def mainloop_idle(self, pipe_k, pipe_v, n_blocks: Int32, turns: Int32, wg_idx: Int32, kv_state):
        """A warpgroup without rows in this tile: wait for and release each of the tile's K/V
        stages (every MMA warp releases every stage) and take and pass as many ping-pong turns as
        the mainloop of its siblings does, one after each block; O stays 0, the softmax state empty."""
        fence = not self.fence_gathered_only  # no GEMM of this warpgroup reads the stages
        for i in cutlass.range(n_blocks, unroll=1):
            self.kv_wait(pipe_k, kv_state, fence)
            pipe_k.consumer_release(kv_state)
            self.kv_wait(pipe_v, kv_state, fence)
            pipe_v.consumer_release(kv_state)
            kv_state.advance()
            # Turn i after block i's stages: a sibling's turn i needs K(i) and, with 2 stages,
            # V(i) may wait for the releases of block i - 2, which this warpgroup gave first.
            # (With one stage this order deadlocks: forward.py refuses that config.)
            if i < turns:
                self.sched_wait(wg_idx)
                self.sched_pass(wg_idx)
        for _ in cutlass.range(turns - n_blocks, unroll=1):
            self.sched_wait(wg_idx)
            self.sched_pass(wg_idx)
        return kv_state

    @cute.jit
    def mask_softmax(
        self, acc_S, n_block, block_info, softmax, tOrP, acc_O, mask_args, rescale: cutlass.Constexpr[bool],
        masked: cutlass.Constexpr[bool] = True,
    ):
        """Mask (boundary blocks only), online softmax, P -> 16-bit A fragment, O rescale.
        masked=False: the caller knows no element of the block is masked (no mask code at all)."""
        tScS, row0, tile_n, has_left, has_right, len_k, off, left, right = mask_args[:9]
        # Row packing's tiles: the rows' tokens (forward.row_tokens) after the numbers (and the cap).
        n_args = 10 if const_expr(self.softcap) else 9
        rows = mask_args[n_args] if const_expr(len(mask_args) > n_args) else None
        if const_expr(self.softcap):
            # Issue 14: S -> tanh(S * softmax_scale / softcap) before the mask (the softmax's
            # scale is softcap * log2(e) for this class); PTX tanh.approx.f32, one per element.
            softcap_mult = mask_args[9]
            for i in cutlass.range(cute.size(acc_S), unroll_full=True):
                acc_S[i] = cute.math.tanh(acc_S[i] * softcap_mult, approx=True)
        if const_expr(masked):
            if block_info.needs_mask(n_block):
                apply_mask(acc_S, tScS, row0, n_block, tile_n, has_left, has_right, len_k, off, left, right, rows)
        row_scale = softmax.step(acc_S)
        if const_expr(rescale):
            store_p(tOrP, acc_S, self.dtype)
            rescale_rows(acc_O, row_scale)
        return row_scale

    @cute.jit
    def mainloop_overlap(
        self, tiled_mma_qk, tiled_mma_pv, tSrQ, tSrK, tOrVt, tOrP, acc_O, acc_S_shape, softmax,
        pipe_k, pipe_v, block_info, n_block_min, n_block_max, wg_idx, mask_args, kv_state, q_release=None,
        kv_boxed=None,
    ):
        """Intra-warpgroup overlap: the softmax of block n runs while O += P V of block n + 1 is
        on the tensor cores. Prologue: S and P of the first block; each step issues S of the next
        block and P V of the previous one, softmaxes the new S under the PV GEMM; epilogue: last PV.
        Needs n_block_max > n_block_min. Scheduling barriers bracket each step's GEMM issue
        (n - 1 waits and passes per warpgroup). Returns the K/V state of the next tile's first block.
        q_release = (pipe_q, q_state): Q is released once the last S GEMM (block n_block_min) is done.
        kv_boxed (fence_gathered_only): each wait fences only a gathered stage (`stage_gathered`); the
        interior loop, whose blocks lie inside len_k, is traced twice: without fences (the launch's
        whole blocks come by boxes) and with them."""
        len_k = mask_args[5]
        self.kv_wait(pipe_k, kv_state, self.stage_gathered(kv_boxed, n_block_max - 1, len_k))
        acc_S = cute.make_rmem_tensor(acc_S_shape, Float32)
        if const_expr(self.turn_first_gemm):
            self.sched_wait(wg_idx)
            self.gemm(tiled_mma_qk, acc_S, tSrQ, tSrK[None, None, None, kv_state.index], False, wait=False)
            self.sched_pass(wg_idx)
            warpgroup.wait_group(0)
        else:
            self.gemm(tiled_mma_qk, acc_S, tSrQ, tSrK[None, None, None, kv_state.index], False)
        pipe_k.consumer_release(kv_state)
        if const_expr(q_release is not None):
            if n_block_max - 1 == n_block_min:
                q_release[0].consumer_release(q_release[1])
        self.mask_softmax(acc_S, n_block_max - 1, block_info, softmax, tOrP, acc_O, mask_args, False)
        store_p(tOrP, acc_S, self.dtype)
        # The other blocks, last first, in up to three loops by what they need: those crossing
        # the right bound (masked), the interior (no mask code: a branch-free loop body lets
        # ptxas schedule the softmax around the wgmma waits, as in FA3's and FA4's peeled
        # loops), those crossing the left bound (masked). Blocks [n_lo, n_hi) need no mask.
        n_lo, n_hi = block_info.unmasked_range()
        hi_end = n_block_max - 1  # no right bound: only the last block may cross len_k
        if const_expr(self.has_right):
            hi_end = cutlass.max(cutlass.min(n_hi, n_block_max - 1), n_block_min)
        lo_end = n_block_min
        if const_expr(self.has_left):
            lo_end = cutlass.min(cutlass.max(n_lo, n_block_min), hi_end)
        step_args = (
            tiled_mma_qk, tiled_mma_pv, tSrQ, tSrK, tOrVt, tOrP, acc_O, acc_S_shape, softmax,
            pipe_k, pipe_v, block_info, n_block_min, wg_idx, mask_args, q_release, kv_boxed,
        )  # fmt: skip
        if const_expr(self.has_right):
            kv_state = self.overlap_steps(step_args, n_block_max - 1, hi_end, kv_state, True)
        if const_expr(kv_boxed is None):
            kv_state = self.overlap_steps(step_args, hi_end, lo_end, kv_state, False)
        else:
            if kv_boxed != 0:
                # The interior's first step waits for block hi_end's V (the block before it): the
                # one stage of the loop that may have been gathered (hi_end crossing len_k).
                if hi_end > lo_end:
                    if (hi_end + 1) * self.tile_n > len_k:
                        self.kv_wait(pipe_v, kv_state)
                kv_state = self.overlap_steps(step_args, hi_end, lo_end, kv_state, False, False)
            else:
                kv_state = self.overlap_steps(step_args, hi_end, lo_end, kv_state, False, True)
        if const_expr(self.has_left):
            kv_state = self.overlap_steps(step_args, lo_end, n_block_min, kv_state, True)
        self.kv_wait(pipe_v, kv_state, self.stage_gathered(kv_boxed, n_block_min, len_k))
        self.gemm(tiled_mma_pv, acc_O, tOrP, tOrVt[None, None, None, kv_state.index], True)
        pipe_v.consumer_release(kv_state)
        kv_state.advance()
        return kv_state

    @cute.jit
    def overlap_steps(
        self, step_args, end: Int32, begin: Int32, kv_state, masked: cutlass.Constexpr[bool], fence=None
    ):  # fmt: skip
        """`overlap_step` for key blocks end - 1 down to begin (none when end <= begin). The step
        whose block end - 1 - i is n_block_min releases Q (q_release): i == end - 1 - n_block_min,
        a loop invariant (no step where the loop ends above n_block_min). Compared per step as
        n_block == n_block_min, a run-time n_block_min (split-KV's share, a left window) cost the
        interior loop 3 uniform instructions and ptxas then put the P V wait ~50 instructions
        earlier in the softmax (static SASS, d128 causal; H200: 1 x 16384 -4%); with the
        invariant the loop has main's instruction mix and P V wait placement (no split-KV there:
        n_block_min a trace-time 0). Classes with a left bound, whose n_block_min is run time
        without split-KV too, keep the per-step test (their loops stay main's exactly; the
        invariant would change them: d128 window 505 -> 501, wait 233 -> 286, unmeasured).
        fence (kv_boxed given): a bool for every wait of the loop (the interior's two copies),
        None: per stage (`stage_gathered` of block n_block's K and block n_block + 1's V)."""
        n_block_min = step_args[12]  # overlap_step's step_args
        kv_boxed, len_k = step_args[16], step_args[14][5]
        release_i = end - 1 - n_block_min
        for i in cutlass.range(end - begin, unroll=1):
            n_block = end - 1 - i
            release_q = i == release_i
            if const_expr(self.has_left or not step_args[11].split):
                release_q = n_block == n_block_min
            fence_k, fence_v = True, True
            if const_expr(fence is not None):
                fence_k, fence_v = fence, fence
            elif const_expr(kv_boxed is not None):
                fence_k = self.stage_gathered(kv_boxed, n_block, len_k)
                fence_v = self.stage_gathered(kv_boxed, n_block + 1, len_k)
            kv_state = self.overlap_step(step_args, n_block, kv_state, masked, release_q, fence_k, fence_v)
        return kv_state

    @cute.jit
    def overlap_step(
        self, step_args, n_block: Int32, kv_state, masked: cutlass.Constexpr[bool], release_q, fence_k=True, fence_v=True
    ):  # fmt: skip
        """One step of `mainloop_overlap`: issue S of block n_block and P V of the block before it,
        softmax the new S under the P V GEMM. kv_state: the previous block's stages on entry, this
        block's on return. masked=False: block n_block needs no mask (BlockInfo.unmasked_range).
        release_q: n_block is n_block_min (`overlap_steps`), where q_release releases Q. fence_k,
        fence_v: `kv_wait`'s fence for the K and V waits."""
        (
            tiled_mma_qk, tiled_mma_pv, tSrQ, tSrK, tOrVt, tOrP, acc_O, acc_S_shape, softmax,
            pipe_k, pipe_v, block_info, n_block_min, wg_idx, mask_args, q_release, _,
        ) = step_args  # fmt: skip
        v_state = kv_state.clone()
        kv_state.advance()
        self.kv_wait(pipe_k, kv_state, fence_k)
        self.sched_wait(wg_idx)
        acc_S = cute.make_rmem_tensor(acc_S_shape, Float32)
        self.gemm(tiled_mma_qk, acc_S, tSrQ, tSrK[None, None, None, kv_state.index], False, wait=False)
        self.kv_wait(pipe_v, v_state, fence_v)
        self.gemm(tiled_mma_pv, acc_O, tOrP, tOrVt[None, None, None, v_state.index], True, wait=False)
        self.sched_pass(wg_idx)
        warpgroup.wait_group(1)  # S done, PV may still run
        pipe_k.consumer_release(kv_state)
        if const_expr(q_release is not None):
            if release_q:  # block n_block_min: the last S GEMM reading Q is done
                q_release[0].consumer_release(q_release[1])
        row_scale = self.mask_softmax(acc_S, n_block, block_info, softmax, tOrP, acc_O, mask_args, False, masked)
        warpgroup.wait_group(0)
        pipe_v.consumer_release(v_state)
        store_p(tOrP, acc_S, self.dtype)
        rescale_rows(acc_O, row_scale)
        return kv_state

    @cute.jit
    def kv_wait(self, pipe, state, fence=True):
        """Wait for a K or V stage. Paged stages the gather wrote (cp.async: generic proxy) are
        fenced into the async proxy before WGMMA reads them; those TMA boxes wrote need no fence
        (async proxy, completed on the stage barrier), as the ragged class's. fence: True or False
        (trace time), or a run-time Boolean (`stage_gathered`); it counts only in paged classes."""
        pipe.consumer_wait(state)
        if const_expr(self.paged and self.paged_consumer_fence):
            if const_expr(isinstance(fence, bool)):
                if const_expr(fence):
                    cute.arch.fence_view_async_shared()
            else:
                if fence:
                    cute.arch.fence_view_async_shared()

    @cute.jit
    def stage_gathered(self, kv_boxed, n_block: Int32, len_k: Int32):
        """Whether the gather wrote key block n_block's stages (paged_producer.box_block's complement):
        True (trace time) without kv_boxed; else the launch's pools take no boxes or the block
        crosses len_k."""
        if const_expr(kv_boxed is None):
            return True
        return (kv_boxed == 0) | ((n_block + 1) * self.tile_n > len_k)

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
    # barrier before issuing GEMMs and, once issued, arrives on the next one's (a ring: 0 -> 1 -> 0,
    # or 0 -> 1 -> 2 -> 0); each barrier counts its waiter's 128 threads and the passer's 128.
    # Warpgroup 0 arrives on its own once per CTA (`mma`), then each tile makes as many waits as
    # passes per warpgroup, so the turn is warpgroup 0's again at every tile's start.
    @cute.jit
    def sched_wait(self, wg_idx: Int32):
        if const_expr(self.pingpong):
            cute.arch.barrier(barrier_id=SCHED_BARRIER_BASE + wg_idx, number_of_threads=256)

    @cute.jit
    def sched_pass(self, wg_idx: Int32):
        if const_expr(self.pingpong):
            nxt = wg_idx + 1
            if nxt == self.num_mma_warpgroups:
                nxt = Int32(0)
            cute.arch.barrier_arrive(barrier_id=SCHED_BARRIER_BASE + nxt, number_of_threads=256)


def overlap_fences_ref(n_min, n_max, n_lo, n_hi, len_k, tile_n, kv_boxed, has_left, has_right):
    """Pure-Python twin of `MmaMainloops.mainloop_overlap`'s stage waits and their fences, for
    tests: [(stage, n_block, fenced)] in the order the warpgroup waits, stage "K" or "V" (a wait
    before a GEMM reads it) or "V early" (the wait before the interior loop, fence_gathered_only);
    kv_boxed None (every wait fences), 0 or 1 as the kernel's. Blocks [n_min, n_max), the
    warpgroup's; (n_lo, n_hi): `BlockInfo.unmasked_range` of the tile."""

    def gathered(n):
        return kv_boxed is None or kv_boxed == 0 or (n + 1) * tile_n > len_k

    waits = [("K", n_max - 1, gathered(n_max - 1))]
    hi_end = max(min(n_hi, n_max - 1), n_min) if has_right else n_max - 1
    lo_end = min(max(n_lo, n_min), hi_end) if has_left else n_min

    def steps(end, begin, fence):
        for n in range(end - 1, begin - 1, -1):
            fence_k, fence_v = (fence, fence) if fence is not None else (gathered(n), gathered(n + 1))
            waits.extend([("K", n, fence_k), ("V", n + 1, fence_v)])

    if has_right:
        steps(n_max - 1, hi_end, None)
    if kv_boxed is None or kv_boxed == 0:
        steps(hi_end, lo_end, True)
    else:
        if hi_end > lo_end and (hi_end + 1) * tile_n > len_k:
            waits.append(("V early", hi_end, True))
        steps(hi_end, lo_end, False)
    if has_left:
        steps(lo_end, n_min, None)
    waits.append(("V", n_min, gathered(n_min)))
    return waits
