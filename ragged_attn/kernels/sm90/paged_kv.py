"""Paged KV for the sm_90a forward: K/V tiles gathered from page pools by the producer warpgroup.

Facts this module relies on (FA4's PagedKVManager taught the row-gather idea):
- The kernel sees a pool as (num_pages, page_size, H_kv, D) with run-time strides: "NHD" pools are
  that order, "HND" pools (num_pages, H_kv, page_size, D) arrive as a permuted view. Page size is
  the extent of mode 1, read at run time; it is never part of the compile key.
- Key t of sequence b sits in page `page_table[b, t // page_size]`, slot `t % page_size`.
- The 128 producer threads copy a (tile_n, d) tile in 16-byte chunks with cp.async (`cp.async.cg`):
  `tpr` threads share a row, `128 // tpr` rows per pass. Each thread resolves the 64-bit addresses
  of ceil(tile_n / 128) rows per key block (one page-table read each, its page and slot split by a
  `cute.FastDivmodDivisorV2` of the page size, no IDIV sequence); the threads that copy a
  row fetch its address from the owner by a shuffle inside their group of `tpr` lanes.
- A key block wholly inside len_k of a pool as wide as the class is copied without predicates; in
  the block crossing len_k (and pools narrower than the class) rows at or past len_k and columns
  past the real head dim are predicated off, and a predicated-off
  cp.async writes zeros (PTX `cp.async ... 16, src_size` with src_size 0, which is what the DSL
  emits for `pred`): nothing outside a sequence's keys reaches shared memory, so the NaN or
  garbage in unused pool slots never reaches S or P V (0 * NaN is NaN, masking alone would not
  do). Those rows still get an in-range address: their token is clamped to len_k - 1 so the page
  table is never read past the pages the sequence owns.
- The writes are generic-proxy; the MMA warpgroups fence (`fence.proxy.async.shared::cta`) after
  each wait before WGMMA reads the tile (mainloop.py, `kv_wait`).
- TMA boxes (TileConfig.page_tma = box_rows keys, 128 in the d64 .. d192 classes, one box per
  stage; page_tma_small 16 for the other multiples of 16): where the page size is a multiple of
  box_rows and the pool is as wide as the class, a key block wholly inside len_k arrives as tile_n /
  box_rows TMA boxes, each from one page (a run of box_rows keys starting at a multiple of box_rows
  never crosses a page edge). Who issues them matters (H200, sessions 12-13, tile_config.py): one
  128-key box per stage runs at the ragged class's speed; sixteen 16-key box instructions per stage
  (d128: two 64-column halves per box) issued by warp 0 alone lose as much as the gather (~12% on a
  long sequence), and issued by the four producer warps, two boxes each (TileConfig.page_box_warps
  4), 5%. The lanes that issue a box read its page first (`fetch_box_pages`, a block ahead), and
  each issuing warp calls the TMA copy as a whole warp with warp-uniform coordinates (the DSL's TMA
  copy elects one lane of those that reach it: a copy under a lane predicate would issue once, not
  once per lane - the first build hung on exactly that). The box descriptors see a pool as
  (page_size, d, H_kv, num_pages): the page size stays a run-time extent. The block crossing len_k
  keeps the predicated cp.async gather (a box would bring the NaN of the unused slots past len_k),
  so both kinds of writer signal one stage barrier: its arrival count stays the 128 producer
  threads, lane 0 of warp 0 arrives with the expected bytes and one lane of each warp arrives for
  the warp's other threads. Another warp's box may complete its bytes before warp 0's expect: the
  barrier's tx-count goes below zero for a while (PTX allows it), and the phase cannot complete
  before warp 0's arrival.
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, const_expr
from cutlass.cute.nvgpu import cpasync

from .producer import cache_hint

PRODUCER_THREADS = 128
COPY_BITS = 128
L2_LINE_BYTES = 128  # one `prefetch_rows` prefetch
BOX_ROWS = 16  # keys per TMA box by default (TileConfig.page_tma): page sizes that are multiples of it


def threads_per_row(dtype, d_qk: int, d_v: int) -> int:
    """Threads sharing one row: as many 16-byte chunks as one 128-byte swizzle row holds, capped by
    the chunks of the narrower of K and V rows (one thread layout serves both)."""
    elems = COPY_BITS // dtype.width
    return math.gcd(d_qk, d_v, 1024 // dtype.width) // elems


def make_gather_copy(dtype, d_qk: int, d_v: int, tile_n: int) -> cute.TiledCopy:
    """The cp.async tiled copy of a (tile_n, d) K or V tile over the 128 producer threads."""
    tpr = threads_per_row(dtype, d_qk, d_v)
    rows_per_pass = PRODUCER_THREADS // tpr
    assert tile_n % rows_per_pass == 0, f"tile_n {tile_n} is not a multiple of {rows_per_pass} rows per pass"
    atom = cute.make_copy_atom(
        cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), dtype, num_bits_per_copy=COPY_BITS
    )
    thr_layout = cute.make_ordered_layout((rows_per_pass, tpr), order=(1, 0))
    return cute.make_tiled_copy_tv(atom, thr_layout, cute.make_layout((1, COPY_BITS // dtype.width)))


ROW_GROUP = 8  # rows of one swizzle atom: the rows view's second mode


def rows_box_map(tile_n: int, d: int, rows: int):
    """(64, 8, d / 64, rows / 8) -> a (tile_n, d) stage's (row, column) index (column-major, the
    stage layout's domain): column c of 64-column band h of row 8 g + r."""
    return cute.make_layout((64, ROW_GROUP, d // 64, rows // ROW_GROUP), stride=(tile_n, 1, 64 * tile_n, ROW_GROUP))


def make_page_rows_tma(pool: cute.Tensor, s_layout, tile_n: int, d: int, box_rows: int):
    """TileConfig.page_tma_rows (a measurement variant): (atom, coordinate tensor) of one TMA
    instruction per box of box_rows keys over a (num_pages, page_size, H_kv, d) pool whose pages are
    contiguous runs of rows (page stride = page_size x row stride: NHD pools as vLLM allocates them;
    the kernel checks it at run time), into a stage whose 64-column bands of each 8-row group sit
    side by side (forward.make_smem_layout col_first). The pool is seen as (64 columns, 8 rows, d /
    64 bands, row groups of the whole pool, H_kv): five dimensions, TMA's most; box b of a block at
    pool row p x page_size + slot is row group (p x page_size + slot) / 8 onwards."""
    ps, pages = cute.size(pool.shape[1]), cute.size(pool.shape[0])
    rs, hs = pool.layout.stride[1], pool.layout.stride[2]
    groups = cutlass.max(pages * ps // ROW_GROUP, 1)
    view = cute.make_layout((64, ROW_GROUP, d // 64, groups, pool.shape[2]), stride=(1, rs, 64, ROW_GROUP * rs, hs))
    pool_t = cute.make_tensor(pool.iterator, view)
    box = cute.composition(cute.select(s_layout, mode=[0, 1]), rows_box_map(tile_n, d, box_rows))
    return cpasync.make_tiled_tma_atom(
        cpasync.CopyBulkTensorTileG2SOp(), pool_t, box, (64, ROW_GROUP, d // 64, box_rows // ROW_GROUP)
    )


def make_page_box_tma(pool: cute.Tensor, s_layout, tile_n: int, d: int, box_rows: int = BOX_ROWS):
    """(atom, coordinate tensor) of the TMA box copy of box_rows keys from a (num_pages, page_size,
    H_kv, d) pool into a box_rows-row slice of a (tile_n, d) swizzled stage (s_layout: the stage's
    layout, its first two modes). The coordinate tensor is (page_size, d, H_kv, num_pages)."""
    pool_t = cute.make_tensor(pool.iterator, cute.select(pool.layout, mode=[1, 3, 2, 0]))
    box = cute.composition(cute.select(s_layout, mode=[0, 1]), cute.make_layout((box_rows, d), stride=(1, tile_n)))
    return cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), pool_t, box, (box_rows, d))


class PagedKV:
    """Per-CTA gather state of one (sequence, KV head): pool views, the sequence's page-table row,
    and the row addresses of the current key block (registers, refreshed by `resolve_rows`)."""

    def __init__(
        self,
        mK: cute.Tensor,  # (num_pages, page_size, d_qk) of this KV head
        mV: cute.Tensor,  # (num_pages, page_size, d_v) of this KV head
        mPages: cute.Tensor,  # (max_pages,) int32: this sequence's page-table row
        len_k: Int32,
        tidx: Int32,  # 0 .. 127 inside the producer warpgroup
        tiled_copy: cute.TiledCopy,
        dtype,
        tile_n: int,
        d_qk: int,
        d_v: int,
        page_div=None,  # cute.FastDivmodDivisorV2 of the page size (made here when None)
        box_rows: int = BOX_ROWS,  # keys per TMA box (TileConfig.page_tma)
        box_warps: int = 1,  # producer warps that issue a block's boxes (TileConfig.page_box_warps)
        rows_view: bool = False,  # boxes over the pool's rows view (TileConfig.page_tma_rows)
        cache_policy=None,  # Int64 L2 cache_policy of the boxes (TileConfig.l2_hints), None: default
    ):
        self.mK = mK
        self.mV = mV
        self.mPages = mPages
        self.len_k = len_k
        self.tidx = tidx
        self.tiled_copy = tiled_copy
        self.dtype = dtype
        self.tile_n = tile_n
        self.d_qk = d_qk
        self.d_v = d_v
        self.box_rows = box_rows
        self.box_warps = box_warps
        self.rows_view = rows_view
        self.tpr = threads_per_row(dtype, d_qk, d_v)
        self.rows_per_pass = PRODUCER_THREADS // self.tpr
        self.entries = (tile_n + PRODUCER_THREADS - 1) // PRODUCER_THREADS
        self.addr_k = cute.make_rmem_tensor((self.entries,), Int64)
        self.addr_v = cute.make_rmem_tensor((self.entries,), Int64)
        self.pages = cute.make_rmem_tensor((self.entries,), Int32)  # `fetch_pages`' page indices
        # Page size divisions by multiply-high (no IDIV sequence per key block and row).
        self.page_div = page_div if page_div is not None else cute.FastDivmodDivisorV2(Int32(cute.size(mK.shape[1])))
        self.slots = cute.make_rmem_tensor((self.entries,), Int32)  # and the rows' slots in them
        # `fetch_box_pages`' page and slot (lane l < tile_n / box_rows: box l's)
        self.box_pages = cute.make_rmem_tensor((1,), Int32)
        self.box_slots = cute.make_rmem_tensor((1,), Int32)
        self.cache_policy = cache_policy
        if cache_policy is not None:
            self._dynamic = PagedKV._dynamic + ("cache_policy",)

    # Device values travel through run-time loops as a flat list of IR values.
    _dynamic = ("mK", "mV", "mPages", "len_k", "tidx", "addr_k", "addr_v", "pages", "slots", "page_div", "box_pages", "box_slots")

    def __extract_mlir_values__(self):
        values, self._counts = [], []
        for name in self._dynamic:
            vals = cutlass.extract_mlir_values(getattr(self, name))
            self._counts.append(len(vals))
            values += vals
        return values

    def __new_from_mlir_values__(self, values):
        obj = object.__new__(PagedKV)
        obj.__dict__.update(self.__dict__)
        pos = 0
        for name, n in zip(self._dynamic, self._counts):
            setattr(obj, name, cutlass.new_from_mlir_values(getattr(self, name), values[pos : pos + n]))
            pos += n
        return obj

    @staticmethod
    def create(
        mK: cute.Tensor,  # (num_pages, page_size, H_kv, d_qk) pool, any strides
        mV: cute.Tensor,  # (num_pages, page_size, H_kv, d_v)
        mPageTable: cute.Tensor,  # (B, max_pages) int32
        batch_idx: Int32,
        head_kv: Int32,
        len_k: Int32,
        tidx: Int32,
        tiled_copy: cute.TiledCopy,
        dtype,
        tile_n: int,
        d_qk: int,
        d_v: int,
        box_rows: int = BOX_ROWS,
        box_warps: int = 1,
        rows_view: bool = False,
        cache_policy=None,
    ) -> "PagedKV":
        return PagedKV(
            mK[None, None, head_kv, None],
            mV[None, None, head_kv, None],
            mPageTable[batch_idx, None],
            len_k,
            tidx,
            tiled_copy,
            dtype,
            tile_n,
            d_qk,
            d_v,
            box_rows=box_rows,
            box_warps=box_warps,
            rows_view=rows_view,
            cache_policy=cache_policy,
        )

    @cute.jit
    def row_token(self, n_block: Int32, e: cutlass.Constexpr[int]) -> Int32:
        """The key this thread's entry e covers in block n_block, clamped into [0, len_k - 1].

        Entry e of thread t is row e * 128 + (t % tpr) * (128 // tpr) + t // tpr of the block, so
        that pass m's row for thread t lives in lane (t // tpr) * tpr + m % tpr, entry m // tpr."""
        row = e * PRODUCER_THREADS + (self.tidx % self.tpr) * self.rows_per_pass + self.tidx // self.tpr
        return cutlass.max(cutlass.min(n_block * self.tile_n + row, self.len_k - 1), 0)

    @cute.jit
    def fetch_pages(self, n_block: Int32):
        """Start the page-table reads of this thread's rows of key block n_block (one per row);
        `resolve_rows(n_block)` uses them. Issued one block ahead, their latency hides under the
        producer's waits for free stages instead of sitting between a stage's release and its
        cp.async (measured on an H200: see tile_config.py)."""
        for e in cutlass.range_constexpr(self.entries):
            page_idx, slot = divmod(self.row_token(n_block, e), self.page_div)
            self.pages[e] = Int32(self.mPages[page_idx])
            self.slots[e] = slot

    def boxes_per_warp(self, box_rows: int) -> int:
        """Boxes each issuing warp takes of a key block (box_warps warps share the tile_n / box_rows
        boxes; 1, 2, 4 or 8 boxes divide evenly)."""
        return -(-(self.tile_n // box_rows) // self.box_warps)

    @cute.jit
    def fetch_box_pages(self, n_block: Int32, box_rows: cutlass.Constexpr[int] = 0):
        """TMA boxes: start the page-table read of each box of key block n_block (box b: keys
        n_block * tile_n + box_rows b ..), into `box_pages` and `box_slots` of the lane that issues
        it (box_warps 1: lane b of warp 0; else lane j of warp w holds box w * per_warp + j, per_warp
        = `boxes_per_warp`); `load_boxes(n_block, ...)` uses them. box_rows 0: the instance's."""
        box_rows = box_rows or self.box_rows
        per_warp = self.boxes_per_warp(box_rows)
        lane = self.tidx % cute.arch.WARP_SIZE
        box = self.tidx // cute.arch.WARP_SIZE * per_warp + lane
        if (lane < per_warp) & (box < self.tile_n // box_rows):
            token = cutlass.min(n_block * self.tile_n + box * box_rows, self.len_k - 1)
            page_idx, slot = divmod(cutlass.max(token, 0), self.page_div)
            self.box_pages[0] = Int32(self.mPages[page_idx])
            self.box_slots[0] = slot

    @cute.jit
    def load_boxes(
        self, tma_atom: cute.CopyAtom, tma_pool: cute.Tensor, sX: cute.Tensor, bar, num_bytes: int, d: int,
        warp_idx: Int32, page: Int32, slot: Int32, box_rows: cutlass.Constexpr[int] = 0,
    ):  # fmt: skip
        """A key block's (tile_n, d) tile sX by TMA boxes (a block wholly inside len_k; page, slot:
        what `fetch_box_pages` read for it, held by the lanes that issue the boxes): lane 0 of warp
        0 arrives on the stage barrier bar expecting num_bytes; each issuing warp (warp 0, or the
        first tile_n / box_rows / per_warp of box_warps warps) issues its boxes, each with its
        holder lane's page and slot (shuffled; the DSL's TMA copy issues from one elected lane of
        the threads that reach it, so the whole warp calls it with warp-uniform coordinates); lane
        1 of warp 0 and lane 0 of warps 1-3 arrive for the rest of their warps (the barrier counts
        the 128 producer threads). A box of another warp may complete its bytes before warp 0's
        expect: the barrier's tx-count may go below zero, and the phase cannot complete before warp
        0's arrival. tma_pool: this K/V head's box coordinates, (page_size, d, num_pages). box_rows
        0: the instance's."""
        box_rows = box_rows or self.box_rows
        per_warp = self.boxes_per_warp(box_rows)
        lane = cute.arch.lane_idx()
        if warp_idx == 0:
            if lane == 0:
                cute.arch.mbarrier_arrive_and_expect_tx(bar, num_bytes)
        cute.arch.sync_warp()
        if warp_idx * per_warp < self.tile_n // box_rows:  # warp w: boxes w * per_warp ..
            for j in cutlass.range_constexpr(per_warp):
                self.issue_box(tma_atom, tma_pool, sX, bar, d, page, slot, box_rows, j, warp_idx * per_warp + j)
        if warp_idx == 0:
            if lane == 1:
                cute.arch.mbarrier_arrive(bar, arrive_count=31)  # for lanes 1 .. 31
        else:
            if lane == 0:
                cute.arch.mbarrier_arrive(bar, arrive_count=32)  # for the warp

    @cute.jit
    def issue_box(
        self, tma_atom: cute.CopyAtom, tma_pool: cute.Tensor, sX: cute.Tensor, bar, d: int, page: Int32, slot: Int32,
        box_rows: cutlass.Constexpr[int], holder: cutlass.Constexpr[int], box,
    ):  # fmt: skip
        """One TMA box (box rows of sX) from the page and slot that lane `holder` holds (bar None:
        its L2 prefetch, `prefetch_boxes`)."""
        box_page = cute.arch.shuffle_sync(page, holder)
        box_slot = cute.arch.shuffle_sync(slot, holder)
        self.copy_box(tma_atom, tma_pool, sX, bar, d, box_page, box_slot, box_rows, box)

    @cute.jit
    def prefetch_boxes(
        self, tma_atom: cute.CopyAtom, tma_pool: cute.Tensor, sX: cute.Tensor, d: int, warp_idx: Int32, page: Int32,
        slot: Int32, box_rows: cutlass.Constexpr[int] = 0,
    ):  # fmt: skip
        """TileConfig.page_prefetch: the boxes `load_boxes` will copy into sX (a stage of the right
        shape; only its layout is used), prefetched into L2 by the same warps (PTX
        cp.async.bulk.prefetch.tensor: no barrier, no shared memory written), so a box's page
        walk and DRAM read start while the producer still waits for a free stage."""
        box_rows = box_rows or self.box_rows
        per_warp = self.boxes_per_warp(box_rows)
        if warp_idx * per_warp < self.tile_n // box_rows:
            for j in cutlass.range_constexpr(per_warp):
                self.issue_box(tma_atom, tma_pool, sX, None, d, page, slot, box_rows, j, warp_idx * per_warp + j)

    @cute.jit
    def copy_box(
        self, tma_atom: cute.CopyAtom, tma_pool: cute.Tensor, sX: cute.Tensor, bar, d: int, box_page: Int32,
        box_slot: Int32, box_rows: cutlass.Constexpr[int], box,
    ):  # fmt: skip
        """The TMA copy of box `box` of sX from page box_page, slot box_slot (warp-uniform): a
        (box_rows, d) tile of the page, or with rows_view one box of the pool's rows view
        (`make_page_rows_tma`; tma_pool then (64, 8, d / 64, row groups)). bar None: the box's
        L2 prefetch instead (`prefetch_boxes`)."""
        if const_expr(self.rows_view):
            tile = (64, ROW_GROUP, d // 64, box_rows // ROW_GROUP)
            row = box_page * cute.size(self.mK.shape[1]) + box_slot
            g_box = cute.local_tile(tma_pool, tile, (0, 0, 0, row // box_rows))
            s_box = cute.local_tile(cute.composition(sX, rows_box_map(self.tile_n, d, self.tile_n)), tile, (0, 0, 0, box))
            t_s, t_g = cpasync.tma_partition(
                tma_atom, 0, cute.make_layout(1), cute.group_modes(s_box, 0, 4), cute.group_modes(g_box, 0, 4)
            )
        else:
            g_box = cute.local_tile(tma_pool[None, None, box_page], (box_rows, d), (box_slot // box_rows, 0))
            s_box = cute.local_tile(sX, (box_rows, d), (box, 0))
            t_s, t_g = cpasync.tma_partition(
                tma_atom, 0, cute.make_layout(1), cute.group_modes(s_box, 0, 2), cute.group_modes(g_box, 0, 2)
            )
        if const_expr(bar is None):
            # One lane issues (the DSL's prefetch, unlike its TMA copy, elects none: all 32 lanes
            # would each send the box's prefetch).
            with cute.arch.elect_one():
                cute.prefetch(tma_atom, t_g)
        else:
            cute.copy(tma_atom, t_g, t_s, tma_bar_ptr=bar, **cache_hint(self.cache_policy))

    @cute.jit
    def load_boxes_covered(
        self, tma_atom: cute.CopyAtom, tma_pool: cute.Tensor, sX: cute.Tensor, bar, d: int, warp_idx: Int32,
        page: Int32, slot: Int32, box_rows: cutlass.Constexpr[int], chunks: Int32,
    ):  # fmt: skip
        """The block crossing len_k (TileConfig.page_box_crossing): its first `chunks` whole
        box_rows-key runs inside len_k by TMA boxes (issued as `load_boxes` does, boxes >=
        chunks skipped warp-uniformly), the rest by the caller's gather (`load` with covered =
        chunks * box_rows). Lane 0 of warp 0 adds the boxes' bytes to the stage barrier's tx-count
        without arriving: every producer thread arrives through the gather's cp.async arrive, after
        this in program order, so the phase cannot complete before the expect."""
        per_warp = self.boxes_per_warp(box_rows)
        if warp_idx == 0:
            if cute.arch.lane_idx() == 0:
                cute.arch.mbarrier_expect_tx(bar, chunks * (box_rows * d * (self.dtype.width // 8)))
        cute.arch.sync_warp()
        for j in cutlass.range_constexpr(per_warp):
            box = warp_idx * per_warp + j
            if box < chunks:  # warp-uniform: the whole warp shuffles and issues, or none of it
                self.issue_box(tma_atom, tma_pool, sX, bar, d, page, slot, box_rows, j, box)

    @cute.jit
    def resolve_rows(self, n_block: Int32):
        """Addresses of this thread's rows of key block n_block, from the page indices that
        `fetch_pages(n_block)` read."""
        for e in cutlass.range_constexpr(self.entries):
            page = self.pages[e]
            slot = self.slots[e]
            self.addr_k[e] = (self.mK.iterator + cute.crd2idx((page, slot, 0), self.mK.layout)).toint()
            self.addr_v[e] = (self.mV.iterator + cute.crd2idx((page, slot, 0), self.mV.layout)).toint()

    @cute.jit
    def prefetch_rows(self):
        """TileConfig.page_prefetch, the gather's twin of `prefetch_boxes`: this thread's K and V
        rows that `resolve_rows` resolved (each a valid pool row: `row_token` clamps into len_k),
        prefetched into L2 line by line (PTX prefetch.global.L2; only lines inside the pool's
        real head dim) before the producer waits for a free stage."""
        elem_bytes = self.dtype.width // 8
        for is_k in (True, False):
            d = self.d_qk if is_k else self.d_v
            mX = self.mK if is_k else self.mV
            addr = self.addr_k if is_k else self.addr_v
            row_bytes = cute.size(mX.shape[2]) * elem_bytes
            for e in cutlass.range_constexpr(self.entries):
                # The lines the row touches, from the line holding its first byte (a row is only
                # 16-byte aligned): at most one more than a line-aligned row's.
                lead = Int32(addr[e] & Int64(L2_LINE_BYTES - 1))
                line0 = addr[e] - Int64(lead)
                for line in cutlass.range_constexpr(-(-d * elem_bytes // L2_LINE_BYTES) + 1):
                    if line * L2_LINE_BYTES < lead + row_bytes:
                        ptr = cute.make_ptr(
                            self.dtype, line0 + Int64(line * L2_LINE_BYTES), cute.AddressSpace.gmem, assumed_align=16
                        )
                        cute.arch.prefetch(ptr.llvm_ptr, cache_level="L2")

    @cute.jit
    def load(self, n_block: Int32, sX: cute.Tensor, is_k: cutlass.Constexpr[bool], covered=None):
        """cp.async the rows of key block n_block into the smem tile sX (tile_n, d); zero-fill rows
        past len_k and columns past the real head dim. The caller commits and signals. covered
        (Int32, the block crossing len_k only): rows below it are left alone (TMA boxes write them,
        `load_boxes_covered`); a predicated-off cp.async would write zeros over them."""
        d = self.d_qk if const_expr(is_k) else self.d_v
        mX = self.mK if const_expr(is_k) else self.mV
        addr = self.addr_k if const_expr(is_k) else self.addr_v
        d_real = cute.size(mX.shape[2])
        elems = COPY_BITS // self.dtype.width
        cX = cute.make_identity_tensor((self.tile_n, d))
        thr_copy = self.tiled_copy.get_slice(self.tidx)
        tXsX = thr_copy.partition_D(sX)
        tXcX = thr_copy.partition_S(cX)
        tXc0X = self.tiled_copy.get_slice(0).partition_S(cX)
        # Rows of this thread with index below the limit hold keys of the sequence.
        row_limit = self.len_k - n_block * self.tile_n - tXcX[0][0]
        # A block wholly inside len_k of a pool as wide as the class copies without predicates
        # (the block crossing len_k and padded head dims keep them): the predicated form costs
        # an ISETP and three SELs per 16-byte copy (SASS, tools/sass_static.py).
        if const_expr(covered is not None):
            self.copy_rows(addr, tXsX, tXcX, tXc0X, row_limit, d_real, True, covered - tXcX[0][0])
        else:
            whole = (n_block + 1) * self.tile_n <= self.len_k and d_real == d
            if whole:
                self.copy_rows(addr, tXsX, tXcX, tXc0X, row_limit, d_real, False)
            else:
                self.copy_rows(addr, tXsX, tXcX, tXc0X, row_limit, d_real, True)
        assert elems * self.tpr * cute.size(tXsX, mode=[2]) == d


    @cute.jit
    def copy_rows(
        self, addr, tXsX: cute.Tensor, tXcX: cute.Tensor, tXc0X: cute.Tensor, row_limit: Int32, d_real: Int32,
        predicated: cutlass.Constexpr[bool], row_from=None,
    ):  # fmt: skip
        """`load`'s copies: each pass's row address from its owner lane, then one cp.async per
        16-byte chunk; `predicated`: rows at or past row_limit and columns past d_real zero-filled;
        row_from (like row_limit, relative to this thread's first row): rows below it not copied."""
        mask_and_clamp = ((cute.arch.WARP_SIZE - self.tpr) << 8) | (cute.arch.WARP_SIZE - 1)
        for m in cutlass.range_constexpr(cute.size(tXsX, mode=[1])):
            # (the shuffle before any branch: every lane of the group takes part)
            row_addr = cute.arch.shuffle_sync(addr[m // self.tpr], m % self.tpr, mask_and_clamp=mask_and_clamp)
            if const_expr(row_from is not None):
                if tXc0X[0, m, 0][0] >= row_from:
                    self.copy_pass(row_addr, tXsX, tXcX, tXc0X, row_limit, d_real, predicated, m)
            else:
                self.copy_pass(row_addr, tXsX, tXcX, tXc0X, row_limit, d_real, predicated, m)

    @cute.jit
    def copy_pass(
        self, row_addr, tXsX: cute.Tensor, tXcX: cute.Tensor, tXc0X: cute.Tensor, row_limit: Int32, d_real: Int32,
        predicated: cutlass.Constexpr[bool], m: cutlass.Constexpr[int],
    ):  # fmt: skip
        """`copy_rows`' pass m: one cp.async per 16-byte chunk of this thread's row at row_addr."""
        elem_bytes = self.dtype.width // 8
        for k in cutlass.range_constexpr(cute.size(tXsX, mode=[2])):
            col = tXcX[0, m, k][1]
            src_ptr = cute.make_ptr(
                self.dtype, row_addr + Int64(col * elem_bytes), cute.AddressSpace.gmem, assumed_align=16
            )
            src = cute.make_tensor(src_ptr, tXsX[None, m, k].layout)
            if const_expr(predicated):
                pred = cute.make_fragment_like(tXsX[(0, None), m, k], cutlass.Boolean)
                pred.fill((tXc0X[0, m, 0][0] < row_limit) & (col < d_real))
                cute.copy(self.tiled_copy, src, tXsX[None, m, k], pred=pred)
            else:
                cute.copy(self.tiled_copy, src, tXsX[None, m, k])


def gather_ref(pool, page_table_row, len_k: int, kv_layout: str):
    """Pure-PyTorch twin of the gather (tests): the (len_k, H_kv, D) keys of one sequence."""
    import torch

    view = pool if kv_layout == "NHD" else pool.transpose(1, 2)  # (num_pages, page_size, H_kv, D)
    ps = view.shape[1]
    tokens = torch.arange(len_k)
    pages = page_table_row.cpu().long()[tokens // ps]
    return view[pages.to(view.device), (tokens % ps).to(view.device)]
