"""FlashAttention 4's `flash_attn.cute.flash_attn_varlen_func`, served by ragged_attn.

The signature is flash-attn-4 4.0.0b36's (flash_attn/cute/interface.py): the same 33 parameters
in the same order with the same defaults, then ragged_attn's `backend` keyword
(tests/test_compat_signatures.py checks it against tests/signatures/flash-attn-4-4.0.0b36.json).
The result is FA4's: always a pair (out, lse), lse None unless return_lse. Options that change the
numbers and are not served decline by name; scheduling hints are accepted (see compat/flash_attn.py).
`softcap` and `learnable_sink` pass through to `attention(softcap=..., sinks=...)` (issue 14).
"""

from __future__ import annotations

from .. import _checks as chk
from ..api import attention
from ._names import caller_names
from .flash_attn import (
    causal_of,
    check_gather_bwd,
    decline_unserved,
    names_of,
    sinks_of,
    softcap_of,
    window_of,
)


def flash_attn_varlen_func(
    q,
    k,
    v,
    qv=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    min_seqlen_k=None,
    seqused_q=None,
    seqused_k=None,
    gather_kv_indices=None,
    page_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(None, None),
    learnable_sink=None,
    softcap=0.0,
    num_splits=1,
    pack_gqa=None,
    deterministic=False,
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
    *,
    backend="auto",
):
    """`flash_attn.cute.flash_attn_varlen_func` (FA4 4.0.0b36) on ragged_attn, packed (THD) tensors.

    Args (FA4's names and meanings):
        q: (total_q, H_q, D) with cu_seqlens_q int32 (B + 1,) (FA4's batched (B, S, H, D) form,
            cu_seqlens_q=None, raises NotImplementedError); fp16/bf16 on the kernel.
        k, v: (total_k, H_kv, D) with cu_seqlens_k, or page pools (num_pages, page_size, H_kv, D)
            with page_table int32 (B, max_pages) and seqused_k.
        seqused_q, seqused_k: int32 (B,) rows used from each start.
        max_seqlen_q, max_seqlen_k: Python ints or None.
        softmax_scale: default 1 / sqrt(D). causal: bottom-right aligned.
        window_size: (left, right), None (or negative) unbounded; causal sets right = 0.
        learnable_sink: None or an (H_q,) fp16 / bf16 / fp32 tensor of per-head sink logits (natural
            log, not scaled by softmax_scale), passed as `attention(sinks=...)` in float32; the LSE
            includes the sink; a row that sees no key gets O = 0, LSE = the sink.
        softcap: 0.0 or None (off), or the cap: scores (after softmax_scale) become
            softcap * tanh(scores / softcap). Both run on either backend; the GPU kernel serves
            them with ragged K/V and with page_table (a stride-1 sink).
        qv, gather_kv_indices, score_mod, score_mod_bwd, mask_mod, block_sparse_tensors: must be
            None (NotImplementedError names it).
        min_seqlen_k, num_splits, pack_gqa, deterministic, scheduler_metadata, seqlen_k_per_split,
            disable_scheduler_metadata, aux_tensors, aux_scalars: accepted, nothing to steer.
        gather_bwd_recompute_p, gather_bwd_token_chunk: ValueError when set (FA4's rule without
            gather_kv_indices).
        return_lse: also compute softmax_lse, float32 (H_q, total_q), natural log; -inf for rows
            that see no key (FA4's convention).
        backend (ours): "auto", "reference" or "cute".
    Returns:
        (out (total_q, H_q, D_v), softmax_lse or None).
    Raises:
        TypeError: return_lse not a bool (0 / 1, numpy's bool and None are taken).
        NotImplementedError: an unserved option (named) or the batched layout; otherwise as
        `ragged_attn.attention` (learnable_sink named as such).
    """
    decline_unserved(
        qv=qv, gather_kv_indices=gather_kv_indices, score_mod=score_mod, score_mod_bwd=score_mod_bwd,
        mask_mod=mask_mod, block_sparse_tensors=block_sparse_tensors,
    )  # fmt: skip
    check_gather_bwd(gather_bwd_recompute_p, gather_bwd_token_chunk)
    return_lse = chk.flag("return_lse", return_lse, none_as=False)
    if cu_seqlens_q is None:
        raise NotImplementedError(
            "cu_seqlens_q: FA4's batched (B, S, H, D) layout is not served; pass packed (total_q, H, D) "
            "tensors with cu_seqlens_q, got None"
        )
    if cu_seqlens_k is None and page_table is None:
        raise NotImplementedError(
            "cu_seqlens_k: FA4's batched (B, S_k, H_kv, D) keys are not served; pass packed keys with "
            "cu_seqlens_k or a page pool with page_table, got None"
        )
    with caller_names(names_of()):
        result = attention(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
            seqused_q=seqused_q, seqused_k=seqused_k, page_table=page_table, kv_layout="NHD",
            causal=causal_of(causal), window_size=window_of(window_size, causal_of(causal) is not False),
            softmax_scale=softmax_scale,
            return_lse=return_lse, lse_layout="head_major", lse_base="ln", sinks=sinks_of(learnable_sink),
            softcap=softcap_of(softcap), backend=backend,
        )  # fmt: skip
    return result if return_lse else (result, None)
