"""ragged_attn: fused attention forward for ragged (THD) batches, compiled once per layout class."""

__version__ = "0.1.0"
