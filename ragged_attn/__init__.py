"""ragged_attn: fused attention forward for ragged (THD) batches, compiled once per layout class.

Public API (see each docstring for shapes, dtypes, units and errors):
    attention(...)        the functional call (FlashAttention's varlen argument names); under
                          torch.compile it is the custom op torch.ops.ragged_attn.attention
    attention_op(...)     the same call through that op in eager mode too
    plan(...) -> Plan     bind a call to its layout class; Plan.run(...) is the low-overhead path
    layout_class_of(...)  the compile key a call would use (works on meta tensors, no GPU)
    warmup(...)           compile or load kernels ahead of traffic
    cache_info()          per-process compile counters
    merge_state(...)      merge two partial results by their LSE (FlashInfer's cascade.merge_state)
    merge_states(...)     merge any number of them (FlashInfer's cascade.merge_states)
    LayoutClass, Problem  the compile key and the checked call description
Drop-in adapters: ragged_attn.compat.flashinfer, .flash_attn, .torch_varlen.
"""

# First: cache_store fingerprints the kernel sources before any kernel module is imported.
from . import cache_store as _cache_store  # noqa: F401,I001
from .api import Plan, attention, cache_info, layout_class_of, plan, warmup
from .torch_op import attention_op
from .layout_class import LayoutClass
from .merge import merge_state, merge_states
from .problem import Problem

__version__ = "0.1.0"

__all__ = [
    "LayoutClass",
    "Plan",
    "Problem",
    "attention",
    "attention_op",
    "cache_info",
    "layout_class_of",
    "merge_state",
    "merge_states",
    "plan",
    "warmup",
]
