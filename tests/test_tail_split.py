"""The tail split's host side and pure-Python twins (kernels/sm90/tail_split.py, tile_scheduler.py
"Tail split", tail_merge.py), on the CPU: the linear order's pieces, the rules that choose them, the
model they are chosen by, the merge's arithmetic, the workspace, and the configs that may take it.
The kernel itself: tests/test_kernel_compile_sm90.py (compiles, no spills) and
tests/gpu/test_tail_split_gpu.py (results on a GPU)."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from ragged_attn.kernels.sm90.launch import COMPILED_ARGS, COMPILED_ARGS_TAIL, compiled_args, launch_forward
from ragged_attn.kernels.sm90.tail_merge import merge_ref, slot_floats
from ragged_attn.kernels.sm90.tail_split import (
    MIN_PIECE_BLOCKS,
    TailClass,
    choose_tail_split,
    launch_tiles,
    tail_arguments,
    tail_class,
    tail_makespan_ref,
)
from ragged_attn.kernels.sm90.tile_config import TileConfig, smem_bytes, tile_config
from ragged_attn.kernels.sm90.tile_scheduler import TAIL_MAX_PIECES, tail_tile_ref
from ragged_attn.layout_class import LayoutClass

H200_SMS = 132
NOMASK = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "none", False, "ragged")


@pytest.mark.parametrize("tiles,tail,pieces", [(10, 3, 4), (7, 7, 16), (4096, 4, 16), (5, 1, 2)])
def test_pieces_cover_each_tail_tile_once_and_whole_tiles_once(tiles, tail, pieces):
    """Linear indices [0, N + T (S - 1)) decode to every whole tile below N - T once and to each of the
    T tail tiles' S pieces once, pieces of one tile consecutive; the word carries (index, piece, S)."""
    start = tiles - tail
    seen = []
    for t in range(tiles + tail * (pieces - 1)):
        u, word, piece, count = tail_tile_ref(t, start, pieces)
        if u < start:
            assert (word, piece, count) == (0, 0, 1)
        else:
            assert count == pieces and word != 0
            assert (word >> 8, (word >> 4) & 15, (word & 15) + 1) == (u - start, piece, pieces)
        seen.append((u, piece))
    assert seen == sorted(seen)
    assert seen == [(u, 0) for u in range(start)] + [(u, p) for u in range(start, tiles) for p in range(pieces)]


def test_choose_on_the_long_no_mask_rows():
    """Session 28's rows (H200, 132 SMs, 128 x 128 tiles): r = N mod 132 tiles in S pieces."""
    # llama3-8b 1 x 16384, 32 heads: 4,096 tiles, 4 in the last wave, pieces of 8 key blocks
    assert choose_tail_split("none", 1, 16384, 16384, 16384, 16384, 32, H200_SMS, 128, 128) == (4, 16)
    # qwen2.5-7b (28 heads): 3,584 tiles, r = 20, S = 132 // 20
    assert choose_tail_split("none", 1, 16384, 16384, 16384, 16384, 28, H200_SMS, 128, 128) == (20, 6)
    # llama3-70b 2 x 8192 (64 heads): 8,192 tiles, r = 8
    assert choose_tail_split("none", 2, 16384, 8192, 16384, 8192, 64, H200_SMS, 128, 128) == (8, 16)


@pytest.mark.parametrize(
    "why,args",
    [
        ("causal tiles differ", ("causal", 1, 16384, 16384, 16384, 16384, 32)),
        ("window tiles differ", ("window", 1, 16384, 16384, 16384, 16384, 32)),
        ("unequal query lengths", ("none", 2, 16000, 8192, 16384, 8192, 64)),
        ("unequal key lengths", ("none", 2, 16384, 8192, 16000, 8192, 64)),
        ("no whole wave", ("none", 1, 2048, 2048, 2048, 2048, 8)),  # 128 tiles < 132
        ("a full last wave", ("none", 1, 128 * 132, 128 * 132, 16384, 16384, 1)),
        ("r above C / 2", ("none", 1, 16384, 16384, 16384, 16384, 34)),  # 4,352 - 32 x 132 = 128 > 66
        ("keys too short for 2 pieces", ("none", 1, 16384, 16384, 896, 896, 32)),  # 7 blocks
    ],
)
def test_no_tail_split(why, args):
    assert choose_tail_split(*args, H200_SMS, 128, 128) == (0, 1), why


def test_no_tail_split_with_split_kv_padded_lse_or_seqused():
    row = ("none", 1, 16384, 16384, 16384, 16384, 32, H200_SMS, 128, 128)
    assert choose_tail_split(*row, 2) == (0, 1)
    assert choose_tail_split(*row, 1, 16384) == (0, 1)
    assert choose_tail_split(*row, 1, 0, True) == (0, 1)


def test_r_above_half_the_ctas_is_not_split():
    """33 heads of 1 x 16384: 4,224 tiles = 32 waves exactly (r 0); 34 heads: r = 4,352 - 4,224 = 128
    > 66, so S would be 1."""
    for heads in (33, 34):
        assert choose_tail_split("none", 1, 16384, 16384, 16384, 16384, heads, H200_SMS, 128, 128) == (0, 1)


@pytest.mark.parametrize("seed", range(40))
def test_chosen_split_shortens_the_modelled_launch(seed):
    """Whatever the rules choose, the greedy model's makespan drops by at least half a tile time
    (the last wave's r tiles become r S pieces in one wave), and never grows."""
    rng = random.Random(seed)
    b = rng.choice([1, 2, 4])
    lq = 128 * rng.randint(4, 64)
    lk = rng.choice([lq, 128 * rng.randint(8, 128)])
    h = rng.randint(1, 64)
    tail, pieces = choose_tail_split("none", b, b * lq, lq, b * lk, lk, h, H200_SMS, 128, 128)
    tiles, packed = launch_tiles(b, b * lq, lq, h, 128)
    base = tail_makespan_ref(tiles, H200_SMS, 0, 1)
    assert base == math.ceil(tiles / H200_SMS)
    if tail:
        assert not packed and 2 <= pieces <= TAIL_MAX_PIECES and tail == tiles % H200_SMS
        assert -(-lk // 128) // pieces >= MIN_PIECE_BLOCKS
        assert tail_makespan_ref(tiles, H200_SMS, tail, pieces) <= base - 0.5


def test_launch_tiles_counts_as_the_kernel_does():
    assert launch_tiles(1, 16384, 16384, 32, 128) == (4096, False)
    assert launch_tiles(4, 2000, 500, 8, 128) == (4 * 4 * 8, False)  # partial last tiles
    assert launch_tiles(3, 300, 298, 2, 128)[1]  # one long, two short: packed by cu_seqlens_q


@pytest.mark.parametrize("seed", range(20))
def test_merge_of_pieces_is_the_softmax_of_the_whole_row(seed):
    """merge_ref (the kernel's step 3) over key shares equals the float64 softmax of the whole row;
    shares without a key (LSE -inf) weigh nothing, and a row without any key gives O = 0, -inf."""
    rng = random.Random(seed)
    n, d, pieces = rng.randint(1, 60), 4, rng.randint(2, 16)
    scores = [rng.gauss(0, 3) for _ in range(n)]
    values = [[rng.gauss(0, 1) for _ in range(d)] for _ in range(n)]
    bounds = [n * s // pieces for s in range(pieces + 1)]  # block_info's shares, some empty
    o_p, lse_p = [], []
    for s in range(pieces):
        idx = range(bounds[s], bounds[s + 1])
        if not idx:
            o_p.append([0.0] * d)
            lse_p.append(-math.inf)
            continue
        m = max(scores[i] for i in idx)
        w = [2.0 ** (scores[i] - m) for i in idx]
        o_p.append([sum(wi * values[i][j] for wi, i in zip(w, idx)) / sum(w) for j in range(d)])
        lse_p.append(m + math.log2(sum(w)))
    o, lse = merge_ref(o_p, lse_p)
    m = max(scores)
    w = [2.0 ** (x - m) for x in scores]
    want_o = [sum(wi * values[i][j] for i, wi in enumerate(w)) / sum(w) for j in range(d)]
    assert lse == pytest.approx(m + math.log2(sum(w)), abs=1e-9)
    assert o == pytest.approx(want_o, abs=1e-9)
    assert merge_ref([[1.0] * d] * 3, [-math.inf] * 3) == ([0.0] * d, -math.inf)


def test_workspace_slots_and_arguments():
    """slot_floats: each of a warpgroup's 128 threads holds 64 d_v / 128 O values and 2 LSEs;
    tail_arguments allocates tail tiles x warpgroups x pieces slots and zeroed counters, and
    one-element stand-ins where the launch takes no tail split."""
    torch = pytest.importorskip("torch")
    assert slot_floats(128) == (64 + 2) * 128
    assert slot_floats(64) == (32 + 2) * 128
    q = torch.empty((16384, 32, 128), dtype=torch.bfloat16)
    tail = TailClass("none", 128, 128, 128)
    kw = dict(batch=1, max_seqlen_q=16384, total_k=16384, seqused_k=None, num_ctas=H200_SMS, lse_s_max=0)
    tiles, pieces, work, counts = tail_arguments(tail, q, max_seqlen_k=16384, **kw)
    assert (tiles, pieces) == (4, 16)
    assert work.dtype == torch.float32 and work.numel() == 4 * 2 * 16 * slot_floats(128)
    assert counts.dtype == torch.int32 and counts.shape == (8,) and not counts.any()
    tiles, pieces, work, counts = tail_arguments(tail, q, max_seqlen_k=None, **kw)  # no key length: no split
    assert (tiles, pieces, work.numel(), counts.numel()) == (0, 1, 1, 1)
    forced = dataclasses.replace(tail, force=(3, 5))
    tiles, pieces, work, counts = tail_arguments(forced, q, max_seqlen_k=None, **kw)
    assert (tiles, pieces, work.numel(), counts.numel()) == (3, 5, 3 * 2 * 5 * slot_floats(128), 6)


def test_configs_that_take_the_tail_split():
    """tail_split needs one row block per warpgroup (no pack_gqa, no pack_rows), wg_epilogue and no
    stream_mix (whose dealing would put a whole tile among a CTA's pieces); the
    flag adds one int32 per MMA warpgroup to the barriers' block; no class has it yet, and a class
    config with it changes the compiled function's arguments."""
    with pytest.raises(ValueError, match="tail_split"):
        TileConfig(192, 128, 3, pingpong=False, pack_gqa=True, tail_split=True)
    with pytest.raises(ValueError, match="tail_split"):
        TileConfig(128, 128, pack_rows=True, tail_split=True)
    with pytest.raises(ValueError, match="tail_split"):
        TileConfig(128, 128, wg_epilogue=False, tail_split=True)
    with pytest.raises(ValueError, match="stream_mix"):
        TileConfig(128, 128, batch_order=256, stream_mix=True, tail_split=True)
    cfg = tile_config(NOMASK)
    assert not cfg.tail_split
    tailed = dataclasses.replace(cfg, tail_split=True)
    assert smem_bytes(tailed, 128, 128, True) == smem_bytes(cfg, 128, 128, True)  # inside the barriers' 1 KiB
    assert compiled_args(NOMASK) == COMPILED_ARGS
    assert compiled_args(NOMASK, tailed) == COMPILED_ARGS_TAIL == COMPILED_ARGS + (
        "tail_tiles", "tail_pieces", "tail_work", "tail_count",
    )  # fmt: skip
    assert tail_class(NOMASK) is None
    assert tail_class(NOMASK, tailed) == TailClass("none", 128, 128, 128)


def test_tail_split_launch_refuses_split_kv_before_anything():
    """A tail_split class runs unsplit: num_splits > 1 is a ValueError naming it, raised before any
    tensor is touched (the stand-ins below are not tensors)."""
    with pytest.raises(ValueError, match="num_splits"):
        launch_forward(
            None, q=None, k=None, v=None, out=None, lse=None, cu_seqlens_q=None, cu_seqlens_k=None,
            seqused_q=None, seqused_k=None, batch=1, max_seqlen_q=1, lse_s_max=0, softmax_scale=1.0,
            window_left=-1, window_right=-1, bottom_right=True, num_splits=2,
            tail=TailClass("none", 128, 128, 128),
        )  # fmt: skip
