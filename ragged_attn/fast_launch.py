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
  seqused_q/k, page_table, sinks): data_ptr ranges only.
- When any of them fails it returns None and the caller runs the full checks, which raise the
  named error or serve the call. Nothing is written before every check has passed.
- It reads no device memory and allocates only out / lse.
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
from .kernels.sm90.launch import tile_counter
from .layout_class import head_dim_class
from .problem import Problem

_ARG_ORDER = (
    "q", "k", "v", "out", "lse_flat", "cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k",
    "use_seqused_q", "use_seqused_k", "batch", "max_seqlen_q", "lse_s_max", "softmax_scale",
    "window_left", "window_right", "bottom_right", "lse_s_b", "lse_s_tok", "lse_s_row", "lse_s_h",
    "lse_scale", "num_ctas", "tile_counter", "page_table",
)  # fmt: skip
# A -softcap / -sinks class's function takes these after page_table (kernels/sm90/launch.py).
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
        "_paged",
        "_return_lse",
        "_sinks_slot",
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

    def try_launch(self, q, k, v, cu_q, cu_k, max_q, seqused_q, seqused_k, page_table, out, lse, max_k=None, sinks=None):
        """Launch and return out or (out, lse); None when the checked path must take the call.
        max_k (max_seqlen_k) sizes nothing here; a value the checked path rejects still sends the
        call there. sinks: the call's (H_q,) float32 sinks, for a -sinks class only.
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
                # Nested strides (no element shares memory) and a span apart from q, k and v (byte
                # ranges [lo, hi) of 2-byte elements); anything else goes to the checked path, which
                # tells which rule broke. Shape, dtype, device, alignment and the last stride are
                # the TVM-FFI entry's to check.
                s0, s1, _ = out.stride()
                lo = out.data_ptr()
                hi = lo + ((total_q - 1) * s0 + (h_q - 1) * s1 + d_v) * 2
                if not (s1 >= d_v and s0 >= h_q * s1):
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
            if out is None:  # the kernels write q's dtype (check_support); new_empty parses least
                out = q.new_empty((total_q, h_q, d_v))
                if flag_q:
                    out.zero_()
            if slot is not None:  # set last: a call that returns None keeps no tensor alive
                slot.sinks = sinks
            try:
                self._compiled(
                    q, k, v, out, None, cu_q, cu_k, used_q, used_k, flag_q, flag_k, batch, max_q, 0,
                    scale, left, right, bottom_right, 0, 0, 0, 0, 1.0, self._num_ctas, tile_counter(q), page_table,
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
        if out is None:
            out = q.new_empty((total_q, h_q, d_v))
            if flag_q:
                out.zero_()
        if slot is not None:
            slot.sinks = sinks
        try:
            self._compiled(
                q, k, v, out, lse.view(-1), cu_q, cu_k, used_q, used_k, flag_q, flag_k, batch, max_q, s_max,
                scale, left, right, bottom_right, *strides, self._lse_scale, self._num_ctas, tile_counter(q), page_table,
            )  # fmt: skip
        except (ValueError, TypeError):  # the TVM-FFI entry's checks (before any launch): the checked path names it
            return None
        return out, lse
