"""Tile configuration of the sm_90a forward kernel, one per layout class (a pure function, no GPU).

Rules of this module (tests/test_kernel_compile_sm90.py checks them on the CPU):
1. `tile_config(layout_class)` depends only on fields of the class (d_qk, d_v, mask): the config
   is part of the compile key through the class and nothing else.
2. Every config fits the 227 KiB of shared memory of an sm_90 CTA (`smem_bytes`); when Q, K, V
   and O do not fit side by side, O's staging buffer aliases Q's (`o_aliases_q`), which costs one
   named barrier before the epilogue writes it.
3. tile_m = 64 per MMA warpgroup (2 warpgroups), tile_n a multiple of 16 (one k16 step of the
   P V GEMM takes two n8 chunks of the S accumulator).

The numbers below each choice are what decided it (ptxas `remarks{ptx}` on this CPU box for
registers/spills; speeds are useful TFLOP/s, bf16, H200, median of do_bench, FA4 4.0.0b36 in the
same run).
"""

from __future__ import annotations

from dataclasses import dataclass

SMEM_CAPACITY = 232448  # bytes of dynamic smem per CTA on sm_90 (227 KiB)
_BARRIER_BYTES = 8 * (2 + 4 + 4)  # mbarriers of the Q (1 stage) and K/V pipelines, 2 stages
_ALIGN = 1024  # every smem operand buffer starts on a 1024-byte boundary (128-byte swizzle)


@dataclass(frozen=True)
class TileConfig:
    """tile_m query rows x tile_n keys per step; K/V pipeline depth; warpgroup scheduling."""

    tile_m: int = 128
    tile_n: int = 128
    num_stages: int = 2
    pingpong: bool = True  # named-barrier turns between the two MMA warpgroups
    overlap: bool = True  # softmax of block n under the P V GEMM of block n + 1

    def __post_init__(self) -> None:
        if self.tile_m != 128:
            raise ValueError(f"TileConfig.tile_m: the kernel runs 2 MMA warpgroups (128), got {self.tile_m}")
        if self.tile_n % 16 or not 16 <= self.tile_n <= 256:
            raise ValueError(f"TileConfig.tile_n: expected a multiple of 16 in [16, 256], got {self.tile_n}")
        if self.num_stages < 1:
            raise ValueError(f"TileConfig.num_stages: expected >= 1, got {self.num_stages}")


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def smem_bytes(cfg: TileConfig, d_qk: int, d_v: int, o_separate: bool, elem_bytes: int = 2) -> int:
    """Shared memory the kernel allocates: barriers, then Q, K stages, V stages (and O) buffers."""
    total = _BARRIER_BYTES
    bufs = [cfg.tile_m * d_qk, cfg.num_stages * cfg.tile_n * d_qk, cfg.num_stages * cfg.tile_n * d_v]
    if o_separate:
        bufs.append(cfg.tile_m * d_v)
    for elems in bufs:
        total = _round_up(total, _ALIGN) + elems * elem_bytes
    return total


def o_aliases_q(cfg: TileConfig, d_qk: int, d_v: int) -> bool:
    """True when O must reuse Q's buffer to fit (d_v <= d_qk holds for every class)."""
    return smem_bytes(cfg, d_qk, d_v, o_separate=True) > SMEM_CAPACITY


def tile_config(layout_class) -> TileConfig:
    """The tile configuration of a class.

    - d <= 128 (classes 32, 64, 96, 128): 128 x 128, ping-pong + intra-warpgroup overlap.
      d128, 2 x 8192 causal, 64/8 heads, 2026-11-30: no overlap / no ping-pong 551, + ping-pong
      567, + overlap 561-588 (FA4 596-613). 0 spill bytes for every d <= 128 class (ptxas,
      2026-11-30). FA4 runs d <= 96 with 3 MMA warpgroups (192 x 128); this kernel has 2.
    - (192, 128): 128 x 128 (FA4: 128 if d_v <= 128), no ping-pong (FA4 drops it above d128);
      Q 48 KiB + 2 x (K 48 + V 32) KiB leaves no room for a separate O: O aliases Q.
    - (256, 256): 128 x 80 (128 x 128 spills: 52 bytes of spill stores in an earlier probe), no
      ping-pong; Q 64 + 2 x (K 40 + V 40) KiB = 224 KiB, O aliases Q.
    The window family uses the same tiles (FA4 shrinks tile_n for local masks: unmeasured here).
    """
    d_qk = layout_class.d_qk
    if d_qk <= 128:
        return TileConfig(128, 128, 2, pingpong=True, overlap=True)
    if d_qk <= 192:
        return TileConfig(128, 128, 2, pingpong=False, overlap=True)
    return TileConfig(128, 80, 2, pingpong=False, overlap=True)
