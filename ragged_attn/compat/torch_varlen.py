"""torch's `torch.nn.attention.varlen.varlen_attn`, served by ragged_attn.

One signature accepts every call of torch 2.10-2.13 (torch 2.9 ships no torch.nn.attention.varlen):
torch 2.10's `(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False,
return_aux=None)` with both trailing parameters positional, and torch 2.11-2.13's keyword-only
`return_aux, scale, window_size` (2.11) plus `enable_gqa, seqused_k, block_table, num_splits`
(2.12, 2.13), then ragged_attn's `backend`. tests/test_compat_signatures.py binds each recorded
signature (tests/signatures/torch-*.json, from those wheels' sources) to this one.
"""

from __future__ import annotations

from .. import _checks as chk
from ..api import attention
from ._names import caller_names

# attention's argument names -> torch's, for errors (ragged_attn/compat/_names.py).
NAMES = {
    "q": "query", "k": "key", "v": "value", "cu_seqlens_q": "cu_seq_q", "cu_seqlens_k": "cu_seq_k",
    "max_seqlen_q": "max_q", "max_seqlen_k": "max_k", "page_table": "block_table", "softmax_scale": "scale",
    "causal": "is_causal",
}  # fmt: skip


def varlen_attn(
    query,
    key,
    value,
    cu_seq_q,
    cu_seq_k,
    max_q,
    max_k,
    is_causal=False,
    return_aux=None,
    *,
    scale=None,
    window_size=(-1, -1),
    enable_gqa=False,
    seqused_k=None,
    block_table=None,
    num_splits=None,
    backend="auto",
):
    """`torch.nn.attention.varlen.varlen_attn` on ragged_attn.

    Args (torch's names): query (T_q, H_q, D); key, value (T_k, H_kv, D) or page pools
        (total_pages, page_size, H_kv, D) with block_table (N, max_pages) int32 and seqused_k (N,);
        cu_seq_q, cu_seq_k int32 (N + 1,); max_q, max_k Python ints; scale (default 1/sqrt(D));
        window_size (left, right): (-1, 0) is causal, (W, 0) causal with a window of W, all
        bottom-right aligned (FlashAttention's frame, as torch's FA2 backend);
        return_aux: None, or torch's AuxRequest (any object with an `lse` attribute): a truthy
            `.lse` also returns the LSE. A bool (return_aux=True) or anything without `.lse` is a
            TypeError naming return_aux (it would otherwise drop the LSE silently).
        enable_gqa: required (as in torch 2.12+) when H_q != H_kv. torch 2.10-2.11 have no such
            flag and took equal head counts only (docs/DESIGN.md, peer facts), so their calls
            have nothing to add.
        num_splits: 1 (FlashAttention 3's "no split", what batch-invariant serving passes) runs
            every launch unsplit: `attention(split_kv=False)`. None (torch's default) and other
            counts leave the split-KV count to ragged_attn (chosen per launch from the batch:
            docs/SUPPORT_MATRIX.md, "Split-KV"); a count is not forced.
        is_causal: torch 2.10's spelling of window_size=(-1, 0) (its 8th positional parameter;
            return_aux is its 9th). torch 2.11+ has no is_causal: position 8 was keyword-only there.
        backend: ragged_attn's backend choice ("auto", "reference", "cute").
    Returns:
        output (T_q, H_q, D), or (output, lse) with lse float32 (H_q, T_q), natural log (what
        torch's FA2 path returns; its docstring says (T_q, H_q), its kernels and fake say (H_q, T_q)).
    Raises:
        TypeError: return_aux neither None nor an object with `.lse`; is_causal, enable_gqa or
            return_aux.lse not a bool (0 / 1 and numpy's bool are taken; a string such as "false"
            or a tensor is refused, never coerced with bool()).
        ValueError: H_q != H_kv without enable_gqa, or H_q not a multiple of H_kv; otherwise as
            `ragged_attn.attention`, naming torch's arguments (query, cu_seq_q, max_q, block_table, ...).
    """
    is_causal = chk.flag("is_causal", is_causal)
    enable_gqa = chk.flag("enable_gqa", enable_gqa)
    h_q = query.shape[1] if hasattr(query, "shape") and len(query.shape) == 3 else None
    h_kv = None
    if hasattr(key, "shape"):
        h_kv = key.shape[2] if block_table is not None and len(key.shape) == 4 else (key.shape[1] if len(key.shape) >= 2 else None)
    if h_q is not None and h_kv is not None and h_q != h_kv and not enable_gqa:
        raise ValueError(
            f"key: expected H_kv = H_q = {h_q} heads (pass enable_gqa=True for grouped-query attention), got {h_kv}"
        )
    if return_aux is None:
        want_lse = False
    elif isinstance(return_aux, bool) or not hasattr(return_aux, "lse"):
        raise TypeError(
            "return_aux: expected None or torch's AuxRequest (an object with an `lse` attribute: "
            f"AuxRequest(lse=True) returns (output, lse)), got {type(return_aux).__name__} {return_aux!r}"
        )
    else:
        want_lse = chk.flag("return_aux.lse", return_aux.lse)
    # A window_size that is not a pair passes through for `attention` to name (it is checked there).
    pair = isinstance(window_size, (tuple, list)) and len(window_size) == 2
    window = tuple(window_size) if pair else window_size
    causal = is_causal or window == (-1, 0)
    if causal and pair and window[1] == -1:
        window = (window[0], 0)
    with caller_names(NAMES):
        return attention(
            query, key, value, cu_seq_q, cu_seq_k, max_q, max_k,
            seqused_k=seqused_k, page_table=block_table, kv_layout="NHD", causal=causal, window_size=window,
            softmax_scale=scale, return_lse=want_lse, lse_layout="head_major", lse_base="ln",
            split_kv=not _no_split(num_splits), backend=backend,
        )  # fmt: skip


def _no_split(num_splits) -> bool:
    """torch's num_splits=1 (an int, not a bool): run unsplit."""
    return isinstance(num_splits, int) and not isinstance(num_splits, bool) and num_splits == 1
