"""Row packing on the CPU (kernels/sm90/tile_scheduler.py "Row packing", split_kv.choose_pack_rows):
the library's choice from host integers, its tile count against the scheduler's twin, the split
count over packed tiles, and that every launch path passes the flag in COMPILED_ARGS' place (a
Python stand-in records the arguments). tests/test_tile_schedule.py checks the packed order's
cover; tests/gpu/test_pack_rows_gpu.py runs the kernel."""

from __future__ import annotations

import random

import pytest
import torch

pytest.importorskip("cutlass")

from ragged_attn.kernels.sm90 import COMPILED_ARGS, launch, launch_forward  # noqa: E402
from ragged_attn.kernels.sm90.split_kv import (  # noqa: E402
    choose_num_splits,
    choose_pack_rows,
    row_packed_tiles,
    unsplit_tiles,
)
from ragged_attn.kernels.sm90.tile_config import tile_config  # noqa: E402
from ragged_attn.kernels.sm90.tile_scheduler import launch_schedule_ref  # noqa: E402
from ragged_attn.layout_class import LayoutClass  # noqa: E402


@pytest.mark.parametrize(
    "batch, total_q, max_q, hq, hkv, max_k, packs",
    [
        (64, 64, 1, 32, 8, None, 1),  # decode rows: one tile per (row, K/V head) instead of per query head
        (4, 4 * 7, 7, 32, 8, None, 1),  # spec-decode
        (64, 2048, 32, 32, 8, 32, 1),  # 32-query rows, GQA 4: a quarter of the tiles (H200: 0.72x the time)
        (68, 4 * 512 + 64, 512, 32, 8, 32768, 1),  # vLLM's mixed batch: decode rows over long keys
        (68, 4 * 512 + 64, 512, 32, 8, None, 0),  # the same tiles, keys not known: 0.40 of the tiles only
        (68, 4 * 512 + 64, 512, 32, 8, 1024, 0),  # and over short keys
        (32, 2048, 64, 32, 8, 64, 0),  # half the tiles over one key block (H200: 1.32x slower packed)
        (32, 2048, 64, 32, 8, 4096, 1),  # half the tiles over long keys: shared K/V loads
        (2, 2 * 8192, 8192, 64, 8, 8192, 0),  # long prefill: the same tiles, nothing to gain
        (14, 5873, 1487, 32, 8, 1487, 0),  # a prefill mix: 17% fewer tiles (H200: 1.32x slower packed)
        (4, 4 * 128, 128, 32, 8, None, 0),  # 128-query sequences fill 128-row tiles already
        (8, 8, 1, 8, 8, None, 0),  # MHA: nothing to pack
        (8, 8, 1, 12, 8, None, 0),  # H_q not a multiple of H_kv (checked elsewhere): never
        (1, 2**28, 2**28, 64, 8, None, 0),  # g * rows would pass 2**31
    ],
)
def test_choose_pack_rows(batch, total_q, max_q, hq, hkv, max_k, packs):
    assert choose_pack_rows(batch, total_q, max_q, hq, hkv, 128, 0, max_k) == packs


def test_no_row_packing_with_a_padded_lse():
    assert choose_pack_rows(64, 64, 1, 32, 8, 128, lse_s_max=1) == 0


@pytest.mark.parametrize("tile_m", [128, 192])
@pytest.mark.parametrize("seed", range(8))
def test_packed_tile_count_is_the_schedulers(seed, tile_m):
    rng = random.Random(seed)
    hkv, g = rng.choice([1, 2, 8]), rng.choice([2, 3, 4, 5, 7, 8, 16])
    lens = [rng.choice([0, 1, 1, 2, 17, 64, 65, rng.randrange(0, 500)]) for _ in range(rng.choice([1, 3, 9, 40]))]
    if not any(lens):
        lens[0] = 1
    *_, tiles = launch_schedule_ref(lens, lens, hkv * g, hkv, tile_m, False, pack_rows=True)
    assert row_packed_tiles(len(lens), sum(lens), max(lens), hkv * g, hkv, tile_m) == tiles
    assert unsplit_tiles(len(lens), sum(lens), max(lens), hkv * g, hkv, tile_m, False, 1) == tiles


def test_splits_count_the_packed_tiles():
    # 8 decode rows, 32/8 heads: 256 unpacked tiles fill 132 SMs (no split); packed, 64 tiles split.
    assert choose_num_splits(8, 8, 1, 8192, 32, 8, 132, 128, 128) == 1
    assert choose_num_splits(8, 8, 1, 8192, 32, 8, 132, 128, 128, False, True) > 1


def test_the_classes_that_pack_rows():
    def cfg(d, mask="causal", kv="ragged", sinks=False):
        return tile_config(LayoutClass("sm_90a", d, d, "bf16", "bf16", mask, True, kv, sinks=sinks))

    assert cfg(128).pack_rows and cfg(128, kv="paged").pack_rows
    assert not cfg(128, sinks=True).pack_rows and not cfg(64, kv="paged").pack_rows
    assert not any(cfg(d, m).pack_rows for d in (64, 128) for m in ("window", "none"))
    # d64 causal packs blocks (pack_gqa) only: rows traced in cost its unpacked launches 3-5%.
    assert cfg(64).pack_gqa and not cfg(64).pack_rows
    assert not any(cfg(d).pack_rows for d in (32, 64, 96, 256))


class Recorder:
    """A stand-in for a compiled class: records each call's arguments by name."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(dict(zip(COMPILED_ARGS, args)))


def _decode_problem(hq=32, hkv=8, d=128, batch=4):
    q = torch.randn(batch, hq, d).to(torch.bfloat16)
    k = torch.randn(batch * 300, hkv, d).to(torch.bfloat16)
    v = torch.randn(batch * 300, hkv, d).to(torch.bfloat16)
    cu_q = torch.arange(batch + 1, dtype=torch.int32)
    cu_k = torch.arange(batch + 1, dtype=torch.int32) * 300
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("hkv, want", [(8, 1), (32, 0)])
def test_launch_paths_pass_the_choice(hkv, want, monkeypatch):
    """launch_forward (pack_rows None: the library's choice; True / False: forced), backends'
    checked launch and the fast path's BoundKernel each pass pack_rows in its COMPILED_ARGS place."""
    from ragged_attn import backends
    from ragged_attn.fast_launch import BoundKernel
    from ragged_attn.problem import build_problem

    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    q, k, v, cu_q, cu_k = _decode_problem(hkv=hkv)
    problem, t = build_problem(q, k, v, cu_q, cu_k, 1, 300, causal=True)
    assert backends.pack_rows_for(backends.layout_class_for(problem), problem) == bool(want)
    rec = Recorder()
    out = torch.empty(4, 32, 128, dtype=torch.bfloat16)
    kw = backends.kernel_arguments(problem, t, out, None)
    launch_forward(rec, **kw)
    launch_forward(rec, **kw, pack_rows=True)
    launch_forward(rec, **kw, pack_rows=False)
    BoundKernel(rec, problem).try_launch(q, k, v, cu_q, cu_k, 1, None, None, None, out, None, None)
    assert [c["pack_rows"] for c in rec.calls] == [want, 1, 0, want]
    assert all(c["num_splits"] == 1 for c in rec.calls)


def test_fast_path_asks_per_call_heads(monkeypatch):
    """The heads are the call's, not the class's: a BoundKernel bound by an MHA call (H_q == H_kv)
    packs the rows of a later GQA call of the same class as the checked launch does, and an MHA call
    of a class bound by a GQA call does not pack."""
    from ragged_attn import backends
    from ragged_attn.fast_launch import BoundKernel
    from ragged_attn.problem import build_problem

    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    calls = {hkv: _decode_problem(hkv=hkv) for hkv in (32, 8)}
    problems = {hkv: build_problem(*c, 1, 300, causal=True)[0] for hkv, c in calls.items()}
    lc = backends.layout_class_for(problems[32])
    assert lc == backends.layout_class_for(problems[8])
    for bound_hkv, call_hkv in ((32, 8), (8, 32)):
        rec = Recorder()
        out = torch.empty(4, 32, 128, dtype=torch.bfloat16)
        q, k, v, cu_q, cu_k = calls[call_hkv]
        bound = BoundKernel(rec, problems[bound_hkv])
        assert bound.try_launch(q, k, v, cu_q, cu_k, 1, None, None, None, out, None, None) is not None
        assert [c["pack_rows"] for c in rec.calls] == [int(backends.pack_rows_for(lc, problems[call_hkv]))]
        assert rec.calls[0]["pack_rows"] == (call_hkv == 8)


def test_batch_order_rule():
    """split_kv.choose_batch_order: two or more sequences, at least BATCH_ORDER_KEYS keys in the
    longest, and more (unpacked) tiles than CTAs; anything else keeps the caller's order."""
    from ragged_attn.kernels.sm90.split_kv import BATCH_ORDER_KEYS, choose_batch_order, unsplit_tiles

    keys = BATCH_ORDER_KEYS
    # vLLM's decode rows (64 x 1 query, 32/8 heads): 2048 tiles over 132 CTAs, keys up to 32k.
    assert choose_batch_order(64, 64, 1, 32768, 32, 8, 132) == 1
    assert choose_batch_order(64, 64, 1, keys, 32, 8, 132) == 1
    assert choose_batch_order(64, 64, 1, keys - 1, 32, 8, 132) == 0  # short keys: the prologue's cost
    assert choose_batch_order(64, 64, 1, None, 32, 8, 132) == 0  # keys not known
    assert choose_batch_order(1, 8192, 8192, 8192, 32, 8, 132) == 0  # one sequence: nothing to order
    # Two decode rows: 64 tiles, one per CTA at once.
    assert unsplit_tiles(2, 2, 1, 32, 8, 128, False) == 64
    assert choose_batch_order(2, 2, 1, 32768, 32, 8, 132) == 0
    assert choose_batch_order(5, 5, 1, 32768, 32, 8, 132) == 1  # 160 tiles
    assert choose_batch_order(4, 2048, 512, 512, 32, 8, 132) == 0  # issue 10's 4 x 512
    # The tiles as launched: 8 decode rows are 256 unpacked tiles, 64 row-packed, 256 in 4 splits.
    assert choose_batch_order(8, 8, 1, 32768, 32, 8, 132) == 1
    assert choose_batch_order(8, 8, 1, 32768, 32, 8, 132, pack_rows=1) == 0
    assert choose_batch_order(8, 8, 1, 32768, 32, 8, 132, pack_rows=1, num_splits=4) == 1


@pytest.mark.parametrize("max_k, want", [(300, 0), (4096, 1), (None, 0)])
def test_launch_paths_pass_the_batch_order(max_k, want, monkeypatch):
    """launch_forward (batch_order None: the library's choice; True / False: forced) and the fast
    path's BoundKernel pass batch_order in its COMPILED_ARGS place, from max_seqlen_k: 64 decode
    rows (2048 unpacked tiles over 132 CTAs) order only over >= BATCH_ORDER_KEYS keys (max_seqlen_k
    is an upper bound: the keys here are 300 per row)."""
    import dataclasses

    from ragged_attn import backends
    from ragged_attn.fast_launch import BoundKernel
    from ragged_attn.problem import build_problem

    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    q, k, v, cu_q, cu_k = _decode_problem(batch=64)
    problem, t = build_problem(q, k, v, cu_q, cu_k, 1, max_k, causal=True, return_lse=True, lse_layout="token_major")
    lc = backends.layout_class_for(problem)
    assert tile_config(lc).batch_order == 256
    rec = Recorder()
    out = torch.empty(64, 32, 128, dtype=torch.bfloat16)
    lse = torch.empty(64, 32)
    kw = backends.kernel_arguments(problem, t, out, lse)
    assert kw["max_seqlen_k"] == max_k
    launch_forward(rec, **kw)
    launch_forward(rec, **kw, batch_order=True)
    launch_forward(rec, **kw, batch_order=False)
    cuda_problem = dataclasses.replace(problem, device=torch.device("cuda", 0))  # the SM count's device
    assert backends.batch_order_for(lc, cuda_problem, False, 1) == bool(want)
    bound = BoundKernel(rec, problem)
    monkeypatch.setattr(bound, "_num_ctas", 132)
    monkeypatch.setattr(bound, "_split", None)  # one launch (splits would repeat the choice per split)
    assert bound.try_launch(q, k, v, cu_q, cu_k, 1, None, None, None, None, None, max_k) is not None
    assert [c["batch_order"] for c in rec.calls] == [want, 1, 0, want]
