"""CPU compile tests of the sm_90a forward kernel (no GPU; CUTE_DSL_ARCH=sm_90a)."""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
import re

import pytest

pytestmark = pytest.mark.cute

cute = pytest.importorskip("cutlass.cute")
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from ragged_attn.kernels.sm90 import compile_forward  # noqa: E402
from ragged_attn.kernels.sm90.block_info import block_range_ref, needs_mask_ref, unmasked_range_ref  # noqa: E402
from ragged_attn.kernels.sm90.producer import L2_EVICT_FIRST, L2_EVICT_LAST, L2_EVICT_NORMAL  # noqa: E402
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
# Issue 14's softcap / sinks classes (served for ragged and paged K/V; tests/gpu/test_softcap_sinks_gpu.py,
# tests/gpu/test_sinks_softcap_api_gpu.py).
EXTENDED_CLASSES = [
    LayoutClass("sm_90a", 64, 64, "bf16", "bf16", "causal", True, "ragged", softcap=True),
    LayoutClass("sm_90a", 64, 64, "bf16", "bf16", "window", True, "ragged", sinks=True),
    LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "window", True, "ragged", softcap=True),
    LayoutClass("sm_90a", 128, 128, "fp16", "fp16", "causal", True, "ragged", softcap=True, sinks=True),
    # The widest head-dim class with both options.
    LayoutClass("sm_90a", 256, 256, "bf16", "bf16", "window", True, "ragged", softcap=True, sinks=True),
    # Paged with both: 0 spills; served since tests/gpu/test_softcap_sinks_gpu.py's paged cases
    # passed on an H200 (2026-12-03).
    LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, "paged", softcap=True, sinks=True),
]


def compile_without_spills(lc, capfd, config=None, options=""):
    """compile_forward with ptxas's usage report (and `options`, e.g. --keep-ptx --dump-dir DIR),
    asserting it reports no spill stores or loads."""
    fn = compile_forward(lc, f"remarks{{ptx}} {options}".strip(), config=config)
    out, err = capfd.readouterr()
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out + err)
    assert spills, "ptxas printed no usage report"
    assert all(a == "0" and b == "0" for a, b in spills), f"register spills: {spills}"
    return fn


@pytest.mark.parametrize(
    "lc",
    [
        LayoutClass("sm_90a", 32, 32, "bf16", "bf16", "causal", True, "ragged"),
        LayoutClass("sm_90a", 64, 64, "bf16", "bf16", "none", False, "ragged"),
        # The class whose producer issues the next tile's Q ahead (tile_config._q_ahead).
        LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "none", False, "ragged"),
        LayoutClass("sm_90a", 96, 96, "fp16", "fp16", "window", True, "ragged"),
        LayoutClass("sm_90a", 128, 128, "fp16", "fp16", "window", True, "ragged"),
        LayoutClass("sm_90a", 192, 128, "bf16", "bf16", "causal", True, "ragged"),
        LayoutClass("sm_90a", 256, 256, "bf16", "bf16", "window", True, "ragged"),
        # Paged (cp.async gather, 40/232 registers): the widest tile_n with 4 threads per row, the
        # FlashInfer-shaped class, and d256's 80-row tiles.
        LayoutClass("sm_90a", 32, 32, "fp16", "fp16", "none", False, "paged"),
        LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, "paged"),
        LayoutClass("sm_90a", 256, 256, "bf16", "bf16", "window", True, "paged"),
        *EXTENDED_CLASSES,
    ],
    ids=lambda lc: lc.name,
)
def test_compiles_without_spills_and_exports(lc, tmp_path, capfd):
    fn = compile_without_spills(lc, capfd)
    obj = tmp_path / "k.o"
    fn.export_to_c(str(obj), "fwd")
    mod = cute.runtime.load_module(str(obj), enable_tvm_ffi=True)
    assert callable(mod.fwd)


@pytest.mark.parametrize("lse", [False, True], ids=["nolse", "lse"])
def test_tail_split_compiles_without_spills_and_exports(lse, tmp_path, capfd):
    """TileConfig.tail_split (kernels/sm90/tail_split.py) on the d128 no-mask classes, the rows it is
    for: the entry `call_tail` with its four arguments, the pieces' merge traced beside the whole
    tiles' code, no spill; paged, softcap and sinks classes refuse it."""
    from ragged_attn.kernels.sm90.launch import kernel_for

    lc = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "none", lse, "ragged")
    fn = compile_without_spills(lc, capfd, dataclasses.replace(tile_config(lc), tail_split=True))
    obj = tmp_path / "k.o"
    fn.export_to_c(str(obj), "fwd")
    assert callable(cute.runtime.load_module(str(obj), enable_tvm_ffi=True).fwd)
    for other in (
        LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "none", lse, "paged"),
        LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "none", lse, "ragged", softcap=True),
        LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "none", lse, "ragged", sinks=True),
    ):
        with pytest.raises(ValueError, match="tail_split"):
            kernel_for(other, dataclasses.replace(tile_config(other), tail_split=True))


def test_one_stage_with_warpgroup_skipping_and_ping_pong_is_refused():
    """One K/V stage with wg_skip and ping-pong deadlocks (an idle warpgroup's V wait and its
    successor's turn wait on each other): refused when the kernel object is made, before tracing."""
    from ragged_attn.kernels.sm90.launch import kernel_for

    lc = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, "ragged")
    with pytest.raises(ValueError, match="num_stages >= 2"):
        kernel_for(lc, TileConfig(128, 32, 1))
    kernel_for(lc, TileConfig(128, 32, 1, wg_skip=False))  # the same stage count without skipping
    kernel_for(lc, TileConfig(128, 32, 1, pingpong=False))  # no turns to wait for


def test_every_class_has_a_config_that_fits():
    """Each head-dim class x mask family: tile_n a multiple of 16, smem within 227 KiB; O shares
    Q's buffer exactly when the separate buffers would not fit, even with O staged 64 rows at a
    time (o_turns: d192)."""
    for (dq, dv), mask in itertools.product(HEAD_DIM_CLASSES, ("none", "causal", "window")):
        lc = LayoutClass("sm_90a", dq, dv, "bf16", "bf16", mask, True, "ragged")
        cfg = tile_config(lc)
        alias = o_aliases_q(cfg, dq, dv)
        assert smem_bytes(cfg, dq, dv, o_separate=not alias) <= SMEM_CAPACITY, lc.name
        assert alias == (dq > 192), f"{lc.name}: O aliases Q = {alias}"
        assert cfg.o_turns == (128 < dq <= 192), lc.name


def test_every_class_has_the_batch_order_beside_what_it_had():
    """TileConfig.batch_order 256 for every class, ragged and paged: its arrays (the sorted q-row
    prefix and the order, 1540 bytes) fit in the smem the class leaves, without moving O into Q's
    buffer; the field takes 0 or a sequence count in [2, 1024]."""
    for (dq, dv), mask, kv in itertools.product(HEAD_DIM_CLASSES, ("none", "causal", "window"), ("ragged", "paged")):
        lc = LayoutClass("sm_90a", dq, dv, "bf16", "bf16", mask, True, kv)
        cfg = tile_config(lc)
        assert cfg.batch_order == 256, lc.name
        without = dataclasses.replace(cfg, batch_order=0)
        assert o_aliases_q(cfg, dq, dv) == o_aliases_q(without, dq, dv), lc.name
        alias = o_aliases_q(cfg, dq, dv)
        grown = smem_bytes(cfg, dq, dv, not alias) - smem_bytes(without, dq, dv, not alias)
        assert 1540 <= grown <= 1540 + 1023 and smem_bytes(cfg, dq, dv, not alias) <= SMEM_CAPACITY, lc.name
    for bad in (1, 1025, -2):
        with pytest.raises(ValueError, match="batch_order"):
            TileConfig(128, 128, batch_order=bad)


def test_l2_groups_are_capped_where_measured():
    """TileConfig.l2_group_max: 16 query heads for the d128 classes, 8 for d192, whose every
    sequence is grouped (l2_group_always; session 24's measurements, tile_config), ragged and paged
    alike (one scheduler); the other classes uncapped; the fields take 0 or a head count, and
    grouping every sequence needs a cap."""
    want = {(128, 128): (16, False), (192, 128): (8, True)}
    for (dq, dv), mask, kv in itertools.product(HEAD_DIM_CLASSES, ("none", "causal", "window"), ("ragged", "paged")):
        cfg = tile_config(LayoutClass("sm_90a", dq, dv, "bf16", "bf16", mask, True, kv))
        assert (cfg.l2_group_max, cfg.l2_group_always) == want.get((dq, dv), (0, False)), (dq, mask, kv)
    with pytest.raises(ValueError, match="l2_group_max"):
        TileConfig(128, 128, l2_group_max=-1)
    with pytest.raises(ValueError, match="l2_group_always"):
        TileConfig(128, 128, l2_group_always=True)


def test_two_q_buffers_exactly_where_o_has_its_own():
    """q_stages=2 for every class whose O keeps a whole tile's buffer (d <= 128, ragged and paged), 1
    where O is staged in Q's smem or 64 rows at a time (d192); two Q buffers with O in Q's buffer are
    refused before tracing."""
    from ragged_attn.kernels.sm90.launch import kernel_for

    for (dq, dv), kv in itertools.product(HEAD_DIM_CLASSES, ("ragged", "paged")):
        lc = LayoutClass("sm_90a", dq, dv, "bf16", "bf16", "causal", True, kv)
        cfg = tile_config(lc)
        assert cfg.q_stages == (1 if o_aliases_q(cfg, dq, dv) or cfg.o_turns else 2), lc.name
    lc = LayoutClass("sm_90a", 192, 128, "bf16", "bf16", "causal", True, "ragged")
    # 128 x 96 with two Q buffers fits only with O in Q's buffer (the separate O does not).
    with pytest.raises(ValueError, match="needs q_stages == 1"):
        kernel_for(lc, TileConfig(128, 96, 2, pingpong=False, q_stages=2))
    with pytest.raises(ValueError, match="q_stages"):
        TileConfig(128, 128, q_stages=3)


def test_ticket_early_and_q_ahead_configs():
    """Session 27's producer variants: on (ticket_early 2, q_ahead) only in the d128 ragged no-mask
    class without LSE, softcap or sinks (session 28's measurement); ticket_early counts key blocks,
    q_ahead needs it and the second Q buffer, and the trace build needs a class with LSE."""
    from ragged_attn.kernels.sm90.launch import kernel_for

    classes = itertools.product(
        HEAD_DIM_CLASSES, ("bf16", "fp16"), ("none", "causal", "window"), (True, False), ("ragged", "paged"),
        (False, True), (False, True),
    )  # fmt: skip
    for (dq, dv), dtype, mask, lse, kv, softcap, sinks in classes:
        lc = LayoutClass("sm_90a", dq, dv, dtype, dtype, mask, lse, kv, softcap=softcap, sinks=sinks)
        cfg = tile_config(lc)
        on = (dq, dv, mask, lse, kv, softcap, sinks) == (128, 128, "none", False, "ragged", False, False)
        want = (2, True, 2) if on else (0, False, cfg.q_stages)
        assert (cfg.ticket_early, cfg.q_ahead, cfg.q_stages) == want, lc
        assert not cfg.trace_timeline, lc
    with pytest.raises(ValueError, match="ticket_early"):
        TileConfig(128, 128, ticket_early=-1)
    with pytest.raises(ValueError, match="q_ahead"):
        TileConfig(128, 128, q_stages=2, q_ahead=True)  # no ticket_early
    with pytest.raises(ValueError, match="q_ahead"):
        TileConfig(128, 128, ticket_early=1, q_ahead=True)  # one Q buffer
    nolse = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "none", False, "ragged")
    with pytest.raises(ValueError, match="trace_timeline"):
        kernel_for(nolse, dataclasses.replace(tile_config(nolse), trace_timeline=True))


def test_config_that_does_not_fit_is_refused():
    lc = LayoutClass("sm_90a", 256, 256, "bf16", "bf16", "causal", True, "ragged")
    with pytest.raises(ValueError, match="smem"):
        compile_forward(lc, config=TileConfig(128, 96))
    with pytest.raises(ValueError, match="tile_n"):
        TileConfig(128, 72)


def test_paged_classes_take_whole_blocks_by_tma_boxes():
    """The paged classes of d64 .. d192 (every mask family, dtype and LSE choice) load key blocks of
    pools whose page size is a multiple of 128 as one 128-key TMA box per stage, and of the other
    multiples of 16 as 16-key boxes issued by the four producer warps (measured on the H200,
    sessions 12-13: within 3-6% of the ragged class at page 128 where the gather ran 0.72-0.97x);
    d32 (192-key blocks) and d256 (80-key blocks) keep the gather, ragged classes have no pool. The
    d64 paged classes but window take three MMA warpgroups, as the ragged ones."""
    for (dq, dv), mask, kv, lse in itertools.product(
        HEAD_DIM_CLASSES, ("none", "causal", "window"), ("ragged", "paged"), (True, False)
    ):
        cfg = tile_config(LayoutClass("sm_90a", dq, dv, "bf16", "bf16", mask, lse, kv))
        boxes = kv == "paged" and 64 <= dq <= 192
        name = f"d{dq} {mask} {kv} lse={lse}"
        assert (cfg.page_tma, cfg.page_tma_small, cfg.page_box_warps) == ((128, 16, 4) if boxes else (0, 0, 1)), name
        assert cfg.page_tma == 0 or cfg.tile_n % cfg.page_tma == 0
        if kv == "paged" and dq == 64:
            assert cfg.tile_m == (128 if mask == "window" else 192), name


def test_crossing_boxes_need_a_small_box_and_rows_view_boxes_need_boxes():
    with pytest.raises(ValueError, match="page_box_crossing"):
        TileConfig(128, 128, page_tma=128, page_box_crossing=True)
    assert TileConfig(128, 128, page_tma=128, page_tma_small=16, page_box_warps=4, page_box_crossing=True)
    with pytest.raises(ValueError, match="page_tma_rows"):
        TileConfig(128, 128, page_tma_rows=True)
    with pytest.raises(ValueError, match="page_prefetch: needs page_tma"):
        TileConfig(128, 128, page_prefetch=True)
    assert TileConfig(128, 128, page_tma=128, page_prefetch=True).page_prefetch
    with pytest.raises(ValueError, match="page_crossing_k_box: needs page_tma"):
        TileConfig(128, 128, page_crossing_k_box=True)
    with pytest.raises(ValueError, match="page_crossing_k_box: not with page_box_crossing"):
        TileConfig(128, 128, page_tma=128, page_tma_small=16, page_box_warps=4, page_box_crossing=True,
                   page_crossing_k_box=True)  # fmt: skip
    assert TileConfig(128, 128, page_tma=128, page_tma_small=16, page_crossing_k_box=True).page_crossing_k_box


def test_crossing_block_k_by_box_compiles_without_spills(capfd):
    """TileConfig.page_crossing_k_box (a measurement variant, session 17): the d128 paged class with
    the crossing block's K by its 128-key box and its V gathered fits the producer's registers."""
    lc = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, "paged")
    compile_without_spills(lc, capfd, dataclasses.replace(tile_config(lc), page_crossing_k_box=True))


@pytest.mark.parametrize("kv", ["ragged", "paged"])
def test_stream_mix_on_the_d128_causal_classes_compiles_without_spills(kv, capfd):
    """TileConfig.stream_mix (session 17): the d128 causal classes ship it beside the batch order
    (sort_batch's key, mix_bound, mixed_tile's two 64-bit divisions per tile in producer warp 0),
    without spills; the softcap class and the other head dims do not have it."""
    lc = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", False, kv)
    cfg = tile_config(lc)
    assert cfg.stream_mix and cfg.batch_order
    assert not tile_config(LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, kv, softcap=True)).stream_mix
    assert not tile_config(LayoutClass("sm_90a", 64, 64, "bf16", "bf16", "causal", True, kv)).stream_mix
    assert not tile_config(LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "window", True, kv)).stream_mix
    compile_without_spills(lc, capfd, cfg)


def tma_load_policies(ptx: str) -> list:
    """How each TMA load's (cp.async.bulk.tensor global -> shared::cta) cache-policy register is set,
    in program order: ("mov", constant) or ("add", constant) of its last definition above it, or
    None where neither."""
    defs, out = {}, []
    for line in ptx.splitlines():
        m = re.match(r"\s*mov\.b64\s+(%rd\d+),\s*(-?\d+);", line)
        if m:
            defs[m.group(1)] = ("mov", int(m.group(2)))
            continue
        m = re.match(r"\s*add\.s64\s+(%rd\d+),\s*%rd\d+,\s*(-?\d+);", line)
        if m:
            defs[m.group(1)] = ("add", int(m.group(2)))
            continue
        if "cp.async.bulk.tensor" in line and "shared::cta.global" in line:
            assert "L2::cache_hint" in line, line
            reg = re.search(r"(%rd\d+);\s*$", line)
            out.append(defs.get(reg.group(1)) if reg else None)
    return out


@pytest.mark.parametrize("kv, mode", [("ragged", 1), ("paged", 1), ("paged", 2)])
def test_l2_hints_put_cache_policies_on_the_tma_loads_without_spills(kv, mode, tmp_path, capfd):
    """TileConfig.l2_hints (a measurement variant, session 18): every TMA load of the d128 causal
    classes (Q, and ragged K/V or the paged boxes) carries one of CUTLASS's CacheHintSm90 policies,
    without spills: mode 1 Q's EVICT_FIRST (a constant) and K/V's EVICT_LAST plus the lone tiles'
    difference (an add, per tile), mode 2 EVICT_NORMAL everywhere. The DSL emits .L2::cache_hint on
    every TMA copy with policy 0 where none is given (the class's own config, checked too)."""
    lc = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, kv)
    cfg = dataclasses.replace(tile_config(lc), l2_hints=mode)
    compile_without_spills(lc, capfd, cfg, f"--keep-ptx --dump-dir {tmp_path}")
    (ptx,) = [p for p in tmp_path.iterdir() if p.suffix == ".ptx"]
    policies = tma_load_policies(ptx.read_text())
    assert policies
    if mode == 1:
        assert set(policies) == {("mov", L2_EVICT_FIRST), ("add", L2_EVICT_LAST)}, set(policies)
    else:
        assert set(policies) == {("mov", L2_EVICT_NORMAL)}, set(policies)
    assert tile_config(lc).l2_hints == 0
    with pytest.raises(ValueError, match="l2_hints"):
        TileConfig(l2_hints=3)


def test_tma_load_policies_reads_the_dsl_default_as_zero():
    """The parser above on the DSL's own emission (a d128 ragged class's PTX shape, abridged)."""
    ptx = """
	mov.b64 	%rd706, 0;
	cp.async.bulk.tensor.3d.shared::cta.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%r1+1024], [%rd705, {%r2, %r37, %r4}], [%r3+96], %rd706;
	selp.b64 	%rd719, -1, 0, %p1020;
	shl.b64 	%rd720, %rd719, 57;
	add.s64 	%rd721, %rd720, 1508705875169116160;
	cp.async.bulk.tensor.3d.shared::cta.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%r4+66560], [%rd718, {%r5, %r6, %r35}], [%r38+128], %rd721;
	cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group.L2::cache_hint [%rd1, {%r7, %r8, %r9}], [%r10], %rd485;
"""
    assert tma_load_policies(ptx) == [("mov", 0), ("add", L2_EVICT_LAST)]


def test_producer_registers_override():
    """TileConfig.producer_regs: a multiple of 8 in [24, 256]; the MMA warpgroups get what the
    launch's pool leaves (d64 paged, 192-row tiles: the class's 32 -> 160, the ragged class's
    split, where the box path's default 56 leaves 152)."""
    from ragged_attn.kernels.sm90.launch import kernel_for

    for bad in (20, 36, 264):
        with pytest.raises(ValueError, match="producer_regs"):
            TileConfig(128, 128, producer_regs=bad)
    lc = LayoutClass("sm_90a", 64, 64, "bf16", "bf16", "causal", True, "paged")
    k = kernel_for(lc, tile_config(lc))
    assert (tile_config(lc).producer_regs, k.producer_regs, k.mma_regs) == (32, 32, 160)
    k = kernel_for(lc, dataclasses.replace(tile_config(lc), producer_regs=0))
    assert (k.producer_regs, k.mma_regs) == (56, 152)


@pytest.mark.parametrize("kv", ["ragged", "paged"])
def test_d192_with_every_thread_passing_o_turns_compiles_without_spills(kv, capfd):
    """TileConfig.o_turn_every_thread (the d192 classes' O turns, on since session 16: every
    thread passes, so the pipeline state stays in uniform registers): the shipped config has it, it
    compiles without spills, and the barrier counts are the waiter's 128 and the passer's 32 or 128."""
    from ragged_attn.kernels.sm90.epilogue import turn_threads

    assert (turn_threads(False), turn_threads(True)) == (128 + 32, 128 + 128)
    lc = LayoutClass("sm_90a", 192, 128, "bf16", "bf16", "causal", True, kv)
    assert tile_config(lc).o_turns and tile_config(lc).o_turn_every_thread
    compile_without_spills(lc, capfd, tile_config(lc))


def test_d64_paged_192_row_class_compiles_without_spills(capfd):
    """The d64 paged 192-row class spilled at 56 / 152 (36 spill instructions); at its 32 / 160
    (TileConfig.producer_regs, session 14) the four warps' box path and the gather fit, and the MMA
    warpgroups do too: no spill anywhere."""
    lc = LayoutClass("sm_90a", 64, 64, "bf16", "bf16", "causal", True, "paged")
    assert tile_config(lc).producer_regs == 32
    compile_without_spills(lc, capfd)


def test_rows_view_boxes_only_for_head_dims_of_whole_bands():
    """page_tma_rows splits a row into 64-column bands: the d96 class keeps its boxes as they are
    (so a test run with the variant over every class stays valid), d64 / d128 / d192 take it."""
    from ragged_attn.kernels.sm90.launch import kernel_for

    for (dq, dv), takes in (((96, 96), False), ((64, 64), True), ((128, 128), True), ((192, 128), True)):
        lc = LayoutClass("sm_90a", dq, dv, "bf16", "bf16", "causal", True, "paged")
        assert kernel_for(lc, dataclasses.replace(tile_config(lc), page_tma_rows=True)).page_tma_rows == takes


@pytest.mark.parametrize("small", [8, 48, 128])
def test_second_box_sizes_that_do_not_divide_the_first_are_refused(small):
    """TileConfig.page_tma_small: 16, 32 or 64 keys dividing page_tma, only beside it."""
    with pytest.raises(ValueError, match="page_tma_small"):
        TileConfig(128, 128, page_tma=128, page_tma_small=small)
    with pytest.raises(ValueError, match="page_tma_small"):
        TileConfig(128, 128, page_tma_small=64)  # no first box
    assert TileConfig(128, 128, page_tma=128, page_tma_small=64).page_tma_small == 64


@pytest.mark.parametrize("box", [8, 48, 256])
def test_page_box_sizes_that_do_not_divide_the_tile_are_refused(box):
    with pytest.raises(ValueError, match="page_tma"):
        TileConfig(128, 128, page_tma=box)
    assert TileConfig(128, 128, page_tma=64).page_tma == 64


@pytest.mark.parametrize("dims", HEAD_DIM_CLASSES, ids=lambda d: f"d{d[0]}x{d[1]}")
@pytest.mark.parametrize("kv", ["ragged", "paged"])
@pytest.mark.parametrize("page_tma", [0, 16])
def test_register_split_fits_what_the_launch_allocates(dims, kv, page_tma):
    """setmaxnreg.inc waits until the CTA's pool holds what the MMA warpgroups ask for: the pool is
    the launch's allocation (floor(65536 / threads) rounded down to 8, per thread), not 65536, or
    the kernel hangs (session 9: producer 48 + MMA 232 at 384 threads asked 1024 too many)."""
    from ragged_attn.kernels.sm90.launch import kernel_for

    lc = LayoutClass("sm_90a", *dims, "bf16", "bf16", "causal", True, kv)
    config = tile_config(lc)
    if page_tma and kv == "paged" and config.tile_n % page_tma == 0:
        config = dataclasses.replace(config, page_tma=page_tma)
    k = kernel_for(lc, config)
    per_thread = 65536 // k.num_threads // 8 * 8
    assert 128 * k.producer_regs + k.num_mma_threads * k.mma_regs <= per_thread * k.num_threads
    assert k.mma_regs % 8 == 0 and k.producer_regs % 8 == 0 and k.mma_regs <= 240


@pytest.mark.parametrize(
    "box", [16, 64, (128, 64), "crossing", "rows", "one_warp", "fence_every", "prefetch", "warp_release"]
)
def test_paged_class_with_page_boxes_compiles_without_spills(box, capfd):
    """TileConfig.page_tma (paged_kv.py's TMA boxes beside the gather; a pair: page_tma and
    page_tma_small; "crossing": the class's boxes with page_box_crossing, the crossing block's whole
    runs by boxes too; "rows": with page_tma_rows, one instruction per box; "one_warp": warp 0 issues
    every box, session 12's way; "fence_every": paged_fence_gathered_only off, every stage wait
    fenced, as before session 16; "prefetch": page_prefetch, each block's boxes prefetched into L2
    before the stage acquire; "warp_release": paged_warp_release, one release arrive per MMA warp):
    the producer warpgroup's 56 registers hold the box coordinates without spilling."""
    lc = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, "paged")
    variants = {
        "crossing": dict(page_box_crossing=True), "rows": dict(page_tma_rows=True), "one_warp": dict(page_box_warps=1),
        "fence_every": dict(paged_fence_gathered_only=False), "prefetch": dict(page_prefetch=True),
        "warp_release": dict(paged_warp_release=True),
    }
    if box in variants:  # the class's own boxes with a measurement variant on
        config = dataclasses.replace(tile_config(lc), **variants[box])
    else:
        big, small = box if isinstance(box, tuple) else (box, 0)
        config = dataclasses.replace(tile_config(lc), page_tma=big, page_tma_small=small)
    compile_without_spills(lc, capfd, config)


@pytest.mark.parametrize("dims", HEAD_DIM_CLASSES, ids=lambda d: f"d{d[0]}x{d[1]}")
def test_paged_gather_rows_have_one_owner(dims):
    """The gather's row bookkeeping (paged_kv.py): the thread that copies row r of a pass finds
    r's address in lane (t // tpr) * tpr + m % tpr, entry m // tpr, of its own warp; every row of the
    tile is copied by exactly tpr threads, each covering distinct 16-byte chunks."""
    import cutlass

    from ragged_attn.kernels.sm90.paged_kv import PRODUCER_THREADS, threads_per_row

    d_qk, d_v = dims
    tile_n = tile_config(LayoutClass("sm_90a", d_qk, d_v, "bf16", "bf16", "causal", True, "paged")).tile_n
    tpr = threads_per_row(cutlass.BFloat16, d_qk, d_v)
    rpp = PRODUCER_THREADS // tpr
    assert 32 % tpr == 0 and tile_n % rpp == 0 and d_qk % (8 * tpr) == 0 and d_v % (8 * tpr) == 0

    def entry_row(t, e):
        return e * PRODUCER_THREADS + (t % tpr) * rpp + t // tpr

    chunks = {}
    for t in range(PRODUCER_THREADS):
        for m in range(tile_n // rpp):
            row = m * rpp + t // tpr
            owner = (t // tpr) * tpr + m % tpr
            assert owner // 32 == t // 32 and entry_row(owner, m // tpr) == row
            for k in range(d_qk // (8 * tpr)):
                chunks.setdefault(row, set()).add((t % tpr) + k * tpr)
    assert all(c == set(range(d_qk // 8)) for c in chunks.values()) and len(chunks) == tile_n


def test_gather_ref_matches_the_reference_gather():
    import torch

    from ragged_attn.kernels.sm90.paged_kv import gather_ref
    from ragged_attn.problem import build_problem
    from ragged_attn.reference import _gather_kv
    from tests.cases import Case

    for layout in ("NHD", "HND"):
        case = Case(5, [3, 4], [11, 30], 4, 2, 64, 64, dtype=torch.float32, page_size=3, kv_layout=layout)
        args, kwargs = case.make()
        problem, t = build_problem(*args, **kwargs)
        for b, lk in enumerate(case.lens_k):
            want_k, _ = _gather_kv(t, problem, b, 0, lk)
            assert torch.equal(gather_ref(args[1], kwargs["page_table"][b], lk, layout), want_k)


def _allowed(i, j, lq, lk, off, left, right):
    return j < lk and (left is None or j >= i + off - left) and (right is None or j <= i + off + right)


def _random_masks(r, lq_max, lk_min, lk_max):
    """A random (len_q, len_k, off, left, right): both causal alignments, windows or none."""
    lq, lk = r.randint(1, lq_max), r.randint(lk_min, lk_max)
    off = r.choice([0, lk - lq])
    return lq, lk, off, r.choice([None, 0, 5, 200]), r.choice([None, 0, 3, 150])


@pytest.mark.parametrize("seed", range(40))
def test_unmasked_range_is_exactly_the_blocks_without_a_masked_element(seed):
    """The mainloop's branch-free loop runs blocks [n_lo, n_hi) without mask code: those must be
    exactly the blocks where every (row, key) of the whole tile is allowed (brute force), which is
    also where needs_mask says no."""
    r = random.Random(1000 + seed)
    tm, tn = r.choice([128, 192]), r.choice([128, 80, 176, 192])
    lq, lk, off, left, right = _random_masks(r, 600, 0, 800)
    for mb in range((lq + tm - 1) // tm):
        n_lo, n_hi = unmasked_range_ref(tm, tn, mb, lk, off, left, right)
        for nb in range(-(-lk // tn) + 1):
            clean = all(
                _allowed(i, j, lq, lk, off, left, right)
                for i in range(mb * tm, (mb + 1) * tm)
                for j in range(nb * tn, (nb + 1) * tn)
            )
            assert clean == (n_lo <= nb < n_hi), (tm, tn, lq, lk, off, left, right, mb, nb, n_lo, n_hi)
            assert clean == (not needs_mask_ref(tm, tn, mb, nb, lk, off, left, right))


@pytest.mark.parametrize("seed", range(30))
def test_fences_cover_exactly_the_gathered_stages(seed):
    """TileConfig.paged_fence_gathered_only (mainloop.overlap_fences_ref, the overlapped mainloop's
    waits): over random tiles, warpgroup block ranges (wg_skip's sub-ranges, split-KV's shares) and
    masks, every K or V stage a GEMM reads was fenced after its wait exactly where the producer
    gathered it (paged_producer.box_block: the launch takes no boxes, or the block crosses len_k), so a
    boxed launch's interior runs without a fence and no gathered stage reaches WGMMA unfenced;
    with kv_boxed None every wait fences (the classes without it: d64, d96, d192 paged)."""
    from ragged_attn.kernels.sm90.mainloop import overlap_fences_ref

    r = random.Random(500 + seed)
    tm, tn = 128, 128
    checked = 0
    for _ in range(40):
        lq, lk, off, left, right = _random_masks(r, 700, 1, 1100)
        for mb in range((lq + tm - 1) // tm):
            n_min, n_max = block_range_ref(tm, tn, mb, lq, lk, off, left, right)
            n_lo, n_hi = unmasked_range_ref(tm, tn, mb, lk, off, left, right)
            for _ in range(3):
                a = r.randint(n_min, max(n_min, n_max - 1))
                b = r.randint(a + 1, max(a + 1, n_max))
                if b > n_max:
                    continue  # an empty range: mainloop_overlap needs a block
                for boxed in (None, 0, 1):
                    waits = overlap_fences_ref(a, b, n_lo, n_hi, lk, tn, boxed, left is not None, right is not None)
                    for n in range(a, b):
                        gathered = boxed != 1 or (n + 1) * tn > lk
                        k = [f for s, m, f in waits if s == "K" and m == n]
                        v = [f for s, m, f in waits if s.startswith("V") and m == n]
                        assert len(k) == 1 and 1 <= len(v) <= 2, (waits, n)
                        assert k[0] == gathered and any(v) == gathered, (lq, lk, off, left, right, mb, a, b, boxed, waits)
                    checked += 1
    assert checked > 100


@pytest.mark.parametrize("seed", range(20))
def test_block_range_covers_every_allowed_pair(seed):
    """Every allowed (row, key) of a tile lies in [n_min, n_max) blocks; the range is tight at the ends."""
    r = random.Random(seed)
    tm, tn = 128, (128, 80, 192)[seed % 3]  # the tile_n of the classes
    lq, lk, off, left, right = _random_masks(r, 700, 0, 900)
    for mb in range((lq + tm - 1) // tm):
        n_min, n_max = block_range_ref(tm, tn, mb, lq, lk, off, left, right)
        rows = range(mb * tm, min((mb + 1) * tm, lq))
        used = {j // tn for i in rows for j in range(lk) if _allowed(i, j, lq, lk, off, left, right)}
        if used:  # (an empty `used` may still get a non-empty, fully masked range: correct, slower)
            assert n_min == min(used) and n_max == max(used) + 1


# --- issue 14: softcap and sinks classes (ragged and paged K/V; tests/gpu/test_softcap_sinks_gpu.py) ---


@pytest.mark.parametrize("lc", EXTENDED_CLASSES, ids=lambda lc: lc.name)
def test_softcap_and_sinks_classes_take_sinks_and_softcap_after_page_table(lc):
    """The -softcap / -sinks classes' functions take sinks and softcap after page_table (compiled_args);
    they compile without spills and export in test_compiles_without_spills_and_exports."""
    from ragged_attn.kernels.sm90 import COMPILED_ARGS, compiled_args

    assert compiled_args(lc) == (*COMPILED_ARGS, "sinks", "softcap")


# The compiled function's parameter names (cute.jit's, forward.py) for launch.COMPILED_ARGS_EXT.
_PARAM_NAMES = {"q": "mQ", "k": "mK", "v": "mV", "out": "mO", "lse_flat": "mLSE", "cu_seqlens_q": "mCuSeqlensQ",
                "cu_seqlens_k": "mCuSeqlensK", "seqused_q": "mSeqUsedQ", "seqused_k": "mSeqUsedK",
                "tile_counter": "mTileCounter", "page_table": "mPageTable", "sinks": "mSinks"}  # fmt: skip


@pytest.mark.parametrize(
    "options",
    [dict(causal=True, return_lse=True, softcap=5.0, sinks=True), dict(window_size=(9, 2), softcap=3.0)],
    ids=["causal-lse-softcap-sinks", "window-nolse-softcap"],
)
def test_dispatch_arguments_fit_the_compiled_function(options, monkeypatch):
    """What the library passes (backends.kernel_arguments -> launch_forward, and the fast path's
    BoundKernel for a -softcap class) fits the class's compiled function: its parameters (the
    DSL's record of the jit signature, stream last) are compiled_args(lc) in order, and each call
    passes one value per parameter, sinks and the cap in their places. (Calling the function itself
    needs the DSL imported with CUTE_DSL_ARCH=sm_90a; these names come from the compile alone.)"""
    import torch

    from ragged_attn import backends
    from ragged_attn.fast_launch import BoundKernel
    from ragged_attn.kernels.sm90 import compiled_args, launch, launch_forward
    from ragged_attn.problem import build_problem

    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    q = torch.randn(12, 4, 64).to(torch.bfloat16)
    k, v = torch.randn(15, 2, 64).to(torch.bfloat16), torch.randn(15, 2, 64).to(torch.bfloat16)
    cu_q, cu_k = torch.tensor([0, 5, 12], dtype=torch.int32), torch.tensor([0, 6, 15], dtype=torch.int32)
    if options.pop("sinks", False):
        options["sinks"] = torch.zeros(4)
    problem, t = build_problem(q, k, v, cu_q, cu_k, 7, 9, **options)
    lc = backends.layout_class_for(problem)
    assert lc.softcap and lc.sinks == ("sinks" in options)
    fn = compile_forward(lc)
    params = fn.execution_args.get_kwargs_wrapper_spec().arg_names
    assert params == [_PARAM_NAMES.get(n, n) for n in compiled_args(lc)] + ["stream"]
    out = torch.empty(12, 4, 64, dtype=torch.bfloat16)
    lse = torch.empty(problem.lse_shape()) if problem.return_lse else None
    calls = []
    launch_forward(lambda *a: calls.append(a), **backends.kernel_arguments(problem, t, out, lse))
    BoundKernel(lambda *a: calls.append(a), problem).try_launch(
        q, k, v, cu_q, cu_k, 7, None, None, None, out, None, None, t.sinks
    )  # the fast path, each call's sinks for a -sinks class
    assert len(calls) == 2
    for call in calls:
        named = dict(zip(params[:-1], call, strict=True))
        assert named["mSinks"] is t.sinks and named["softcap"] == options["softcap"]
        assert named["mQ"] is q and named["mO"] is out and named["mPageTable"] is None


def test_softcap_uses_tanh_approx_and_plain_classes_keep_their_signature(tmp_path):
    """A softcap class's PTX has tanh.approx.f32 (one per score element and S GEMM site); a plain
    class's compiled function keeps COMPILED_ARGS (its entry is `__call__`, not `call_ext`)."""
    from ragged_attn.kernels.sm90 import COMPILED_ARGS, compiled_args

    plain = LayoutClass("sm_90a", 64, 64, "bf16", "bf16", "causal", True, "ragged")
    assert compiled_args(plain) == COMPILED_ARGS
    lc = dataclasses.replace(plain, softcap=True)
    compile_forward(lc, f"--keep-ptx --dump-dir {tmp_path}")
    ptx = "".join(p.read_text() for p in tmp_path.glob("*.ptx"))
    assert "call_ext" in "".join(p.name for p in tmp_path.glob("*.ptx"))
    assert ptx.count("tanh.approx.f32") > 0


@pytest.mark.parametrize("seed", range(30))
def test_finalize_sink_matches_logaddexp(seed):
    """finalize_sink's arithmetic (its Python mirror, float64) against LSE = logaddexp(row LSE,
    sink), O scale = exp(-LSE) relative to the row's sum; empty rows give LSE = sink, O = 0."""
    import math

    from ragged_attn.kernels.sm90.softmax import finalize_sink_ref

    r = random.Random(seed)
    scale = r.choice([0.125, 0.088, 1.0]) * math.log2(math.e)
    scores = [r.gauss(0, 3) for _ in range(r.randint(0, 6))]
    sink = r.choice([r.gauss(0, 3), 50.0, -50.0, -math.inf])
    m = max(scores, default=-math.inf)
    l = sum(2.0 ** ((x - m) * scale) for x in scores)  # noqa: E741
    o_scale, lse2 = finalize_sink_ref(m, l, sink, scale)
    row_lse = math.log(sum(math.exp(x * scale / math.log2(math.e)) for x in scores)) if scores else -math.inf
    want = row_lse if sink == -math.inf else (sink if row_lse == -math.inf else max(row_lse, sink) + math.log1p(math.exp(-abs(row_lse - sink))))
    if want == -math.inf:
        assert lse2 == -math.inf
    else:
        assert abs(lse2 * math.log(2) - want) < 1e-9
        if scores:  # O = sum_j 2^((x_j - m) s) v_j * o_scale: the weights sum to exp(row_lse - want)
            assert abs(l * o_scale - math.exp(row_lse - want)) < 1e-9
    # +inf sink: O = 0, LSE = +inf; NaN sink: NaN
    assert finalize_sink_ref(m, l, math.inf, scale) == (0.0, math.inf)
    assert math.isnan(finalize_sink_ref(m, l, math.nan, scale)[1])


@pytest.mark.parametrize(
    "lc",
    [
        LayoutClass("sm_90a", 256, 256, "bf16", "bf16", "none", True, "ragged"),  # tile_n 80
        LayoutClass("sm_90a", 32, 32, "bf16", "bf16", "none", False, "paged"),  # tile_n 192
        LayoutClass("sm_90a", 96, 96, "bf16", "bf16", "causal", True, "ragged"),  # O: d_v / 16 = 6
    ],
    ids=lambda lc: lc.name,
)
def test_p_and_o_convert_to_bf16_in_pairs(lc, tmp_path):
    """softmax.convert_k16: a class whose tile_n / 16 (P, store_p) or d_v / 16 (O, the epilogue) is
    not a power of two converts with packed cvt.rn.bf16x2.f32 only. Converted as one fragment, such
    classes' PTX held one cvt.rn.bf16.f32 per value (d256's P: 80 beside 128 packed ones; d32 paged's
    P: 192; d96's O: 96, two traced epilogues of 48), which ptxas paired with PRMTs (and, for P,
    extra warpgroup waits in the interior loop)."""
    compile_forward(lc, f"--keep-ptx --dump-dir {tmp_path}")
    ptx = "".join(p.read_text() for p in tmp_path.glob("*.ptx"))
    assert ptx.count("cvt.rn.bf16x2.f32") > 0
    assert ptx.count("cvt.rn.bf16.f32") == 0
