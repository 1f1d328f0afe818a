"""FlashAttention's `flash_attn_varlen_func`, served by ragged_attn.

`flash_attn_varlen_func` has flash-attn 2.8.3's signature (flash_attn/flash_attn_interface.py):
the same 16 parameters in the same order with the same defaults, then, keyword-only, the varlen
keywords of FlashAttention 4's `flash_attn.cute.flash_attn_varlen_func` (flash-attn-4 4.0.0b36)
that FA2 lacks, with FA4's defaults, and `out` / `backend`. tests/test_compat_signatures.py checks
both against tests/signatures/*.json, recorded from those releases' sources. For FA4's own
positional order and its (out, lse) return, import ragged_attn.compat.flash_attn_cute instead.

Pass-through (issue 14): FA's `softcap` (0.0 or None = off) becomes `attention(softcap=...)` and
FA4's `learnable_sink` ((H_q,) bf16 / fp16 / fp32) becomes `attention(sinks=...)` in float32; the
GPU kernel serves both with ragged K/V and with a page table (block_table / page_table) alike.

Rules for what is not served: an option that changes the numbers (dropout, ALiBi, score/mask
mods, block sparsity, qv / MLA absorption, top-k gather) declines with NotImplementedError naming it; an option that only steers the other library's scheduling (num_splits,
pack_gqa, scheduler_metadata, seqlen_k_per_split, disable_scheduler_metadata, deterministic,
min_seqlen_k) is accepted and has nothing to steer here, so results are unchanged.
"""

from __future__ import annotations

import numbers

import torch

from .. import _checks as chk
from ..api import attention
from ._names import caller_names

_SINK_DTYPES = (torch.float16, torch.bfloat16)


def window_of(window_size, causal: bool) -> tuple[int, int]:
    """FA2's (left, right) with -1 (or any negative) unbounded, or FA4's None, as ragged_attn's pair.

    With causal the right bound is 0, as FA2's mha_varlen_fwd and FA4's
    _resolve_causal_local_window set it. Anything that is not a pair is passed through for
    `attention` to name.
    """
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        return window_size
    left, right = (
        -1 if side is None or (isinstance(side, numbers.Integral) and not isinstance(side, bool) and side < 0) else side
        for side in window_size
    )
    if causal:
        right = 0
    return (left, right)


def causal_of(causal):
    """FlashAttention's causal (a bool; 0 / 1, numpy's bool_ and None taken as such) as
    `attention`'s. Anything else passes through for `attention` to check and name: its own
    "bottom_right" / "top_left" keep their meaning (never `bool("top_left")`, which would run
    bottom-right), other values are a ValueError naming causal."""
    if causal is None:
        return False
    value = chk.bool_like(causal)
    return causal if value is None else value


def softcap_of(softcap):
    """FA's softcap (0.0 or None = off) as `attention`'s softcap; anything else passes through for
    `attention` to check and name."""
    return 0.0 if softcap is None else softcap


def sinks_of(learnable_sink):
    """FA4's learnable_sink as `attention`'s sinks: fp16 / bf16 widened to float32 (exact); None, a
    float32 tensor or anything else (for `attention` to name) as given.
    Raises TypeError for a tensor of another dtype (the three FA4 takes are named)."""
    if isinstance(learnable_sink, torch.Tensor):
        if learnable_sink.dtype in _SINK_DTYPES:
            return learnable_sink.float()
        if learnable_sink.dtype != torch.float32:
            raise TypeError(
                f"learnable_sink: expected dtype float16, bfloat16 or float32 (widened to float32), got "
                f"{str(learnable_sink.dtype).removeprefix('torch.')}"
            )
    return learnable_sink


def names_of(block_table=None) -> dict[str, str]:
    """attention's argument names -> FlashAttention's, for errors (ragged_attn/compat/_names.py):
    FA4's learnable_sink, and FA2's block_table when the call passed that rather than page_table."""
    names = {"sinks": "learnable_sink"}
    if block_table is not None:
        names["page_table"] = "block_table"
    return names


def decline_unserved(**options) -> None:
    """NotImplementedError naming the first option set to something ragged_attn does not compute."""
    for name, value in options.items():
        if name == "dropout_p" and value is not None and (
            isinstance(value, torch.Tensor) or not isinstance(value, numbers.Real)
        ):
            raise TypeError(f"dropout_p: expected a Python float (0.0: no dropout), got {chk.type_name(value)}")
        unset = (value == 0.0 or value is None) if name == "dropout_p" else value is None
        if not unset:
            what = {
                "dropout_p": "ragged_attn is an inference forward (no dropout)",
                "alibi_slopes": "ALiBi is not served yet",
                "qv": "the MLA-absorbed qv term is not served (in FA4's order qv is the 4th positional "
                      "argument: pass cu_seqlens_q= and the rest by keyword)",
                "gather_kv_indices": "top-k KV gathering (sparse MLA) is not served",
                "score_mod": "score modifiers are not served",
                "score_mod_bwd": "score modifiers are not served",
                "mask_mod": "mask modifiers are not served (use causal / window_size)",
                "block_sparse_tensors": "block sparsity is not served",
            }[name]
            shown = f"{value!r}" if isinstance(value, (int, float)) else f"a {type(value).__name__}"
            raise NotImplementedError(f"{name}: {what}, got {shown}")


def check_gather_bwd(gather_bwd_recompute_p, gather_bwd_token_chunk) -> None:
    """FA4's rule: the sparse-MLA backward options need gather_kv_indices (which declines before this)."""
    if gather_bwd_recompute_p or gather_bwd_token_chunk is not None:
        raise ValueError(
            "gather_bwd_recompute_p: gather_bwd_recompute_p / gather_bwd_token_chunk only apply to sparse "
            "top-k MLA attention (gather_kv_indices), which is not set"
        )


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
    *,
    qv=None,
    min_seqlen_k=None,
    seqused_q=None,
    seqused_k=None,
    gather_kv_indices=None,
    page_table=None,
    learnable_sink=None,
    num_splits=1,
    pack_gqa=None,
    score_mod=None,
    score_mod_bwd=None,
    mask_mod=None,
    block_sparse_tensors=None,
    aux_tensors=None,
    aux_scalars=None,
    return_lse=False,
    scheduler_metadata=None,
    seqlen_k_per_split=None,
    disable_scheduler_metadata=False,
    gather_bwd_recompute_p=False,
    gather_bwd_token_chunk=None,
    out=None,
    backend="auto",
):
    """`flash_attn.flash_attn_varlen_func` (FA2 2.8.3, FA4's varlen keywords too) on ragged_attn.

    Args (FA2's names and meanings unless marked FA4 or ours):
        q: (total_q, H_q, D); k, v: (total_k, H_kv, D), or with block_table / page_table page
            pools (num_blocks, page_block_size, H_kv, D) ("NHD"); fp16/bf16 on the kernel.
        cu_seqlens_q, cu_seqlens_k: int32 (B + 1,) token offsets; with a page table and no
            seqused_k, cu_seqlens_k gives the key lengths (as in FA2); may be None with a page
            table and seqused_k.
        max_seqlen_q, max_seqlen_k: Python ints (or None: bounds unknown).
        dropout_p: must be 0.0; alibi_slopes: must be None.
        softcap: 0.0 or None (off), or the cap: scores (after softmax_scale) become
            softcap * tanh(scores / softcap), as FA2 computes them (`attention(softcap=...)`;
            the kernel serves it with ragged K/V and with page tables).
        softmax_scale: default 1 / sqrt(D). causal: bottom-right aligned (FA2 >= 2.1, FA4).
        window_size: (left, right), -1 (FA2) or None (FA4) unbounded; with causal the right bound
            is forced to 0, as FA2 and FA4 do.
        deterministic: accepted; the forward is deterministic anyway.
        return_attn_probs: FA2's way to get the LSE: returns (out, softmax_lse, None). FA2 computes
            the probabilities only with dropout_p > 0 (declined), returning None for them too.
        block_table (FA2) / page_table (FA4): int32 (B, max_pages); pass one of them.
        seqused_q, seqused_k (FA4): int32 (B,) rows used from each start.
        return_lse (FA4): returns (out, softmax_lse) as FA4 does. Not with return_attn_probs.
        learnable_sink (FA4): None or an (H_q,) fp16 / bf16 / fp32 tensor of per-head sink logits
            (natural log, not scaled), passed as `attention(sinks=...)` in float32; the LSE
            includes the sink (the kernel serves it with ragged K/V and with page tables; a
            strided float32 sink is declined by name, pass it contiguous).
        qv, gather_kv_indices, score_mod, score_mod_bwd, mask_mod,
            block_sparse_tensors (FA4): must be None (NotImplementedError names the one set).
        min_seqlen_k, num_splits, pack_gqa, scheduler_metadata, seqlen_k_per_split,
            disable_scheduler_metadata (FA4): scheduling hints, accepted and not used: ragged_attn
            chooses its own split-KV count per launch from the batch (docs/SUPPORT_MATRIX.md,
            "Split-KV"), so num_splits=1 (FA4's default) does not make results batch-invariant
            here; `ragged_attn.attention(split_kv=False)` does. aux_tensors, aux_scalars (FA4): inputs of the
            mods, unused without them. gather_bwd_recompute_p, gather_bwd_token_chunk (FA4):
            ValueError when set (they need gather_kv_indices, as FA4 says).
        out (ours, FA3's name): optional (total_q, H_q, D_v) destination, q's dtype on the kernel.
        backend (ours): "auto", "reference" or "cute".
    softmax_lse is float32 (H_q, total_q), natural log (FA2/FA4's layout). Rows that see no key
    have LSE -inf (ragged_attn's convention and FA3/FA4's; FA2 writes +inf there).
    Returns:
        out (total_q, H_q, D_v); (out, softmax_lse, None) with return_attn_probs; (out,
        softmax_lse) with return_lse.
    Raises:
        NotImplementedError: an unserved option above (named).
        TypeError: return_attn_probs / return_lse not a bool (0 / 1, numpy's bool and None are
            taken; never bool() of a string or tensor), dropout_p not a Python number.
        ValueError: block_table and page_table both given; return_lse with return_attn_probs;
            gather_bwd_* set; otherwise TypeError / ValueError / NotImplementedError as
            `ragged_attn.attention`, naming FA's arguments (block_table, learnable_sink).
    """
    decline_unserved(
        dropout_p=dropout_p, alibi_slopes=alibi_slopes, qv=qv, gather_kv_indices=gather_kv_indices,
        score_mod=score_mod, score_mod_bwd=score_mod_bwd, mask_mod=mask_mod, block_sparse_tensors=block_sparse_tensors,
    )  # fmt: skip
    check_gather_bwd(gather_bwd_recompute_p, gather_bwd_token_chunk)
    if block_table is not None and page_table is not None:
        raise ValueError("page_table: FA2's block_table and FA4's page_table name the same table; pass one, got both")
    return_attn_probs = chk.flag("return_attn_probs", return_attn_probs, none_as=False)
    return_lse = chk.flag("return_lse", return_lse, none_as=False)
    if return_lse and return_attn_probs:
        raise ValueError("return_lse: pass FA4's return_lse or FA2's return_attn_probs, got both")
    want_lse = return_attn_probs or return_lse
    table = block_table if block_table is not None else page_table
    with caller_names(names_of(block_table)):
        result = attention(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
            seqused_q=seqused_q, seqused_k=seqused_k, page_table=table, kv_layout="NHD", causal=causal_of(causal),
            window_size=window_of(window_size, causal_of(causal) is not False),
            softmax_scale=softmax_scale, return_lse=want_lse, lse_layout="head_major", lse_base="ln", out=out,
            sinks=sinks_of(learnable_sink), softcap=softcap_of(softcap), backend=backend,
        )  # fmt: skip
    if return_attn_probs:
        o, lse = result
        return o, lse, None
    return result
