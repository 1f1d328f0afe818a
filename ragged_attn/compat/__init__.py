"""Drop-in adapters: the exact signatures and conventions of the APIs serving engines call today.

    ragged_attn.compat.flashinfer.cudnn_batch_prefill_with_kv_cache   (FlashInfer's cuDNN prefill)
    ragged_attn.compat.flash_attn.flash_attn_varlen_func              (FlashAttention 2's varlen API)
    ragged_attn.compat.torch_varlen.varlen_attn                       (torch.nn.attention.varlen)

Each is a thin translator over `ragged_attn.attention`: switching is a one-line import change.
"""
