"""A checked description of one attention call: `Problem`, built by `build_problem`.

Rules (docs/DESIGN.md, contract 3-5):
- Every bad argument raises `TypeError` or `ValueError` naming the argument, what was expected and
  what came, before anything is written (tests/test_bad_inputs.py, one test per bad input).
- Nothing here reads device memory: only shapes, strides, dtypes, devices and Python scalars.
  Values inside cu_seqlens / seqused / page_table are trusted on the kernel path (checking them
  would cost a device-to-host sync); the reference backend checks them as it reads them.
- The checks do not depend on the backend, so a problem is valid or invalid everywhere; whether a
  backend *serves* a valid problem is `check_support`'s question (NotImplementedError).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import NamedTuple

import torch

from . import _checks as chk

KV_LAYOUTS = ("NHD", "HND")
LSE_LAYOUTS = ("head_major", "token_major", "padded")
LSE_BASES = ("ln", "log2")
CAUSAL_VALUES = (False, True, "bottom_right", "top_left")
MAX_HEAD_DIM = 256
# Window bounds are 32-bit in the kernels, which keep 2**29 as "unbounded"; a bound this large is
# unbounded for any real sequence (pass -1 for that).
MAX_WINDOW = 2**29 - 1

# A padded LSE gets ceil(s_max / 128) query tiles per sequence on the kernel grid's y axis (at
# most 65535). It is also the most rows per sequence a call may ask this library to allocate for
# a padded LSE (s_max = max_seqlen_q): 2**31 - 1 ("no bound") would be 8 GiB per head and sequence.
MAX_PADDED_LSE_ROWS = 65535 * 128

# The kernels fold log2(e) into the scale and work in float32: the largest scale whose folded
# value is a finite float32. Below it, a scaled score |softmax_scale * q.k| beyond float32's
# 3.4e38 still overflows and makes its row NaN, on the reference and the kernels alike
# (docs/SUPPORT_MATRIX.md, "Non-finite inputs").
MAX_SOFTMAX_SCALE = float.fromhex("0x1.fffffep+127") / math.log2(math.e)
# The smallest: a normal float32 (below it the folded scale is subnormal or 0 in float32, and a
# scale of 0 turns every row into a uniform average, which softmax_scale=0.0 is refused for).
MIN_SOFTMAX_SCALE = 2.0**-126

# The smallest positive softcap: a normal float32 (below it softcap and scores / softcap leave
# float32's normal range in the kernels' and the reference's float32 math).
MIN_SOFTCAP = 2.0**-126
MAX_SOFTCAP = float.fromhex("0x1.fffffep+127")

_MAX_SEQLEN_IS_TENSOR = " (a tensor would force a device-to-host sync on every call; pass the int you know)"


@dataclass(frozen=True)
class Problem:
    """Everything about a call except the data: shapes, dtypes, options (all normalised).

    Units: lengths and counts in tokens; head dims in elements.
    `window` is (left, right) with -1 = unbounded, already folded with causal (causal sets
    right = 0); `alignment` is the frame of causal and window: "bottom_right" (FlashAttention's
    default: query i of a sequence with lq queries and lk keys is aligned with key i + lk - lq)
    or "top_left" (aligned with key i).
    """

    device: torch.device
    dtype: torch.dtype
    out_dtype: torch.dtype  # always `dtype` (q's): the output is q's dtype on every backend
    batch: int
    total_q: int
    h_q: int
    h_kv: int
    d_qk: int
    d_v: int
    kv: str  # "ragged" | "paged"
    kv_layout: str  # "NHD" | "HND" (pools only; "NHD" for ragged)
    total_k: int  # ragged: rows of k/v; paged: num_pages * page_size
    page_size: int  # 0 for ragged
    num_pages: int  # 0 for ragged
    max_pages_per_seq: int  # 0 for ragged
    has_seqused_q: bool
    has_seqused_k: bool
    max_seqlen_q: int | None
    max_seqlen_k: int | None
    causal: bool
    alignment: str  # "bottom_right" | "top_left"
    window: tuple[int, int]
    softmax_scale: float
    return_lse: bool
    lse_layout: str
    lse_base: str
    lse_s_max: int  # padded LSE rows per sequence; 0 for the other layouts
    # Issue 14: the score transforms (the kernel's -sinks / -softcap classes, ragged or paged K/V).
    has_sinks: bool = False  # a float32 (H_q,) sink logit per query head (Tensors.sinks)
    softcap: float = 0.0  # scores -> softcap * tanh(scores / softcap) after softmax_scale; 0.0 = off
    sinks_stride: int = 1  # sinks' element stride (1 without sinks or with one head; the kernel needs 1)
    # split_kv=False: every launch runs unsplit (num_splits 1), so a row's output does not depend on
    # the rest of the batch (split-KV's count does; backends.num_splits_for, fast_launch._split_tiles).
    split_kv: bool = True

    @property
    def gqa_ratio(self) -> int:
        return self.h_q // self.h_kv

    @property
    def mask_family(self) -> str:
        """"none", "causal" (left unbounded, right = 0) or "window" (any other bounded window)."""
        left, right = self.window
        if left < 0 and right < 0:
            return "none"
        if self.causal and left < 0:
            return "causal"
        return "window"

    def lse_shape(self) -> tuple[int, ...]:
        if self.lse_layout == "head_major":
            return (self.h_q, self.total_q)
        if self.lse_layout == "token_major":
            return (self.total_q, self.h_q)
        return (self.batch, self.lse_s_max, self.h_q)


class Tensors(NamedTuple):
    """The checked tensors of a call (None where not given)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor | None
    seqused_q: torch.Tensor | None
    seqused_k: torch.Tensor | None
    page_table: torch.Tensor | None
    out: torch.Tensor | None
    lse: torch.Tensor | None
    sinks: torch.Tensor | None = None


def _normalise_causal(causal) -> tuple[bool, str]:
    # The type first: `in` on a numpy array or tensor compares elementwise and raises its own error.
    if not isinstance(causal, (bool, str)) or causal not in CAUSAL_VALUES:
        raise ValueError(
            f"causal: expected False, True or 'bottom_right' (bottom-right aligned) or 'top_left', got {causal!r}"
        )
    if causal is False:
        return False, "bottom_right"
    if causal == "top_left":
        return True, "top_left"
    return True, "bottom_right"


def _normalise_window(window_size, causal: bool) -> tuple[int, int]:
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise ValueError(f"window_size: expected a pair (left, right) of ints >= -1, got {window_size!r}")
    left, right = window_size
    for side, value in (("left", left), ("right", right)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not -1 <= value <= MAX_WINDOW:
            raise ValueError(
                f"window_size: expected (left, right) ints in [-1, {MAX_WINDOW}] (-1 = unbounded), "
                f"got {side} = {value!r}"
            )
    if causal:
        if right > 0:
            raise ValueError(
                f"window_size: causal attention fixes the right bound to 0, got window_size={tuple(window_size)}"
                " with causal (pass causal=False for a window that looks ahead)"
            )
        right = 0
    return int(left), int(right)


def _softmax_scale(softmax_scale, d_qk: int) -> float:
    if softmax_scale is None:
        return 1.0 / math.sqrt(d_qk)
    if isinstance(softmax_scale, torch.Tensor) or isinstance(softmax_scale, bool) or not isinstance(
        softmax_scale, numbers.Real
    ):
        raise TypeError(f"softmax_scale: expected a Python float or None, got {type(softmax_scale).__name__}")
    try:
        finite = math.isfinite(softmax_scale)
    except OverflowError:  # an int beyond float range (math.isfinite converts it to a float)
        finite = False
    if not finite or softmax_scale <= 0:
        raise ValueError(f"softmax_scale: expected a finite positive float, got {chk.short_repr(softmax_scale)}")
    if softmax_scale > MAX_SOFTMAX_SCALE:
        raise ValueError(
            f"softmax_scale: expected at most {MAX_SOFTMAX_SCALE:.4g} (the kernels scale scores by "
            f"softmax_scale * log2(e) in float32, which overflows above that), got {chk.short_repr(softmax_scale)}"
        )
    if softmax_scale < MIN_SOFTMAX_SCALE:
        raise ValueError(
            f"softmax_scale: expected at least {MIN_SOFTMAX_SCALE:.4g} (2**-126, the smallest normal float32: "
            f"the kernels scale scores by softmax_scale * log2(e) in float32, where a smaller scale is 0 or "
            f"subnormal), got {softmax_scale!r}"
        )
    return float(softmax_scale)


def check_softcap(softcap) -> float:
    """softcap: a Python float, 0.0 (off) or in [MIN_SOFTCAP, MAX_SOFTCAP] (finite, normal float32)."""
    if isinstance(softcap, torch.Tensor) or isinstance(softcap, bool) or not isinstance(softcap, numbers.Real):
        raise TypeError(f"softcap: expected a Python float (0.0 = off), got {type(softcap).__name__}")
    try:
        softcap = float(softcap)
    except OverflowError:  # an int beyond float range
        raise ValueError(f"softcap: expected 0.0 (off) or a finite positive float <= {MAX_SOFTCAP!r}, got {softcap!r}") from None
    if softcap == 0.0:
        return 0.0
    if not MIN_SOFTCAP <= softcap <= MAX_SOFTCAP:  # NaN fails both comparisons
        raise ValueError(
            f"softcap: expected 0.0 (off) or a finite positive float in [2**-126, {MAX_SOFTCAP!r}] (a normal "
            f"float32: the scores are capped in float32), got {softcap!r}"
        )
    return softcap


def check_sinks(sinks, h_q: int, device: torch.device) -> torch.Tensor:
    """sinks: a float32 (H_q,) tensor on q's device (any stride). Its values are not read (no sync)."""
    if not isinstance(sinks, torch.Tensor):
        raise TypeError(f"sinks: expected a float32 torch.Tensor of shape (H_q,) or None, got {type(sinks).__name__}")
    if sinks.dtype != torch.float32:
        raise TypeError(
            f"sinks: expected dtype float32 (one sink logit per query head; convert with .float()), "
            f"got {chk.dtype_name(sinks.dtype)}"
        )
    if tuple(sinks.shape) != (h_q,):
        raise ValueError(f"sinks: expected shape ({h_q},) (H_q, one logit per query head), got {tuple(sinks.shape)}")
    chk.same_device("sinks", sinks, device)
    return sinks


def _check_kv(q, k, v, kv_layout: str, paged: bool):
    """Ranks, dtypes, devices and heads of k and v. Returns (h_kv, d_qk, d_v, total_k, page_size, num_pages)."""
    rank = 4 if paged else 3
    what = "a page pool" if paged else "ragged"
    for name, x in (("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
        if x.dim() != rank:
            shape = f"(num_pages, page_size, H_kv, D) ({kv_layout})" if paged else "(total_k, H_kv, D)"
            if paged and kv_layout == "HND":
                shape = "(num_pages, H_kv, page_size, D) (HND)"
            raise ValueError(
                f"{name}: expected a {rank}-D tensor {shape} for {what} KV, got shape {tuple(x.shape)}"
                + ("" if paged else " (pass page_table for page pools)")
            )
        chk.same_dtype(name, x, "q", q)
        chk.same_device(name, x, q.device)
        chk.last_dim_contiguous(name, x)
    if paged:
        seq_axis, head_axis = (1, 2) if kv_layout == "NHD" else (2, 1)
        if k.shape[:3] != v.shape[:3]:
            raise ValueError(
                f"v: expected the pool shape of k (num_pages, page_size, H_kv as {kv_layout}) "
                f"{tuple(k.shape[:3])}, got {tuple(v.shape[:3])}"
            )
        h_kv, page_size, num_pages = k.shape[head_axis], k.shape[seq_axis], k.shape[0]
        total_k = num_pages * page_size
        if page_size < 1:
            raise ValueError(f"k: expected a page size >= 1, got a pool of shape {tuple(k.shape)}")
    else:
        if k.shape[0] != v.shape[0]:
            raise ValueError(f"v: expected {k.shape[0]} tokens (the rows of k), got {v.shape[0]}")
        if k.shape[1] != v.shape[1]:
            raise ValueError(f"v: expected H_kv = {k.shape[1]} heads (those of k), got {v.shape[1]}")
        h_kv, total_k, page_size, num_pages = k.shape[1], k.shape[0], 0, 0
    return h_kv, k.shape[-1], v.shape[-1], total_k, page_size, num_pages


def build_problem(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    *,
    seqused_q=None,
    seqused_k=None,
    page_table=None,
    kv_layout="NHD",
    causal=False,
    window_size=(-1, -1),
    softmax_scale=None,
    return_lse=False,
    lse_layout="head_major",
    lse_base="ln",
    out=None,
    lse=None,
    sinks=None,
    softcap=0.0,
    split_kv=True,
    for_class_only=False,
) -> tuple[Problem, Tensors]:
    """Check every argument of `ragged_attn.attention` and describe the call.

    Arguments and shapes: see `ragged_attn.attention`. Reads no device memory.
    for_class_only: the problem only names a layout class (`layout_class_of`): a padded LSE
    needs no s_max then (it is not in the key; lse_s_max = 0 when max_seqlen_q is None), and
    no allocation limit applies.

    Returns:
        (Problem, Tensors): the normalised description and the checked tensors.
    Raises:
        TypeError: an argument of the wrong type or dtype (e.g. a tensor for max_seqlen_q).
        ValueError: a wrong shape, stride, alignment, device or option value.
    """
    q = chk.tensor("q", q, rank=3)
    chk.dtype_in("q", q, chk.INPUT_DTYPES)
    chk.last_dim_contiguous("q", q)
    device = q.device
    total_q, h_q, _ = q.shape

    chk.choice("kv_layout", kv_layout, KV_LAYOUTS)
    paged = page_table is not None
    h_kv, d_qk, d_v, total_k, page_size, num_pages = _check_kv(q, k, v, kv_layout, paged)
    if q.shape[2] != d_qk:
        raise ValueError(f"k: expected head_dim {q.shape[2]} (that of q), got {d_qk}")
    for name, d in (("q", d_qk), ("v", d_v)):
        if d % 8 or not 8 <= d <= MAX_HEAD_DIM:
            raise ValueError(f"{name}: expected a head_dim that is a multiple of 8 in [8, {MAX_HEAD_DIM}], got {d}")
    if h_kv < 1 or h_q % h_kv:
        raise ValueError(f"k: expected H_kv to divide H_q = {h_q} (GQA: query head h reads kv head h // (H_q / H_kv)), got H_kv = {h_kv}")

    # Sequence metadata.
    cu_seqlens_q = chk.index_vector("cu_seqlens_q", cu_seqlens_q, length=None, device=device)
    if cu_seqlens_q.shape[0] < 1:
        raise ValueError("cu_seqlens_q: expected shape (B + 1,) with B >= 0, got an empty tensor")
    batch = cu_seqlens_q.shape[0] - 1
    if cu_seqlens_k is not None:
        cu_seqlens_k = chk.index_vector("cu_seqlens_k", cu_seqlens_k, length=batch + 1, device=device)
    elif not paged:
        raise ValueError("cu_seqlens_k: expected an int32 (B + 1,) tensor for ragged KV, got None")
    if seqused_q is not None:
        seqused_q = chk.index_vector("seqused_q", seqused_q, length=batch, device=device)
    if seqused_k is not None:
        seqused_k = chk.index_vector("seqused_k", seqused_k, length=batch, device=device)
    max_pages = 0
    if paged:
        page_table = chk.tensor("page_table", page_table, rank=2)
        if page_table.dtype != torch.int32:
            raise TypeError(f"page_table: expected dtype int32, got {chk.dtype_name(page_table.dtype)}")
        chk.same_device("page_table", page_table, device)
        if page_table.shape[0] != batch:
            raise ValueError(
                f"page_table: expected shape (B, max_pages) with B = {batch} (from cu_seqlens_q), "
                f"got {tuple(page_table.shape)}"
            )
        if page_table.shape[1] > 1 and page_table.stride(1) != 1:
            raise ValueError(f"page_table: expected contiguous rows (stride 1 in dim 1), got strides {page_table.stride()}")
        if seqused_k is None and cu_seqlens_k is None:
            raise ValueError(
                "seqused_k: expected an int32 (B,) tensor of key lengths for page pools (or cu_seqlens_k, whose "
                "differences are the key lengths), got None"
            )
        max_pages = page_table.shape[1]

    max_seqlen_q = chk.python_int("max_seqlen_q", max_seqlen_q, minimum=0, why_not_tensor=_MAX_SEQLEN_IS_TENSOR)
    max_seqlen_k = chk.python_int("max_seqlen_k", max_seqlen_k, minimum=0, why_not_tensor=_MAX_SEQLEN_IS_TENSOR)

    is_causal, alignment = _normalise_causal(causal)
    window = _normalise_window(window_size, is_causal)
    scale = _softmax_scale(softmax_scale, d_qk)
    softcap = check_softcap(softcap)
    if sinks is not None:
        sinks = check_sinks(sinks, h_q, device)

    # Output: q's dtype on every backend (the kernels write the input dtype; the reference computes
    # in float32 and rounds to it), so one call gives one dtype whichever backend runs it.
    out_dtype = q.dtype
    if out is not None:
        out = chk.tensor("out", out, rank=3)
        if tuple(out.shape) != (total_q, h_q, d_v):
            raise ValueError(f"out: expected shape {(total_q, h_q, d_v)} (total_q, H_q, D_v), got {tuple(out.shape)}")
        chk.same_device("out", out, device)
        if out.dtype != out_dtype:
            raise TypeError(
                f"out: expected dtype {chk.dtype_name(out_dtype)} (q's: the output is q's dtype on every backend), "
                f"got {chk.dtype_name(out.dtype)}"
            )
        chk.last_dim_contiguous("out", out)
        chk.not_self_overlapping("out", out)
        chk.writable_in_place("out", out)
        inputs = (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k),
                  ("seqused_q", seqused_q), ("seqused_k", seqused_k), ("page_table", page_table), ("sinks", sinks))  # fmt: skip
        chk.apart("out", out, inputs)

    if not isinstance(split_kv, bool):
        raise TypeError(f"split_kv: expected a bool, got {chk.type_name(split_kv)}")

    # Log-sum-exp.
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse: expected a bool, got {chk.type_name(return_lse)}")
    chk.choice("lse_layout", lse_layout, LSE_LAYOUTS)
    chk.choice("lse_base", lse_base, LSE_BASES)
    if lse is not None and not return_lse:
        raise ValueError("lse: a buffer was passed but return_lse=False (pass return_lse=True to fill it)")
    lse_s_max = 0
    if return_lse and lse_layout == "padded":
        if lse is not None:
            lse = chk.tensor("lse", lse, rank=3)
            lse_s_max = lse.shape[1]
            if max_seqlen_q is not None and lse_s_max < max_seqlen_q:
                raise ValueError(
                    f"lse: expected a padded buffer with s_max >= max_seqlen_q = {max_seqlen_q} rows, "
                    f"got shape {tuple(lse.shape)}"
                )
        elif max_seqlen_q is None:
            if not for_class_only:
                raise ValueError("max_seqlen_q: expected an int (the s_max of the padded LSE buffer), got None")
        elif max_seqlen_q > MAX_PADDED_LSE_ROWS and not for_class_only:
            raise ValueError(
                f"max_seqlen_q: a padded LSE allocated by the call is (B, s_max = max_seqlen_q, H_q) float32; "
                f"expected s_max <= {MAX_PADDED_LSE_ROWS} rows, got {max_seqlen_q} "
                f"({batch * max_seqlen_q * h_q * 4 / 2**30:.1f} GiB); pass the longest query length, "
                "or an lse buffer of your own"
            )
        else:
            lse_s_max = max_seqlen_q
    problem = Problem(
        device=device,
        dtype=q.dtype,
        out_dtype=out_dtype,
        batch=batch,
        total_q=total_q,
        h_q=h_q,
        h_kv=h_kv,
        d_qk=d_qk,
        d_v=d_v,
        kv="paged" if paged else "ragged",
        kv_layout=kv_layout if paged else "NHD",
        total_k=total_k,
        page_size=page_size,
        num_pages=num_pages,
        max_pages_per_seq=max_pages,
        has_seqused_q=seqused_q is not None,
        has_seqused_k=seqused_k is not None,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k,
        causal=is_causal,
        alignment=alignment,
        window=window,
        softmax_scale=scale,
        return_lse=return_lse,
        lse_layout=lse_layout,
        lse_base=lse_base,
        lse_s_max=lse_s_max,
        has_sinks=sinks is not None,
        softcap=softcap,
        sinks_stride=sinks.stride(0) if sinks is not None and h_q > 1 else 1,
        split_kv=split_kv,
    )
    if lse is not None:
        check_lse_buffer(problem, lse)
        chk.writable_in_place("lse", lse)
        others = (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k),
                  ("seqused_q", seqused_q), ("seqused_k", seqused_k), ("page_table", page_table), ("out", out),
                  ("sinks", sinks))  # fmt: skip
        chk.apart("lse", lse, others, "the inputs and out")
    if q.dtype in chk.KERNEL_DTYPES:
        # The kernels load with TMA; the check is the same for every backend so that a problem is
        # valid or invalid everywhere.
        for name, x in (("q", q), ("k", k), ("v", v)) + ((("out", out),) if out is not None else ()):
            chk.tma_aligned(name, x)
    return problem, Tensors(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k, page_table, out, lse, sinks)


def check_lse_buffer(problem: Problem, lse) -> None:
    """A caller's LSE buffer: float32, the layout's shape, compact in some dim order, on q's device."""
    lse = chk.tensor("lse", lse, rank=len(problem.lse_shape()))
    if lse.dtype != torch.float32:
        raise TypeError(f"lse: expected dtype float32, got {chk.dtype_name(lse.dtype)}")
    chk.same_device("lse", lse, problem.device)
    if tuple(lse.shape) != problem.lse_shape():
        axes = {"head_major": "(H_q, total_q)", "token_major": "(total_q, H_q)", "padded": "(B, s_max, H_q)"}
        raise ValueError(
            f"lse: expected shape {problem.lse_shape()} {axes[problem.lse_layout]} for lse_layout="
            f"{problem.lse_layout!r}, got {tuple(lse.shape)}"
        )
    if not chk.is_compact(lse):
        raise ValueError(
            f"lse: expected a compact buffer (its dims in any order, no gaps), got strides {lse.stride()} "
            f"for shape {tuple(lse.shape)}"
        )
