"""FlashAttention's `flash_attn_varlen_func`, served by ragged_attn (FA2's conventions)."""

from __future__ import annotations

from ..api import attention


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
    backend="auto",
):
    """`flash_attn.flash_attn_varlen_func` (FlashAttention 2) on ragged_attn.

    Args (FA2's names and meanings):
        q: (total_q, H_q, D); k, v: (total_k, H_kv, D), or with block_table page pools
            (num_blocks, page_block_size, H_kv, D) ("NHD"); fp16/bf16 on the kernel.
        cu_seqlens_q, cu_seqlens_k: int32 (B + 1,) token offsets; with block_table, cu_seqlens_k
            gives the key lengths (as in FA2).
        max_seqlen_q, max_seqlen_k: Python ints.
        softmax_scale: default 1 / sqrt(D). causal: bottom-right aligned (FA2 >= 2.1).
        window_size: (left, right), -1 unbounded; with causal the right bound is forced to 0, as
            FA2's mha_varlen_fwd does.
        return_attn_probs: when True, return (out, softmax_lse, None): softmax_lse is float32
            (H_q, total_q), natural log; the attention probabilities are never materialised (None).
            Rows that see no key have LSE -inf (ragged_attn's convention and FA3/FA4's; FA2 writes
            +inf there).
        deterministic: accepted; the forward is deterministic anyway.
        backend: ragged_attn's backend choice ("auto", "reference", "cute").
    Returns:
        out (total_q, H_q, D), or (out, softmax_lse, None).
    Raises:
        NotImplementedError: dropout_p > 0, softcap != 0 or alibi_slopes (not served).
        TypeError / ValueError / NotImplementedError: as `ragged_attn.attention`.
    """
    if dropout_p != 0.0:
        raise NotImplementedError(f"dropout_p: ragged_attn is an inference forward, got dropout_p={dropout_p}")
    if softcap != 0.0:
        raise NotImplementedError(f"softcap: logit soft-capping is not served yet, got softcap={softcap}")
    if alibi_slopes is not None:
        raise NotImplementedError("alibi_slopes: ALiBi is not served yet, got a tensor")
    if causal and isinstance(window_size, (tuple, list)) and len(window_size) == 2:
        window_size = (window_size[0], 0)
    result = attention(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
        page_table=block_table, kv_layout="NHD", causal=bool(causal), window_size=window_size,
        softmax_scale=softmax_scale, return_lse=bool(return_attn_probs), lse_layout="head_major",
        lse_base="ln", backend=backend,
    )  # fmt: skip
    if return_attn_probs:
        out, lse = result
        return out, lse, None
    return result
