"""Drop-in adapters: the exact signatures and conventions of the APIs serving engines call today.

    ragged_attn.compat.flashinfer.cudnn_batch_prefill_with_kv_cache   (flashinfer-python 0.7.2's cuDNN prefill)
    ragged_attn.compat.flash_attn.flash_attn_varlen_func              (flash-attn 2.8.3's varlen API + FA4's keywords)
    ragged_attn.compat.flash_attn_cute.flash_attn_varlen_func         (FA4's flash_attn.cute varlen API)
    ragged_attn.compat.torch_varlen.varlen_attn                       (torch 2.10-2.13 torch.nn.attention.varlen)
    ragged_attn.compat.transformers (import it)                       (attn_implementation="ragged_attn", transformers 5.x)

Each is a thin translator over `ragged_attn.attention`: switching is a one-line import change.
Importing this package imports none of them (nor transformers).
"""
