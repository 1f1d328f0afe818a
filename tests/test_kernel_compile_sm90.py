"""CPU compile tests of the sm_90a forward kernel (no GPU; CUTE_DSL_ARCH=sm_90a)."""

from __future__ import annotations

import itertools
import os
import random
import re

import pytest

pytestmark = pytest.mark.cute

cute = pytest.importorskip("cutlass.cute")
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from ragged_attn.kernels.sm90 import compile_forward  # noqa: E402
from ragged_attn.kernels.sm90.block_info import block_range_ref  # noqa: E402
from ragged_attn.kernels.sm90.tile_config import (  # noqa: E402
    SMEM_CAPACITY,
    TileConfig,
    o_aliases_q,
    smem_bytes,
    tile_config,
)
from ragged_attn.layout_class import HEAD_DIM_CLASSES, LayoutClass  # noqa: E402


# One representative per head-dim class, the families spread over them, keeps this near half a
# minute on a 2-core box. ptxas reports (remarks{ptx}) must show no register spills.
@pytest.mark.parametrize(
    "lc",
    [
        LayoutClass("sm_90a", 32, 32, "bf16", "bf16", "causal", True, "ragged"),
        LayoutClass("sm_90a", 64, 64, "bf16", "bf16", "none", False, "ragged"),
        LayoutClass("sm_90a", 96, 96, "fp16", "fp16", "window", True, "ragged"),
        LayoutClass("sm_90a", 128, 128, "fp16", "fp16", "window", True, "ragged"),
        LayoutClass("sm_90a", 192, 128, "bf16", "bf16", "causal", True, "ragged"),
        LayoutClass("sm_90a", 256, 256, "bf16", "bf16", "window", True, "ragged"),
    ],
    ids=lambda lc: lc.name,
)
def test_compiles_without_spills_and_exports(lc, tmp_path, capfd):
    fn = compile_forward(lc, "remarks{ptx}")
    out, err = capfd.readouterr()
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out + err)
    assert spills, "ptxas printed no usage report"
    assert all(a == "0" and b == "0" for a, b in spills), f"register spills: {spills}"
    obj = tmp_path / "k.o"
    fn.export_to_c(str(obj), "fwd")
    mod = cute.runtime.load_module(str(obj), enable_tvm_ffi=True)
    assert callable(mod.fwd)


def test_every_class_has_a_config_that_fits():
    """Each head-dim class x mask family: tile_n a multiple of 16, smem within 227 KiB; O shares
    Q's buffer exactly when the separate buffers would not fit."""
    for (dq, dv), mask in itertools.product(HEAD_DIM_CLASSES, ("none", "causal", "window")):
        lc = LayoutClass("sm_90a", dq, dv, "bf16", "bf16", mask, True, "ragged")
        cfg = tile_config(lc)
        alias = o_aliases_q(cfg, dq, dv)
        assert smem_bytes(cfg, dq, dv, o_separate=not alias) <= SMEM_CAPACITY, lc.name
        assert alias == (dq > 128), f"{lc.name}: O aliases Q = {alias}"


def test_config_that_does_not_fit_is_refused():
    lc = LayoutClass("sm_90a", 256, 256, "bf16", "bf16", "causal", True, "ragged")
    with pytest.raises(ValueError, match="smem"):
        compile_forward(lc, config=TileConfig(128, 96))
    with pytest.raises(ValueError, match="tile_n"):
        TileConfig(128, 72)


def test_paged_not_implemented():
    with pytest.raises(NotImplementedError, match="paged"):
        compile_forward(LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "none", True, "paged"))


def _allowed(i, j, lq, lk, off, left, right):
    return j < lk and (left is None or j >= i + off - left) and (right is None or j <= i + off + right)


@pytest.mark.parametrize("seed", range(20))
def test_block_range_covers_every_allowed_pair(seed):
    """Every allowed (row, key) of a tile lies in [n_min, n_max) blocks; the range is tight at the ends."""
    r = random.Random(seed)
    tm, tn = 128, (128, 80, 192)[seed % 3]  # the tile_n of the classes
    lq, lk = r.randint(1, 700), r.randint(0, 900)
    off = r.choice([0, lk - lq])
    left = r.choice([None, 0, 5, 200])
    right = r.choice([None, 0, 3, 150])
    for mb in range((lq + tm - 1) // tm):
        n_min, n_max = block_range_ref(tm, tn, mb, lq, lk, off, left, right)
        rows = range(mb * tm, min((mb + 1) * tm, lq))
        used = {j // tn for i in rows for j in range(lk) if _allowed(i, j, lq, lk, off, left, right)}
        if used:  # (an empty `used` may still get a non-empty, fully masked range: correct, slower)
            assert n_min == min(used) and n_max == max(used) + 1
