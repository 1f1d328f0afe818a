"""Epilogue of the sm_90a forward kernel: O and LSE stores for one (m_block, head, sequence) tile.

O goes registers -> smem (its own buffer, stmatrix) -> registers -> 128-bit global stores with a
row predicate (rows >= len_q are never stored). LSE uses one addressing formula with run-time
element strides: lse[b * s_b + cu_seqlens_q[b] * s_tok + row * s_row + h * s_h]; rows in
[len_q, lse_s_max) get -inf (lse_s_max = 0 unless the layout is padded).
"""

from __future__ import annotations

from typing import Optional

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, const_expr

from .seqlen_info import SeqlenInfo
from .softmax import acc_rows_view


@cute.jit
def lse_index(seqlen, batch_idx, head_idx, row, s_b, s_tok, s_row, s_h) -> Int64:
    """lse[b * s_b + cu_seqlens_q[b] * s_tok + row * s_row + h * s_h] (element units, 64-bit)."""
    return Int64(batch_idx) * s_b + Int64(seqlen.offset_q) * s_tok + Int64(row) * s_row + Int64(head_idx) * s_h


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
    m_block: Int32,
    head_idx: Int32,
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
):
    """O (normalised, fp32 registers) -> out dtype -> smem (stmatrix) -> 128-bit global stores of
    rows < len_q and columns < mO's run-time head dim (an envelope class never writes the columns
    past the real d_v); LSE (scaled to its base) for rows < len_q, -inf for padded rows < lse_s_max.
    A named barrier over the MMA threads comes first: the previous tile's O reads (a persistent
    CTA reuses sO) and, when sO is Q's buffer (o_aliases_q), every MMA warpgroup's GEMMs reading
    sQ are done before sO is written; then each warp releases Q (pipe_q, q_state) once it has read
    its O rows back, so the producer may load the next tile's Q into that buffer."""
    rO = cute.make_rmem_tensor_like(acc_O, out_dtype)
    rO.store(acc_O.load().to(out_dtype))
    epilogue_barrier(wg_local, wg_idx, wg_barrier_base, barrier_id, num_mma_threads)
    smem_copy = cute.make_tiled_copy_C(
        cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(transpose=False, num_matrices=4), out_dtype),
        tiled_mma_pv,
    ).get_slice(tidx)
    cute.copy(smem_copy, smem_copy.retile(rO), smem_copy.partition_D(sO))

    rows_left = seqlen.len_q - m_block * tile_m  # > 0 here
    if const_expr(has_lse):
        cO = cute.make_identity_tensor((tile_m, d_v))
        tOcO = acc_rows_view(tiled_mma_pv.get_slice(tidx).partition_C(cO))
        if tOcO[0, 0][1] == 0:  # the thread of each quad that holds column 0
            for r in cutlass.range_constexpr(cute.size(tOcO, mode=[0])):
                row_in_tile = tOcO[r, 0][0]
                row = m_block * tile_m + row_in_tile
                idx = lse_index(seqlen, batch_idx, head_idx, row, lse_s_b, lse_s_tok, lse_s_row, lse_s_h)
                if row_in_tile < rows_left:
                    mLSE[idx] = lse2[r] * lse_scale
                elif row < lse_s_max:
                    mLSE[idx] = -Float32.inf

    epilogue_barrier(wg_local, wg_idx, wg_barrier_base, barrier_id, num_mma_threads)
    # The rows this thread's copy covers: the warpgroup's own 64 (wg_local) or the whole tile.
    rows = 64 if const_expr(wg_local) else tile_m
    part = wg_idx if const_expr(wg_local) else 0
    copy_tidx = tidx % 128 if const_expr(wg_local) else tidx
    gmem_copy = gmem_tiled_copy_O.get_slice(copy_tidx)
    tOsO = gmem_copy.partition_S(cute.local_tile(sO, (rows, d_v), (part, 0)))
    tOrO = cute.make_fragment_like(tOsO, out_dtype)
    cute.autovec_copy(tOsO, tOrO)
    if const_expr(o_aliases_q):
        pipe_q.consumer_release(q_state)
    gO = cute.local_tile(
        cute.domain_offset((seqlen.offset_q, 0), mO[None, head_idx, None]),
        (rows, d_v),
        (m_block * (tile_m // rows) + part, 0),
    )
    rows_left = rows_left - part * rows  # may be <= 0: this warpgroup's rows are all past len_q
    tOgO = gmem_copy.partition_D(gO)
    tOcO_g = gmem_copy.partition_S(cute.make_identity_tensor((rows, d_v)))
    tOpO = column_predicate(tOcO_g, mO.shape[2])
    for rm in cutlass.range_constexpr(cute.size(tOrO.shape[1])):
        if tOcO_g[0, rm, 0][0] < rows_left:
            cute.copy(
                gmem_tiled_copy_O, tOrO[None, rm, None], tOgO[None, rm, None], pred=tOpO[None, rm, None]
            )


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
