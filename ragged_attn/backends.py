"""Which backend serves a problem, and the GPU kernel's side of the call.

Contract "accept means run" (docs/DESIGN.md rule 3): `check_support` either returns the layout class
that will run the problem correctly, or raises NotImplementedError naming the reason and pointing
to backend="reference". There is no silent fallback.
"""

from __future__ import annotations

import functools
import math

import torch

from . import _checks as chk
from .layout_class import HEAD_DIM_CLASSES, LayoutClass, head_dim_class
from .problem import MAX_PADDED_LSE_ROWS, Problem, Tensors  # fast_launch reads MAX_PADDED_LSE_ROWS here

BACKENDS = ("auto", "reference", "cute")
# Kernel limits: the batch is the grid's z extent; token indices and window bounds stay below
# the kernel's 2**29 "unbounded" sentinel.
MAX_BATCH = 65535
MAX_HEADS = 65535  # query heads: the grid's x extent (kept within the y/z limit)
MAX_TOKENS = 2**29
_DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
_LN2 = math.log(2.0)
_USE_REFERENCE = 'pass backend="reference" for the exact PyTorch path'


# The CuTe DSL release the kernels are written and tested against (pyproject's `cute` extra).
REQUIRED_DSL_VERSION = "4.8.1"


@functools.cache
def cute_import_error() -> str | None:
    """None when the CuTe DSL kernels import, else why not (a one-line reason).

    Checks the installed nvidia-cutlass-dsl version first: another release may compile different
    code from the same kernel sources, so it is refused rather than trusted.
    """
    from importlib import metadata

    try:
        version = metadata.version("nvidia-cutlass-dsl")
    except metadata.PackageNotFoundError:
        return "the CuTe DSL is not installed; install it with pip install 'ragged-attn[cute]'"
    if version != REQUIRED_DSL_VERSION:
        return (
            f"nvidia-cutlass-dsl {version} is installed, the kernels need {REQUIRED_DSL_VERSION}; "
            "install it with pip install 'ragged-attn[cute]'"
        )
    try:
        from .kernels import sm90  # noqa: F401
    except ImportError as exc:  # the `cute` extra is not installed, or a DSL import failed
        return f"the CuTe DSL kernels are not available ({exc}); install them with pip install 'ragged-attn[cute]'"
    return None


def arch_of(device: torch.device) -> str:
    """The kernel arch string for a device: "sm_90a" for compute capability 9.0."""
    if device.type != "cuda":
        return "sm_90a"
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")


def layout_class_for(problem: Problem, arch: str = "sm_90a") -> LayoutClass:
    """The layout class of a checked problem, or NotImplementedError naming why none serves it.

    A problem with sinks or a softcap gets a class with the `sinks` / `softcap` flag (issue 14:
    the kernel's code differs there; the sink values and the cap stay run-time arguments), with
    ragged K/V or page pools; `check_score_options` declines what those classes do not serve
    (a sinks tensor of stride != 1).
    """
    if arch != "sm_90a":
        raise NotImplementedError(f"arch: kernels exist for sm_90a (Hopper), got {arch}; {_USE_REFERENCE}")
    if problem.dtype not in _DTYPE_NAMES:
        raise NotImplementedError(
            f"q: the kernels take float16/bfloat16, got {chk.dtype_name(problem.dtype)}; {_USE_REFERENCE}"
        )
    if problem.out_dtype != problem.dtype:
        raise NotImplementedError(
            f"out: the kernels write the input dtype ({chk.dtype_name(problem.dtype)}), got "
            f"{chk.dtype_name(problem.out_dtype)}; {_USE_REFERENCE}"
        )
    dims = head_dim_class(problem.d_qk, problem.d_v)
    if dims is None:
        raise NotImplementedError(
            f"head dims: kernels serve (d_qk, d_v) in {list(HEAD_DIM_CLASSES)}, got {(problem.d_qk, problem.d_v)}; "
            f"{_USE_REFERENCE}"
        )
    check_score_options(problem)
    return LayoutClass(
        arch=arch,
        d_qk=dims[0],
        d_v=dims[1],
        dtype=_DTYPE_NAMES[problem.dtype],
        out_dtype=_DTYPE_NAMES[problem.out_dtype],
        mask=problem.mask_family,
        lse=problem.return_lse,
        kv=problem.kv,
        softcap=problem.softcap != 0.0,
        sinks=problem.has_sinks,
    )


def check_score_options(problem: Problem) -> None:
    """Issue 14's score options where the kernel does not serve them: NotImplementedError naming them.

    The kernel's `-softcap` / `-sinks` classes serve ragged K/V and page pools alike (the paged
    ones passed tests/gpu/test_softcap_sinks_gpu.py's paged cases on an H200, 2026-12-03), and
    read sinks as a contiguous (H_q,) float32 vector (stride 1; any stride is valid input, the
    reference serves it): a sinks tensor of another stride (H_q > 1) is declined here. Everything
    else with sinks or a softcap runs on the kernel.
    """
    if problem.has_sinks and problem.sinks_stride != 1:
        raise NotImplementedError(
            f"sinks: the GPU kernel reads a contiguous (H_q,) float32 tensor (stride 1), got stride "
            f"{problem.sinks_stride}; pass sinks.contiguous(), or {_USE_REFERENCE}"
        )


def check_support(problem: Problem) -> LayoutClass:
    """Whether the GPU kernel serves this problem on its device.

    Returns:
        The LayoutClass that will run it.
    Raises:
        NotImplementedError: with the reason (CPU tensors, GPU arch, dtype, head dims, a sinks
            tensor of stride != 1 (`check_score_options`; sinks and softcap themselves are served
            with ragged K/V and page pools alike), kernel limits; neither a prebuilt kernel for
            the class nor the DSL installed: the message names the class and both remedies),
            pointing to backend="reference".
    """
    if problem.device.type != "cuda":
        raise NotImplementedError(
            f"q: backend='cute' runs on CUDA tensors, got tensors on {problem.device}; {_USE_REFERENCE}"
        )
    layout_class = layout_class_for(problem, arch_of(problem.device))
    reason = cute_import_error()
    if reason is not None:  # no JIT path: a prebuilt kernel (ragged_attn/prebuilt.py) may serve
        from . import prebuilt

        if not prebuilt.has_prebuilt(layout_class):
            raise NotImplementedError(f"{prebuilt.missing_kernel_message(layout_class, reason)}; {_USE_REFERENCE}")
    check_kernel_limits(problem)
    return layout_class


def check_kernel_limits(problem: Problem) -> None:
    """The kernel's grid and index limits, from shapes only (no device, no DSL needed).

    A padded LSE's rows per sequence are max(s_max, max_seqlen_q) (total_q stands for a missing
    max_seqlen_q when an s_max is known; with neither, as `layout_class_of` allows, there is no
    row count to check). Raises NotImplementedError naming the argument and the limit.
    """
    if problem.batch > MAX_BATCH:
        raise NotImplementedError(
            f"cu_seqlens_q: the kernel's grid holds at most {MAX_BATCH} sequences, got B = {problem.batch}; "
            f"{_USE_REFERENCE}"
        )
    if problem.h_q > MAX_HEADS:
        raise NotImplementedError(
            f"q: the kernel's grid holds at most {MAX_HEADS} query heads, got H_q = {problem.h_q}; {_USE_REFERENCE}"
        )
    if problem.lse_layout == "padded" and problem.return_lse:
        max_q = problem.max_seqlen_q
        if max_q is None:
            max_q = problem.total_q if problem.lse_s_max else 0
        rows = max(problem.lse_s_max, max_q)
        if rows > MAX_PADDED_LSE_ROWS:
            raise NotImplementedError(
                f"lse: a padded LSE holds at most {MAX_PADDED_LSE_ROWS} rows per sequence on the kernel "
                f"(max(s_max, max_seqlen_q) = {rows}); use lse_layout='head_major' or {_USE_REFERENCE}"
            )
    # Paged pools are addressed with 64-bit row pointers: only a sequence's key count (at most
    # max_pages * page_size) meets the kernel's 32-bit token arithmetic.
    total_k = problem.total_k if problem.kv == "ragged" else problem.max_pages_per_seq * problem.page_size
    for name, total in (("q", problem.total_q), ("k" if problem.kv == "ragged" else "page_table", total_k)):
        if total >= MAX_TOKENS:
            raise NotImplementedError(
                f"{name}: the kernel indexes tokens below 2**29 = {MAX_TOKENS}, got {total} rows; {_USE_REFERENCE}"
            )


def launch_cute(layout_class: LayoutClass, problem: Problem, t: Tensors) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the sm90 kernel: allocate the outputs the caller did not pass, then launch on the current stream.

    Reads no device memory and allocates nothing but out / lse and, for a split-KV launch
    (`num_splits_for` > 1), its workspace. A class without an LSE splits through its LSE sibling
    (`split_kv_sibling`), fetched from compile_cache here: when the sibling is in neither the
    memory, the disk cache nor a prebuilt directory, the first call that splits compiles it and
    stalls for that compile (ragged_attn.aot builds both siblings of each shape); where it cannot
    be had at all (no DSL and no prebuilt sibling: NotImplementedError from compile_cache) the call
    runs unsplit on the class's own kernel.
    """
    from . import compile_cache
    from .kernels import sm90

    out = t.out
    if out is None:
        alloc = torch.zeros if problem.has_seqused_q else torch.empty
        out = alloc((problem.total_q, problem.h_q, problem.d_v), dtype=problem.out_dtype, device=problem.device)
    lse = t.lse
    if problem.return_lse and lse is None:
        lse = torch.empty(problem.lse_shape(), dtype=torch.float32, device=problem.device)
    if problem.total_q == 0 or problem.batch == 0:
        # No row of any sequence: every LSE entry is a padded row or a row outside every
        # sequence, -inf with sinks too (docs/SUPPORT_MATRIX.md, sinks).
        if lse is not None:
            lse.fill_(-math.inf)
        return out, lse
    compiled = compile_cache.get_kernel(layout_class, sm90.compile_forward)
    splits = num_splits_for(layout_class, problem)
    split_compiled = None
    if splits > 1 and not layout_class.lse:  # the LSE sibling runs the splits (split_kv.py rule 2)
        try:
            split_compiled = compile_cache.get_kernel(split_kv_sibling(layout_class), sm90.compile_forward)
        except NotImplementedError:  # no JIT and no prebuilt sibling: the class's own kernel, unsplit
            splits = 1
    pack_rows = pack_rows_for(layout_class, problem)
    sm90.launch_forward(
        compiled, **kernel_arguments(problem, t, out, lse), num_splits=splits,
        fresh_outputs=t.out is None and t.lse is None, split_compiled=split_compiled,
        pack_rows=pack_rows, batch_order=batch_order_for(layout_class, problem, pack_rows, splits),
    )  # fmt: skip
    return out, lse


def pack_rows_for(layout_class: LayoutClass, problem: Problem) -> bool:
    """Whether a launch of `layout_class` packs GQA rows (kernels/sm90/tile_scheduler.py): the
    class has TileConfig.pack_rows and `split_kv.choose_pack_rows` takes it for the call's host
    integers with the class's tile_m (the kernel ignores the flag elsewhere). No device read."""
    from .kernels.sm90 import split_kv
    from .kernels.sm90.tile_config import tile_config

    cfg = tile_config(layout_class)
    if not cfg.pack_rows:
        return False
    max_q = problem.max_seqlen_q if problem.max_seqlen_q is not None else problem.total_q
    return bool(
        split_kv.choose_pack_rows(
            problem.batch, problem.total_q, max_q, problem.h_q, problem.h_kv, cfg.tile_m, problem.lse_s_max,
            problem.max_seqlen_k,
        )
    )


def batch_order_for(layout_class: LayoutClass, problem: Problem, pack_rows: bool, num_splits: int) -> bool:
    """Whether a launch of `layout_class` deals its sequences longest first (tile_scheduler.py
    "Batch order"): the class has TileConfig.batch_order and `split_kv.choose_batch_order` takes it
    for the call's host integers, the launch's row packing and split count and the class's tile_m
    (as the fast path asks). No device read."""
    from .kernels.sm90 import launch, split_kv
    from .kernels.sm90.tile_config import tile_config

    cfg = tile_config(layout_class)
    if not cfg.batch_order:
        return False
    max_q = problem.max_seqlen_q if problem.max_seqlen_q is not None else problem.total_q
    # A stand-in launch (CPU tests) counts one CTA, as the fast path's BoundKernel does.
    num_ctas = launch.sm_count(problem.device) if problem.device.type == "cuda" else 1
    return bool(
        split_kv.choose_batch_order(
            problem.batch, problem.total_q, max_q, problem.max_seqlen_k, problem.h_q, problem.h_kv,
            num_ctas, 1 if pack_rows else 0, num_splits, cfg.tile_m,
        )
    )


def split_kv_sibling(layout_class: LayoutClass) -> LayoutClass:
    """The class whose kernel runs `layout_class`'s split launches (kernels/sm90/split_kv.py
    `lse_sibling`): itself with an LSE, else the same class with lse=True."""
    from .kernels.sm90.split_kv import lse_sibling

    return lse_sibling(layout_class)


def num_splits_for(layout_class: LayoutClass, problem: Problem) -> int:
    """Split-KV's split count for a checked problem of `layout_class` (kernels/sm90/split_kv.py:
    1 where the class or the LSE layout may not split, else `choose_num_splits` over the call's
    host integers and the tile of the class that runs the splits, `split_kv_sibling`; ragged K/V
    and page pools alike). No device read."""
    from .kernels.sm90 import launch, split_kv
    from .kernels.sm90.tile_config import tile_config

    if not problem.split_kv or not split_kv.split_allowed(layout_class, problem.lse_layout) or problem.total_k == 0:
        return 1
    if problem.device.type != "cuda":  # a stand-in launch (CPU tests): no SM count to fill
        return 1
    cfg = tile_config(split_kv.lse_sibling(layout_class))
    max_q = problem.max_seqlen_q if problem.max_seqlen_q is not None else problem.total_q
    return split_kv.choose_num_splits(
        problem.batch, problem.total_q, max_q, problem.max_seqlen_k, problem.h_q, problem.h_kv,
        launch.sm_count(problem.device), cfg.tile_m, cfg.tile_n, cfg.pack_gqa, cfg.pack_rows,
    )  # fmt: skip


def lse_strides(problem: Problem, lse: torch.Tensor | None) -> tuple[int, int, int, int]:
    """(s_b, s_tok, s_row, s_h) in elements: lse[b*s_b + cu_seqlens_q[b]*s_tok + i*s_row + h*s_h]."""
    if lse is None:
        return (0, 0, 0, 0)
    if problem.lse_layout == "head_major":  # (H_q, total_q)
        return (0, lse.stride(1), lse.stride(1), lse.stride(0))
    if problem.lse_layout == "token_major":  # (total_q, H_q)
        return (0, lse.stride(0), lse.stride(0), lse.stride(1))
    return (lse.stride(0), 0, lse.stride(1), lse.stride(2))  # padded (B, s_max, H_q)


def kernel_arguments(problem: Problem, t: Tensors, out: torch.Tensor, lse: torch.Tensor | None) -> dict:
    """The keyword arguments of `kernels.sm90.launch_forward` for a checked problem.

    A problem with sinks or a softcap (a `-sinks` / `-softcap` class: `layout_class_for`) passes
    extended=True, its sinks tensor (None without) and its cap (0.0 without), the two trailing
    arguments of such a class's compiled function (`kernels.sm90.compiled_args`).
    """
    left, right = problem.window
    max_q = problem.max_seqlen_q if problem.max_seqlen_q is not None else problem.total_q
    return dict(
        q=t.q,
        k=t.k,
        v=t.v,
        out=out,
        lse=lse,
        cu_seqlens_q=t.cu_seqlens_q,
        cu_seqlens_k=t.cu_seqlens_k,
        seqused_q=t.seqused_q,
        seqused_k=t.seqused_k,
        batch=problem.batch,
        max_seqlen_q=max_q,
        max_seqlen_k=problem.max_seqlen_k,  # keys: the batch order's rule (split_kv.choose_batch_order)
        lse_s_max=problem.lse_s_max,
        softmax_scale=problem.softmax_scale,
        window_left=left,
        window_right=right,
        bottom_right=problem.alignment == "bottom_right",
        lse_strides=lse_strides(problem, lse),
        lse_base_is_log2=problem.lse_base == "log2",
        page_table=t.page_table,
        kv_layout=problem.kv_layout,
        extended=problem.has_sinks or problem.softcap != 0.0,
        sinks=_unit_stride(t.sinks),
        softcap=problem.softcap,
    )


def _unit_stride(sinks: torch.Tensor | None) -> torch.Tensor | None:
    """sinks as the kernel's stride-1 vector: a one-head tensor of another stride is viewed with
    stride 1 (the same element); longer ones have stride 1 already (`check_score_options`)."""
    if sinks is not None and sinks.shape[0] == 1 and sinks.stride(0) != 1:
        return sinks.as_strided((1,), (1,))
    return sinks
