"""Epilogue of the sm_90a forward kernel: O and LSE stores for one tile (or one warpgroup's item of it).

O goes registers -> smem (its own buffer, stmatrix), then either one TMA store per warpgroup of
64 rows that all lie below len_q (`o_tma`: the async proxy reads sO; the next epilogue's first
barrier waits for that read), or smem -> registers -> 128-bit global stores with a row predicate
(rows >= len_q are never stored; a TMA store of a partial block would write the next sequence's
rows). LSE uses one addressing formula with run-time
element strides: lse[b * s_b + cu_seqlens_q[b] * s_tok + row * s_row + h * s_h]; rows in
[len_q, lse_s_max) get -inf (lse_s_max = 0 unless the layout is padded). Split-KV: O rows and token-row
LSE entries start at the sequence's output offset, seqlen.offset_o (split s of a launch with
num_splits > 1: offset_q + s * total_q, rows of the split-major workspace); Q's offset_q otherwise.
"""

from __future__ import annotations

from typing import Optional

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, const_expr
from cutlass.cute.nvgpu import cpasync

from .seqlen_info import SeqlenInfo
from .softmax import acc_as_operand_a, acc_rows_view, convert_k16


@cute.jit
def lse_index(seqlen, batch_idx, head_idx, row, s_b, s_tok, s_row, s_h) -> Int64:
    """lse[b * s_b + cu_seqlens_q[b] * s_tok + row * s_row + h * s_h] (element units, 64-bit), with
    cu_seqlens_q[b] the sequence's output row offset (seqlen.offset_o: split-KV's splits store into
    rows s * total_q + ... of their workspace)."""
    return Int64(batch_idx) * s_b + Int64(seqlen.offset_o) * s_tok + Int64(row) * s_row + Int64(head_idx) * s_h


# A turn at the shared O block (o_turns): the waiting warpgroup's 128 threads and the passing one's
# storing warp, or with TileConfig.o_turn_every_thread its 128.
O_TURN_THREADS = 128 + 32
O_TURN_THREADS_EVERY = 256


def turn_threads(every_thread: bool) -> int:
    """The thread count of a turn's named barrier (trace time)."""
    return O_TURN_THREADS_EVERY if every_thread else O_TURN_THREADS


@cute.jit
def store_tile(
    acc_O: cute.Tensor,
    lse2: cute.Tensor,  # (rows per thread,) log2-domain LSE or -inf
    tiled_mma_pv: cute.TiledMma,
    gmem_tiled_copy_O: cute.TiledCopy,
    sO: cute.Tensor,
    mO: cute.Tensor,
    mLSE: Optional[cute.Tensor],
    seqlen: SeqlenInfo,
    tidx: Int32,
    row0: Int32,  # the sequence row of tile row 0: m_block * tile_m, or per warpgroup 64 * (row block - wg_idx)
    head_idx: Int32,  # the query head of these rows (per warpgroup with GQA packing)
    batch_idx: Int32,
    lse_s_max: Int32,
    lse_s_b: Int64,
    lse_s_tok: Int64,
    lse_s_row: Int64,
    lse_s_h: Int64,
    lse_scale: Float32,
    tile_m: cutlass.Constexpr[int],
    d_v: cutlass.Constexpr[int],
    out_dtype: cutlass.Constexpr,
    has_lse: cutlass.Constexpr[bool],
    num_mma_threads: cutlass.Constexpr[int],
    barrier_id: cutlass.Constexpr[int],
    o_aliases_q: cutlass.Constexpr[bool],
    pipe_q,
    q_state,
    wg_local: cutlass.Constexpr[bool],
    wg_idx: Int32,
    wg_barrier_base: cutlass.Constexpr[int],
    o_tma=(None, None),  # (tma_atom_O, tma_O): TMA stores of full 64-row blocks (wg_local only)
    o_turn=None,  # (one warpgroup's P V tiled MMA, turn barrier base, warpgroups, every thread): sO holds 64 rows
    row_mult=None,  # row packing's classes: packed rows per token (1: the launch does not pack rows)
):
    """O (normalised, fp32 registers) -> out dtype -> smem (stmatrix) -> 128-bit global stores of
    rows < len_q and columns < mO's run-time head dim (an envelope class never writes the columns
    past the real d_v); LSE (scaled to its base) for rows < len_q, -inf for padded rows < lse_s_max.
    A named barrier over the MMA threads comes first: the previous tile's O reads (a persistent
    CTA reuses sO) and, when sO is Q's buffer (o_aliases_q), every MMA warpgroup's GEMMs reading
    sQ are done before sO is written; then each warp releases Q (pipe_q, q_state) once it has read
    its O rows back, so the producer may load the next tile's Q into that buffer.
    o_tma (wg_local, O in its own buffer): a warpgroup whose 64 rows all lie below len_q stores them
    with one TMA store issued by its first warp, which waits for that store's smem read before the
    first barrier of its next epilogue (and the kernel's exit).
    o_turn (wg_local): sO holds one warpgroup's 64 rows and the warpgroups take it in turns, in
    warpgroup order: each waits for its turn (named barrier turn base + wg_idx: its 128 threads and
    the previous holder's storing warp) before writing sO, and its storing warp passes the turn on
    once sO has been read (its TMA store's read done, or after the warpgroup read its rows back).
    With o_turn's "every thread" (TileConfig.o_turn_every_thread) every thread of the warpgroup
    passes (O_TURN_THREADS_EVERY: the waiter's 128 and the passer's 128), the storing warp after its TMA
    store's read (the turn completes with the last arrival): a pass under the storing warp's branch
    made ptxas keep the MMA warpgroups' pipeline state in per-thread registers (d192 causal interior
    loop 567 instructions, 40 R2UR and 44 IMAD for the WGMMA descriptors; every thread passing: 514,
    the descriptors in uniform registers as in the classes without o_turns; static SASS, 2026-12-04).
    row_mult (classes with row packing; tile_scheduler.py): where it is > 1, row0 counts packed
    rows, head_idx is the unit's K/V head, and packed row m is token m // row_mult of query head
    head_idx * row_mult + m % row_mult: LSE and O (predicated 128-bit stores, never the TMA store)
    go to that token's row and head, rows m < len_q * row_mult only."""
    tma_atom_O, tma_O = o_tma
    use_tma = const_expr(tma_atom_O is not None)
    use_turns = const_expr(o_turn is not None)
    rO = cute.make_rmem_tensor_like(acc_O, out_dtype)
    # by k16 chunks where d_v / 16 is not a power of two (d96 whole: 48 unpacked cvts a thread a tile)
    convert_k16(acc_as_operand_a(rO), acc_as_operand_a(acc_O), out_dtype)
    stmatrix = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(transpose=False, num_matrices=4), out_dtype)
    if const_expr(use_turns):
        cute.arch.barrier(barrier_id=o_turn[1] + wg_idx, number_of_threads=turn_threads(o_turn[3]))
        smem_copy = cute.make_tiled_copy_C(stmatrix, o_turn[0]).get_slice(tidx % 128)
    else:
        if const_expr(use_tma):
            if tidx % 128 < 32:  # the storing warp: its previous TMA store has read this sO block
                cute.arch.cp_async_bulk_wait_group(0, read=True)
        epilogue_barrier(wg_local, wg_idx, wg_barrier_base, barrier_id, num_mma_threads)
        smem_copy = cute.make_tiled_copy_C(stmatrix, tiled_mma_pv).get_slice(tidx)
    cute.copy(smem_copy, smem_copy.retile(rO), smem_copy.partition_D(sO))

    rows_left = seqlen.len_q - row0  # may be <= 0 for a warpgroup whose item lies past len_q
    if const_expr(row_mult is not None):
        rows_left = seqlen.len_q * row_mult - row0  # packed rows
    if const_expr(has_lse and row_mult is not None):
        store_lse_packed(
            lse2, tiled_mma_pv, mLSE, seqlen, tidx, row0, head_idx, batch_idx, row_mult, rows_left,
            lse_s_b, lse_s_tok, lse_s_row, lse_s_h, lse_scale, tile_m, d_v,
        )  # fmt: skip
    elif const_expr(has_lse):
        store_lse(
            lse2, tiled_mma_pv, mLSE, seqlen, tidx, row0, head_idx, batch_idx, rows_left, lse_s_max,
            lse_s_b, lse_s_tok, lse_s_row, lse_s_h, lse_scale, tile_m, d_v,
        )  # fmt: skip

    if const_expr(use_tma):
        cute.arch.fence_view_async_shared()  # the stmatrix writes, before the async proxy reads them
    epilogue_barrier(wg_local, wg_idx, wg_barrier_base, barrier_id, num_mma_threads)
    # The rows this thread's copy covers: the warpgroup's own 64 (wg_local) or the whole tile.
    rows = 64 if const_expr(wg_local) else tile_m
    part = wg_idx if const_expr(wg_local) else 0
    s_part = 0 if const_expr(use_turns) else part  # the block of sO holding these rows
    turn_pass = None
    if const_expr(use_turns):
        turn_pass = (o_turn[1], o_turn[2], wg_idx, wg_barrier_base, o_turn[3])
    # With O in Q's buffer every warp releases Q once it has read its O rows back (the producer may
    # then load the next tile's Q into the buffer).
    release_q = pipe_q if const_expr(o_aliases_q) else None
    if const_expr(use_tma and row_mult is not None):  # row packing: rows of several tokens and heads
        store_rows(
            gmem_tiled_copy_O, sO, mO, seqlen, tidx, row0, head_idx, rows_left, part, rows, tile_m, d_v,
            out_dtype, s_part=s_part, turn_pass=turn_pass, row_mult=row_mult,
        )  # fmt: skip
    elif const_expr(use_tma):
        if rows_left - part * rows >= rows:  # the whole block lies below len_q
            if tidx % 128 < 32:
                gO_tma = cute.local_tile(
                    cute.domain_offset((seqlen.offset_o, 0), tma_O[None, None, head_idx]),
                    (rows, d_v),
                    ((row0 + part * rows) // rows, 0),
                )
                tOsO_tma, tOgO_tma = cpasync.tma_partition(
                    tma_atom_O, 0, cute.make_layout(1),
                    cute.group_modes(cute.local_tile(sO, (rows, d_v), (s_part, 0)), 0, 2),
                    cute.group_modes(gO_tma, 0, 2),
                )  # fmt: skip
                cute.copy(tma_atom_O, tOsO_tma, tOgO_tma)
                cute.arch.cp_async_bulk_commit_group()
                if const_expr(use_turns):
                    cute.arch.cp_async_bulk_wait_group(0, read=True)
                    if const_expr(not o_turn[3]):
                        pass_o_turn(turn_pass)
            if const_expr(use_turns and o_turn[3]):
                pass_o_turn(turn_pass)  # every thread; the storing warp's after its store's read
        else:
            store_rows(
                gmem_tiled_copy_O, sO, mO, seqlen, tidx, row0, head_idx, rows_left, part, rows, tile_m, d_v,
                out_dtype, s_part=s_part, turn_pass=turn_pass, row_mult=row_mult,
            )  # fmt: skip
    else:
        store_rows(
            gmem_tiled_copy_O, sO, mO, seqlen, tidx, row0, head_idx, rows_left, part, rows, tile_m, d_v,
            out_dtype, release_q, q_state, s_part=s_part, turn_pass=turn_pass, row_mult=row_mult,
        )  # fmt: skip


@cute.jit
def store_lse(
    lse2, tiled_mma_pv, mLSE, seqlen, tidx, row0, head_idx, batch_idx, rows_left, lse_s_max,
    lse_s_b, lse_s_tok, lse_s_row, lse_s_h, lse_scale, tile_m: cutlass.Constexpr[int], d_v: cutlass.Constexpr[int],
):  # fmt: skip
    """store_tile's LSE rows (one head, rows row0 + ...): rows < len_q get the LSE, padded rows < lse_s_max -inf."""
    cO = cute.make_identity_tensor((tile_m, d_v))
    tOcO = acc_rows_view(tiled_mma_pv.get_slice(tidx).partition_C(cO))
    if tOcO[0, 0][1] == 0:  # the thread of each quad that holds column 0
        # One 64-bit index for the thread's first row; its other rows are a constant number of
        # rows further (the thread's base row cancels), one multiply-add each.
        row_first = tOcO[0, 0][0]
        idx_first = lse_index(seqlen, batch_idx, head_idx, row0 + row_first, lse_s_b, lse_s_tok, lse_s_row, lse_s_h)
        for r in cutlass.range_constexpr(cute.size(tOcO, mode=[0])):
            row_in_tile = tOcO[r, 0][0]
            row = row0 + row_in_tile
            idx = idx_first + Int64(row_in_tile - row_first) * lse_s_row
            if row_in_tile < rows_left:
                mLSE[idx] = lse2[r] * lse_scale
            elif row < lse_s_max:
                mLSE[idx] = -Float32.inf


@cute.jit
def store_lse_packed(
    lse2, tiled_mma_pv, mLSE, seqlen, tidx, row0, kv_head, batch_idx, g, rows_left,
    lse_s_b, lse_s_tok, lse_s_row, lse_s_h, lse_scale, tile_m: cutlass.Constexpr[int], d_v: cutlass.Constexpr[int],
):  # fmt: skip
    """store_tile's LSE rows under row packing: packed row m = row0 + row is token m // g of query
    head kv_head * g + m % g; rows m < len_q * g only (rows_left counts packed rows past row0)."""
    cO = cute.make_identity_tensor((tile_m, d_v))
    tOcO = acc_rows_view(tiled_mma_pv.get_slice(tidx).partition_C(cO))
    if tOcO[0, 0][1] == 0:
        for r in cutlass.range_constexpr(cute.size(tOcO, mode=[0])):
            row_in_tile = tOcO[r, 0][0]
            if row_in_tile < rows_left:
                m = row0 + row_in_tile
                tok = m // g
                head = kv_head * g + (m - tok * g)
                idx = lse_index(seqlen, batch_idx, head, tok, lse_s_b, lse_s_tok, lse_s_row, lse_s_h)
                mLSE[idx] = lse2[r] * lse_scale

@cute.jit
def store_rows(
    gmem_tiled_copy_O: cute.TiledCopy,
    sO: cute.Tensor,
    mO: cute.Tensor,
    seqlen: SeqlenInfo,
    tidx: Int32,
    row0: Int32,
    head_idx: Int32,
    rows_left: Int32,
    part: Int32,
    rows: cutlass.Constexpr[int],
    tile_m: cutlass.Constexpr[int],
    d_v: cutlass.Constexpr[int],
    out_dtype: cutlass.Constexpr,
    pipe_q=None,
    q_state=None,
    s_part=None,
    turn_pass=None,
    row_mult=None,
):
    """sO block `s_part` (default `part`; `rows` rows) -> registers -> 128-bit global stores of
    the tile's row block `part`, its rows < len_q and columns < mO's run-time head dim; with pipe_q,
    each warp releases Q once it has read its rows; with turn_pass (store_tile's o_turn), the
    warpgroup passes its turn at sO on (its first warp, or every thread) once all its threads have
    read their rows."""
    copy_tidx = tidx % 128 if const_expr(rows == 64) else tidx
    gmem_copy = gmem_tiled_copy_O.get_slice(copy_tidx)
    tOsO = gmem_copy.partition_S(cute.local_tile(sO, (rows, d_v), (part if const_expr(s_part is None) else s_part, 0)))
    tOrO = cute.make_fragment_like(tOsO, out_dtype)
    cute.autovec_copy(tOsO, tOrO)
    if const_expr(turn_pass is not None):
        cute.arch.barrier(barrier_id=turn_pass[3] + turn_pass[2], number_of_threads=128)
        if const_expr(turn_pass[4]):
            pass_o_turn(turn_pass)
        else:
            if tidx % 128 < 32:
                pass_o_turn(turn_pass)
    if const_expr(pipe_q is not None):
        # sO is Q's buffer: order this thread's generic-proxy writes (stmatrix) and reads of it
        # before the producer's next Q TMA (async proxy) writes there.
        cute.arch.fence_view_async_shared()
        pipe_q.consumer_release(q_state)
    gO = cute.local_tile(
        cute.domain_offset((seqlen.offset_o, 0), mO[None, head_idx, None]),
        (rows, d_v),
        ((row0 + part * rows) // rows, 0),
    )
    rows_left = rows_left - part * rows  # may be <= 0: this warpgroup's rows are all past len_q
    tOgO = gmem_copy.partition_D(gO)
    tOcO_g = gmem_copy.partition_S(cute.make_identity_tensor((rows, d_v)))
    tOpO = column_predicate(tOcO_g, mO.shape[2])
    if const_expr(row_mult is None):
        for rm in cutlass.range_constexpr(cute.size(tOrO.shape[1])):
            if tOcO_g[0, rm, 0][0] < rows_left:
                cute.copy(
                    gmem_tiled_copy_O, tOrO[None, rm, None], tOgO[None, rm, None], pred=tOpO[None, rm, None]
                )
    else:
        # Row packing: each row's own (token, query head) address (store_tile's row_mult).
        first = row0 + part * rows  # the packed row of this block's row 0
        for rm in cutlass.range_constexpr(cute.size(tOrO.shape[1])):
            row_in = tOcO_g[0, rm, 0][0]
            if row_in < rows_left:
                m = first + row_in
                tok = m // row_mult
                head = head_idx * row_mult + (m - tok * row_mult)
                row_ptr = mO.iterator + cute.crd2idx((seqlen.offset_o + tok, head, 0), mO.layout)
                ptr = cute.make_ptr(out_dtype, row_ptr.toint(), cute.AddressSpace.gmem, assumed_align=16)
                # Every row of this view is the one row: partition_D's row rm is it.
                gO_row = cute.make_tensor(ptr, cute.make_layout((rows, d_v), stride=(0, 1)))
                tOgO_row = gmem_copy.partition_D(gO_row)
                cute.copy(
                    gmem_tiled_copy_O, tOrO[None, rm, None], tOgO_row[None, rm, None], pred=tOpO[None, rm, None]
                )


@cute.jit
def pass_o_turn(turn_pass):
    """Warpgroup wg_idx (its storing warp, or every thread) gives the next warpgroup (a ring) its turn
    at the shared O block: turn_pass = (turn barrier base, warpgroups, wg_idx, -, every thread)."""
    base, num_wg, wg_idx, _, every_thread = turn_pass
    nxt = wg_idx + 1
    if nxt == num_wg:
        nxt = Int32(0)
    cute.arch.barrier_arrive(barrier_id=base + nxt, number_of_threads=turn_threads(every_thread))


@cute.jit
def epilogue_barrier(wg_local: cutlass.Constexpr[bool], wg_idx: Int32, wg_barrier_base: cutlass.Constexpr[int], barrier_id: cutlass.Constexpr[int], num_mma_threads: cutlass.Constexpr[int]):
    """The epilogue's named barrier: the warpgroup's own (wg_local) or all MMA threads'."""
    if const_expr(wg_local):
        cute.arch.barrier(barrier_id=wg_barrier_base + wg_idx, number_of_threads=128)
    else:
        cute.arch.barrier(barrier_id=barrier_id, number_of_threads=num_mma_threads)


@cute.jit
def column_predicate(tXcX: cute.Tensor, limit: Int32) -> cute.Tensor:
    """One flag per copy-atom instance of a (atom values, rows, cols) partition of an identity
    tensor: its first column < limit (the run-time head dim; a multiple of the 8-element atom).
    The row mode has stride 0: rows are predicated separately."""
    n_v = cute.size(tXcX, mode=[0, 1])
    n_c = cute.size(tXcX, mode=[2])
    pred = cute.make_rmem_tensor(
        cute.make_layout((n_v, cute.size(tXcX, mode=[1]), n_c), stride=(n_c, 0, 1)), cutlass.Boolean
    )
    for v in cutlass.range_constexpr(n_v):
        for c in cutlass.range_constexpr(n_c):
            pred[v, 0, c] = cute.elem_less(tXcX[(0, v), 0, c][1], limit)
    return pred
