"""softmax.exp2_poly (TileConfig.exp2_emulate): the polynomial exp2 on the FMA pipe, checked on the
CPU through its torch mirror `exp2_poly_ref` and the constants its PTX carries. The PTX itself runs
in the GPU tests with RAGGED_ATTN_TEST_TILE_CONFIG=exp2_emulate=N (tests/gpu/tile_overrides.py)."""

from __future__ import annotations

import math
import re
import struct

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass.cute")

from ragged_attn.kernels.sm90 import softmax  # noqa: E402
from ragged_attn.kernels.sm90.softmax import (  # noqa: E402
    EXP2_POLY,
    EXP2_POLY_MAX_REL_ERR,
    emulated_column,
    exp2_poly_ref,
)
from ragged_attn.kernels.sm90.tile_config import TileConfig  # noqa: E402


def test_relative_error_over_the_normal_range():
    """Every float32 softmax exponent of a wide grid, and random ones, within the fit's bound of
    float64 exp2 where 2^x is a normal float (x in [-126, 0], plus the FFMA's rounding above 0)."""
    g = torch.Generator().manual_seed(7)
    x = torch.cat([
        torch.linspace(-126.0, 0.25, 1_000_003, dtype=torch.float32),
        -torch.rand(200_000, generator=g, dtype=torch.float32) * 30.0,
        torch.tensor([0.0, -0.0, -0.5, 0.5, -1.5, -2.5, -125.5, 1e-7, -1e-7]),
    ])
    ref = torch.exp2(x.double())
    rel = ((exp2_poly_ref(x).double() - ref).abs() / ref).max().item()
    assert rel <= EXP2_POLY_MAX_REL_ERR, rel


def test_masked_scores_give_exact_zero_and_nan_stays_nan():
    """-inf (a masked score, or a row that saw no key: exponent -inf - 0) must give exactly 0, as
    MUFU.EX2 does, or `finalize` would see a non-zero sum for an empty row; anything below -126.5
    gives 0 (2^-127 is already below fp32's normals); NaN (a NaN key) must stay NaN."""
    x = torch.tensor([-float("inf"), -1e30, -200.0, -127.0, -126.6, float("nan")])
    y = exp2_poly_ref(x)
    assert torch.equal(y[:5], torch.zeros(5)), y
    assert not torch.signbit(y[:5]).any(), y
    assert torch.isnan(y[5])
    # just above the cut: the smallest normal scale, a finite positive value
    assert 0 < exp2_poly_ref(torch.tensor([-126.0])).item() < 2e-38


def _bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def _f32(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0]


def _round32(v: float) -> int:
    return _bits(float(torch.tensor(v, dtype=torch.float64).to(torch.float32))) if not math.isnan(v) else 0x7FFFFFFF


def interpret_exp2_poly_ptx(x: float) -> float:
    """Run softmax._EXP2_POLY_PTX instruction by instruction on one float32 (the subset it uses:
    max.NaN, add / sub / mul / fma .rn.f32, mov.b32, shl.b32, add.s32; NaN results canonical), so
    the CPU tests see the PTX's own data flow, not only the mirror's."""
    regs = {"$1": _bits(x)}

    def val(tok):
        if tok.startswith("0f"):
            return int(tok[2:], 16)
        return int(tok) & 0xFFFFFFFF if re.fullmatch(r"-?\d+", tok) else regs[tok]

    for line in softmax._EXP2_POLY_PTX.splitlines():
        line = line.strip()
        if not line or line in "{}" or line.startswith(".reg"):
            continue
        op, rest = line.rstrip(";").split(None, 1)
        dst, *srcs = [a.strip() for a in rest.split(",")]
        a = [val(t) for t in srcs]
        fa = [_f32(v) for v in a]
        if op == "max.NaN.f32":
            regs[dst] = 0x7FFFFFFF if any(map(math.isnan, fa)) else _bits(max(fa))
        elif op in ("add.rn.f32", "sub.rn.f32", "mul.rn.f32"):
            f32 = torch.tensor(fa, dtype=torch.float32)
            r = {"add": f32[0] + f32[1], "sub": f32[0] - f32[1], "mul": f32[0] * f32[1]}[op[:3]]
            regs[dst] = _round32(float(r))
        elif op == "fma.rn.f32":  # the float32 product is exact in float64, then one rounding
            regs[dst] = _round32(fa[0] * fa[1] + fa[2])
        elif op == "mov.b32":
            regs[dst] = a[0]
        elif op == "shl.b32":
            regs[dst] = (a[0] << a[1]) & 0xFFFFFFFF
        elif op == "add.s32":
            regs[dst] = (a[0] + a[1]) & 0xFFFFFFFF
        else:
            raise AssertionError(f"the interpreter lacks {op}")
    return _f32(regs["$0"])


def test_the_ptx_itself_matches_the_mirror_bit_for_bit():
    """The PTX string's instruction sequence (which register each step reads) against the mirror:
    bit-identical on special values and random exponents (e.g. the clamp's output, not the input,
    must feed f: -inf then gives 0, not NaN)."""
    g = torch.Generator().manual_seed(11)
    xs = torch.cat([
        torch.tensor([-math.inf, math.nan, -1e30, -200.0, -127.0, -126.6, -126.5, -126.0, -125.5, -1.5,
                      -0.5, -1e-7, -0.0, 0.0, 1e-6, 0.25]),
        -torch.rand(1500, generator=g) * 126.0,
        -torch.rand(1500, generator=g) * 2.0,
    ]).to(torch.float32)
    mirror = exp2_poly_ref(xs)
    for x, want in zip(xs.tolist(), mirror.tolist()):
        got = interpret_exp2_poly_ptx(x)
        assert (math.isnan(got) and math.isnan(want)) or _bits(got) == _bits(want), (x, got, want)
    assert interpret_exp2_poly_ptx(-math.inf) == 0.0 and _bits(interpret_exp2_poly_ptx(-math.inf)) == 0


def test_ptx_constants_are_the_fit():
    """The PTX string spells the mirror's constants: the Horner coefficients, the clamp and the
    rounding magic, as 0fXXXXXXXX float32 literals."""
    ptx = softmax._EXP2_POLY_PTX
    lits = [struct.unpack("<f", struct.pack("<I", int(h, 16)))[0] for h in re.findall(r"0f([0-9A-F]{8})", ptx)]
    f32 = [struct.unpack("<f", struct.pack("<f", c))[0] for c in EXP2_POLY]
    assert lits == [-127.0, 12582912.0, 12582912.0, f32[3], f32[2], f32[1], f32[0]]
    assert "max.NaN.f32" in ptx and "shl.b32 b, b, 23" in ptx and "1065353216" in ptx


@pytest.mark.parametrize("e", range(9))
def test_emulated_columns_are_e_of_each_8(e):
    cols = [c for c in range(64) if emulated_column(c, e)]
    assert len(cols) == 8 * e
    assert all(sum(emulated_column(c, e) for c in range(k, k + 8)) == e for k in range(0, 64, 8))


def test_exp2_emulate_validation():
    assert TileConfig().exp2_emulate == 0
    assert TileConfig(exp2_emulate=8).exp2_emulate == 8
    for bad in (-1, 9, 2.5, True):
        with pytest.raises(ValueError, match="exp2_emulate"):
            TileConfig(exp2_emulate=bad)
