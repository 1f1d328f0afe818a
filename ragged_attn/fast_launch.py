"""The microsecond launch path of `Plan.run` and `attention`: a few reads, then the kernel.

Rules (DESIGN.md contract 4):
- The compiled kernel's TVM-FFI entry checks, in C before any launch, everything one tensor or two
  tensors sharing an extent can get wrong (ranks, dtypes, devices, unit last strides, strides that
  are multiples of 8 elements, 16-byte bases, head dims multiples of 8, equal shared extents, int32
  scalars; kernels/sm90/launch.py lists them) and raises ValueError/TypeError; `try_launch` then
  returns None.
- `try_launch` checks in Python only what that entry cannot see: the call's needs that the fast
  path leaves to the checked path (a caller's LSE buffer, empty tensors or an empty page pool),
  the K/V kind of the bound class (a ragged class declines a page_table, a paged class needs one),
  the kernel's limits (tokens, sequences, heads; for page pools max_pages * page_size tokens),
  H_q % H_kv, the class's head-dim envelope, the device of the plan, seqused shapes, a page table's
  dtype, B rows and unit row stride, key lengths for page pools (seqused_k or cu_seqlens_k), and
  that a caller's `out` overlaps neither itself nor any input (q, k, v, cu_seqlens_q/k,
  seqused_q/k, page_table, sinks): data_ptr ranges only. A caller's `out` must also meet the
  entry's stride and alignment rules here: a split launch hands the entry a workspace instead.
- When any of them fails it returns None and the caller runs the full checks, which raise the
  named error or serve the call. Nothing is written before every check has passed.
- It reads no device memory and allocates only out / lse, and for a split-KV launch (a call that
  `choose_num_splits` splits: kernels/sm90/split_kv.py) its workspace and, with a caller's out,
  the merge's temporaries (split_kv.run_splits). A plan without an LSE splits
  through its class's LSE sibling (`BoundKernel._sibling_kernel`, fetched at the first call that
  splits and kept: a sibling not yet compiled, on disk or prebuilt stalls that call for its
  compile); its unsplit calls pay two integer comparisons more (min(total_q, B * max_seqlen_q) *
  H_q and max_seqlen_k against the bounds under which no split is possible), and
  choose_num_splits' cached call only
  when both pass. Ragged K/V and page pools alike: a paged call's num_splits and pack_rows are
  chosen as the checked path (kernels/sm90/launch.py `launch_forward` through backends.launch_cute)
  chooses them, and its splits go through the same workspace and merge.
Page pools (a paged class): k and v are (num_pages, page_size, H_kv, D) for kv_layout "NHD" or
(num_pages, H_kv, page_size, D) for "HND" (the bound plan's layout; attention's fast key holds it),
and reach the entry as kernels/sm90/launch.py `launch_forward` passes them: HND pools as their
(num_pages, page_size, H_kv, D) views, a one-column page table with stride 1 in dim 1, and
cu_seqlens_q standing in for a missing cu_seqlens_k (the key lengths are then seqused_k's).
The argument order of the compiled kernel is asserted against `kernels.sm90.COMPILED_ARGS` at bind
time, so a kernel change cannot silently shift arguments.
Issue 14: a `-softcap` class is bound with its plan's cap appended to every call (a wrapper made at
bind time, so the plain classes' calls are unchanged). A `-sinks` class is bound with a wrapper that
appends the call's sinks (kept in a thread-local slot between the checks and the call) and the cap;
`try_launch` takes the sinks only as the kernel reads them: float32 (H_q,), stride 1 (or one head),
on the plan's device, apart from a caller's `out`. A call with sinks to a class without them, or
without sinks to a class with them, returns None (the checked path names the mismatch).
"""

from __future__ import annotations

import functools
import math
import threading

import torch

from .backends import MAX_BATCH, MAX_HEADS, MAX_PADDED_LSE_ROWS, MAX_TOKENS
from .kernels.sm90.launch import rows_inside, tile_counter
from .kernels.sm90.split_kv import choose_batch_order, choose_num_splits, choose_pack_rows, run_splits
from .layout_class import head_dim_class
from .problem import Problem

_ARG_ORDER = (
    "q", "k", "v", "out", "lse_flat", "cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k",
    "use_seqused_q", "use_seqused_k", "batch", "max_seqlen_q", "lse_s_max", "softmax_scale",
    "window_left", "window_right", "bottom_right", "lse_s_b", "lse_s_tok", "lse_s_row", "lse_s_h",
    "lse_scale", "num_ctas", "tile_counter", "page_table", "num_splits", "pack_rows", "batch_order",
)  # fmt: skip
# A -softcap / -sinks class's function takes these after batch_order (kernels/sm90/launch.py).
_EXT_ARGS = ("sinks", "softcap")
_INT32 = torch.int32
_F32 = torch.float32
_LN2 = math.log(2.0)


def _with_softcap(compiled, softcap: float):
    """`compiled` of a -softcap class (no sinks) as a function of the plain classes' arguments:
    sinks None and the plan's cap follow them."""

    def call(*args):
        return compiled(*args, None, softcap)

    return call


def _with_sinks(compiled, softcap: float, slot):
    """`compiled` of a -sinks class as a function of the plain classes' arguments: the sinks that
    `try_launch` put in this thread's `slot` and the plan's cap (ignored without -softcap) follow."""

    def call(*args):
        sinks, slot.sinks = slot.sinks, None  # the slot keeps no tensor alive after the call
        return compiled(*args, sinks, softcap)

    return call


def _split_tiles(problem: Problem):
    """Where the problem's class may split (kernels/sm90/split_kv.py `split_allowed`): (tile_m,
    tile_n, pack_gqa, min_k, max_rows, sibling, pack_rows) of the class that runs its splits
    (`lse_sibling`), else None. min_k: the fewest keys (max_seqlen_k) that split (MIN_KEY_BLOCKS blocks); max_rows:
    a call with min(total_q, B * max_seqlen_q) * H_q >= max_rows (the query (row, head) pairs of at
    least FILL_FRACTION of a wave of tile_m-pair tiles) fills the SMs unsplit: every count of
    `split_kv.unsplit_tiles` (per-sequence slots, block or row packing) is at least
    min(total_q, B * max_seqlen_q) * H_q / tile_m tiles, since each slot term has at least one
    tile of slack per sequence. total_q alone is no bound: rows outside every sequence (a q padded
    for a CUDA graph) count in total_q but make no tile. Both are necessary conditions of
    choose_num_splits > 1, read as two integer comparisons before its (cached) call. sibling:
    the LSE sibling LayoutClass for a class without an LSE (its kernel is fetched at the first
    call that splits), None for a class with one. pack_rows: that class's TileConfig.pack_rows."""
    from .backends import layout_class_for
    from .kernels.sm90.split_kv import FILL_FRACTION, MIN_KEY_BLOCKS, lse_sibling, split_allowed
    from .kernels.sm90.tile_config import tile_config

    if not problem.split_kv:  # the caller asked for unsplit launches (batch invariance)
        return None
    try:
        layout_class = layout_class_for(problem)
    except NotImplementedError:
        return None
    if not split_allowed(layout_class, problem.lse_layout):
        return None
    sibling = lse_sibling(layout_class)
    cfg = tile_config(sibling)
    min_k = (MIN_KEY_BLOCKS - 1) * cfg.tile_n + 1
    return (
        cfg.tile_m, cfg.tile_n, cfg.pack_gqa, min_k, FILL_FRACTION * cfg.tile_m, None if layout_class.lse else sibling,
        cfg.pack_rows,
    )  # fmt: skip


def _schedule_tiles(problem: Problem) -> tuple[int, int]:
    """(pack_rows, batch_order) of the problem's class: its tile_m where the class packs rows
    (TileConfig.pack_rows), resp. has the batch order (TileConfig.batch_order), else 0. try_launch
    then asks split_kv.choose_pack_rows for each call with GQA (H_q > H_kv; the heads are the call's,
    not the class's: as backends.pack_rows_for asks for the checked path), resp.
    split_kv.choose_batch_order for each call (both cached)."""
    from .backends import layout_class_for
    from .kernels.sm90.tile_config import tile_config

    try:
        cfg = tile_config(layout_class_for(problem))
    except NotImplementedError:
        return 0, 0
    return (cfg.tile_m if cfg.pack_rows else 0), (cfg.tile_m if cfg.batch_order else 0)


@functools.cache
def served_head_dims(own: tuple[int, int] | None) -> frozenset:
    """The (d_qk, d_v) pairs (multiples of 8 up to 256) whose `head_dim_class` is `own`: a class's
    envelope. Cached: the 1,024 head_dim_class calls cost ~0.8 ms of Python, once per class (not
    once per BoundKernel: attention's checked path binds one after each call it serves)."""
    return frozenset(
        (dq, dv) for dq in range(8, 257, 8) for dv in range(8, 257, 8) if head_dim_class(dq, dv) == own
    )


class BoundKernel:
    """A compiled kernel with the plan's fixed options bound; `try_launch` is the hot path."""

    __slots__ = (
        "_compiled",
        "_device",
        "_dims",
        "_hnd",
        "_lse_layout",
        "_lse_scale",
        "_num_ctas",
        "_options",
        "_batch_order",
        "_pack_rows",
        "_paged",
        "_return_lse",
        "_dtype",
        "_sibling",
        "_sinks_slot",
        "_softcap",
        "_split",
        "_split_rows",
    )  # fmt: skip

    def __init__(self, compiled, problem: Problem, default_scale: bool = False):
        """default_scale: the call left softmax_scale to its default, 1 / sqrt(d_qk) of each call's q."""
        from .kernels import sm90

        if tuple(sm90.COMPILED_ARGS) != _ARG_ORDER or tuple(sm90.COMPILED_ARGS_EXT) != _ARG_ORDER + _EXT_ARGS:
            raise RuntimeError(
                "ragged_attn.fast_launch: the sm90 kernel's argument order changed "
                f"({sm90.COMPILED_ARGS_EXT}); update _ARG_ORDER and try_launch together"
            )
        self._sinks_slot = None
        if problem.has_sinks:
            self._sinks_slot = threading.local()
            compiled = _with_sinks(compiled, problem.softcap, self._sinks_slot)
        elif problem.softcap:
            compiled = _with_softcap(compiled, problem.softcap)
        self._compiled = compiled
        device = problem.device  # compared with Tensor.get_device(): -1 for the CPU
        if device.type == "cuda":
            self._device = device.index if device.index is not None else torch.cuda.current_device()
            self._num_ctas = sm90.sm_count(torch.device("cuda", self._device))
        else:
            self._device = -1
            self._num_ctas = 1
        # Every (d_qk, d_v) this class serves (its envelope): the checked path would pick it too.
        self._dims = served_head_dims(head_dim_class(problem.d_qk, problem.d_v))
        left, right = problem.window
        scale = None if default_scale else float(problem.softmax_scale)
        self._options = (scale, left, right, 1 if problem.alignment == "bottom_right" else 0)
        self._return_lse = problem.return_lse
        # The K/V kind is part of the class: a ragged class serves calls without a page table, a
        # paged class calls with one, its pools in the layout it was bound with.
        self._paged = problem.kv == "paged"
        self._hnd = self._paged and problem.kv_layout == "HND"
        self._lse_layout = problem.lse_layout
        self._lse_scale = 1.0 if problem.lse_base == "log2" else _LN2
        self._split = _split_tiles(problem)
        self._pack_rows, self._batch_order = _schedule_tiles(problem)
        # min(total_q, B * max_seqlen_q) * H_q at or above this never splits (`_split_tiles`'
        # max_rows, times the SMs).
        self._split_rows = 0 if self._split is None else self._split[4] * self._num_ctas
        self._softcap = problem.softcap
        self._dtype = problem.dtype  # q, k, v and out of every call the class serves
        self._sibling = None  # the LSE sibling's kernel (a class without an LSE), at its first split

    def _sibling_kernel(self):
        """The compiled kernel that runs this no-LSE class's split launches: its LSE sibling's
        (split_kv.lse_sibling), from compile_cache at the first call that splits and kept here.
        When the sibling is in neither memory, the disk cache nor a prebuilt directory, that call
        compiles it (a stall of the compile's length). None where it cannot be had (no DSL and no
        prebuilt sibling): this kernel then never splits."""
        from . import compile_cache
        from .kernels import sm90

        try:
            fn = compile_cache.get_kernel(self._split[5], sm90.compile_forward)
        except NotImplementedError:  # later calls skip the split test; _split itself stays (other
            self._split_rows = 0  # threads may be reading it)
            return None
        if self._softcap:  # a -softcap sibling takes the sinks slot (None) and the cap
            fn = _with_softcap(fn, self._softcap)
        self._sibling = fn
        return fn

    def try_launch(self, q, k, v, cu_q, cu_k, max_q, seqused_q, seqused_k, page_table, out, lse, max_k=None, sinks=None):
        """Launch and return out or (out, lse); None when the checked path must take the call.
        max_k (max_seqlen_k) feeds the split-KV choice (choose_num_splits; the split count sizes the
        workspace); a value the checked path rejects still sends the call there. sinks: the call's (H_q,) float32 sinks, for a -sinks class only.
        A ragged class takes k, v (total_k, H_kv, D) with cu_k; a paged class takes page pools
        (the bound kv_layout), a page_table (B, max_pages) and cu_k or None (then seqused_k)."""
        paged = self._paged
        if lse is not None or (page_table is None) is paged or type(max_q) is not int:
            return None
        if max_k is not None and not (type(max_k) is int and 0 <= max_k < 2**31):
            return None
        try:  # unpacking checks the ranks; a non-tensor fails on .shape
            total_q, h_q, d_qk = q.shape
            batch = cu_q.numel() - 1  # its rank is the TVM-FFI entry's to check
            if paged:
                num_pages, a1, a2, _ = k.shape
                page_size, h_kv = (a2, a1) if self._hnd else (a1, a2)
                d_v = v.shape[3]
                rows, max_pages = page_table.shape
                total_k = num_pages * page_size  # the pool's slots: 0 is the checked path's fill
                # A sequence's keys are addressed in 32-bit tokens (backends.check_kernel_limits);
                # the table's rows are contiguous (any stride for one column: launch passes stride 1).
                if not (
                    page_table.dtype is _INT32 and rows == batch and 0 < max_pages
                    and max_pages * page_size < MAX_TOKENS and (max_pages == 1 or page_table.stride(1) == 1)
                    and (cu_k is not None or seqused_k is not None)
                ):  # fmt: skip
                    return None
            else:
                if cu_k is None:
                    return None
                total_k, h_kv, _ = k.shape
                d_v = v.shape[2]
                if total_k >= MAX_TOKENS:
                    return None
            if not (
                0 < total_q < MAX_TOKENS and 0 < total_k and 0 < batch <= MAX_BATCH
                and 0 < h_kv <= h_q <= MAX_HEADS and h_q % h_kv == 0 and 0 < max_q < 2**31
                and (d_qk, d_v) in self._dims and q.get_device() == self._device
            ):  # fmt: skip
                return None
            # Forward only: an input that requires grad with grad mode on goes to the checked path,
            # which names it (api.py calls _checks.forward_only there); three attribute reads here
            # instead of that helper on every call.
            if q.requires_grad or k.requires_grad or v.requires_grad or (sinks is not None and sinks.requires_grad):
                if torch.is_grad_enabled():
                    return None
            if seqused_q is None and seqused_k is None:
                used_q, used_k, flag_q, flag_k = cu_q, cu_k, 0, 0
            else:
                for used in (seqused_q, seqused_k):
                    if used is not None and not (used.dtype is _INT32 and used.shape == (batch,)):
                        return None
                used_q, flag_q = (cu_q, 0) if seqused_q is None else (seqused_q, 1)
                used_k, flag_k = (cu_k, 0) if seqused_k is None else (seqused_k, 1)
            if out is not None:
                # A buffer torch would refuse to write in place (requires grad with grad mode on, an
                # inference tensor outside inference mode): the checked path names it
                # (_checks.writable_in_place), so a call is refused on every backend alike.
                if out.requires_grad and torch.is_grad_enabled():
                    return None
                if out.is_inference() and not torch.is_inference_mode_enabled():
                    return None
                # A unit last stride, other strides multiples of 8 elements and a 16-byte base (the
                # TVM-FFI entry's rules, checked here too: a split launch hands the entry a workspace,
                # not out, and the merge writes out with torch ops that take any layout), nested
                # strides (no element shares memory) and a span apart from q, k and v (byte ranges
                # [lo, hi) of 2-byte elements); anything else goes to the checked path, which tells
                # which rule broke. Shape, dtype and device are the entry's (unsplit) or the merge's
                # (split) to refuse, before anything is written.
                s0, s1, s2 = out.stride()
                lo = out.data_ptr()
                hi = lo + ((total_q - 1) * s0 + (h_q - 1) * s1 + d_v) * 2
                if s2 != 1 or lo & 15 or s0 & 7 or s1 & 7 or not (s1 >= d_v and s0 >= h_q * s1):
                    return None
                p = q.data_ptr()
                if p < hi:
                    s0, s1, _ = q.stride()
                    if p + ((total_q - 1) * s0 + (h_q - 1) * s1 + d_qk) * 2 > lo:
                        return None
                if paged:  # the pools' spans (any layout: the tensors' own extents and strides)
                    for pool, d in ((k, d_qk), (v, d_v)):
                        p = pool.data_ptr()
                        if p < hi:
                            s0, s1, s2, _ = pool.stride()
                            if p + ((num_pages - 1) * s0 + (a1 - 1) * s1 + (a2 - 1) * s2 + d) * 2 > lo:
                                return None
                    p = page_table.data_ptr()  # the kernel reads the table while it writes out
                    if p < hi:
                        s0, s1 = page_table.stride()
                        if p + ((batch - 1) * s0 + (max_pages - 1) * s1 + 1) * 4 > lo:
                            return None
                else:
                    for t, d in ((k, d_qk), (v, d_v)):
                        p = t.data_ptr()
                        if p < hi:
                            s0, s1, _ = t.stride()
                            if p + ((total_k - 1) * s0 + (h_kv - 1) * s1 + d) * 2 > lo:
                                return None
                # The int32 metadata (4-byte elements): the kernel reads it while it writes out. Its
                # spans are counted as contiguous, (B + 1) and B elements: the entry refuses any other
                # stride or a cu_seqlens_k of another length before it launches (kernels/sm90/launch.py
                # declares them unit-stride), so a launch only happens where these spans are exact.
                p = cu_q.data_ptr()
                if p < hi and p + (batch + 1) * 4 > lo:
                    return None
                if cu_k is not None:  # (a paged call may leave it to seqused_k)
                    p = cu_k.data_ptr()
                    if p < hi and p + (batch + 1) * 4 > lo:
                        return None
                if flag_q:
                    p = used_q.data_ptr()
                    if p < hi and p + batch * 4 > lo:
                        return None
                if flag_k:
                    p = used_k.data_ptr()
                    if p < hi and p + batch * 4 > lo:
                        return None
            slot = self._sinks_slot
            if slot is not None or sinks is not None:
                if slot is None or not (
                    isinstance(sinks, torch.Tensor) and sinks.dtype is _F32 and sinks.shape == (h_q,)
                    and (h_q == 1 or sinks.stride(0) == 1) and sinks.get_device() == self._device
                ):  # fmt: skip
                    return None
                if out is not None:  # the kernel reads the sinks while it writes out
                    p = sinks.data_ptr()
                    if p < hi and p + 4 * h_q > lo:
                        return None
                if h_q == 1 and sinks.stride(0) != 1:  # as backends passes it: the same element
                    sinks = sinks.as_strided((1,), (1,))
        except (AttributeError, TypeError, ValueError, IndexError):  # not a tensor, or the wrong rank
            return None
        scale, left, right, bottom_right = self._options
        if scale is None:
            scale = d_qk**-0.5
        if paged:  # the arguments as kernels/sm90/launch.py launch_forward passes a paged call's
            if self._hnd:  # (num_pages, page_size, H_kv, D) views of (num_pages, H_kv, page_size, D)
                k, v = k.transpose(1, 2), v.transpose(1, 2)
            if max_pages == 1 and page_table.stride(1) != 1:  # one column: its stride is never used
                page_table = page_table.as_strided(page_table.shape, (page_table.stride(0), 1))
            if cu_k is None:  # the key lengths are seqused_k's; any (B + 1,) int32 fills the slot
                cu_k = cu_q
        if not self._return_lse:  # the common call, spelled out: one shared call site costs ~0.3 us
            # (row, head) pairs that can make tiles: rows outside every sequence make none
            pairs = (total_q if total_q < batch * max_q else batch * max_q) * h_q
            if pairs < self._split_rows and type(max_k) is int and max_k >= self._split[3]:
                return self._launch_split_nolse(
                    q, k, v, cu_q, cu_k, used_q, used_k, flag_q, flag_k, batch, max_q, max_k, h_kv, scale, out,
                    page_table,
                )  # fmt: skip
            if out is None:  # the kernels write q's dtype (check_support); new_empty parses least
                out = q.new_empty((total_q, h_q, d_v))
                if flag_q:
                    out.zero_()
            if slot is not None:  # set last: a call that returns None keeps no tensor alive
                slot.sinks = sinks
            rows = 0
            if self._pack_rows and h_q != h_kv:
                rows = choose_pack_rows(batch, total_q, max_q, h_q, h_kv, self._pack_rows, 0, max_k)
            order = 0
            if self._batch_order:
                order = choose_batch_order(
                    batch, total_q, max_q, max_k, h_q, h_kv, self._num_ctas, rows, 1, self._batch_order
                )
            try:
                self._compiled(
                    q, k, v, out, None, cu_q, cu_k, used_q, used_k, flag_q, flag_k, batch, max_q, 0,
                    scale, left, right, bottom_right, 0, 0, 0, 0, 1.0, self._num_ctas, tile_counter(q), page_table, 1,
                    rows, order,
                )  # fmt: skip
            except (ValueError, TypeError):  # the TVM-FFI entry's checks, before any launch
                return None
            return out
        s_max = 0
        layout = self._lse_layout
        if layout == "head_major":
            lse = q.new_empty((h_q, total_q), dtype=_F32)
            strides = (0, 1, 1, total_q)
        elif layout == "token_major":
            lse = q.new_empty((total_q, h_q), dtype=_F32)
            strides = (0, h_q, h_q, 1)
        else:
            if max_q > MAX_PADDED_LSE_ROWS:
                return None
            s_max = max_q
            lse = q.new_empty((batch, s_max, h_q), dtype=_F32)
            strides = (s_max * h_q, 0, h_q, 1)
        inside = None  # split-KV merges write every row of a buffer made here (split_kv.run_splits)
        if out is None:
            out = q.new_empty((total_q, h_q, d_v))
            if flag_q:
                out.zero_()
        elif self._split is not None:
            inside = False  # the caller's out: computed below where the launch splits
        if slot is not None:
            slot.sinks = sinks
        splits = 1
        if self._split is not None and type(max_k) is int:
            tile_m, tile_n, pack_gqa = self._split[:3]
            splits = choose_num_splits(
                batch, total_q, max_q, max_k, h_q, h_kv, self._num_ctas, tile_m, tile_n, pack_gqa, self._split[6]
            )  # fmt: skip
        pack_rows = 0
        if self._pack_rows and h_q != h_kv:
            pack_rows = choose_pack_rows(batch, total_q, max_q, h_q, h_kv, self._pack_rows, s_max, max_k)
        order = 0
        if self._batch_order:
            order = choose_batch_order(
                batch, total_q, max_q, max_k, h_q, h_kv, self._num_ctas, pack_rows, splits, self._batch_order
            )
        args = (
            q, k, v, out, lse.view(-1), cu_q, cu_k, used_q, used_k, flag_q, flag_k, batch, max_q, s_max,
            scale, left, right, bottom_right, *strides, self._lse_scale, self._num_ctas, tile_counter(q), page_table, 1,
            pack_rows, order,
        )  # fmt: skip
        try:
            if splits == 1:
                self._compiled(*args)
            else:
                if inside is False:
                    inside = rows_inside(cu_q, used_q if flag_q else None, batch, total_q)
                lse_rows = lse if layout == "token_major" else lse.t()
                run_splits(self._compiled, args, splits, out, lse_rows, self._lse_scale == 1.0, inside)
        except (ValueError, TypeError):  # the TVM-FFI entry's checks (before any launch): the checked path names it
            return None
        return out, lse

    def _launch_split_nolse(
        self, q, k, v, cu_q, cu_k, used_q, used_k, flag_q, flag_k, batch, max_q, max_k, h_kv, scale, out, page_table,
    ):  # fmt: skip
        """try_launch's no-LSE call that may split (its two integer tests passed; never a -sinks
        class: split_allowed): choose_num_splits over host integers; S > 1 runs the LSE sibling's
        kernel (`_sibling_kernel`) into a workspace whose merged LSE is dropped (split_kv.run_splits);
        S = 1, or no sibling to be had, is the plain launch. k, v, cu_k and page_table as try_launch
        passes them to the kernel (a paged class's pools as (num_pages, page_size, H_kv, D) views).
        Returns out, or None (the TVM-FFI entry refused the arguments before any launch)."""
        total_q, h_q, _ = q.shape
        d_v = v.shape[-1]
        tile_m, tile_n, pack_gqa = self._split[:3]
        splits = choose_num_splits(
            batch, total_q, max_q, max_k, h_q, h_kv, self._num_ctas, tile_m, tile_n, pack_gqa, self._split[6]
        )  # fmt: skip
        sibling = self._sibling
        if splits > 1 and sibling is None:
            # The sibling's entry checks the arguments at launch; a call of another dtype than the
            # class's would only be refused there, after a fetch (or compile) of the sibling.
            if not (q.dtype is k.dtype is v.dtype is self._dtype and (out is None or out.dtype is self._dtype)):
                return None
            sibling = self._sibling_kernel()
        inside = None
        if out is None:  # the merge writes every row of a buffer made here (O = 0 outside)
            out = q.new_empty((total_q, h_q, d_v))
            if flag_q and (splits == 1 or sibling is None):
                out.zero_()
        elif splits > 1 and sibling is not None:
            inside = rows_inside(cu_q, used_q if flag_q else None, batch, total_q)
        left, right, bottom_right = self._options[1:]
        rows = 0
        if self._pack_rows and h_q != h_kv:
            rows = choose_pack_rows(batch, total_q, max_q, h_q, h_kv, self._pack_rows, 0, max_k)
        order = 0
        if self._batch_order:  # the splits as launched: the sibling's where it runs them, else one
            launched = splits if splits > 1 and sibling is not None else 1
            order = choose_batch_order(
                batch, total_q, max_q, max_k, h_q, h_kv, self._num_ctas, rows, launched, self._batch_order
            )
        args = (
            q, k, v, out, None, cu_q, cu_k, used_q, used_k, flag_q, flag_k, batch, max_q, 0,
            scale, left, right, bottom_right, 0, 0, 0, 0, 1.0, self._num_ctas, tile_counter(q), page_table, 1,
            rows, order,
        )  # fmt: skip
        try:
            if splits == 1 or sibling is None:
                self._compiled(*args)
            else:  # the workspace LSE is in base 2 (lse_scale 1.0), merged in base 2, then dropped
                run_splits(sibling, args, splits, out, None, True, inside)
        except (ValueError, TypeError):  # the TVM-FFI entry's checks (before any launch)
            return None
        return out
