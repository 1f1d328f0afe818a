"""Key-block range arithmetic for one tile of a sequence: which n_blocks to visit, which to mask.

Frame (FlashAttention's): with off = len_k - len_q (bottom-right alignment) or 0 (top-left),
query row i sees key column j iff
    j < len_k  and  (no left bound  or j >= i + off - left)  and  (no right bound or j <= i + off + right).
Causal is right = 0 with no left bound. Unbounded sides are encoded as `UNBOUNDED` (a large
positive window) so one formula serves every family; it keeps `i + off +/- UNBOUNDED` inside int32
for any total length below 2**29 tokens.

A tile's rows span [row_lo, row_hi) (tile_scheduler.tile_rows: m_block * tile_m and the next
tile's first row without GQA packing; with it, the row blocks of the warpgroups' items, whose
query heads may differ but whose keys and mask frame are the sequence's). The visited key blocks
[n_block_min, n_block_max) are the union over the valid rows [row_lo, min(row_hi, len_q)); an
empty range means every row of the tile
sees no key (O = 0, LSE = -inf). A block needs the element-wise mask only when it crosses len_k or
one of the window edges of some row of the tile (`needs_mask`); interior blocks run unmasked.

Split-KV (`for_split`): split s of S visits only its share of the tile's blocks, [n_min + s n // S,
n_min + (s + 1) n // S) of the n = n_max - n_min blocks (consecutive shares, sizes differing by at
most one, empty ones where n < S). The share is computed once per tile (one division pair, only when
S > 1) and kept in the BlockInfo, whose `n_block_range` then returns it; the element-wise mask is
unchanged (absolute columns), and a row that sees no key of the share gets O = 0, LSE = -inf, which
the merge of the splits reads as "no contribution".
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, const_expr

UNBOUNDED = 1 << 29


class BlockInfo:
    """Trace-time flags (`has_left`, `has_right`) pick the family; the numbers are run time."""

    def __init__(
        self,
        tile_n: int,
        has_left: bool,
        has_right: bool,
        row_lo: Int32,
        row_hi: Int32,
        len_q: Int32,
        len_k: Int32,
        off: Int32,
        left: Int32,
        right: Int32,
        n_min: Int32 = None,
        n_max: Int32 = None,
        split: bool = True,
    ):
        """n_min, n_max: the key blocks to visit (`for_split`'s share); None: the tile's whole
        range (`full_range`). split (trace time): False where n_min, n_max are known to be the
        whole range (`for_split` with the constant num_splits 1), whose n_min is then the
        class's own (a trace-time 0 without a left bound)."""
        self.split = split
        self.tile_n = tile_n
        self.has_left = has_left
        self.has_right = has_right
        self.row_lo = row_lo
        self.row_hi = row_hi
        self.len_q = len_q
        self.len_k = len_k
        self.off = off
        self.left = left
        self.right = right
        if n_min is None:
            n_min, n_max = self.full_range()
        self.n_min = n_min
        self.n_max = n_max

    _dynamic = ("row_lo", "row_hi", "len_q", "len_k", "off", "left", "right", "n_min", "n_max")

    def _blocks(self, x: Int32) -> Int32:
        """floor(x / tile_n): an arithmetic shift where tile_n is a power of two (one instruction
        instead of a signed division's fix-ups), else the division."""
        if self.tile_n & (self.tile_n - 1) == 0:
            return x >> (self.tile_n.bit_length() - 1)
        return x // self.tile_n

    # Device values travel through runtime loops as a flat list of IR values.
    def __extract_mlir_values__(self):
        return [v for name in self._dynamic for v in cutlass.extract_mlir_values(getattr(self, name))]

    def __new_from_mlir_values__(self, values):
        dyn = [Int32(v) for v in values]
        return BlockInfo(self.tile_n, self.has_left, self.has_right, *dyn, split=self.split)

    def n_block_range(self):
        """(n_block_min, n_block_max): the key blocks this tile visits: those any valid row of the
        tile may see (`full_range`), or under split-KV this split's share of them (`for_split`)."""
        return self.n_min, self.n_max

    @cute.jit
    def for_split(self, split: Int32, num_splits: Int32, split_flag: bool = True) -> "BlockInfo":
        """This tile as split `split` of `num_splits` visits it: the blocks [n_min + split * n //
        num_splits, n_min + (split + 1) * n // num_splits) of its n = n_max - n_min (module
        docstring). num_splits == 1 divides nothing. split_flag (trace time): the `split` of the
        result for a run-time num_splits (False: the tail split's producer, whose whole tiles and
        pieces share one traced copy; the flag only picks the MMA loop's Q-release test)."""
        n_min, n_max = self.n_min, self.n_max
        if const_expr(isinstance(num_splits, int) and num_splits == 1):
            return BlockInfo(
                self.tile_n, self.has_left, self.has_right, self.row_lo, self.row_hi, self.len_q, self.len_k,
                self.off, self.left, self.right, n_min, n_max, split=False,
            )  # fmt: skip
        if num_splits != 1:
            n = cutlass.max(n_max - n_min, 0)  # an empty range (a window that misses) stays empty
            share_min = n_min + split * n // num_splits
            n_max = n_min + (split + 1) * n // num_splits
            n_min = share_min
        return BlockInfo(
            self.tile_n, self.has_left, self.has_right, self.row_lo, self.row_hi, self.len_q, self.len_k,
            self.off, self.left, self.right, n_min, n_max, split=split_flag,
        )  # fmt: skip

    @cute.jit
    def full_range(self):
        """(n_block_min, n_block_max): key blocks any valid row of this tile may see."""
        n_block_max = self._blocks(self.len_k + (self.tile_n - 1))
        n_block_min = Int32(0)
        if const_expr(self.has_right):
            row_last = cutlass.min(self.row_hi, self.len_q) - 1
            col_end = cutlass.max(row_last + self.off + self.right + 1, 0)  # exclusive
            n_block_max = cutlass.min(n_block_max, self._blocks(col_end + (self.tile_n - 1)))
        if const_expr(self.has_left):
            col_begin = cutlass.max(self.row_lo + self.off - self.left, 0)
            n_block_min = self._blocks(col_begin)
        return n_block_min, n_block_max

    @cute.jit
    def n_block_max_rows(self, row_first: Int32, rows: cutlass.Constexpr[int]) -> Int32:
        """The end of the key blocks rows [row_first, row_first + rows) of the tile may see (at
        most n_block_range's: this split's share); without a right bound, n_block_range's. Needs row_first < len_q."""
        _, n_block_max = self.n_block_range()
        if const_expr(self.has_right):
            row_last = cutlass.min(row_first + rows, self.len_q) - 1
            col_end = cutlass.max(row_last + self.off + self.right + 1, 0)
            n_block_max = cutlass.min(n_block_max, self._blocks(col_end + (self.tile_n - 1)))
        return n_block_max

    @cute.jit
    def n_block_max_last(self, row_last: Int32) -> Int32:
        """`n_block_max_rows` for rows up to row_last (< len_q, already clipped): row packing's
        warpgroups, whose last row's token is computed by the caller."""
        _, n_block_max = self.n_block_range()
        if const_expr(self.has_right):
            col_end = cutlass.max(row_last + self.off + self.right + 1, 0)
            n_block_max = cutlass.min(n_block_max, self._blocks(col_end + (self.tile_n - 1)))
        return n_block_max

    @cute.jit
    def n_block_min_rows(self, row_first: Int32) -> Int32:
        """The first key block rows row_first.. of the tile may see, at least n_block_range's
        (this split's share); without a left bound, n_block_range's."""
        n_block_min, _ = self.n_block_range()
        if const_expr(self.has_left):
            n_block_min = cutlass.max(self._blocks(cutlass.max(row_first + self.off - self.left, 0)), n_block_min)
        return n_block_min

    @cute.jit
    def unmasked_range(self):
        """(n_lo, n_hi): the key blocks n with n_lo <= n < n_hi are exactly those `needs_mask`
        rejects (no element masked for any row of the tile), so a mainloop can run them in a loop
        of its own without the mask's branch (FlashAttention 3 and 4 peel the masked blocks the
        same way). n_lo > 0 only with a left bound; n_hi < n_block_range's end wherever the last
        block crosses len_k or the right bound."""
        n_hi = self._blocks(self.len_k)
        if const_expr(self.has_right):
            r_end = cutlass.max(self.row_lo + self.off + self.right + 1, 0)
            n_hi = cutlass.min(n_hi, self._blocks(r_end))
        n_lo = Int32(0)
        if const_expr(self.has_left):
            l_first = cutlass.max(self.row_hi - 1 + self.off - self.left, 0)
            n_lo = self._blocks(l_first + (self.tile_n - 1))
        return n_lo, n_hi

    @cute.jit
    def needs_mask(self, n_block: Int32) -> cutlass.Boolean:
        """True when some element of key block n_block is masked for some row of [row_lo, row_hi)."""
        col_first = n_block * self.tile_n
        col_last = col_first + (self.tile_n - 1)
        need = col_last >= self.len_k
        if const_expr(self.has_right):
            need = need | (col_last > self.row_lo + self.off + self.right)
        if const_expr(self.has_left):
            need = need | (col_first < self.row_hi - 1 + self.off - self.left)
        return need


def unmasked_range_ref(tile_m, tile_n, m_block, len_k, off, left, right):
    """Pure-Python twin of `BlockInfo.unmasked_range` for rows [m_block * tile_m, (m_block + 1) * tile_m)
    (left/right None = unbounded), for tests."""
    n_hi = len_k // tile_n
    if right is not None:
        n_hi = min(n_hi, max(m_block * tile_m + off + right + 1, 0) // tile_n)
    n_lo = 0
    if left is not None:
        n_lo = -(-max((m_block + 1) * tile_m - 1 + off - left, 0) // tile_n)
    return n_lo, n_hi


def needs_mask_ref(tile_m, tile_n, m_block, n_block, len_k, off, left, right):
    """Pure-Python twin of `BlockInfo.needs_mask`, for tests."""
    col_first, col_last = n_block * tile_n, n_block * tile_n + tile_n - 1
    need = col_last >= len_k
    if right is not None:
        need = need or col_last > m_block * tile_m + off + right
    if left is not None:
        need = need or col_first < (m_block + 1) * tile_m - 1 + off - left
    return need


def block_range_ref(tile_m, tile_n, m_block, len_q, len_k, off, left, right):
    """Pure-Python twin of `BlockInfo.n_block_range` (left/right None = unbounded), for tests."""
    n_max = -(-len_k // tile_n)
    n_min = 0
    if right is not None:
        row_last = min((m_block + 1) * tile_m, len_q) - 1
        col_end = max(row_last + off + right + 1, 0)
        n_max = min(n_max, -(-col_end // tile_n))
    if left is not None:
        n_min = max(m_block * tile_m + off - left, 0) // tile_n
    return n_min, n_max


def split_share_ref(n_min, n_max, split, num_splits):
    """Pure-Python twin of `BlockInfo.for_split`'s share of the blocks [n_min, n_max), for tests."""
    if num_splits == 1:
        return n_min, n_max
    n = max(n_max - n_min, 0)
    return n_min + split * n // num_splits, n_min + (split + 1) * n // num_splits
