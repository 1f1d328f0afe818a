"""Small argument checks shared by the problem builder and the plan's run path.

Every helper raises `TypeError` (wrong kind of object) or `ValueError` (right kind, wrong value),
with a message that names the argument, what was expected and what came.
"""

from __future__ import annotations

import numbers

import torch

# Bytes the TMA engine needs every base address and non-unit stride to be a multiple of.
TMA_ALIGN_BYTES = 16

KERNEL_DTYPES = (torch.float16, torch.bfloat16)
# float32 is served by the reference backend only (the kernels take fp16/bf16).
INPUT_DTYPES = KERNEL_DTYPES + (torch.float32,)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def type_name(x) -> str:
    """x's type for a message, qualified outside builtins: numpy's bool is "numpy.bool", not the
    "bool" that would contradict "expected a bool"."""
    t = type(x)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def tensor(name: str, x, *, rank: int | tuple[int, ...]) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    ranks = (rank,) if isinstance(rank, int) else rank
    if x.dim() not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ValueError(f"{name}: expected a {want}-D tensor, got shape {tuple(x.shape)} ({x.dim()}-D)")
    return x


def dtype_in(name: str, x: torch.Tensor, allowed: tuple[torch.dtype, ...]) -> None:
    if x.dtype not in allowed:
        names = ", ".join(dtype_name(d) for d in allowed)
        raise TypeError(f"{name}: expected dtype in ({names}), got {dtype_name(x.dtype)}")


def same_dtype(name: str, x: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if x.dtype != ref.dtype:
        raise TypeError(
            f"{name}: expected the dtype of {ref_name} ({dtype_name(ref.dtype)}), got {dtype_name(x.dtype)}"
        )


def same_device(name: str, x: torch.Tensor, device: torch.device) -> None:
    if x.device != device:
        raise ValueError(f"{name}: expected a tensor on {device} (the device of q), got one on {x.device}")


def index_vector(name: str, x, *, length: int | None, device: torch.device) -> torch.Tensor:
    """An int32 1-D metadata tensor (cu_seqlens, seqused) on q's device."""
    x = tensor(name, x, rank=1)
    if x.dtype != torch.int32:
        raise TypeError(f"{name}: expected dtype int32, got {dtype_name(x.dtype)}")
    same_device(name, x, device)
    if length is not None and x.shape[0] != length:
        raise ValueError(f"{name}: expected shape ({length},), got {tuple(x.shape)}")
    if x.numel() > 1 and x.stride(0) != 1:
        raise ValueError(f"{name}: expected a contiguous tensor, got stride {x.stride()}")
    return x


def last_dim_contiguous(name: str, x: torch.Tensor) -> None:
    if x.shape[-1] > 1 and x.stride(-1) != 1:
        raise ValueError(
            f"{name}: expected the last dim (head_dim) to be contiguous (stride 1), got strides {x.stride()}"
        )


def tma_aligned(name: str, x: torch.Tensor) -> None:
    """Base address and every non-unit stride a multiple of 16 bytes (what TMA requires)."""
    item = x.element_size()
    if x.data_ptr() % TMA_ALIGN_BYTES:
        raise ValueError(
            f"{name}: expected a data pointer aligned to {TMA_ALIGN_BYTES} bytes, got one at offset "
            f"{x.data_ptr() % TMA_ALIGN_BYTES} (a view that starts mid-row?)"
        )
    for dim, (size, stride) in enumerate(zip(x.shape, x.stride())):
        if size > 1 and stride != 1 and (stride * item) % TMA_ALIGN_BYTES:
            raise ValueError(
                f"{name}: expected every non-unit stride to be a multiple of {TMA_ALIGN_BYTES} bytes "
                f"({TMA_ALIGN_BYTES // item} elements of {dtype_name(x.dtype)}), got stride {stride} "
                f"in dim {dim} (strides {x.stride()})"
            )


def is_compact(x: torch.Tensor) -> bool:
    """True when x covers a dense block of memory in some dim order (no gaps, no overlap)."""
    dims = sorted((s, n) for n, s in zip(x.shape, x.stride()) if n > 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


# Lengths, offsets and window bounds travel to the kernels as 32-bit ints.
INT32_MAX = 2**31 - 1


def python_int(name: str, x, *, minimum: int, allow_none: bool = True, why_not_tensor: str = "") -> int | None:
    if x is None and allow_none:
        return None
    if isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a Python int, got a torch.Tensor{why_not_tensor}")
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name}: expected a Python int, got {type(x).__name__}")
    if x < minimum or x > INT32_MAX:
        raise ValueError(f"{name}: expected an int in [{minimum}, {INT32_MAX}], got {x}")
    return int(x)


def bool_like(x) -> bool | None:
    """x as a bool when it is one by any reasonable reading: a bool, numpy's bool, or the ints 0 / 1;
    None for anything else (a string, a tensor, 2, None), which the caller names or passes on."""
    if isinstance(x, bool):
        return x
    if type(x).__module__ == "numpy" and type(x).__name__ in ("bool", "bool_"):  # np.True_ (numpy 2 / 1)
        return bool(x)
    if isinstance(x, numbers.Integral) and not isinstance(x, torch.Tensor) and x in (0, 1):
        return bool(x)
    return None


def flag(name: str, x, *, none_as: bool | None = None) -> bool:
    """A boolean option as a bool (`bool_like`; None as `none_as` where given). TypeError naming
    `name` for anything else: never `bool(x)` of a string ("false" is truthy) or a tensor
    (ambiguous with more than one element)."""
    if x is None and none_as is not None:
        return none_as
    value = bool_like(x)
    if value is None:
        shown = f" {x!r}" if isinstance(x, (str, numbers.Number)) and len(repr(x)) <= 40 else ""
        raise TypeError(f"{name}: expected a bool, got {type_name(x)}{shown}")
    return value


def short_repr(x) -> str:
    """repr(x) for a message, at most ~40 characters (a 2**1100 int is not printed whole)."""
    r = repr(x)
    return r if len(r) <= 40 else f"{r[:20]}... ({len(r)} characters)"


def not_self_overlapping(name: str, x: torch.Tensor) -> None:
    """Each element of x at its own address (no stride-0 or interleaved dims): a writable output.
    Skipped while torch.compile traces (symbolic strides cannot be sorted; eager calls check)."""
    if torch.compiler.is_compiling():
        return
    expected = 1
    for stride, size in sorted((s, n) for n, s in zip(x.shape, x.stride()) if n > 1):
        if stride < expected:
            raise ValueError(
                f"{name}: expected an output whose elements do not share memory, got strides {x.stride()} "
                f"for shape {tuple(x.shape)} (an expanded or overlapping view)"
            )
        expected = stride * size


def choice(name: str, x, allowed: tuple) -> None:
    """x is one of the strings in `allowed`; anything else (a tensor, a numpy array, whose `in`
    would raise its own ambiguous-truth error) is a ValueError naming `name`."""
    if not isinstance(x, str) or x not in allowed:
        raise ValueError(f"{name}: expected one of {allowed}, got {x!r}")


def forward_only(q, k, v, sinks=None) -> None:
    """ValueError naming the first of q, k, v, sinks that requires grad. Call it when grad mode is
    enabled: the library has no backward on either backend (the kernel computes none; the reference
    would build an autograd graph the kernel cannot, so it refuses the same calls)."""
    for name, x in (("q", q), ("k", k), ("v", v), ("sinks", sinks)):
        if getattr(x, "requires_grad", False) is True:
            raise ValueError(
                f"{name}: expected a tensor that does not require grad (ragged_attn is forward-only: no backward "
                "on any backend), got one with requires_grad=True while grad mode is enabled; call it under "
                "torch.no_grad() or torch.inference_mode(), or pass detached tensors"
            )


def writable_in_place(name: str, buf: torch.Tensor) -> None:
    """ValueError naming `name` for a caller's output buffer that torch would refuse to write in
    place: one that requires grad while grad mode is enabled, or an inference tensor outside
    torch.inference_mode(). Called before anything is written (the reference writes sequence by
    sequence, so torch's own error would come after the first sequence's rows)."""
    if torch.is_grad_enabled() and buf.requires_grad:
        raise ValueError(
            f"{name}: expected a buffer that does not require grad (it is written in place), got one with "
            "requires_grad=True while grad mode is enabled; pass a plain tensor or call under torch.no_grad()"
        )
    if torch.compiler.is_compiling():  # no inference flags under tracing
        return
    if buf.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError(
            f"{name}: expected a tensor writable outside torch.inference_mode(), got an inference tensor; "
            "call under torch.inference_mode() or pass a tensor made outside it"
        )


def apart(name: str, x: torch.Tensor, others, what: str = "the inputs") -> None:
    """ValueError naming `name` when x's memory overlaps one of `others`, (name, tensor or None)
    pairs (`overlaps`: a span test): "NAME: expected memory apart from WHAT, got a tensor
    overlapping OTHER". Entries that are not tensors are skipped."""
    for other, y in others:
        if isinstance(y, torch.Tensor) and overlaps(x, y):
            raise ValueError(f"{name}: expected memory apart from {what}, got a tensor overlapping {other}")


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when the memory spans of a and b intersect (conservative: spans, not exact elements).
    Meta tensors have no memory (every data_ptr is 0), so they overlap nothing."""
    if a.device != b.device or a.device.type == "meta" or a.numel() == 0 or b.numel() == 0:
        return False
    a_lo = a.data_ptr()
    a_hi = a_lo + (sum((n - 1) * s for n, s in zip(a.shape, a.stride())) + 1) * a.element_size()
    b_lo = b.data_ptr()
    b_hi = b_lo + (sum((n - 1) * s for n, s in zip(b.shape, b.stride())) + 1) * b.element_size()
    return a_lo < b_hi and b_lo < a_hi
