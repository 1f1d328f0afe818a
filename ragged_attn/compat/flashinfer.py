"""FlashInfer's `cudnn_batch_prefill_with_kv_cache`, served by ragged_attn.

Conventions kept from FlashInfer (flashinfer/cudnn/prefill.py): q packed (total_tokens, H_q, D_qk);
k/v either ragged (total_kv, H_kv, D) or page pools (num_pages, H_kv, page_size, D) ("HND") with
block_tables (B, max_pages); lengths (B,) or (B, 1, 1, 1); batch offsets (B + 1, 1, 1, 1) in
elements (cumsum * H * D) or tokens; causal is bottom-right; LSE float32 (B, max_token_per_sequence,
H_q), log2 by default since FlashInfer PR #5257 ("ln" on request). Rows of the LSE past a
sequence's length hold -inf.

Everything is translated on the device with torch ops (no device-to-host reads), so the call is
CUDA-graph capturable whatever `is_cuda_graph_compatible` says.
"""

from __future__ import annotations

import math

import torch

from .. import _checks as chk
from ..api import attention

OFFSET_UNITS = ("elements", "tokens")


def _lengths(name: str, x, batch: int | None, device) -> torch.Tensor:
    x = chk.tensor(name, x, rank=(1, 4))
    if x.dim() == 4 and tuple(x.shape[1:]) != (1, 1, 1):
        raise ValueError(f"{name}: expected shape (B,) or (B, 1, 1, 1), got {tuple(x.shape)}")
    if x.dtype != torch.int32:
        raise TypeError(f"{name}: expected dtype int32, got {chk.dtype_name(x.dtype)}")
    x = x.reshape(-1)
    if batch is not None and x.shape[0] != batch:
        raise ValueError(f"{name}: expected {batch} lengths (those of actual_seq_lens_q), got {x.shape[0]}")
    return x.to(device, non_blocking=True)


def _starts(name: str, offsets, lengths: torch.Tensor, per_token: int, units: str, total: int) -> torch.Tensor:
    """(B + 1,) token offsets: the given batch offsets converted to tokens, or cumsum of lengths."""
    batch = lengths.shape[0]
    if offsets is None:
        starts = torch.zeros(batch + 1, dtype=torch.int32, device=lengths.device)
        torch.cumsum(lengths, 0, out=starts[1:])
        return starts
    offsets = chk.tensor(name, offsets, rank=(1, 4))
    if offsets.dtype != torch.int32:
        raise TypeError(f"{name}: expected dtype int32, got {chk.dtype_name(offsets.dtype)}")
    flat = offsets.reshape(-1)
    if flat.shape[0] not in (batch, batch + 1):
        raise ValueError(f"{name}: expected B + 1 = {batch + 1} (or B) offsets, got shape {tuple(offsets.shape)}")
    chk.same_device(name, flat, lengths.device)
    if units == "elements":
        flat = torch.div(flat, per_token, rounding_mode="floor")
    # The end of the last sequence is its start + length (seqused), so the closing entry only
    # bounds it: use the tensor's total.
    end = torch.full((1,), total, dtype=torch.int32, device=flat.device)
    return torch.cat([flat[:batch].to(torch.int32), end])


def _scatter_rows(dst: torch.Tensor, src: torch.Tensor, src_starts, dst_starts, lengths) -> None:
    """dst[dst_starts[b] + i] = src[src_starts[b] + i] for i < lengths[b], on the device."""
    rows = torch.arange(src.shape[0], device=src.device, dtype=torch.int32)
    seq = torch.searchsorted(src_starts[1:-1].contiguous(), rows, right=True) if src_starts.shape[0] > 2 else torch.zeros_like(rows)
    pos = rows - src_starts[seq.long()]
    valid = (pos >= 0) & (pos < lengths[seq.long()])
    target = dst_starts[seq.long()] + pos
    index = torch.where(valid, target, torch.full_like(target, dst.shape[0]))  # invalid rows -> a dropped slot
    padded = torch.cat([dst, dst[:1]]) if dst.shape[0] else dst.new_empty((1,) + tuple(dst.shape[1:]))
    padded.index_copy_(0, index.long(), src)
    dst.copy_(padded[: dst.shape[0]])


def cudnn_batch_prefill_with_kv_cache(
    q,
    k_cache,
    v_cache,
    scale,
    workspace_buffer,
    *,
    max_token_per_sequence,
    max_sequence_kv,
    actual_seq_lens_q,
    actual_seq_lens_kv,
    block_tables=None,
    causal,
    return_lse,
    batch_offsets_q=None,
    batch_offsets_o=None,
    batch_offsets_k=None,
    batch_offsets_v=None,
    batch_offsets_stats=None,
    batch_offsets_units="elements",
    out=None,
    lse=None,
    is_cuda_graph_compatible=False,
    backend=None,
    o_data_type=None,
    lse_base="log2",
    ragged_attn_backend="auto",
):
    """`flashinfer.cudnn_batch_prefill_with_kv_cache` on ragged_attn, same arguments and results.

    Args (FlashInfer's names):
        q: (total_tokens, H_q, D_qk), fp16/bf16.
        k_cache, v_cache: page pools (num_pages, H_kv, page_size, D) with block_tables
            (B, max_pages) int32, or ragged (total_kv, H_kv, D).
        scale: softmax scale (float).
        workspace_buffer: accepted and unused (ragged_attn needs no workspace).
        max_token_per_sequence, max_sequence_kv: Python ints, the longest query / key sequence;
            max_token_per_sequence is the s_max of the padded LSE.
        actual_seq_lens_q, actual_seq_lens_kv: int32 (B,) or (B, 1, 1, 1), on the CPU or q's device
            (moved to the device without a sync).
        causal: bottom-right aligned causal mask.
        return_lse: also return the LSE, float32 (B, max_token_per_sequence, H_q), rows past each
            length -inf. `lse` may be a caller's buffer of that shape (any compact dim order).
        batch_offsets_q/_k/_v/_o: (B + 1, 1, 1, 1) (or (B + 1,)) int32 start offsets of each
            sequence, in `batch_offsets_units`: "elements" (token offset * H * D of that tensor, as
            FlashInfer's tests build them) or "tokens". Offsets may leave gaps between sequences.
            When B > 1 and none are given, q/k/v/o are taken as packed back to back: the offsets are
            derived from the lengths on the device (FlashInfer itself once produced silent garbage
            in that case). Output offsets that differ from q's are served by a device-side copy.
            batch_offsets_v must describe the same token starts as batch_offsets_k (FlashInfer
            builds both from one cumsum); only batch_offsets_k is read.
        batch_offsets_stats: start offsets of each sequence's LSE rows in elements (token * H_q) or
            tokens; given, the LSE is written packed (token-major) at those offsets into `lse`'s
            storage instead of padded. Served by a device-side copy.
        is_cuda_graph_compatible: accepted; every call is capturable.
        backend: FlashInfer's backend choice (None / "cudnn" / "cubin"), accepted and ignored.
        o_data_type: output dtype (default q's). The kernels write q's dtype; another dtype runs on
            the reference backend only.
        lse_base: "log2" (FlashInfer's current default) or "ln".
        ragged_attn_backend: ragged_attn's backend ("auto", "reference", "cute").
    Returns:
        (out (total_tokens, H_q, D_v), lse or None).
    Raises:
        TypeError / ValueError: bad arguments (named); NotImplementedError: as `ragged_attn.attention`.
    """
    q = chk.tensor("q", q, rank=3)
    chk.choice("batch_offsets_units", batch_offsets_units, OFFSET_UNITS)
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected a bool, got {type(causal).__name__}")
    lens_q = _lengths("actual_seq_lens_q", actual_seq_lens_q, None, q.device)
    batch = lens_q.shape[0]
    lens_k = _lengths("actual_seq_lens_kv", actual_seq_lens_kv, batch, q.device)
    paged = block_tables is not None
    if not isinstance(k_cache, torch.Tensor) or not isinstance(v_cache, torch.Tensor):
        raise TypeError("k_cache: expected torch.Tensor k_cache and v_cache")
    h_q, d_qk = q.shape[1], q.shape[2]
    h_kv = k_cache.shape[1]
    d_v = v_cache.shape[-1]
    units = batch_offsets_units
    starts_q = _starts("batch_offsets_q", batch_offsets_q, lens_q, h_q * d_qk, units, q.shape[0])
    if paged:
        starts_k = None
    else:
        starts_k = _starts("batch_offsets_k", batch_offsets_k, lens_k, h_kv * d_qk, units, k_cache.shape[0])

    out_dtype = o_data_type if o_data_type is not None else q.dtype
    chk.python_int("max_token_per_sequence", max_token_per_sequence, minimum=0, allow_none=False)
    chk.python_int("max_sequence_kv", max_sequence_kv, minimum=0, allow_none=False)
    o_separate = batch_offsets_o is not None and batch_offsets_o is not batch_offsets_q
    stats_packed = return_lse and batch_offsets_stats is not None
    # Everything is checked before anything is written, the copy paths included.
    if out is not None:
        out = chk.tensor("out", out, rank=3)
        if out.dtype != out_dtype:
            raise TypeError(f"out: expected dtype {chk.dtype_name(out_dtype)}, got {chk.dtype_name(out.dtype)}")
        if o_separate:
            if tuple(out.shape[1:]) != (h_q, d_v):
                raise ValueError(f"out: expected shape (rows, {h_q}, {d_v}) (rows, H_q, D_v), got {tuple(out.shape)}")
            chk.same_device("out", out, q.device)
            chk.not_self_overlapping("out", out)
            for name, x in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
                if chk.overlaps(out, x):
                    raise ValueError(f"out: expected memory apart from the inputs, got a tensor overlapping {name}")
    if o_separate:
        rows_o = out.shape[0] if out is not None else q.shape[0]
        starts_o = _starts("batch_offsets_o", batch_offsets_o, lens_q, h_q * d_v, units, rows_o)
    if stats_packed:
        if lse is not None:
            lse = chk.tensor("lse", lse, rank=3)
            if lse.dtype != torch.float32:
                raise TypeError(f"lse: expected dtype float32, got {chk.dtype_name(lse.dtype)}")
            if not lse.is_contiguous() or lse.shape[-1] != h_q:
                raise ValueError(f"lse: expected a contiguous (B, s_max, {h_q}) buffer with batch_offsets_stats, got "
                                 f"shape {tuple(lse.shape)} strides {lse.stride()}")
            chk.same_device("lse", lse, q.device)
        rows_s = lse.numel() // h_q if lse is not None else batch * max_token_per_sequence
        starts_s = _starts("batch_offsets_stats", batch_offsets_stats, lens_q, h_q, units, rows_s)
    target_out = out
    if target_out is None:
        target_out = torch.empty(q.shape[0], h_q, d_v, dtype=out_dtype, device=q.device)
    work_out = torch.empty(q.shape[0], h_q, d_v, dtype=out_dtype, device=q.device) if o_separate else target_out
    if return_lse and lse is None:  # packed stats leave rows outside every sequence: -inf there
        alloc = torch.full if stats_packed else lambda shape, _, **kw: torch.empty(shape, **kw)
        lse = alloc((batch, max_token_per_sequence, h_q), -math.inf, dtype=torch.float32, device=q.device)

    result = attention(
        q, k_cache, v_cache, starts_q, starts_k, max_token_per_sequence, max_sequence_kv,
        seqused_q=lens_q, seqused_k=lens_k, page_table=block_tables, kv_layout="HND",
        causal=causal, softmax_scale=scale, return_lse=return_lse,
        lse_layout="token_major" if stats_packed else "padded", lse_base=lse_base,
        out=work_out, lse=None if stats_packed else lse, backend=ragged_attn_backend,
    )  # fmt: skip
    out_written, lse_written = result if return_lse else (result, None)
    if o_separate:
        _scatter_rows(target_out, out_written, starts_q, starts_o, lens_q)
    if stats_packed:
        _scatter_rows(lse.view(-1, h_q), lse_written, starts_q, starts_s, lens_q)
        lse_written = lse
    return target_out, lse_written
