"""CPU compile tests of the sm_90a forward kernel (no GPU; CUTE_DSL_ARCH=sm_90a)."""

from __future__ import annotations

import os
import random

import pytest

pytestmark = pytest.mark.cute

cute = pytest.importorskip("cutlass.cute")
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from ragged_attn.kernels.sm90 import compile_forward  # noqa: E402
from ragged_attn.kernels.sm90.block_info import block_range_ref  # noqa: E402
from ragged_attn.layout_class import LayoutClass  # noqa: E402


# One representative per family keeps this under a minute on a 2-core box.
@pytest.mark.parametrize(
    "lc",
    [
        LayoutClass("sm_90a", 64, 64, "bf16", "bf16", "none", False, "ragged"),
        LayoutClass("sm_90a", 128, 128, "fp16", "fp16", "window", True, "ragged"),
    ],
    ids=lambda lc: lc.name,
)
def test_compiles_and_exports(lc, tmp_path):
    fn = compile_forward(lc)
    obj = tmp_path / "k.o"
    fn.export_to_c(str(obj), "fwd")
    mod = cute.runtime.load_module(str(obj), enable_tvm_ffi=True)
    assert callable(mod.fwd)


def test_paged_not_implemented():
    with pytest.raises(NotImplementedError, match="paged"):
        compile_forward(LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "none", True, "paged"))


def _allowed(i, j, lq, lk, off, left, right):
    return j < lk and (left is None or j >= i + off - left) and (right is None or j <= i + off + right)


@pytest.mark.parametrize("seed", range(20))
def test_block_range_covers_every_allowed_pair(seed):
    """Every allowed (row, key) of a tile lies in [n_min, n_max) blocks; the range is tight at the ends."""
    r = random.Random(seed)
    tm, tn = 128, 128
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
