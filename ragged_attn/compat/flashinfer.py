"""FlashInfer's `cudnn_batch_prefill_with_kv_cache`, served by ragged_attn, and its cascade
`merge_state` / `merge_states` (re-exported from ragged_attn.merge under FlashInfer's names: the
same positional arguments, shapes and base-2 LSE, plus ragged_attn's keyword `lse_base`).

The signature is flashinfer-python 0.7.2's (flashinfer/cudnn/prefill.py), parameter for parameter:
names, kinds, defaults and order (tests/test_compat_signatures.py compares it with
tests/signatures/flashinfer-python-0.7.2.json, recorded from that release's source), plus
ragged_attn's own `ragged_attn_backend` keyword at the end.

Conventions kept from FlashInfer: q packed (total_tokens, H_q, D_qk); k/v either ragged
(total_kv, H_kv, D) or page pools (num_pages, H_kv, page_size, D) ("HND") with block_tables
(B, max_pages); lengths (B,) or (B, 1, 1, 1), optional when token-unit indptrs imply them; batch
offsets (B + 1, 1, 1, 1) in elements (cumsum * H * D) or tokens; with token units the output
offsets default to q's and v's to k's; causal is bottom-right; LSE float32
(B, max_token_per_sequence, H_q), or packed (num_tokens, H_q) at `batch_offsets_stats`, log2 by
default ("ln" on request). Rows of a padded LSE past a sequence's length hold -inf.

Everything is translated on the device with torch ops (no device-to-host reads), so the call is
CUDA-graph capturable whatever `is_cuda_graph_compatible` says.
"""

from __future__ import annotations

import math

import torch

from .. import _checks as chk
from ..api import attention
from ..merge import merge_state, merge_states
from ..problem import MAX_PADDED_LSE_ROWS
from ._names import caller_names

__all__ = ["cudnn_batch_prefill_with_kv_cache", "merge_state", "merge_states"]

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
    if x.device != device and x.device.type != "cpu":  # the CPU or q's (a meta tensor has no values)
        where = "the CPU" if device.type == "cpu" else f"the CPU or {device}"
        raise ValueError(f"{name}: expected a tensor on {where} (the device of q), got one on {x.device}")
    return x.to(device, non_blocking=True)


def _indptr(name: str, offsets, device) -> torch.Tensor:
    """A token-unit (B + 1,) indptr given in place of lengths, flattened (FlashInfer's (B + 1, 1, 1, 1) too)."""
    offsets = chk.tensor(name, offsets, rank=(1, 4))
    if offsets.dtype != torch.int32:
        raise TypeError(f"{name}: expected dtype int32, got {chk.dtype_name(offsets.dtype)}")
    if offsets.dim() == 4 and tuple(offsets.shape[1:]) != (1, 1, 1):
        raise ValueError(f"{name}: expected shape (B + 1,) or (B + 1, 1, 1, 1), got {tuple(offsets.shape)}")
    if offsets.numel() < 1:
        raise ValueError(f"{name}: expected B + 1 >= 1 offsets, got an empty tensor")
    chk.same_device(name, offsets, device)
    return offsets.reshape(-1)


def _seq_lens(name: str, given, offsets_name: str, offsets, units: str, batch: int | None, device) -> torch.Tensor:
    """(B,) int32 lengths: the given ones, or differences of a token-unit indptr (FlashInfer 0.7.2's rule)."""
    if given is not None:
        return _lengths(name, given, batch, device)
    if units != "tokens" or offsets is None:
        raise ValueError(
            f"{name}: may be omitted only with batch_offsets_units='tokens' and {offsets_name} set "
            f"(the lengths are then its differences), got None"
        )
    flat = _indptr(offsets_name, offsets, device)
    if batch is not None and flat.shape[0] != batch + 1:
        raise ValueError(f"{offsets_name}: expected B + 1 = {batch + 1} offsets, got shape {tuple(offsets.shape)}")
    lengths = flat[1:] - flat[:-1]
    if flat.device.type == "cpu" and lengths.numel() and bool((lengths < 0).any()):  # no device read on the GPU
        i = int((lengths < 0).nonzero()[0, 0])
        raise ValueError(
            f"{offsets_name}: expected non-decreasing offsets (without {name}, the lengths are its differences), "
            f"got {int(flat[i])} then {int(flat[i + 1])} at sequence {i}"
        )
    return lengths


def _starts(
    name: str, offsets, lengths: torch.Tensor, per_token: int, units: str, total: int, row: str, read: bool
) -> torch.Tensor:
    """(B + 1,) token offsets: the given batch offsets converted to tokens, or cumsum of lengths.

    `row` spells the per_token elements of one row ("q: H_q * D_qk = 4 * 64") for errors. With `read`
    (values read back anyway: CPU tensors or backend "reference"), element offsets that are not
    whole rows are a ValueError; otherwise they are trusted (no host sync) and floor-divided."""
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
        if read:
            for i, x in enumerate(flat.tolist()):
                if x % per_token:
                    raise ValueError(
                        f"{name}: expected offsets in elements that are multiples of {per_token} (one row of "
                        f"{row}), got {x} at index {i}"
                    )
        flat = torch.div(flat, per_token, rounding_mode="floor")
    # The end of the last sequence is its start + length (seqused), so the closing entry only
    # bounds it: use the tensor's total.
    end = torch.full((1,), total, dtype=torch.int32, device=flat.device)
    return torch.cat([flat[:batch].to(torch.int32), end])


def _check_packed(name: str, lengths: torch.Tensor, rows: int, what: str, offsets_name: str) -> None:
    """ValueError naming `name` (lengths packed back to back from row 0: no `offsets_name` given)
    when a length is negative or they sum past the `rows` rows of `what`. Reads the values (one
    host sync): called only where the reference backend reads lengths back anyway."""
    values = lengths.tolist()
    for i, n in enumerate(values):
        if n < 0:
            raise ValueError(f"{name}: expected lengths >= 0, got {n} at index {i}")
    if sum(values) > rows:
        raise ValueError(
            f"{name}: expected lengths summing to at most the {rows} rows of {what} (without {offsets_name} "
            f"the sequences are packed back to back from row 0), got {len(values)} lengths summing to "
            f"{sum(values)}"
        )


def _names(actual_seq_lens_q, actual_seq_lens_kv, batch_offsets_q, batch_offsets_k) -> dict[str, str]:
    """attention's argument names -> FlashInfer's, for errors (ragged_attn/compat/_names.py). The
    offsets and lengths `attention` gets come from whichever of FlashInfer's the call passed: lengths
    from actual_seq_lens_* (else the differences of the token indptrs), starts from batch_offsets_*
    (else the prefix sums of the lengths)."""
    return {
        "k": "k_cache", "v": "v_cache", "page_table": "block_tables", "softmax_scale": "scale",
        "max_seqlen_q": "max_token_per_sequence", "max_seqlen_k": "max_sequence_kv",
        "backend": "ragged_attn_backend",
        "seqused_q": "actual_seq_lens_q" if actual_seq_lens_q is not None else "batch_offsets_q",
        "seqused_k": "actual_seq_lens_kv" if actual_seq_lens_kv is not None else "batch_offsets_k",
        "cu_seqlens_q": "batch_offsets_q" if batch_offsets_q is not None else "actual_seq_lens_q",
        "cu_seqlens_k": "batch_offsets_k" if batch_offsets_k is not None else "actual_seq_lens_kv",
    }  # fmt: skip


def _scatter_rows(dst: torch.Tensor, src: torch.Tensor, src_starts, dst_starts, lengths) -> None:
    """dst[dst_starts[b] + i] = src[src_starts[b] + i] for i < lengths[b], on the device.

    A target row outside dst is dropped, never indexed (on the GPU an out-of-range index_copy_ is
    a device-side assert that ends the process's CUDA context); where the values can be read
    (`_check_targets`) such offsets are a ValueError before anything is written."""
    if lengths.numel() == 0 or src.shape[0] == 0:  # no sequence, or no row: nothing to move
        return
    rows = torch.arange(src.shape[0], device=src.device, dtype=torch.int32)
    seq = torch.searchsorted(src_starts[1:-1].contiguous(), rows, right=True) if src_starts.shape[0] > 2 else torch.zeros_like(rows)
    pos = rows - src_starts[seq.long()]
    target = dst_starts[seq.long()] + pos
    valid = (pos >= 0) & (pos < lengths[seq.long()]) & (target >= 0) & (target < dst.shape[0])
    index = torch.where(valid, target, torch.full_like(target, dst.shape[0]))  # invalid rows -> a dropped slot
    padded = torch.cat([dst, dst[:1]]) if dst.shape[0] else dst.new_empty((1,) + tuple(dst.shape[1:]))
    padded.index_copy_(0, index.long(), src)
    dst.copy_(padded[: dst.shape[0]])


def _check_targets(name: str, starts: torch.Tensor, lengths: torch.Tensor, rows: int, what: str) -> None:
    """ValueError naming `name` when a sequence's target rows [starts[b], starts[b] + lengths[b])
    leave [0, rows) or overlap another sequence's. Reads the values (one host sync): called only
    where the reference backend reads lengths back anyway (CPU tensors or backend "reference")."""
    spans = sorted(
        (s, n, b) for b, (s, n) in enumerate(zip(starts[:-1].tolist(), lengths.tolist())) if n > 0
    )
    end_prev, b_prev = 0, None
    for s, n, b in spans:
        if s < 0 or s + n > rows:
            raise ValueError(
                f"{name}: expected sequence {b}'s {n} rows to lie within the {rows} rows of {what}, got start {s}"
            )
        if b_prev is not None and s < end_prev:
            raise ValueError(
                f"{name}: expected sequences whose rows do not overlap, got sequence {b} starting at row {s} "
                f"inside sequence {b_prev} (rows up to {end_prev})"
            )
        end_prev, b_prev = s + n, b


def cudnn_batch_prefill_with_kv_cache(
    q,
    k_cache,
    v_cache,
    scale,
    workspace_buffer,
    *,
    max_token_per_sequence,
    max_sequence_kv,
    actual_seq_lens_q=None,
    actual_seq_lens_kv=None,
    block_tables=None,
    causal,
    return_lse,
    q_scale=None,
    k_scale=None,
    v_scale=None,
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
    """`flashinfer.cudnn_batch_prefill_with_kv_cache` (flashinfer-python 0.7.2) on ragged_attn.

    Same parameters (names, kinds, defaults, order) and results as FlashInfer's; the conventions
    below are FlashInfer's (flashinfer/cudnn/prefill.py) unless marked as ours.

    Args:
        q: (total_tokens, H_q, D_qk), fp16/bf16.
        k_cache, v_cache: page pools (num_pages, H_kv, page_size, D) with block_tables
            (B, max_pages) int32, or ragged (total_kv, H_kv, D).
        scale: softmax scale (float).
        workspace_buffer: accepted and unused (ragged_attn needs no workspace; None is fine).
        max_token_per_sequence, max_sequence_kv: Python ints, the longest query / key sequence;
            max_token_per_sequence is the s_max of the padded LSE.
        actual_seq_lens_q, actual_seq_lens_kv: int32 (B,) or (B, 1, 1, 1), on the CPU or q's device
            (moved to the device without a sync; another device, meta included, is a ValueError).
            Without batch_offsets_q / batch_offsets_k the sequences are packed from row 0, and
            lengths summing past q's / k_cache's rows are a ValueError naming them where the values
            are read anyway (CPU tensors or ragged_attn_backend="reference"). Each may be omitted
            with batch_offsets_units="tokens" and batch_offsets_q (for _q) / batch_offsets_k (for
            _kv) set: the lengths are the differences of that indptr, on the device. Otherwise
            omitting one is a ValueError (FlashInfer's rule).
        block_tables: int32 (B, max_pages) page ids, or None for ragged KV.
        causal: bool, bottom-right aligned causal mask.
        return_lse: also return the LSE (float32).
        q_scale, k_scale, v_scale: FP8 dequantization scales; None is accepted, a tensor raises
            NotImplementedError (fp8 is not served yet).
        batch_offsets_q/_k/_v/_o: (B + 1,) or (B + 1, 1, 1, 1) int32 start offsets of each
            sequence in `batch_offsets_units`: "elements" (token offset * H * D of that tensor) or
            "tokens" (indptrs). Offsets may leave gaps between sequences; the last entry only
            bounds the last sequence (its rows are its length from its start). Defaults: with
            "tokens", o from q and v from k (FlashInfer's); with "elements", an offset not given
            means packed back to back from row 0 (the cumsum of the lengths): for B = 1 that is
            where FlashInfer writes, for B > 1 FlashInfer raises and ragged_attn serves it (ours).
            Output offsets that differ from q's are served by a device-side copy. batch_offsets_v
            must describe the same token starts as batch_offsets_k (FlashInfer builds both from one
            cumsum); only batch_offsets_k is read, and where values are read (CPU tensors or
            ragged_attn_backend="reference") other starts are a ValueError. Element offsets must be
            whole rows (multiples of H * D of that tensor): where the values are read anyway (CPU tensors or
            ragged_attn_backend="reference") another value is a ValueError naming the argument; on
            CUDA with the kernel they are trusted (no device-to-host read).
        batch_offsets_stats: start offsets of each sequence's LSE rows in elements (token * H_q,
            whole rows as above) or tokens; given (with return_lse), the LSE is written token-major
            at those offsets into `lse`'s storage instead of padded (a device-side copy).
        batch_offsets_units: "elements" or "tokens"; anything else is a ValueError.
        out: optional (total_tokens, H_q, D_v) destination (rows at batch_offsets_o when given).
        lse: optional float32 destination: (B, max_token_per_sequence, H_q) (padded; any compact
            dim order, s_max >= max_token_per_sequence) or, with batch_offsets_stats, a contiguous
            (num_tokens, H_q) or (B, max_token_per_sequence, H_q) buffer whose rows are addressed
            by the stats offsets. Ignored (and None returned) when return_lse is False, as in FlashInfer.
        is_cuda_graph_compatible: accepted; every call is capturable.
        backend: FlashInfer's backend choice (None / "cudnn" / "cubin"), accepted and ignored.
        o_data_type: output dtype: None or q's dtype. The output is q's dtype on every backend
            (ragged_attn's one rule); another dtype (FlashInfer's fp8-in, bf16-out case) is a
            NotImplementedError naming it, on every backend.
        lse_base: "log2" (FlashInfer's default) or "ln".
        ragged_attn_backend: ragged_attn's backend ("auto", "reference", "cute"); ours.
    Returns:
        (out (total_tokens, H_q, D_v), lse or None). Without a caller's lse and with
        batch_offsets_stats, lse is a (B, max_token_per_sequence, H_q) allocation holding the
        packed rows, -inf elsewhere (what FlashInfer allocates).
    Raises:
        TypeError / ValueError: bad arguments (named as FlashInfer names them; an `out` not of q's
            dtype is a TypeError), among them lengths on a device other than the CPU or q's, and,
            where values are read (CPU tensors or ragged_attn_backend="reference"), element offsets
            that are not whole rows and lengths that run past q's / k_cache's rows; nothing is written;
        NotImplementedError: fp8 scales, an o_data_type other than q's, or as `ragged_attn.attention`.
    """
    q = chk.tensor("q", q, rank=3)
    chk.choice("batch_offsets_units", batch_offsets_units, OFFSET_UNITS)
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected a bool, got {chk.type_name(causal)}")
    for name, x in (("q_scale", q_scale), ("k_scale", k_scale), ("v_scale", v_scale)):
        if x is not None:
            raise NotImplementedError(f"{name}: FP8 dequantization scales are not served yet (fp8 inputs are not); pass None")
    if not return_lse:  # FlashInfer ignores a passed lse then and returns None
        lse = None
    units = batch_offsets_units
    if units == "tokens":  # FlashInfer's defaults for token-unit indptrs
        if batch_offsets_o is None:
            batch_offsets_o = batch_offsets_q
        if batch_offsets_v is None:
            batch_offsets_v = batch_offsets_k
    lens_q = _seq_lens("actual_seq_lens_q", actual_seq_lens_q, "batch_offsets_q", batch_offsets_q, units, None, q.device)
    batch = lens_q.shape[0]
    lens_k = _seq_lens("actual_seq_lens_kv", actual_seq_lens_kv, "batch_offsets_k", batch_offsets_k, units, batch, q.device)
    paged = block_tables is not None
    if not isinstance(k_cache, torch.Tensor) or not isinstance(v_cache, torch.Tensor):
        raise TypeError("k_cache: expected torch.Tensor k_cache and v_cache")
    want_rank = 4 if paged else 3
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        if x.dim() != want_rank:
            shape = "(num_pages, H_kv, page_size, D) with block_tables" if paged else "(total_kv, H_kv, D)"
            raise ValueError(f"{name}: expected a {want_rank}-D tensor {shape}, got shape {tuple(x.shape)}")
    h_q, d_qk = q.shape[1], q.shape[2]
    h_kv = k_cache.shape[1]
    d_v = v_cache.shape[-1]
    num_tokens = q.shape[0]
    # The reference reads lengths back (and names bad ones): where it will, the adapter reads the
    # values it derives from them too; on CUDA with the kernel they are trusted (no host sync).
    reference = isinstance(ragged_attn_backend, str) and ragged_attn_backend == "reference"
    read = q.device.type != "meta" and (reference or q.device.type != "cuda")
    row_q = f"q: H_q * D_qk = {h_q} * {d_qk}"
    starts_q = _starts("batch_offsets_q", batch_offsets_q, lens_q, h_q * d_qk, units, num_tokens, row_q, read)
    if read and batch_offsets_q is None:
        _check_packed("actual_seq_lens_q", lens_q, num_tokens, "q", "batch_offsets_q")
    if paged:
        starts_k = None
    else:
        row_k = f"k_cache: H_kv * D_qk = {h_kv} * {d_qk}"
        starts_k = _starts(
            "batch_offsets_k", batch_offsets_k, lens_k, h_kv * d_qk, units, k_cache.shape[0], row_k, read
        )
        if read and batch_offsets_k is None:
            _check_packed("actual_seq_lens_kv", lens_k, k_cache.shape[0], "k_cache", "batch_offsets_k")
        if batch_offsets_v is not None and batch_offsets_v is not batch_offsets_k:
            # Only batch_offsets_k is read: v's must name the same token starts (checked where values are read).
            row_v = f"v_cache: H_kv * D_v = {h_kv} * {d_v}"
            starts_v = _starts(
                "batch_offsets_v", batch_offsets_v, lens_k, h_kv * d_v, units, v_cache.shape[0], row_v, read
            )
            if read:
                for i, (sv, sk) in enumerate(zip(starts_v[:batch].tolist(), starts_k[:batch].tolist())):
                    if sv != sk:
                        raise ValueError(
                            f"batch_offsets_v: expected the token starts of batch_offsets_k (only batch_offsets_k is "
                            f"read; FlashInfer builds both from one cumsum), got token {sv} at sequence {i} where "
                            f"batch_offsets_k gives {sk}"
                        )

    if o_data_type is not None and not isinstance(o_data_type, torch.dtype):
        raise TypeError(f"o_data_type: expected a torch.dtype or None, got {chk.type_name(o_data_type)}")
    if o_data_type is not None and o_data_type != q.dtype:
        raise NotImplementedError(
            f"o_data_type: the output is q's dtype ({chk.dtype_name(q.dtype)}) on every backend, got "
            f"{o_data_type}; pass None or q's dtype"
        )
    out_dtype = q.dtype
    chk.python_int("max_token_per_sequence", max_token_per_sequence, minimum=0, allow_none=False)
    chk.python_int("max_sequence_kv", max_sequence_kv, minimum=0, allow_none=False)
    if return_lse and lse is None and max_token_per_sequence > MAX_PADDED_LSE_ROWS:
        raise ValueError(
            f"max_token_per_sequence: the LSE allocated by the call is (B, max_token_per_sequence, H_q) float32; "
            f"expected at most {MAX_PADDED_LSE_ROWS} rows, got {max_token_per_sequence} "
            f"({batch * max_token_per_sequence * h_q * 4 / 2**30:.1f} GiB); pass the longest query length, "
            "or an lse buffer of your own"
        )
    # Output rows sit at q's starts unless batch_offsets_o says otherwise (or, in element units
    # without it, packed from row 0 while q has offsets of its own).
    o_separate = batch_offsets_o is not batch_offsets_q
    stats_packed = return_lse and batch_offsets_stats is not None
    # Everything is checked before anything is written, the copy paths included.
    if out is not None:
        out = chk.tensor("out", out, rank=3)
        if out.dtype != out_dtype:
            raise TypeError(
                f"out: expected dtype {chk.dtype_name(out_dtype)} (q's: the output is q's dtype on every backend), "
                f"got {chk.dtype_name(out.dtype)}"
            )
        if o_separate:
            if tuple(out.shape[1:]) != (h_q, d_v):
                raise ValueError(f"out: expected shape (rows, {h_q}, {d_v}) (rows, H_q, D_v), got {tuple(out.shape)}")
            chk.same_device("out", out, q.device)
            chk.not_self_overlapping("out", out)
            chk.writable_in_place("out", out)  # (`attention` writes a scratch out, then rows are copied)
            chk.apart("out", out, (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)))
    if o_separate:
        rows_o = out.shape[0] if out is not None else num_tokens
        row_o = f"out: H_q * D_v = {h_q} * {d_v}"
        starts_o = _starts("batch_offsets_o", batch_offsets_o, lens_q, h_q * d_v, units, rows_o, row_o, read)
    if stats_packed:
        if lse is not None:
            lse = chk.tensor("lse", lse, rank=(2, 3))
            if lse.dtype != torch.float32:
                raise TypeError(f"lse: expected dtype float32, got {chk.dtype_name(lse.dtype)}")
            shapes = ((num_tokens, h_q), (batch, max_token_per_sequence, h_q))
            if tuple(lse.shape) not in shapes or not lse.is_contiguous():
                raise ValueError(
                    f"lse: expected a contiguous buffer of shape {shapes[0]} (num_tokens, H_q) or {shapes[1]} "
                    f"(B, max_token_per_sequence, H_q) with batch_offsets_stats, got shape {tuple(lse.shape)} "
                    f"strides {lse.stride()}"
                )
            chk.same_device("lse", lse, q.device)
            chk.writable_in_place("lse", lse)  # (`attention` writes a token-major scratch LSE here)
            inputs = (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("block_tables", block_tables),
                      ("out", out), ("actual_seq_lens_q", actual_seq_lens_q), ("actual_seq_lens_kv", actual_seq_lens_kv),
                      ("batch_offsets_q", batch_offsets_q), ("batch_offsets_k", batch_offsets_k),
                      ("batch_offsets_stats", batch_offsets_stats))  # fmt: skip
            chk.apart("lse", lse, inputs, "the inputs and out")
        rows_s = lse.numel() // h_q if lse is not None else batch * max_token_per_sequence
        row_s = f"lse: H_q = {h_q}"
        starts_s = _starts(
            "batch_offsets_stats", batch_offsets_stats, lens_q, h_q, units, rows_s, row_s, read
        )
    if lse is not None and o_separate:
        # (`attention` writes a scratch out then; its own check cannot see the caller's)
        chk.apart("lse", lse, (("out", out),), "the inputs and out")
    if (o_separate or stats_packed) and read:
        # The reference reads lengths back (and names bad ones); the copies' targets likewise.
        if o_separate:  # without batch_offsets_o, out's rows are packed by actual_seq_lens_q
            name_o = "batch_offsets_o" if batch_offsets_o is not None else "actual_seq_lens_q"
            _check_targets(name_o, starts_o, lens_q, rows_o, "out")
        if stats_packed:
            _check_targets("batch_offsets_stats", starts_s, lens_q, rows_s, "lse")
    target_out = out
    if target_out is None:
        # Rows no sequence covers are never written: zeros on the CPU, as `attention`'s own out (README);
        # unspecified on the GPU (no memset paid for, as FlashInfer).
        alloc_out = torch.empty if q.device.type == "cuda" else torch.zeros
        target_out = alloc_out(num_tokens, h_q, d_v, dtype=out_dtype, device=q.device)
    work_out = torch.empty(num_tokens, h_q, d_v, dtype=out_dtype, device=q.device) if o_separate else target_out
    if return_lse and lse is None:  # packed stats leave rows outside every sequence: -inf there
        alloc = torch.full if stats_packed else lambda shape, _, **kw: torch.empty(shape, **kw)
        lse = alloc((batch, max_token_per_sequence, h_q), -math.inf, dtype=torch.float32, device=q.device)

    with caller_names(_names(actual_seq_lens_q, actual_seq_lens_kv, batch_offsets_q, batch_offsets_k)):
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
