"""softmax.exp2_poly (TileConfig.exp2_emulate): the polynomial exp2 on the FMA pipe, checked on the
CPU through its torch mirror `exp2_poly_ref` and the constants its PTX carries. The PTX itself runs
in the GPU tests with RAGGED_ATTN_TEST_TILE_CONFIG=exp2_emulate=N (tests/gpu/tile_overrides.py)."""

from __future__ import annotations

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
    for bad in (-1, 9):
        with pytest.raises(ValueError, match="exp2_emulate"):
            TileConfig(exp2_emulate=bad)
