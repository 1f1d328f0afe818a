"""TileConfig.rescale_skip: the online softmax keeps a row's reference max until a block's max passes
it by more than softmax.RESCALE_SKIP_LOG2 (warp-uniform vote), rescaling O only then. Checked on the
CPU through `online_softmax_ref` (the float64 mirror of OnlineSoftmax.step and finalize): the same O
and LSE as moving the max every block, P bounded by 2^8, and few rescales on long rows; the kernel
with it compiles without spills (tests/test_kernel_compile_sm90.py). The GPU tests run it with
RAGGED_ATTN_TEST_TILE_CONFIG=rescale_skip=True."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass.cute")

from ragged_attn.kernels.sm90.softmax import RESCALE_SKIP_LOG2, online_softmax_ref  # noqa: E402
from ragged_attn.kernels.sm90.tile_config import TileConfig  # noqa: E402

SCALE_LOG2 = 128**-0.5 * math.log2(math.e)


def stream(seed, rows=32, blocks=12, n=128, d_v=16, drift=0.0, spikes=(), masked_rows=0, masked_blocks=()):
    """Key blocks of random scores (rows, n) with values (n, d_v): scores grow by `drift` per block,
    (block, row, amount) spikes, the first masked_rows rows see no key in the first half of the
    blocks, and whole masked blocks."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for b in range(blocks):
        s = torch.randn(rows, n, generator=g, dtype=torch.float64) * 3 + drift * b
        for blk, row, amount in spikes:
            if blk == b:
                s[row, 7] += amount
        if b < blocks // 2:
            s[:masked_rows] = -math.inf
        if b in masked_blocks:
            s[:] = -math.inf
        out.append((s, torch.randn(n, d_v, generator=g, dtype=torch.float64)))
    return out


CASES = {
    "noise": dict(),
    "drift": dict(drift=4.0),
    "spikes": dict(spikes=[(3, 5, 200.0), (8, 20, 60.0), (9, 21, -500.0)]),
    "late rows": dict(masked_rows=6),
    "masked blocks": dict(masked_blocks=(0, 5), masked_rows=3),
    "huge": dict(drift=1e4),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("rows_per_warp", [16, None])
def test_same_output_and_lse_as_moving_the_max_every_block(name, rows_per_warp):
    blocks = stream(len(name), **CASES[name])
    o_ref, lse_ref, p_ref, moves = online_softmax_ref(blocks, SCALE_LOG2)
    o, lse, p_max, rescaled = online_softmax_ref(blocks, SCALE_LOG2, True, rows_per_warp)
    assert torch.allclose(o, o_ref, rtol=1e-12, atol=1e-12)
    assert torch.equal(torch.isinf(lse), torch.isinf(lse_ref))
    finite = torch.isfinite(lse_ref)
    assert torch.allclose(lse[finite], lse_ref[finite], rtol=1e-12, atol=1e-12)
    assert p_ref <= 1.0 and p_max <= 2.0**RESCALE_SKIP_LOG2
    assert rescaled <= moves


def test_long_rows_rarely_rescale():
    """Scores of one distribution over 64 blocks: after the first block, a 16-row warp's max rarely
    moves by more than 8 in log2 units, so almost every block skips the O rescale."""
    blocks = stream(3, rows=128, blocks=64)
    _, _, _, rescaled = online_softmax_ref(blocks, SCALE_LOG2, True, 16)
    _, _, _, moves = online_softmax_ref(blocks, SCALE_LOG2, False, 16)
    assert moves == 64 and rescaled <= 2, rescaled


def test_rows_that_see_no_key_stay_empty():
    blocks = stream(5, masked_blocks=tuple(range(12)))
    o, lse, p_max, rescaled = online_softmax_ref(blocks, SCALE_LOG2, True, 16)
    assert torch.equal(o, torch.zeros_like(o)) and torch.isinf(lse).all() and (lse < 0).all()
    assert p_max == 0.0 and rescaled == 0


def test_field_default_off():
    assert TileConfig().rescale_skip is False
