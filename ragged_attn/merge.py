"""Merging partial attention results by their log-sum-exp: `merge_state`, `merge_states`.

Attention over a key set split into parts A, B, ... (cascade / shared-prefix attention, split-KV,
context parallelism) is recovered from each part's output O_i and LSE s_i: with weights
w_i = exp(s_i - s), s = log(sum_i exp(s_i)), the merged output is O = sum_i w_i O_i and the merged
LSE is s. The shapes, the argument order and the default base 2 are FlashInfer's
(`flashinfer.cascade.merge_state` / `merge_states`, as read in FlashInfer's repository:
flashinfer/cascade.py and include/flashinfer/attention/cascade.cuh, whose kernels compute the
weights as exp2(s_i - max) / sum exp2(s_j - max)); `lse_base="ln"` takes FlashAttention's natural-log LSE
(and ragged_attn.attention's default) instead.

What runs where. CUDA tensors on an sm_90 GPU (H100 / H200) go to one fused single-pass kernel
(ragged_attn/kernels/merge_sm90.py, CuTe DSL, compiled on first use once per (merge_state or
merge_states, dtype, lse_base) and kept in this process; every extent and stride is a run-time
value) when v is float16 / bfloat16 / float32 with a unit last stride, head_dim and every other
stride of v a multiple of 16 bytes' worth of elements (8 for fp16/bf16, 4 for fp32) and a
16-byte-aligned base; the LSEs may have any strides. Everything else takes the torch-op path:
CPU and meta tensors, other GPUs, a CuTe DSL that is missing or not the pinned version, other
strides / head dims / alignment, empty extents, inputs that require grad while grad mode is on
(autograd records the torch ops), tracing under torch.compile (inductor fuses the torch ops), and
RAGGED_ATTN_MERGE_KERNEL=0 in the environment (read at every call; tests and
tools/bench_merge.py use it to time the torch path). The kernel reads every input once and writes
every output once; on an H200 (2026-12-03, 32k tokens x 32 heads x d128 bf16, tools/bench_merge.py)
merge_state moves 3418 GB/s (80% of the ~4.3 TB/s copy bandwidth), merge_states 3076 GB/s with 2
states (72%) and 3927 GB/s with 4 (91%). The torch path makes several memory passes (285-328 GB/s). Both are numerically stable (the row maximum is subtracted before exponentiating, so LSEs of
+-1e4 neither overflow nor underflow) and compute weights, sums and products in float32 whatever
the input dtype, rounding the output once to the input dtype; they differ only in float32
rounding (the kernel sums w_i v_i then divides by sum w_i, the torch path scales each part by
w_i / sum w_i first). On either path no host sync happens and the launch is CUDA-graph capturable.

Non-finite values (one rule for both functions, tests/test_merge.py checks each case):
  * A part whose LSE is -inf saw no key: it contributes nothing and its v is never read (NaN or
    inf there does not reach the result). A row whose every part is -inf (or that has no part:
    merge_states with zero states) gives O = 0 and LSE = -inf. FlashInfer's merge_state gives NaN
    there (max - max = -inf - -inf); its merge_states with one state copies v as it is.
  * A row where any part's LSE is NaN or +inf gives O = NaN (every column) and LSE = NaN.
  * A NaN / inf in v of a part whose LSE is finite propagates (IEEE) into that column of the
    row's O, also when that part's weight underflows to 0 (0 * NaN is NaN).
"""

from __future__ import annotations

import functools
import math
import os
import threading

import torch

from . import _checks as chk

LSE_BASES = ("log2", "ln")
V_DTYPES = chk.INPUT_DTYPES  # float16, bfloat16, float32
KERNEL_ENV = "RAGGED_ATTN_MERGE_KERNEL"  # "0": CUDA tensors take the torch path too
_KERNEL_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
_MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y (a token's (head, chunk) items / 128)


def _device_of(name: str, x: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if x.device != ref.device:
        raise ValueError(f"{name}: expected a tensor on {ref.device} (the device of {ref_name}), got one on {x.device}")


def _lse_tensor(name: str, s, rank: int) -> torch.Tensor:
    s = chk.tensor(name, s, rank=rank)
    if s.dtype != torch.float32:
        raise TypeError(
            f"{name}: expected dtype float32 (an LSE; FlashInfer casts other dtypes, ragged_attn refuses them "
            f"so that no precision is lost silently), got {chk.dtype_name(s.dtype)}"
        )
    return s


def _v_tensor(name: str, v, rank: int) -> torch.Tensor:
    v = chk.tensor(name, v, rank=rank)
    chk.dtype_in(name, v, V_DTYPES)
    return v


def _output_buffers(out, s_out, v0: torch.Tensor, shape: tuple, inputs: dict, v_name: str = "v") -> tuple:
    """Check a caller's `out` (`shape` = (tokens, heads, head_dim), in v0's dtype) and `s_out`
    ((tokens, heads) float32), either None: on v0's device, elements of their own, apart from every
    input and from each other (ValueError / TypeError naming the argument; nothing is written before)."""
    t, h, d = shape
    if out is not None:
        out = chk.tensor("out", out, rank=3)
        chk.same_dtype("out", out, v_name, v0)
        if tuple(out.shape) != (t, h, d):
            raise ValueError(f"out: expected shape {(t, h, d)} (tokens, heads, head_dim), got {tuple(out.shape)}")
        _device_of("out", out, v_name, v0)
        chk.not_self_overlapping("out", out)
    if s_out is not None:
        s_out = _lse_tensor("s_out", s_out, 2)
        if tuple(s_out.shape) != (t, h):
            raise ValueError(f"s_out: expected shape {(t, h)} (tokens, heads), got {tuple(s_out.shape)}")
        _device_of("s_out", s_out, v_name, v0)
        chk.not_self_overlapping("s_out", s_out)
    for name, buf in (("out", out), ("s_out", s_out)):
        if buf is None:
            continue
        chk.writable_in_place(name, buf)  # in-place writes torch refuses, refused before anything is written
        if torch.compiler.is_compiling():  # no data pointers under tracing
            continue
        for other, x in inputs.items():
            if chk.overlaps(buf, x):
                raise ValueError(
                    f"{name}: expected memory apart from the inputs (a span test, as for attention's out), got a "
                    f"tensor overlapping {other}"
                )
    if out is not None and s_out is not None and not torch.compiler.is_compiling() and chk.overlaps(out, s_out):
        raise ValueError("s_out: expected memory apart from out (a span test), got a tensor overlapping out")
    return out, s_out


def _deliver(v: torch.Tensor, s: torch.Tensor, out, s_out) -> tuple:
    """(v, s) written into the caller's buffers where given (the torch path's results)."""
    if out is not None:
        out.copy_(v)
        v = out
    if s_out is not None:
        s_out.copy_(s)
        s = s_out
    return v, s


def _combine(parts: list[torch.Tensor], s: torch.Tensor, lse_base: str, out_dtype: torch.dtype):
    """parts: S tensors (T, H, D); s: float32 (T, S, H). Returns (v (T, H, D) out_dtype, lse (T, H) float32)."""
    exp, log = (torch.exp2, torch.log2) if lse_base == "log2" else (torch.exp, torch.log)
    m = s.amax(dim=1, keepdim=True)  # (T, 1, H); NaN propagates
    m = torch.where(m == -math.inf, 0.0, m)  # rows with no key anywhere: every weight below is 0
    w = exp(s - m)  # -inf parts -> 0 exactly; a NaN or +inf part -> NaN
    total = w.sum(dim=1)  # (T, H): >= 1 unless every part is -inf (0) or the row is NaN
    lse = m.squeeze(1) + log(total)  # 0 + log(0) = -inf for rows with no key
    scale = torch.where(total.unsqueeze(1) == 0, 0.0, w / total.unsqueeze(1))  # (T, S, H)
    empty = s == -math.inf  # (T, S, H): parts whose v is not read
    acc = None
    for i, v_i in enumerate(parts):
        v_i = torch.where(empty[:, i, :, None], 0.0, v_i)  # a python scalar keeps v_i's dtype
        if acc is None:  # the first part (callers pass at least one)
            acc = v_i * scale[:, i, :, None]  # float32: a float16/bfloat16 v promotes to scale's dtype
        else:
            acc.addcmul_(v_i, scale[:, i, :, None])  # in place, computed in float32
    return acc.to(out_dtype), lse


def merge_state(v_a, s_a, v_b, s_b, *, lse_base="log2", out=None, s_out=None):
    """Merge two partial attention results (FlashInfer's `flashinfer.cascade.merge_state`).

    Args:
        v_a, v_b: (tokens, heads, head_dim), float16 / bfloat16 / float32, the same dtype and
            shape: the attention outputs over key sets A and B (any strides).
        s_a, s_b: (tokens, heads) float32, the LSEs of the scaled scores over A and B, in the base
            `lse_base`. A (heads, tokens) head-major LSE (FlashAttention's, ragged_attn's default
            layout) goes in as `lse.t()` (a view; any strides are read).
        lse_base: "log2" (FlashInfer's convention and the default: s = log2 sum 2^(x log2 e))
            or "ln" (natural log: FlashAttention's and ragged_attn.attention's default). Both
            inputs and the result are in this base. Keyword only.
        out, s_out: optional buffers for the results (a ragged_attn extension; FlashInfer's
            merge_state allocates): out (tokens, heads, head_dim) in v_a's dtype, s_out (tokens,
            heads) float32, on v_a's device, any strides but expanded or interleaved views, whose
            memory spans lie apart from every input's and from each other's (a conservative span
            test, as for attention's `out`; not checked while torch.compile traces, where data
            pointers do not exist), writable in place (no grad-requiring buffer in grad mode, no
            inference tensor outside inference mode). Keyword only.
    Returns:
        (v, s): v (tokens, heads, head_dim) in v_a's dtype, the attention over A and B together;
        s (tokens, heads) float32, its LSE in `lse_base`. On v_a's device: `out` / `s_out` where
        given, else fresh tensors.
        Rows where both parts are -inf give v = 0 and s = -inf; the rules for NaN and inf are in
        this module's docstring (ragged_attn/merge.py).
    Raises:
        TypeError: a non-tensor, v of another dtype than float16/bfloat16/float32, v_b's dtype
            not v_a's, an LSE not float32 (FlashInfer casts; we refuse), out not in v_a's dtype,
            s_out not float32.
        ValueError: a wrong rank or shape (v_b not v_a's shape, s_a / s_b / s_out not v_a's
            (tokens, heads), out not v_a's shape), a tensor on another device than v_a,
            lse_base not "log2" / "ln", out / s_out whose elements share memory, that overlap
            an input or each other, or that torch cannot write in place.
        Each message names the argument. Nothing is written before every check has passed (the
        inputs are only read).
    """
    v_a = _v_tensor("v_a", v_a, 3)
    v_b = _v_tensor("v_b", v_b, 3)
    s_a = _lse_tensor("s_a", s_a, 2)
    s_b = _lse_tensor("s_b", s_b, 2)
    chk.choice("lse_base", lse_base, LSE_BASES)
    chk.same_dtype("v_b", v_b, "v_a", v_a)
    if v_b.shape != v_a.shape:
        raise ValueError(f"v_b: expected the shape of v_a {tuple(v_a.shape)}, got {tuple(v_b.shape)}")
    want = tuple(v_a.shape[:2])
    for name, s in (("s_a", s_a), ("s_b", s_b)):
        if tuple(s.shape) != want:
            raise ValueError(f"{name}: expected shape {want} (tokens, heads) of v_a, got {tuple(s.shape)}")
    for name, x in (("s_a", s_a), ("v_b", v_b), ("s_b", s_b)):
        _device_of(name, x, "v_a", v_a)
    inputs = {"v_a": v_a, "s_a": s_a, "v_b": v_b, "s_b": s_b}
    out, s_out = _output_buffers(out, s_out, v_a, tuple(v_a.shape), inputs, "v_a")
    if _kernel_serves([v_a, v_b], [s_a, s_b]) and (out is None or _kernel_fits([out])):
        return _merge_kernel("pair", (v_a, s_a, v_b, s_b), v_a, lse_base, out=out, lse=s_out)
    v, lse = _combine([v_a, v_b], torch.stack([s_a, s_b], dim=1), lse_base, v_a.dtype)
    return _deliver(v, lse, out, s_out)


def merge_states(v, s, *, lse_base="log2", out=None, s_out=None):
    """Merge any number of partial attention results (FlashInfer's `flashinfer.cascade.merge_states`).

    Args:
        v: (tokens, states, heads, head_dim), float16 / bfloat16 / float32 (any strides): state i
            of token t is the attention output of that token over key set i.
        s: (tokens, states, heads) float32, the LSEs in `lse_base`.
        lse_base: "log2" (FlashInfer's, the default) or "ln" (FlashAttention's natural log).
            Keyword only.
        out, s_out: optional buffers for the results, as in `merge_state` (out (tokens, heads,
            head_dim) in v's dtype, s_out (tokens, heads) float32). Keyword only.
    Returns:
        (v, s): v (tokens, heads, head_dim) in v's dtype, the attention over the union of the key
        sets; s (tokens, heads) float32, its LSE in `lse_base`. On v's device: `out` / `s_out`
        where given, else fresh tensors.
        Zero states, or rows whose every state is -inf, give v = 0 and s = -inf (FlashInfer's
        rule for zero states); NaN / inf as in this module's docstring.
    Raises:
        TypeError: a non-tensor, v of another dtype than float16/bfloat16/float32, s not float32,
            out not in v's dtype, s_out not float32.
        ValueError: a wrong rank, s not v's (tokens, states, heads), s on another device than v,
            lse_base not "log2" / "ln", out / s_out of the wrong shape or device, whose elements
            share memory, that overlap v, s or each other, or that torch cannot write in place (as
            in `merge_state`). Each message names the argument;
            nothing is written before every check has passed.
    """
    v = _v_tensor("v", v, 4)
    s = _lse_tensor("s", s, 3)
    chk.choice("lse_base", lse_base, LSE_BASES)
    want = tuple(v.shape[:3])
    if tuple(s.shape) != want:
        raise ValueError(f"s: expected shape {want} (tokens, states, heads) of v, got {tuple(s.shape)}")
    _device_of("s", s, "v", v)
    t, n, h, d = v.shape
    out, s_out = _output_buffers(out, s_out, v, (t, h, d), {"v": v, "s": s})
    if n == 0:
        zeros = torch.zeros((t, h, d), dtype=v.dtype, device=v.device)
        return _deliver(zeros, torch.full((t, h), -math.inf, dtype=torch.float32, device=v.device), out, s_out)
    if _kernel_serves([v[:, 0]], [s], state_stride=v.stride(1)) and (out is None or _kernel_fits([out])):
        return _merge_kernel("stack", (v, s), v[:, 0], lse_base, out=out, lse=s_out)
    merged, lse = _combine(list(v.unbind(1)), s, lse_base, v.dtype)
    return _deliver(merged, lse, out, s_out)


# ---- the fused CUDA kernel (ragged_attn/kernels/merge_sm90.py) ------------------------------------

_KERNELS: dict = {}  # MergeKey -> compiled TVM-FFI function (this process only)
_KERNEL_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    global _KERNEL_LOCK  # a fork during another thread's compile would leave it held in the child
    _KERNEL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

_UNAVAILABLE: list = []  # [reason or None] once checked


def _kernel_unavailable() -> str | None:
    """None when the CuTe DSL merge kernel can be compiled here, else why not (checked once)."""
    if not _UNAVAILABLE:
        from .backends import cute_import_error

        reason = cute_import_error()
        if reason is None:
            try:
                from .kernels import merge_sm90  # noqa: F401
            except ImportError as exc:
                reason = f"the merge kernel does not import ({exc})"
        _UNAVAILABLE.append(reason)
    return _UNAVAILABLE[0]


def _on_cuda(x: torch.Tensor) -> bool:
    return x.is_cuda  # a seam: tests/test_merge_kernel.py stands CPU tensors in for CUDA ones


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _is_sm90(device: torch.device) -> bool:
    """Whether a CUDA device has compute capability 9.0 (the kernel's sm_90a code runs there)."""
    return _capability(_device_index(device)) == (9, 0)


@functools.cache
def _capability(index: int) -> tuple:
    return torch.cuda.get_device_capability(index)


def _kernel_fits(views: list[torch.Tensor], state_stride: int | None = None) -> bool:
    """Whether the kernel's layout contract holds for these (T, H, D) views (merge_state's v_a,
    v_b; merge_states' state 0 with the state stride): unit last stride, D and the other strides
    multiples of `vec` elements (16 bytes), 16-byte-aligned bases, non-empty extents, and a grid
    CUDA can launch. Pure host arithmetic on shapes, strides and data pointers."""
    v0 = views[0]
    t, h, d = v0.shape
    vec = 16 // v0.element_size()
    if t == 0 or h == 0 or d == 0 or d % vec:
        return False
    if -(-h * (d // vec) // 128) > _MAX_GRID_Y:
        return False
    strides = [state_stride] if state_stride is not None else []
    for x in views:
        if x.stride(2) != 1 or x.data_ptr() % 16:
            return False
        strides += [x.stride(0), x.stride(1)]
    return all(st % vec == 0 for st in strides)


def _kernel_serves(views: list[torch.Tensor], lses: list[torch.Tensor], state_stride: int | None = None) -> bool:
    """Whether these CUDA inputs go to the fused kernel (this module's docstring says when).
    views: the (T, H, D) v tensors (merge_states: state 0, with `state_stride`); lses: the LSEs.
    Inputs that require grad (with grad mode on) stay on the torch path, which autograd records."""
    v0 = views[0]
    if not _on_cuda(v0) or v0.dtype not in _KERNEL_DTYPES or torch.compiler.is_compiling():
        return False
    if os.environ.get(KERNEL_ENV, "1").strip() == "0":
        return False
    if torch.is_grad_enabled() and any(x.requires_grad for x in views + lses):
        return False
    if not _kernel_fits(views, state_stride) or not _is_sm90(v0.device):
        return False
    return _kernel_unavailable() is None


def _compiled(key):
    fn = _KERNELS.get(key)
    if fn is None:
        from .cache_store import DSL_LOCK
        from .kernels.merge_sm90 import compile_merge

        # DSL_LOCK: the DSL compiles one thing at a time per process (the compile cache holds it too)
        with _KERNEL_LOCK, DSL_LOCK:
            fn = _KERNELS.get(key)
            if fn is None:
                fn = _KERNELS[key] = compile_merge(key)
    return fn


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _merge_kernel(form: str, args: tuple, v0: torch.Tensor, lse_base: str, out=None, lse=None):
    """Run the fused kernel on torch's current stream; returns (out (T, H, D), lse (T, H) float32).

    form "pair": args (v_a, s_a, v_b, s_b); "stack": (v, s). v0: a (T, H, D) view of the first
    part (its dtype, shape and device). out / lse: the caller's buffers (merge_state(s)' out, whose
    layout `_kernel_fits`, and s_out, any strides) or fresh tensors. The caller has checked the
    inputs, the buffers and `_kernel_serves`."""
    from .kernels.merge_sm90 import MergeKey, grid_shape

    t, h, d = v0.shape
    key = MergeKey(form, _KERNEL_DTYPES[v0.dtype], lse_base)
    if out is None:
        out = torch.empty((t, h, d), dtype=v0.dtype, device=v0.device)
    if lse is None:
        lse = torch.empty((t, h), dtype=torch.float32, device=v0.device)
    grid_x, grid_y, span, tpc = grid_shape(t, h, d, key.vec, _sm_count(_device_index(v0.device)))
    with torch.cuda.device(v0.device):
        _compiled(key)(*args, out, lse, span, tpc, grid_x, grid_y)
    return out, lse


def merge_states_reference(v, s, *, lse_base="log2"):
    """The float64 oracle for merge_states (tests): the same shapes, results in float64.

    Computed independently of `_combine`: torch.logsumexp in float64 (in natural log, the inputs
    converted from base 2 when lse_base is "log2") and weights exp(s_i - lse), with this module's
    non-finite rules applied explicitly. v (tokens, states, heads, head_dim) of any float dtype,
    s (tokens, states, heads) of any float dtype. Returns (v float64 (tokens, heads, head_dim),
    s float64 (tokens, heads) in lse_base).
    """
    chk.choice("lse_base", lse_base, LSE_BASES)
    v64, s64 = v.to(torch.float64), s.to(torch.float64)
    t, n, h, d = v64.shape
    factor = math.log(2.0) if lse_base == "log2" else 1.0  # to natural log
    if n == 0:
        return (torch.zeros((t, h, d), dtype=torch.float64, device=v.device),
                torch.full((t, h), -math.inf, dtype=torch.float64, device=v.device))  # fmt: skip
    s_ln = s64 * factor
    empty = s64 == -math.inf
    bad = (torch.isnan(s64) | (s64 == math.inf)).any(dim=1)  # (T, H): the row is NaN
    no_key = empty.all(dim=1)  # (T, H)
    safe = torch.where(bad.unsqueeze(1), 0.0, s_ln)
    lse_ln = torch.logsumexp(safe, dim=1)  # -inf where every part is -inf
    p = torch.where(empty, 0.0, torch.exp(safe - torch.where(no_key, 0.0, lse_ln).unsqueeze(1)))
    o = (p.unsqueeze(-1) * torch.where(empty.unsqueeze(-1), 0.0, v64)).sum(dim=1)
    o = torch.where(bad.unsqueeze(-1), math.nan, o)
    lse = torch.where(bad, math.nan, lse_ln / factor)
    return o, lse
