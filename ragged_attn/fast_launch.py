"""The microsecond launch path of `Plan.run`: one predicate over what can change, then the kernel.

Rules (DESIGN.md contract 4):
- `BoundKernel.try_launch` checks, in one pass, every fact the kernel relies on that can differ
  from the plan (types, dtypes, ranks, device, head dims, 16-byte alignment, int32 metadata, the
  kernel's limits). When any of them fails, or the call needs something the fast path leaves to
  the checked path (a caller's LSE buffer, empty tensors, paged KV), it returns None and the caller
  runs the full checks, which raise the named error or serve the call.
- It reads no device memory and allocates only out / lse.
The argument order of the compiled kernel is asserted against `kernels.sm90.COMPILED_ARGS` at bind
time, so a kernel change cannot silently shift arguments.
"""

from __future__ import annotations

import math

import torch

from .backends import MAX_BATCH, MAX_TOKENS
from .problem import Problem

_ARG_ORDER = (
    "q", "k", "v", "out", "lse_flat", "cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k",
    "use_seqused_q", "use_seqused_k", "batch", "max_seqlen_q", "lse_s_max", "softmax_scale",
    "window_left", "window_right", "bottom_right", "lse_s_b", "lse_s_tok", "lse_s_row", "lse_s_h",
    "lse_scale", "page_table",
)  # fmt: skip
_INT32 = torch.int32
_LN2 = math.log(2.0)


class BoundKernel:
    """A compiled kernel with the plan's fixed options bound; `try_launch` is the hot path."""

    __slots__ = (
        "_compiled",
        "_d_qk",
        "_d_v",
        "_device",
        "_dtype",
        "_lse_layout",
        "_lse_scale",
        "_options",
        "_out_dtype",
        "_return_lse",
    )  # fmt: skip

    def __init__(self, compiled, problem: Problem):
        from .kernels import sm90

        if tuple(sm90.COMPILED_ARGS) != _ARG_ORDER:
            raise RuntimeError(
                "ragged_attn.fast_launch: the sm90 kernel's argument order changed "
                f"({sm90.COMPILED_ARGS}); update _ARG_ORDER and try_launch together"
            )
        self._compiled = compiled
        self._dtype = problem.dtype
        self._out_dtype = problem.out_dtype
        device = problem.device  # compared with Tensor.get_device(): -1 for the CPU
        if device.type == "cuda":
            self._device = device.index if device.index is not None else torch.cuda.current_device()
        else:
            self._device = -1
        self._d_qk = problem.d_qk
        self._d_v = problem.d_v
        left, right = problem.window
        self._options = (float(problem.softmax_scale), left, right, 1 if problem.alignment == "bottom_right" else 0)
        self._return_lse = problem.return_lse
        self._lse_layout = problem.lse_layout
        self._lse_scale = 1.0 if problem.lse_base == "log2" else _LN2

    def try_launch(self, q, k, v, cu_q, cu_k, max_q, seqused_q, seqused_k, page_table, out, lse):
        """Launch and return out or (out, lse); None when the checked path must take the call."""
        dt, dev = self._dtype, self._device
        try:  # unpacking checks the ranks; a non-tensor fails on .shape
            total_q, h_q, d_qk = q.shape
            total_k, h_kv, d_k = k.shape
            total_v, h_v, d_v = v.shape
            (n_cu_q,) = cu_q.shape
            (n_cu_k,) = cu_k.shape
            qs, ks, vs = q.stride(), k.stride(), v.stride()
            q_ptr, k_ptr, v_ptr = q.data_ptr(), k.data_ptr(), v.data_ptr()
            if not (
                lse is None and page_table is None and type(max_q) is int
                and q.dtype is dt and k.dtype is dt and v.dtype is dt
                and cu_q.dtype is _INT32 and cu_k.dtype is _INT32
                and q.get_device() == dev and k.get_device() == dev and v.get_device() == dev
                and cu_q.get_device() == dev and cu_k.get_device() == dev
                and d_qk == self._d_qk and d_k == d_qk and d_v == self._d_v and total_v == total_k
                and h_v == h_kv and h_kv > 0 and h_q % h_kv == 0 and n_cu_k == n_cu_q
                and 1 < n_cu_q <= MAX_BATCH + 1 and 0 < total_q < MAX_TOKENS and 0 < total_k < MAX_TOKENS
                and 0 < max_q < 2**31
                and qs[2] == 1 and ks[2] == 1 and vs[2] == 1
                and not ((qs[0] | qs[1] | ks[0] | ks[1] | vs[0] | vs[1]) & 7)
                and not ((q_ptr | k_ptr | v_ptr) & 15)
            ):  # fmt: skip
                return None
            batch = n_cu_q - 1
            for used in (seqused_q, seqused_k):
                if used is not None and not (
                    used.dtype is _INT32 and used.shape == (batch,) and used.get_device() == dev
                ):  # fmt: skip
                    return None
            if out is None:
                out = (torch.zeros if seqused_q is not None else torch.empty)(
                    (total_q, h_q, d_v), dtype=self._out_dtype, device=q.device
                )
            else:
                os_ = out.stride()
                out_ptr = out.data_ptr()
                # Nested strides (no element shares memory) and a span apart from q, k and v;
                # anything else goes to the checked path, which tells which rule broke.
                out_end = out_ptr + ((total_q - 1) * os_[0] + (h_q - 1) * os_[1] + d_v) * 2
                if not (
                    out.dtype is self._out_dtype and out.shape == (total_q, h_q, d_v) and out.get_device() == dev
                    and os_[2] == 1 and os_[1] >= d_v and os_[0] >= h_q * os_[1]
                    and not ((os_[0] | os_[1]) & 7) and not (out_ptr & 15)
                    and _apart(out_ptr, out_end, q_ptr, total_q, h_q, d_qk, qs)
                    and _apart(out_ptr, out_end, k_ptr, total_k, h_kv, d_qk, ks)
                    and _apart(out_ptr, out_end, v_ptr, total_k, h_kv, d_v, vs)
                ):  # fmt: skip
                    return None
        except (AttributeError, TypeError, ValueError):  # not a tensor, or the wrong rank
            return None
        s_max = 0
        lse_flat, strides = None, (0, 0, 0, 0)
        if self._return_lse:
            layout = self._lse_layout
            if layout == "head_major":
                lse = torch.empty((h_q, total_q), dtype=torch.float32, device=q.device)
                strides = (0, 1, 1, total_q)
            elif layout == "token_major":
                lse = torch.empty((total_q, h_q), dtype=torch.float32, device=q.device)
                strides = (0, h_q, h_q, 1)
            else:
                s_max = max_q
                lse = torch.empty((batch, s_max, h_q), dtype=torch.float32, device=q.device)
                strides = (s_max * h_q, 0, h_q, 1)
            lse_flat = lse.view(-1)
        scale, left, right, bottom_right = self._options
        try:
            self._compiled(
                q, k, v, out, lse_flat, cu_q, cu_k,
                cu_q if seqused_q is None else seqused_q, cu_k if seqused_k is None else seqused_k,
                0 if seqused_q is None else 1, 0 if seqused_k is None else 1,
                batch, max_q, s_max, scale, left, right, bottom_right, *strides, self._lse_scale, None,
            )  # fmt: skip
        except ValueError:  # TVM-FFI's own argument checks (before any launch): let the checked path name it
            return None
        return (out, lse) if self._return_lse else out


def _apart(lo, hi, ptr, rows, heads, dim, strides) -> bool:
    """[lo, hi) does not meet the bytes of a 2-byte (rows, heads, dim) tensor at ptr with strides."""
    end = ptr + ((rows - 1) * strides[0] + (heads - 1) * strides[1] + dim) * 2
    return hi <= ptr or end <= lo
