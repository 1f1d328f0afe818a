"""Hugging Face transformers: `attn_implementation="ragged_attn"`.

    import ragged_attn.compat.transformers  # registers "ragged_attn"
    model = AutoModel.from_pretrained(path, attn_implementation="ragged_attn")

Importing this module registers `attention_forward` under the name "ragged_attn" with
transformers' `AttentionInterface` and `padding_mask` with its `AttentionMaskInterface`
(transformers 5.x hands an attention function that has no mask function registered no mask at
all, masking_utils._preprocess_mask_arguments: left- or right-padded batches would silently
attend to padding). `import ragged_attn` alone never imports transformers.

Every layer's attention becomes one `ragged_attn.attention` call over a ragged (THD) batch, found
the way transformers' flash_attention_2 path finds it (modeling_flash_attention_utils.
_flash_attention_forward), in this order:

1. A padding mask (B, S_k) (1 = real token): the real tokens of each row are gathered into
   sequences (cu_seqlens from the mask's row sums); queries as flash_attention_2 takes them
   (q_len == S_k: the same tokens; q_len == 1: one query per row; otherwise the mask's last q_len
   columns, i.e. left padding). Padded query rows of the output are 0, as flash_attention_2's.
2. `cu_seq_lens_q/k` and `max_length_q/k` keywords (DataCollatorWithFlattening(
   return_flash_attn_kwargs=True)): used as given.
3. `position_ids` (B, S) and q_len == S_k: a new sequence starts at each row's first token and
   wherever a position is not the previous one plus 1 (DataCollatorWithFlattening restarts them
   at `position_ids_start` for every example; any start value works). Rows whose positions never
   restart are one sequence each, so a plain unpadded batch is B sequences.
4. Otherwise each row is one sequence of q_len queries over S_k keys (a KV cache: the queries are
   the last q_len positions, causal bottom-right, as transformers' causal mask with offsets).

Causal comes from the `is_causal` keyword or `module.is_causal` (BERT: False; Llama, Qwen2: True);
`sliding_window` w becomes window_size (w - 1, w - 1) as flash_attention_2 maps it (causal fixes
the right side to 0); `scaling` is the softmax scale (default 1 / sqrt(head_dim)). GQA needs no
repeat: ragged_attn reads kv head h // (H_q / H_kv) as transformers' repeat_kv does.

Backend: `backend` of `register` ("auto": the exact PyTorch reference on CPU tensors, the sm_90
kernel on CUDA ones). The kernel serves fp16/bf16; both backends serve the forward only (no
autograd: run the model under torch.no_grad() or torch.inference_mode(); with grad mode on, q/k/v
that require grad are a ValueError); what the kernel does not serve is a NotImplementedError
naming it, never a silent fallback.

Passed through (issue 14): `softcap` (Gemma 2's `attn_logit_softcapping`, passed as softcap=) to
`attention(softcap=...)`, and `s_aux` (gpt-oss's per-head `sinks` parameter, passed as s_aux=) to
`attention(sinks=...)` in float32. Both run on either backend: on CUDA the kernel's `-softcap` /
`-sinks` layout classes serve them (this adapter passes ragged K/V); a non-contiguous float32 s_aux
is declined by name there (register(..., backend="reference") serves it on any device).

Declined by name (NotImplementedError): dropout > 0 (training), a 4D (custom) attention mask, and
transformers older than 5.0 (`SUPPORTED`).
Tested with transformers 5.24.0 (tests/test_transformers_compat.py, CPU;
tests/gpu/test_transformers_gpu.py, H200).
"""

from __future__ import annotations

import torch

import ragged_attn

from .. import _checks as chk
from ._names import caller_names

__all__ = ["NAME", "SUPPORTED", "attention_forward", "padding_mask", "register"]

NAME = "ragged_attn"
# The transformers releases this adapter is written for: 5.x (AttentionInterface and
# AttentionMaskInterface registration as in 5.0; tested on 5.24.0).
SUPPORTED = ">=5.0,<6"


def padding_mask(batch_size=None, q_length=None, kv_length=None, q_offset=0, kv_offset=0, mask_function=None,
                 attention_mask=None, **kwargs):  # fmt: skip
    """The mask function registered for "ragged_attn": what flash_attention_2's mask function returns.

    attention_mask: the user's 2D (B, S_k) padding mask (bool after transformers' preprocessing;
    1 = real token) or None. Returns its last kv_length columns (a sliding layer's slice), or None
    when it has no padding token (so an unpadded batch costs no mask). The causal / bidirectional
    pattern itself (mask_function) is not materialised: attention_forward applies it.
    Without a mask, a cache longer than what has been written (a StaticCache: kv_length is its
    size, the slots from q_offset + q_length on hold nothing yet) gets an all-True (B, q_offset +
    q_length) mask, so attention_forward trims K/V to the written slots (it read the empty ones as
    keys: session 21's adversarial pass; flash_attention_2's mask function returns None there too).
    q_offset may be a tensor (a static layer's): read once per mask (one sync)."""
    if attention_mask is None:
        if kv_length is not None and q_length is not None and not kv_offset:
            used = _host_int(q_offset) + int(q_length)
            if used < kv_length:
                return torch.ones(batch_size, used, dtype=torch.bool, device=kwargs.get("device", "cpu"))
        return None
    attention_mask = attention_mask[:, -kv_length:] if kv_length is not None else attention_mask
    if attention_mask.shape[1] == kv_length and bool(attention_mask.all()):
        return None
    return attention_mask


def _decline(name: str, why: str):
    raise NotImplementedError(f"{name}: {why} is not served by attn_implementation={NAME!r}; "
                              "use 'sdpa' or 'eager' for it")  # fmt: skip


def _starts_from_positions(position_ids: torch.Tensor, batch: int, length: int) -> torch.Tensor | None:
    """Token offsets where a sequence starts in the flattened (B * S) tokens, from (B or 1, S)
    position ids: each row's first token and every token whose position is not the previous + 1.
    None when position_ids cannot describe these tokens (another shape, e.g. 3D rope ids)."""
    if position_ids.dim() == 1:
        position_ids = position_ids.unsqueeze(0)
    if position_ids.dim() != 2 or position_ids.shape[1] != length or position_ids.shape[0] not in (1, batch):
        return None
    pos = position_ids.expand(batch, length)
    new = torch.ones(batch, length, dtype=torch.bool, device=pos.device)
    new[:, 1:] = pos[:, 1:] != pos[:, :-1] + 1
    return new.reshape(-1).nonzero().reshape(-1)


def _cu(starts: torch.Tensor, total: int) -> torch.Tensor:
    return torch.cat([starts.to(torch.int32), torch.tensor([total], dtype=torch.int32, device=starts.device)])


def _host_int(x) -> int:
    return int(x.item()) if isinstance(x, torch.Tensor) else int(x)


# attention's argument names -> transformers' (ragged_attn/compat/_names.py): the ones passed
# through unchanged. q / k / v are not renamed: attention gets them reshaped to tokens, so its
# shapes are not the caller's.
_NAMES = {"sinks": "s_aux", "softmax_scale": "scaling"}


def _rows(x: torch.Tensor) -> torch.Tensor:
    """(B, H, S, D), transformers' layout -> (B * S, H, D) tokens, last dim contiguous."""
    return x.transpose(1, 2).reshape(-1, x.shape[1], x.shape[3])


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    s_aux: torch.Tensor | None = None,
    *,
    backend: str = "auto",
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract (AttentionInterface), over `ragged_attn.attention`.

    Args:
        module: the attention layer (its `is_causal` is read when `is_causal` is None).
        query: (B, H_q, q_len, D_qk); key: (B, H_kv, S_k, D_qk); value: (B, H_kv, S_k, D_v), one
            dtype (fp16 / bf16 on the kernel; fp32 too on the reference), H_q % H_kv == 0.
        attention_mask: None or a 2D (B, S_k) padding mask from `padding_mask` (1 = real token).
        dropout: must be 0 (the module passes its dropout only in training).
        scaling: softmax scale, default 1 / sqrt(D_qk).
        sliding_window: None or an int w >= 0 (keys within w - 1 positions, flash_attention_2's
            mapping; 0 maps to an unbounded window there, and here).
        softcap: None / 0 (off) or Gemma 2's cap: scores (after scaling) become
            softcap * tanh(scores / softcap).
        s_aux: None or gpt-oss's (H_q,) sink logits (any float dtype; widened to float32): one
            more softmax column per head with no value (as gpt-oss's eager_attention_forward).
        is_causal: overrides module.is_causal.
        backend: ragged_attn's backend ("auto", "reference", "cute"), bound by `register`.
        kwargs: position_ids (B or 1, q_len); cu_seq_lens_q/k (int, (N + 1,)) with max_length_q/k;
            anything else transformers passes is ignored (output_attentions gets no weights).
    Returns:
        (out (B, q_len, H_q, D_v) in query's dtype, None): rows outside every sequence (padding)
        are 0.
    Raises:
        NotImplementedError: dropout > 0, a 4D mask; or what the backend declines (as
            `ragged_attn.attention`; the GPU kernel serves softcap and s_aux, a float32 s_aux of
            stride 1).
        ValueError: a mask or lengths that do not fit the tensors (a mask of values other than 0 / 1,
            q_len > the mask's keys), query / key / value of different batch sizes.
        TypeError: query / key / value not 4D tensors, a floating-point mask (an additive mask),
            float cu_seq_lens_q / k, an is_causal that is not a bool.
        TypeError / ValueError: a bad s_aux (a tensor of another shape or device than (H_q,) on
            query's, not a tensor, or of an integer dtype), scaling or sliding_window (not an int,
            or negative), named as transformers passes them; as `ragged_attn.attention` otherwise.
    """
    if dropout:
        _decline("dropout", f"dropout_p = {dropout} (training)")
    query = chk.tensor("query", query, rank=4)
    key = chk.tensor("key", key, rank=4)
    value = chk.tensor("value", value, rank=4)
    batch, h_q, q_len, _ = query.shape
    for name, x in (("key", key), ("value", value)):
        if x.shape[0] != batch:
            raise ValueError(f"{name}: expected batch B = {batch} (query's), got shape {tuple(x.shape)} (B, H, S, D)")
    if tuple(value.shape[1:3]) != tuple(key.shape[1:3]):
        raise ValueError(
            f"value: expected key's H_kv and S_k {tuple(key.shape[1:3])}, got shape {tuple(value.shape)} (B, H, S, D)"
        )
    kv_len, d_v = key.shape[2], value.shape[3]
    causal = bool(module.is_causal) if is_causal is None else chk.flag("is_causal", is_causal)
    window = (-1, -1)
    if sliding_window is not None:
        chk.python_int("sliding_window", sliding_window, minimum=0)
    if sliding_window is not None and kv_len > sliding_window:
        window = (sliding_window - 1, 0 if causal else sliding_window - 1)
    opts = {"causal": causal, "window_size": window, "softmax_scale": scaling, "backend": backend}
    if softcap:
        opts["softcap"] = softcap
    if s_aux is not None:
        if isinstance(s_aux, torch.Tensor) and not s_aux.is_floating_point():
            raise TypeError(
                f"s_aux: expected a floating-point (H_q,) tensor, got dtype {chk.dtype_name(s_aux.dtype)}"
            )
        opts["sinks"] = s_aux.float() if isinstance(s_aux, torch.Tensor) else s_aux

    if attention_mask is not None:
        if attention_mask.dim() != 2:
            _decline("attention_mask", f"a {attention_mask.dim()}D (custom) mask of shape {tuple(attention_mask.shape)}")
        if attention_mask.dtype.is_floating_point or attention_mask.dtype.is_complex:
            raise TypeError(
                "attention_mask: expected a bool or integer (B, S_k) padding mask (1 = real token), got dtype "
                f"{chk.dtype_name(attention_mask.dtype)} (an additive 0 / -inf mask would be read inverted)"
            )
        # Values other than 0 / 1: counted here, read back with the lengths' maxima below (one host read).
        not_01 = None
        if attention_mask.dtype != torch.bool:
            not_01 = ((attention_mask != 0) & (attention_mask != 1)).sum(dtype=torch.int32)
        mask = attention_mask.to(torch.bool)
        if mask.shape[0] != batch or mask.shape[1] > kv_len:
            raise ValueError(f"attention_mask: expected (B = {batch}, <= {kv_len}) keys, got {tuple(mask.shape)}")
        if q_len != 1 and q_len > mask.shape[1]:
            raise ValueError(
                f"query: expected q_len <= the {mask.shape[1]} keys of attention_mask (the queries are the "
                f"mask's last q_len columns, flash_attention_2's rule), got q_len = {q_len}"
            )
        if mask.shape[1] < kv_len:  # a static cache longer than the mask: its tail is unused
            key, value, kv_len = key[:, :, : mask.shape[1]], value[:, :, : mask.shape[1]], mask.shape[1]
        lens_k = mask.sum(-1, dtype=torch.int32)
        idx_k = mask.reshape(-1).nonzero().reshape(-1)
        cu_k = torch.nn.functional.pad(lens_k.cumsum(0, dtype=torch.int32), (1, 0))
        if q_len == kv_len:
            idx_q, cu_q, lens_q = idx_k, cu_k, lens_k
        elif q_len == 1:
            idx_q = torch.arange(batch, device=query.device)
            cu_q = torch.arange(batch + 1, dtype=torch.int32, device=query.device)
            lens_q = torch.ones(batch, dtype=torch.int32, device=query.device)
        else:  # flash_attention_2's rule: the queries are the mask's last q_len columns (left padding)
            mq = mask[:, -q_len:]
            lens_q = mq.sum(-1, dtype=torch.int32)
            idx_q = mq.reshape(-1).nonzero().reshape(-1)
            cu_q = torch.nn.functional.pad(lens_q.cumsum(0, dtype=torch.int32), (1, 0))
        read = [lens_q.max(), lens_k.max()] + ([not_01] if not_01 is not None else [])
        max_q, max_k, *bad = torch.stack(read).tolist()  # one host read, as flash_attention_2's
        if bad and bad[0]:
            raise ValueError("attention_mask: expected a padding mask of 0 and 1 (1 = real token), got other values")
        with caller_names(_NAMES):
            o = ragged_attn.attention(_rows(query)[idx_q], _rows(key)[idx_k], _rows(value)[idx_k], cu_q, cu_k,
                                      max_q, max_k, **opts)  # fmt: skip
        out = o.new_zeros(batch * q_len, h_q, d_v)
        out[idx_q] = o
        return out.view(batch, q_len, h_q, d_v), None

    q, k, v = _rows(query), _rows(key), _rows(value)
    varlen = [kwargs.get(n) for n in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")]
    if all(x is not None for x in varlen):
        for name, c in zip(("cu_seq_lens_q", "cu_seq_lens_k"), varlen[:2]):
            c = chk.tensor(name, c, rank=1)
            if c.dtype.is_floating_point or c.dtype.is_complex or c.dtype == torch.bool:
                raise TypeError(f"{name}: expected an integer (N + 1,) tensor, got dtype {chk.dtype_name(c.dtype)}")
        cu_q, cu_k = (c.to(device=query.device, dtype=torch.int32) for c in varlen[:2])
        max_q, max_k = _host_int(varlen[2]), _host_int(varlen[3])
    else:
        starts = None
        position_ids = kwargs.get("position_ids")
        if position_ids is not None and q_len == kv_len:
            starts = _starts_from_positions(position_ids.to(query.device), batch, q_len)
        if starts is not None and starts.numel() > batch:  # packed: sequences restart inside rows
            cu_q = cu_k = _cu(starts, batch * q_len)
            max_q = max_k = _host_int((cu_q[1:] - cu_q[:-1]).max())
        else:  # one sequence per row
            cu_q = torch.arange(0, (batch + 1) * q_len, q_len, dtype=torch.int32, device=query.device)
            cu_k = torch.arange(0, (batch + 1) * kv_len, kv_len, dtype=torch.int32, device=query.device)
            max_q, max_k = q_len, kv_len
    with caller_names(_NAMES):
        o = ragged_attn.attention(q, k, v, cu_q, cu_k, max_q, max_k, **opts)
    return o.view(batch, q_len, h_q, d_v), None


def register(name: str = NAME, backend: str = "auto") -> str:
    """Register `attention_forward` (bound to `backend`) and `padding_mask` under `name` with
    transformers' AttentionInterface and AttentionMaskInterface; returns name. Done for "ragged_attn"
    with backend "auto" on import; call it again for e.g. register("ragged_attn_reference",
    "reference").

    Raises:
        ImportError: transformers is not installed, or is outside SUPPORTED (5.x).
        ValueError: a backend ragged_attn does not know.
    """
    import transformers
    from transformers import AttentionInterface

    major = int(transformers.__version__.split(".")[0])
    if major != 5:
        raise ImportError(
            f"ragged_attn.compat.transformers supports transformers {SUPPORTED} (tested on 5.24.0), "
            f"found {transformers.__version__}"
        )
    from transformers.masking_utils import AttentionMaskInterface

    from ..backends import BACKENDS

    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")

    def forward(module, query, key, value, attention_mask, *args, **kwargs):
        return attention_forward(module, query, key, value, attention_mask, *args, backend=backend, **kwargs)

    forward.__doc__ = f"attention_forward with backend={backend!r} (registered as {name!r})."
    AttentionInterface.register(name, forward)
    AttentionMaskInterface.register(name, padding_mask)
    return name


register()
