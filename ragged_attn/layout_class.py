"""The layout class: the one and only compile key of a ragged_attn kernel.

Contract (docs/DESIGN.md, "The contract that defines the product", rule 1-2):
- A compiled kernel is specialised on the fields of `LayoutClass` and on nothing else.
- Batch size, lengths, H_q, H_kv, the GQA ratio, strides, page size, page count, window sizes,
  softmax scale, LSE base, LSE s_max and dim order are run-time arguments; a new value of any of
  them compiles nothing. Enforced by tests/test_layout_class.py (property test + golden snapshot).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ._checks import type_name

ARCHES = ("sm_90a",)
DTYPES = ("bf16", "fp16")
MASK_FAMILIES = ("none", "causal", "window")
KV_KINDS = ("ragged", "paged")
# Flags of the class that default to False and are named only when True (`name`, `as_dict`).
OPTIONAL_FLAGS = ("softcap", "sinks")

# Head-dim classes served by a kernel, as (d_qk, d_v), cheapest first. Any (d_qk, d_v) (multiples
# of 8 up to 256) rides the cheapest class whose dims are both >= its own: a zero-padded envelope.
# The kernel reads the real dims at run time (TMA zero-fills the columns past them, the O store
# skips them), so every problem a class envelopes runs one compiled kernel. See `head_dim_class`.
HEAD_DIM_CLASSES = ((32, 32), (64, 64), (96, 96), (128, 128), (192, 128), (256, 256))

@dataclass(frozen=True, order=True)
class LayoutClass:
    """Everything a compiled kernel is specialised on (docs/docs/DESIGN.md's table).

    Fields:
        arch: target architecture, "sm_90a".
        d_qk, d_v: the head-dim class (the kernel's envelope, not the problem's exact dims).
        dtype: "bf16" or "fp16" for q, k and v alike.
        out_dtype: "bf16" or "fp16".
        mask: "none", "causal" (either alignment: the offset is a run-time number) or "window"
            (sliding window, left/right bounds at run time; causal + window lands here).
        lse: True when the kernel writes the log-sum-exp (layout, base and s_max are run time).
        kv: "ragged" (k/v are (total_k, H_kv, D)) or "paged" (page pools, NHD or HND by strides).
        softcap: True when the kernel soft-caps the scores (issue 14; the cap is a run-time float).
        sinks: True when the kernel adds a per-head attention sink (issue 14; a run-time (H_q,)
            float32 tensor). Both default to False and appear in `name` and `as_dict` only when
            True, so every other class keeps its name, compile key and compiled object.
            (backends.check_support serves them with ragged K/V and page pools alike.)
    """

    arch: str
    d_qk: int
    d_v: int
    dtype: str
    out_dtype: str
    mask: str
    lse: bool
    kv: str
    softcap: bool = False
    sinks: bool = False

    def __post_init__(self) -> None:
        if self.arch not in ARCHES:
            raise ValueError(f"LayoutClass.arch: expected one of {ARCHES}, got {self.arch!r}")
        for name in ("d_qk", "d_v"):  # ints: 32.0 == 32 would pass the membership test below
            if type(getattr(self, name)) is not int:
                raise TypeError(f"LayoutClass.{name}: expected an int, got {type(getattr(self, name)).__name__}")
        if (self.d_qk, self.d_v) not in HEAD_DIM_CLASSES:
            raise ValueError(
                f"LayoutClass head dims: expected one of {HEAD_DIM_CLASSES}, got {(self.d_qk, self.d_v)}"
            )
        for name in ("dtype", "out_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ValueError(f"LayoutClass.{name}: expected one of {DTYPES}, got {getattr(self, name)!r}")
        if self.out_dtype != self.dtype:
            raise ValueError(
                f"LayoutClass.out_dtype: expected {self.dtype!r}, the input dtype (the output is q's dtype on "
                f"every backend, so no call needs another class), got {self.out_dtype!r}"
            )
        if self.mask not in MASK_FAMILIES:
            raise ValueError(f"LayoutClass.mask: expected one of {MASK_FAMILIES}, got {self.mask!r}")
        if self.kv not in KV_KINDS:
            raise ValueError(f"LayoutClass.kv: expected one of {KV_KINDS}, got {self.kv!r}")
        for name in ("lse", "softcap", "sinks"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"LayoutClass.{name}: expected a bool, got {type_name(getattr(self, name))}")

    @property
    def name(self) -> str:
        """A short, filesystem-safe name, e.g. `sm_90a-d128x128-bf16-bf16-causal-lse-ragged`;
        "-softcap" and then "-sinks" follow only for a class with them."""
        lse = "lse" if self.lse else "nolse"
        extra = ("-softcap" if self.softcap else "") + ("-sinks" if self.sinks else "")
        return (
            f"{self.arch}-d{self.d_qk}x{self.d_v}-{self.dtype}-{self.out_dtype}-"
            f"{self.mask}-{lse}-{self.kv}{extra}"
        )

    def as_dict(self) -> dict:
        """The fields as a dict; softcap and sinks only when True (the other classes' records stay
        as they were)."""
        d = dataclasses.asdict(self)
        for name in OPTIONAL_FLAGS:
            if not d[name]:
                del d[name]
        return d


def head_dim_class(d_qk: int, d_v: int) -> tuple[int, int] | None:
    """The class serving (d_qk, d_v): among the classes with d_qk <= class d_qk and d_v <= class
    d_v, the one with the least work per (query, key) pair (class d_qk + d_v); None when none holds
    it. E.g. 40 -> (64, 64), 80 -> (96, 96), 112 -> (128, 128), (160, 128) -> (192, 128),
    (192, 192) -> (256, 256); exact dims of a class map to themselves."""
    fits = [(cq + cv, (cq, cv)) for cq, cv in HEAD_DIM_CLASSES if d_qk <= cq and d_v <= cv]
    return min(fits)[1] if fits else None
