"""`ragged_attn.attention` as torch.library custom ops, so torch.compile traces it without a graph break.

    torch.ops.ragged_attn.attention(...)       -> (out, lse)   functional: allocates both
    torch.ops.ragged_attn.attention_into(...)  -> ()           writes a caller's out (and lse)

`ragged_attn.attention` calls these only while torch.compile / torch.export traces it
(`torch.compiler.is_compiling()`); eager calls keep the plain path (the fast launch path included),
so the ops cost nothing outside a compiled graph. `attention_op` is the same entry for callers who
want the op in eager mode too (a torch.library dispatch, about 10-20 us of host time more).

Schema rules (torch.library custom ops take tensors, ints, floats, bools and strings):
- causal travels as a string ("none", "bottom_right", "top_left"), window_size as two ints;
  sinks (an optional tensor), softcap (a float) and split_kv (a bool) come last, with their
  defaults (None, 0.0, True).
- The functional op always returns two tensors; without return_lse the second is an empty float32
  tensor (0,) that `attention` drops.
- The fake (meta) implementations give the shapes and dtypes `attention` documents: out
  (total_q, H_q, D_v) in q's dtype; lse float32 (H_q, total_q), (total_q, H_q) or (B, s_max, H_q)
  with s_max = max_seqlen_q (a padded LSE under compile needs max_seqlen_q).
- Forward only, like the library: no autograd formula is registered, so compile inference under
  torch.no_grad() or torch.inference_mode(); a graph that needs a backward fails at compile time,
  naming ragged_attn.attention (tests/test_torch_compile.py).
- CUDA graphs (mode="reduce-overhead") replay the kernel with new lengths written into the same
  cu_seqlens tensors (contract 4; tests/gpu/test_compile_gpu.py).
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _checks as chk
from .problem import (
    _MAX_SEQLEN_IS_TENSOR,
    LSE_LAYOUTS,
    _normalise_causal,
    _normalise_window,
    _softmax_scale,
    check_softcap,
)

_CAUSAL = {"none": False, "bottom_right": True, "top_left": "top_left"}


def causal_name(causal) -> str:
    """The op's string for `attention`'s causal argument (bool or "top_left"/"bottom_right")."""
    if causal is False:
        return "none"
    if causal is True or causal == "bottom_right":
        return "bottom_right"
    if causal == "top_left":
        return "top_left"
    raise ValueError(f"causal: expected False, True, 'bottom_right' or 'top_left', got {causal!r}")


def _call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q, seqused_k, page_table,
          kv_layout, causal, window_left, window_right, softmax_scale, return_lse, lse_layout, lse_base, backend,
          sinks=None, softcap=0.0, split_kv=True, out=None, lse=None):  # fmt: skip
    from .api import attention

    return attention(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
        seqused_q=seqused_q, seqused_k=seqused_k, page_table=page_table, kv_layout=kv_layout,
        causal=_CAUSAL[causal], window_size=(window_left, window_right), softmax_scale=softmax_scale,
        return_lse=return_lse, lse_layout=lse_layout, lse_base=lse_base, out=out, lse=lse, sinks=sinks,
        softcap=softcap, split_kv=split_kv, backend=backend,
    )  # fmt: skip


@torch.library.custom_op("ragged_attn::attention", mutates_args=())
def _attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: Optional[torch.Tensor],
    max_seqlen_q: Optional[int],
    max_seqlen_k: Optional[int],
    seqused_q: Optional[torch.Tensor],
    seqused_k: Optional[torch.Tensor],
    page_table: Optional[torch.Tensor],
    kv_layout: str,
    causal: str,
    window_left: int,
    window_right: int,
    softmax_scale: Optional[float],
    return_lse: bool,
    lse_layout: str,
    lse_base: str,
    backend: str,
    sinks: Optional[torch.Tensor] = None,
    softcap: float = 0.0,
    split_kv: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    result = _call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q, seqused_k, page_table,
                   kv_layout, causal, window_left, window_right, softmax_scale, return_lse, lse_layout, lse_base,
                   backend, sinks, softcap, split_kv)  # fmt: skip
    if return_lse:
        return result
    return result, q.new_empty((0,), dtype=torch.float32)


def _fake_lse(q, v, cu_seqlens_q, max_seqlen_q, return_lse, lse_layout) -> torch.Tensor:
    if not return_lse:
        return q.new_empty((0,), dtype=torch.float32)
    total_q, h_q = q.shape[0], q.shape[1]
    if lse_layout == "head_major":
        shape = (h_q, total_q)
    elif lse_layout == "token_major":
        shape = (total_q, h_q)
    elif lse_layout == "padded":
        if max_seqlen_q is None:
            raise ValueError(
                "max_seqlen_q: a padded LSE made by the op (torch.compile, attention_op) needs max_seqlen_q (its "
                "s_max), got None"
            )
        shape = (cu_seqlens_q.shape[0] - 1, max_seqlen_q, h_q)
    else:
        raise ValueError(f"lse_layout: expected one of {LSE_LAYOUTS}, got {lse_layout!r}")
    return q.new_empty(shape, dtype=torch.float32)


@_attention.register_fake
def _attention_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q, seqused_k, page_table,
                    kv_layout, causal, window_left, window_right, softmax_scale, return_lse, lse_layout, lse_base,
                    backend, sinks=None, softcap=0.0, split_kv=True):  # fmt: skip
    out = q.new_empty((q.shape[0], q.shape[1], v.shape[-1]))
    return out, _fake_lse(q, v, cu_seqlens_q, max_seqlen_q, return_lse, lse_layout)


@torch.library.custom_op("ragged_attn::attention_into", mutates_args=("out", "lse"))
def _attention_into(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: Optional[torch.Tensor],
    max_seqlen_q: Optional[int],
    max_seqlen_k: Optional[int],
    seqused_q: Optional[torch.Tensor],
    seqused_k: Optional[torch.Tensor],
    page_table: Optional[torch.Tensor],
    kv_layout: str,
    causal: str,
    window_left: int,
    window_right: int,
    softmax_scale: Optional[float],
    return_lse: bool,
    lse_layout: str,
    lse_base: str,
    backend: str,
    out: Optional[torch.Tensor],
    lse: Optional[torch.Tensor],
    sinks: Optional[torch.Tensor] = None,
    softcap: float = 0.0,
    split_kv: bool = True,
) -> None:
    _call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q, seqused_k, page_table,
          kv_layout, causal, window_left, window_right, softmax_scale, return_lse, lse_layout, lse_base, backend,
          sinks, softcap, split_kv, out=out, lse=lse)  # fmt: skip


@_attention_into.register_fake
def _attention_into_fake(*args) -> None:
    return None


def _check_schema_types(tensors: dict, optional_tensors: dict, strings: dict) -> None:
    """TypeError naming the argument for what the ops' schema cannot carry (torch's own check
    raises a RuntimeError about the op's signature instead), before any dispatch."""
    for name, x in tensors.items():
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    for name, x in optional_tensors.items():
        if x is not None and not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor or None, got {type(x).__name__}")
    for name, x in strings.items():
        if not isinstance(x, str):
            raise TypeError(f"{name}: expected a string, got {x!r} ({type(x).__name__})")


def attention_op(
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
    backend="auto",
):
    """`ragged_attn.attention` through the torch.library ops (what a compiled graph calls).

    Same arguments, shapes, dtypes, results and errors as `ragged_attn.attention` (the real
    implementations call it); `window_size` must be a pair of ints and `causal` one of False, True,
    "bottom_right", "top_left" (ValueError otherwise, as the op schema has no other spelling). With
    `out` or `lse` it runs `ragged_attn::attention_into`, which writes them in place; otherwise
    `ragged_attn::attention`, which allocates them.
    """
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise ValueError(f"window_size: expected a pair (left, right) of ints >= -1, got {window_size!r}")
    _check_schema_types(
        tensors={"q": q, "k": k, "v": v, "cu_seqlens_q": cu_seqlens_q},
        optional_tensors={"cu_seqlens_k": cu_seqlens_k, "seqused_q": seqused_q, "seqused_k": seqused_k,
                          "page_table": page_table, "sinks": sinks, "out": out, "lse": lse},
        strings={"kv_layout": kv_layout, "lse_layout": lse_layout, "lse_base": lse_base, "backend": backend},
    )  # fmt: skip
    # An out / lse that is an input itself: under torch.compile the op's own overlap check cannot
    # see it (functionalization hands the op a copy, then copies the result over the input), so
    # the identity is refused here, where dynamo can still tell (it turns the error into its
    # "Observed exception", which stops the compile). Views of an input are not seen here.
    inputs = (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k))
    for buf_name, buf in (("out", out), ("lse", lse)):
        if buf is not None:
            for name, x in inputs:
                if buf is x:
                    raise ValueError(f"{buf_name}: expected memory apart from the inputs, got {name} itself")
    softcap = check_softcap(softcap)  # the schema's float would take a bool or round a huge int
    if not isinstance(split_kv, bool):  # the schema's bool would take an int
        raise TypeError(f"split_kv: expected a bool, got {chk.type_name(split_kv)}")
    if not torch.compiler.is_compiling():
        # The schema converts what `attention` refuses (a bool window bound, a tensor or bool
        # max_seqlen, an int return_lse, a tensor scale) or raises a RuntimeError about the op's
        # signature (a float window bound or max_seqlen): `attention`'s own checks name them first.
        # (Under tracing the ints may be SymInts; `attention` checks them in the op's body.)
        _normalise_window(window_size, _normalise_causal(causal)[0])
        for name, x in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
            chk.python_int(name, x, minimum=0, why_not_tensor=_MAX_SEQLEN_IS_TENSOR)
        if not isinstance(return_lse, bool):
            raise TypeError(f"return_lse: expected a bool, got {chk.type_name(return_lse)}")
        _softmax_scale(softmax_scale, 8)  # (the head dim only sizes the default, unused here)
        if out is not None or lse is not None:  # their shapes are read below
            chk.tensor("q", q, rank=3)
            chk.tensor("v", v, rank=(3, 4))
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q, seqused_k, page_table,
            kv_layout, causal_name(causal), window_size[0], window_size[1], softmax_scale, return_lse, lse_layout,
            lse_base, backend)  # fmt: skip
    if out is not None or lse is not None:
        if out is None:
            out = q.new_empty((q.shape[0], q.shape[1], v.shape[-1]))
        if return_lse and lse is None:  # every row gets written (-inf past a padded sequence's length)
            lse = _fake_lse(q, v, cu_seqlens_q, max_seqlen_q, True, lse_layout)
        torch.ops.ragged_attn.attention_into(*args, out, lse, sinks, softcap, split_kv)
        return (out, lse) if return_lse else out
    o, l_ = torch.ops.ragged_attn.attention(*args, sinks, softcap, split_kv)
    return (o, l_) if return_lse else o
