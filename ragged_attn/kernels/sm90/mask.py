"""Element-wise attention mask on one S = Q K^T accumulator tile (boundary blocks only).

Masked scores become -inf before the online softmax, so they contribute exp2(-inf) = 0 to the row
sum and to P @ V. Rules (see block_info.py for the frame): column >= len_k always; with a right
bound column > row + off + right; with a left bound column < row + off - left. Rows past len_q are
left alone (computed, never stored).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr

from .softmax import acc_rows_view


@cute.jit
def apply_mask(
    acc_S: cute.Tensor,  # WGMMA accumulator, ((2, 2, V), MMA_M, MMA_N) fp32
    tScS: cute.Tensor,  # the same partition of an identity tensor over (tile_m, tile_n)
    row0: Int32,  # the sequence row of tile row 0 (for this warpgroup: its item's row block, tile_scheduler.py)
    n_block: Int32,
    tile_n: cutlass.Constexpr[int],
    has_left: cutlass.Constexpr[bool],
    has_right: cutlass.Constexpr[bool],
    len_k: Int32,
    off: Int32,
    left: Int32,
    right: Int32,
    rows=None,  # row packing: this thread's rows' tokens (forward.row_tokens), used instead of row0 + row
):
    acc_mn = acc_rows_view(acc_S)
    coord_mn = acc_rows_view(tScS)
    # Columns relative to this thread's first one: each is then a constant (the thread's base
    # cancels), so a column test is one compare with an immediate, not an add and a compare.
    col_thread = coord_mn[0, 0][1]
    col_base = n_block * tile_n + col_thread
    for r in cutlass.range_constexpr(cute.size(acc_mn, mode=[0])):
        row = row0 + coord_mn[r, 0][0] if const_expr(rows is None) else rows[r]
        # Columns [col_lo, col_hi) of this row survive, relative to col_base.
        col_hi = len_k - col_base
        if const_expr(has_right):
            col_hi = cutlass.min(col_hi, row + off + right + 1 - col_base)
        col_lo = Int32(0)
        if const_expr(has_left):
            col_lo = row + off - left - col_base
        for c in cutlass.range_constexpr(cute.size(acc_mn, mode=[1])):
            col = coord_mn[r, c][1] - col_thread
            keep = col < col_hi
            if const_expr(has_left):
                keep = keep & (col >= col_lo)
            acc_mn[r, c] = acc_mn[r, c] if keep else -Float32.inf
