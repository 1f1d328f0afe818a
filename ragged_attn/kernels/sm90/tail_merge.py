"""The device side of the tail split (TileConfig.tail_split): one MMA warpgroup's piece of a tail tile.

The launch's last `tail_tiles` tiles are each taken `tail_pieces` = S times (the linear order and
the pieces' key-block shares: tail_split.py, `tail_tile`); a piece's warpgroup ends its mainloop with
its 64 rows' normalised O and log2-domain LSE in registers (softmax.finalize). `merge_piece` then:

1. writes them, fp32, into the piece's slot of the workspace (`slot_floats` per (tile, warpgroup,
   piece); thread t of the warpgroup writes value k of its fragment at k * 128 + t, so each store
   of a warp covers 128 contiguous bytes; its rows' LSEs follow the O values);
2. the warpgroup meets at its named barrier; thread 0 fences (fence.acq_rel.gpu, cumulative over
   the barrier: every thread's writes are visible GPU-wide before the count says so) and adds 1 to
   the (tile, warpgroup) counter; the piece that takes it to S is the last: it puts the counter
   back to 0, fences again (acquire: the others' writes are visible to the loads after the
   barrier), and tells its warpgroup through shared memory (CUTLASS's split-K semaphore pattern);
3. the last piece's warpgroup reads all S slots in piece order, its own too (ld.global.cg: from L2,
   never a stale L1 line; its own slot by program order), so the result does not depend on which
   piece came last, and merges them into its registers: with m = max_s lse_s and
   w_s = exp2(lse_s - m), O = sum_s w_s O_s / sum_s w_s and lse = m + log2(sum_s w_s) (a piece that
   saw no key of a row has lse_s = -inf: weight 0; a row no piece saw gets O = 0, lse = -inf).

Returns 1 where this warpgroup stores the tile's rows (the last piece), else 0: its caller then runs
the epilogue with no rows (the same barriers and turns, nothing stored). Nothing waits on another
CTA, so pieces can never deadlock, whichever CTAs take them and in whatever order they finish.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64

from .softmax import acc_rows_view

WG_THREADS = 128


def slot_floats(d_v: int) -> int:
    """fp32 values of one (tile, warpgroup, piece) slot of the workspace for a class of head dim d_v
    (its O envelope): each of 128 threads holds 64 x d_v / 128 O values of its 2 rows, and the two
    rows' LSEs."""
    rows_per_thread = 2
    return (64 * d_v // WG_THREADS + rows_per_thread) * WG_THREADS


def _ptr(mTensor: cute.Tensor, index: Int64):
    return mTensor.iterator + index


@cute.jit
def merge_piece(
    acc_O: cute.Tensor,  # this thread's normalised O fragment (fp32)
    lse2: cute.Tensor,  # (rows per thread,) log2-domain LSE or -inf (softmax.row_sum after finalize)
    mTailWork: cute.Tensor,  # (n,) fp32 workspace: tail_tiles x MMA warpgroups x pieces slots
    mTailCount: cute.Tensor,  # (tail_tiles x MMA warpgroups,) int32, 0 before the launch and after it
    sLast: cute.Tensor,  # (MMA warpgroups,) int32 smem: the broadcast of step 2
    tail_idx: Int32,  # which tail tile (0 .. tail_tiles - 1)
    piece: Int32,
    pieces: Int32,
    wg_idx: Int32,
    t: Int32,  # this thread's index in its warpgroup (0 .. 127)
    num_wg: cutlass.Constexpr[int],
    barrier_id: Int32,  # the warpgroup's own named barrier (128 threads)
) -> Int32:
    """Steps 1-3 of the module docstring for one warpgroup; returns 1 where it stores the tile."""
    acc_mn = acc_rows_view(acc_O)
    n_rows = cute.size(acc_mn, mode=[0])
    n_cols = cute.size(acc_mn, mode=[1])
    slot = (n_rows * n_cols + n_rows) * WG_THREADS
    group = (Int64(tail_idx) * Int64(num_wg) + Int64(wg_idx)) * Int64(pieces)
    mine = (group + Int64(piece)) * Int64(slot) + Int64(t)
    for r in cutlass.range_constexpr(n_rows):
        for c in cutlass.range_constexpr(n_cols):
            cute.arch.store(_ptr(mTailWork, mine + (r * n_cols + c) * WG_THREADS), acc_mn[r, c], cop="cg")
        cute.arch.store(_ptr(mTailWork, mine + (n_rows * n_cols + r) * WG_THREADS), lse2[r], cop="cg")
    cute.arch.barrier(barrier_id=barrier_id, number_of_threads=WG_THREADS)
    if t == 0:
        counter = _ptr(mTailCount, Int64(tail_idx) * Int64(num_wg) + Int64(wg_idx))
        cute.arch.fence_acq_rel_gpu()
        arrived = Int32(cute.arch.atomic_add(counter, Int32(1), sem="relaxed", scope="gpu"))
        last_piece = Int32(arrived == pieces - 1)
        if last_piece != 0:
            cute.arch.store(counter, Int32(0), cop="cg")  # every piece has counted: the launch leaves it 0
            cute.arch.fence_acq_rel_gpu()
        sLast[wg_idx] = last_piece
    cute.arch.barrier(barrier_id=barrier_id, number_of_threads=WG_THREADS)
    last = sLast[wg_idx]
    if last != 0:
        # Every slot in piece order, this piece's own read back too: the sums' order, and so the
        # result, is the same whichever piece arrives last (run to run, and in a CUDA graph).
        first = group * Int64(slot) + Int64(t)
        for r in cutlass.range_constexpr(n_rows):
            lse_at = Int64((n_rows * n_cols + r) * WG_THREADS)
            m = -Float32.inf
            for s in cutlass.range(pieces, unroll=1):
                m = cute.arch.fmax(m, cute.arch.load(_ptr(mTailWork, first + Int64(s) * Int64(slot) + lse_at), Float32, cop="cg"))
            m_safe = Float32(0.0) if m == -Float32.inf else m
            total = Float32(0.0)
            acc_mn[r, None].fill(0.0)
            for s in cutlass.range(pieces, unroll=1):
                at = first + Int64(s) * Int64(slot)
                w = cute.math.exp2(cute.arch.load(_ptr(mTailWork, at + lse_at), Float32, cop="cg") - m_safe, fastmath=True)
                total = total + w
                for c in cutlass.range_constexpr(n_cols):
                    acc_mn[r, c] = acc_mn[r, c] + w * cute.arch.load(
                        _ptr(mTailWork, at + Int64((r * n_cols + c) * WG_THREADS)), Float32, cop="cg"
                    )
            empty = total == Float32(0.0)
            scale = Float32(0.0) if empty else cute.arch.rcp_approx(total)
            acc_mn[r, None].store(acc_mn[r, None].load() * scale)
            lse2[r] = -Float32.inf if empty else m_safe + cute.math.log2(total, fastmath=True)
    return last


def merge_ref(o_pieces, lse_pieces):
    """float64 twin of step 3 for one row: o_pieces (S lists of d values), lse_pieces (S log2-domain
    LSEs, -inf for none). Returns (O, lse)."""
    import math

    m = max(lse_pieces)
    m_safe = 0.0 if m == -math.inf else m
    w = [2.0 ** (x - m_safe) if x != -math.inf else 0.0 for x in lse_pieces]
    total = sum(w)
    if total == 0.0:
        return [0.0] * len(o_pieces[0]), -math.inf
    o = [sum(ws * o[j] for ws, o in zip(w, o_pieces)) / total for j in range(len(o_pieces[0]))]
    return o, m_safe + math.log2(total)
