"""Split-KV on the CPU: the tile order with splits (the scheduler's Python twins), each split's share
of a tile's key blocks, the num_splits heuristic, and the launch path's workspace and merge
bookkeeping (launch_forward and the fast path, with a Python model of the kernel standing in for
the compiled function). tests/gpu/test_split_kv_gpu.py runs the real kernel."""

from __future__ import annotations

import math
import random

import pytest
import torch

pytest.importorskip("cutlass")

from ragged_attn.kernels.sm90 import COMPILED_ARGS, launch, launch_forward  # noqa: E402
from ragged_attn.kernels.sm90.block_info import split_share_ref  # noqa: E402
from ragged_attn.kernels.sm90.split_kv import (  # noqa: E402
    MAX_SPLITS,
    choose_num_splits,
    max_splits_for_rows,
    split_allowed,
    unsplit_tiles,
    wave_split_count,
)
from ragged_attn.kernels.sm90.tile_scheduler import ROW_BLOCK, decode_tile_ref, launch_schedule_ref  # noqa: E402
from ragged_attn.layout_class import LayoutClass  # noqa: E402

POS = {name: i for i, name in enumerate(COMPILED_ARGS)}


# ----------------------------------------------------------------------------- the tile order
@pytest.mark.parametrize("num_splits", [2, 3, 8])
@pytest.mark.parametrize("pack", [False, "always"])
@pytest.mark.parametrize("seed", range(6))
def test_splits_are_the_fastest_digit_of_the_tile_order(seed, pack, num_splits):
    """With S splits the order has S times the tiles; index S u + s is split s of the tile the
    unsplit order has at u (so a tile's splits are consecutive: a sequence's splits start
    together), and each (sequence, head, row block) is computed once per split."""
    rng = random.Random(seed)
    hkv, ratio = rng.choice([1, 2, 4]), rng.choice([1, 2, 4, 8])
    tile_m = rng.choice([128, 192])
    lens_q = [rng.choice([0, 1, 1, 3, 64, 65, 200]) for _ in range(rng.randint(1, 9))]
    lens_k = [n + rng.randrange(0, 3000) for n in lens_q]
    args = (lens_q, lens_k, hkv * ratio, hkv, tile_m, pack)
    *_, unsplit = launch_schedule_ref(*args)
    *_, split_tiles = launch_schedule_ref(*args, num_splits=num_splits)
    assert split_tiles == num_splits * unsplit
    computed = {}
    num_wg = tile_m // ROW_BLOCK
    for t in range(split_tiles):
        unit, tile, b, has_rows, pack_r, split = decode_tile_ref(t, *args, num_splits=num_splits)
        assert split == t % num_splits
        assert (unit, tile, b, has_rows, pack_r, 0) == decode_tile_ref(t // num_splits, *args)
        if has_rows:
            for w in range(num_wg):
                item = tile * num_wg + w  # unshifted items are enough for the count per split
                key = (b, unit, item, split)
                assert key not in computed, f"{key} computed twice"
                computed[key] = t
    per_split = {}
    for b, unit, item, split in computed:
        per_split.setdefault(split, set()).add((b, unit, item))
    assert len({frozenset(v) for v in per_split.values()}) <= 1, "the splits cover different tiles"


@pytest.mark.parametrize("num_splits", [1, 2, 3, 4, 5, 8, 16])
def test_split_shares_partition_the_key_blocks(num_splits):
    """The S shares of [n_min, n_max) are consecutive, disjoint, cover it, differ in size by at
    most one block, and are all empty for an empty (or inverted: a window that misses) range."""
    for n_min in (0, 3, 17):
        for n in range(-3, 40):
            shares = [split_share_ref(n_min, n_min + n, s, num_splits) for s in range(num_splits)]
            if n <= 0:
                assert all(hi <= lo for lo, hi in shares), shares
                continue
            assert shares[0][0] == n_min and shares[-1][1] == n_min + n
            for (lo, hi), (lo2, _) in zip(shares, shares[1:]):
                assert hi == lo2 and hi >= lo
            sizes = [hi - lo for lo, hi in shares]
            assert max(sizes) - min(sizes) <= 1 and sum(sizes) == n


def test_one_split_is_the_whole_range():
    assert split_share_ref(5, 9, 0, 1) == (5, 9)
    assert split_share_ref(5, 3, 0, 1) == (5, 3)  # S = 1 passes an empty range through unchanged


# ----------------------------------------------------------------------------- the heuristic
@pytest.mark.parametrize("pack_gqa", [False, True])
@pytest.mark.parametrize("seed", range(20))
def test_unsplit_tiles_is_the_kernels_count(seed, pack_gqa):
    """unsplit_tiles (host integers only) equals the schedule twin's count of the same launch."""
    rng = random.Random(seed)
    hkv, ratio = rng.choice([1, 2, 8]), rng.choice([1, 2, 4, 8])
    tile_m = rng.choice([128, 192])
    lens_q = [rng.choice([0, 1, 5, 64, 130, rng.randrange(0, 3000)]) for _ in range(rng.randint(1, 40))]
    if max(lens_q) == 0:
        lens_q[0] = 1
    *_, want = launch_schedule_ref(lens_q, lens_q, hkv * ratio, hkv, tile_m, True if pack_gqa else False)
    assert unsplit_tiles(len(lens_q), sum(lens_q), max(lens_q), hkv * ratio, hkv, tile_m, pack_gqa) == want


def test_decode_rows_split_and_prefill_does_not():
    """d128 (128 x 128 tiles), 132 SMs: one decode row at 32/8 heads over 8k keys is 32 tiles, a
    quarter of the SMs; waves 32 S / 132 reach 97% at S = 4 (S = 3: 73%), so 4 splits. A prefill
    batch fills the SMs: 1. Too few key blocks (FA3: <= 4): 1. No max_seqlen_k: 1."""
    assert choose_num_splits(1, 1, 1, 8192, 32, 8, 132, 128, 128) == 4
    assert choose_num_splits(4, 4 * 2048, 2048, 2048, 32, 8, 132, 128, 128) == 1
    assert choose_num_splits(1, 1, 1, 4 * 128, 32, 8, 132, 128, 128) == 1
    assert choose_num_splits(1, 1, 1, 5 * 128, 32, 8, 132, 128, 128) > 1
    assert choose_num_splits(1, 1, 1, None, 32, 8, 132, 128, 128) == 1
    # 8 query heads of one row: 8 tiles; 8 S / 132 is best at S = 16 (97%), and 85% of that (82%)
    # first at S = 14 (85%; S = 13: 79%).
    assert choose_num_splits(1, 1, 1, 65536, 8, 8, 132, 128, 128) == 14


@pytest.mark.parametrize("seed", range(200))
def test_heuristic_stays_in_its_bounds(seed):
    """1 <= S <= min(MAX_SPLITS, key blocks, SMs); 1 once the tiles fill 80% of the SMs or the keys
    are fewer than 5 blocks; S * tiles is the best wave efficiency up to 15%."""
    rng = random.Random(seed)
    tiles, blocks, sms = rng.randint(1, 300), rng.randint(1, 300), rng.choice([1, 8, 78, 114, 132])
    s = wave_split_count(tiles, blocks, sms)
    assert 1 <= s <= max(1, min(MAX_SPLITS, blocks, sms))
    if tiles >= 0.8 * sms or blocks < 5:
        assert s == 1

    def eff(n):
        w = tiles * n / sms
        return w / math.ceil(w)

    if s > 1:
        best = max(eff(n) for n in range(1, min(MAX_SPLITS, blocks, sms) + 1))
        assert eff(s) >= 0.85 * best and all(eff(n) < 0.85 * best for n in range(1, s))


def test_rows_cap_the_splits():
    """num_splits * total_q stays an int32 row count (the kernel's output rows)."""
    assert max_splits_for_rows(2**29 - 1) == 4 and max_splits_for_rows(2**30) == 1
    assert choose_num_splits(1, 2**30, 1, 2**20, 1, 1, 132, 128, 128) == 1


def test_which_classes_split():
    """Token-/head-major LSE classes, no-LSE classes (through their LSE sibling), ragged and paged;
    never a sinks class, nor a padded LSE."""
    from ragged_attn.kernels.sm90.split_kv import lse_sibling

    base = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, "ragged")
    assert split_allowed(base, "token_major") and split_allowed(base, "head_major")
    assert not split_allowed(base, "padded")
    paged = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, "paged")
    assert split_allowed(paged, "token_major") and not split_allowed(paged, "padded")
    for kv in ("ragged", "paged"):
        nolse = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", False, kv)
        for layout in ("token_major", "head_major", "padded"):  # no LSE is written: its layout is moot
            assert split_allowed(nolse, layout), (nolse.name, layout)
        sibling = lse_sibling(nolse)
        assert sibling == LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, kv) and sibling != nolse
        assert lse_sibling(sibling) is sibling
    for other in (
        LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, "ragged", sinks=True),
        LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", False, "paged", sinks=True),
    ):
        assert not split_allowed(other, "token_major"), other.name
    assert split_allowed(LayoutClass("sm_90a", 64, 64, "fp16", "fp16", "window", True, "ragged", softcap=True), "head_major")
    soft = LayoutClass("sm_90a", 64, 64, "fp16", "fp16", "window", False, "paged", softcap=True)
    assert split_allowed(soft, "head_major") and lse_sibling(soft).softcap and lse_sibling(soft).lse


def test_num_splits_pack_rows_and_batch_order_are_the_last_plain_arguments():
    from ragged_attn import fast_launch

    last = ("num_splits", "pack_rows", "batch_order")
    assert COMPILED_ARGS[-3:] == last and fast_launch._ARG_ORDER[-3:] == last


# ----------------------------------------------------------------------------- the launch path
class SplitKernelModel:
    """A stand-in for a compiled class (mask none or causal bottom-right, TILE_N-key blocks) on
    CPU tensors: reads its arguments as the kernel does and writes what the kernel writes. With
    num_splits S, split s of sequence b covers its share of the sequence's key blocks and stores
    O and LSE at rows s * total_q + cu_seqlens_q[b] + i of the buffers out / lse_flat address (the
    kernel's offset_o); rows that see no key of the share get O = 0, LSE = -inf. Records each
    call's num_splits."""

    TILE_N = 16

    def __init__(self, causal: bool, has_lse: bool = True):
        self.causal = causal
        self.has_lse = has_lse  # False: a no-LSE class's kernel (its lse_flat is None, it never splits)
        self.splits_seen = []

    def __call__(self, *args):
        a = dict(zip(COMPILED_ARGS, args))
        q, k, v, out, lse_flat = a["q"], a["k"], a["v"], a["out"], a["lse_flat"]
        num_splits = a["num_splits"]
        self.splits_seen.append(num_splits)
        total_q, h_q, d_v = out.shape
        assert (lse_flat is not None) == self.has_lse, "an LSE buffer for a class without one, or none for one with it"
        if num_splits > 1:
            assert a["lse_s_max"] == 0 and (a["lse_s_b"], a["lse_s_tok"], a["lse_s_row"], a["lse_s_h"]) == (0, h_q, h_q, 1)
            assert out.is_contiguous() and lse_flat.numel() == num_splits * total_q * h_q
        rows_o = out.as_strided((num_splits * total_q, h_q, d_v), out.stride())  # split s after split s - 1
        table = a["page_table"]  # paged: k, v are (num_pages, page_size, H_kv, D) pools (HND permuted)
        ratio = h_q // k.shape[-2]
        cu_q, cu_k = a["cu_seqlens_q"].tolist(), a["cu_seqlens_k"].tolist()
        used_q = a["seqused_q"].tolist() if a["use_seqused_q"] else None
        used_k = a["seqused_k"].tolist() if a["use_seqused_k"] else None
        for b in range(a["batch"]):
            lq = used_q[b] if used_q else cu_q[b + 1] - cu_q[b]
            lk = used_k[b] if used_k else cu_k[b + 1] - cu_k[b]
            qs = q[cu_q[b] : cu_q[b] + lq].double()
            if table is None:
                ks, vs = k[cu_k[b] : cu_k[b] + lk], v[cu_k[b] : cu_k[b] + lk]
            else:  # key j of sequence b: slot j % page_size of page table[b, j // page_size]
                ps = k.shape[1]
                pages = table[b, torch.arange(lk) // ps].long()
                ks, vs = k[pages, torch.arange(lk) % ps], v[pages, torch.arange(lk) % ps]
            ks = ks.double().repeat_interleave(ratio, dim=1)
            vs = vs.double().repeat_interleave(ratio, dim=1)
            scores = torch.einsum("ihd,jhd->hij", qs, ks) * a["softmax_scale"]
            i = torch.arange(lq)[:, None]
            j = torch.arange(lk)[None, :]
            seen = (j <= i + lk - lq) if self.causal else torch.ones(lq, lk, dtype=torch.bool)
            blocks = -(-lk // self.TILE_N)
            for s in range(num_splits):
                lo, hi = split_share_ref(0, blocks, s, num_splits)
                here = seen & (j >= lo * self.TILE_N) & (j < hi * self.TILE_N)
                x = scores.masked_fill(~here, -math.inf)
                lse = torch.logsumexp(x, dim=-1)  # (h, lq), -inf where no key is seen
                p = torch.where(here, torch.exp(x - lse.nan_to_num(neginf=0.0)[..., None]), 0.0)
                o = torch.einsum("hij,jhd->ihd", p, vs)
                row = s * total_q + cu_q[b]
                rows_o[row : row + lq] = o.to(out.dtype)
                if lse_flat is None:
                    continue
                lse2 = lse.transpose(0, 1) / math.log(2.0) * a["lse_scale"]  # the kernel's base conversion
                for r in range(lq):
                    for h in range(h_q):
                        idx = a["lse_s_b"] * b + a["lse_s_tok"] * row + a["lse_s_row"] * r + a["lse_s_h"] * h
                        lse_flat[idx] = lse2[r, h].float()


def _problem(seed, causal, seqused, lse_layout, log2):
    g = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    lens_q = [rng.choice([0, 1, 1, 3, 9]) for _ in range(rng.randint(1, 5))]
    lens_q[0] = max(lens_q[0], 1)
    lens_k = [n + rng.randrange(0, 90) for n in lens_q]
    gaps_q = [rng.randint(0, 2) if seqused else 0 for _ in lens_q]
    cu_q, cu_k = [0], [0]
    for n, gap, m in zip(lens_q, gaps_q, lens_k):
        cu_q.append(cu_q[-1] + n + gap)
        cu_k.append(cu_k[-1] + m)
    total_q, total_k = max(cu_q[-1], 1), cu_k[-1]
    hq, hkv, d = 4, 2, 16
    t = dict(
        q=torch.randn(total_q, hq, d, generator=g).to(torch.bfloat16),
        k=torch.randn(total_k, hkv, d, generator=g).to(torch.bfloat16),
        v=torch.randn(total_k, hkv, d, generator=g).to(torch.bfloat16),
        cu_seqlens_q=torch.tensor(cu_q, dtype=torch.int32),
        cu_seqlens_k=torch.tensor(cu_k, dtype=torch.int32),
        seqused_q=torch.tensor(lens_q, dtype=torch.int32) if seqused else None,
    )
    lse_shape = (total_q, hq) if lse_layout == "token_major" else (hq, total_q)
    options = dict(causal=causal, return_lse=True, lse_layout=lse_layout, lse_base="log2" if log2 else "ln")
    return t, lens_q, lens_k, lse_shape, options


def _reference(t, lens_q, options):
    from ragged_attn.reference import attention_reference

    return attention_reference(
        t["q"], t["k"], t["v"], t["cu_seqlens_q"], t["cu_seqlens_k"], seqused_q=t["seqused_q"], **options
    )  # fmt: skip


def _inside(t, lens_q):
    inside = torch.zeros(t["q"].shape[0], dtype=torch.bool)
    for start, n in zip(t["cu_seqlens_q"].tolist(), lens_q):
        inside[start : start + n] = True
    return inside


@pytest.mark.parametrize("num_splits", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("lse_layout", ["token_major", "head_major"])
@pytest.mark.parametrize("fresh", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_launch_forward_merges_the_splits(seed, fresh, lse_layout, num_splits, monkeypatch):
    """launch_forward with num_splits: the kernel model's partial results merge (ragged_attn.merge
    on the CPU) into the reference's out and LSE; with the caller's buffers (fresh False) rows
    outside every sequence keep their NaN poison; with buffers made for the call every row is
    written (O = 0, LSE = -inf outside)."""
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    causal, seqused, log2 = seed % 2 == 0, seed >= 2, seed % 3 == 1
    t, lens_q, lens_k, lse_shape, options = _problem(seed, causal, seqused, lse_layout, log2)
    total_q, hq, d = t["q"].shape
    out = torch.full((total_q, hq, d), math.nan, dtype=torch.bfloat16)
    lse = torch.full(lse_shape, math.nan)
    model = SplitKernelModel(causal)
    strides = (0, hq, hq, 1) if lse_layout == "token_major" else (0, 1, 1, total_q)
    launch_forward(
        model, q=t["q"], k=t["k"], v=t["v"], out=out, lse=lse, cu_seqlens_q=t["cu_seqlens_q"],
        cu_seqlens_k=t["cu_seqlens_k"], seqused_q=t["seqused_q"], seqused_k=None, batch=len(lens_q),
        max_seqlen_q=max(lens_q), lse_s_max=0, softmax_scale=d**-0.5, window_left=-1, window_right=-1 if not causal else 0,
        bottom_right=True, lse_strides=strides, lse_base_is_log2=log2, num_splits=num_splits, fresh_outputs=fresh,
    )  # fmt: skip
    assert model.splits_seen == [num_splits]
    want_o, want_lse = _reference(t, lens_q, options)
    rows = lse if lse_layout == "token_major" else lse.t()
    want_rows = want_lse if lse_layout == "token_major" else want_lse.t()
    inside = _inside(t, lens_q)
    err = (out[inside].float() - want_o[inside].float()).abs()
    assert (err <= 2e-2 + 2e-2 * want_o[inside].float().abs()).all(), f"out: max err {err.max()}"
    got_l, want_l = rows[inside], want_rows[inside]
    assert torch.equal(torch.isinf(got_l), torch.isinf(want_l))
    fin = ~torch.isinf(want_l)
    assert ((got_l[fin] - want_l[fin]).abs() <= 1e-2).all()
    if fresh and num_splits > 1:  # merged rows outside: O = 0, LSE = -inf
        assert (out[~inside].float() == 0).all() and torch.isneginf(rows[~inside]).all()
    elif not fresh:
        assert torch.isnan(out[~inside].float()).all() and torch.isnan(rows[~inside]).all()


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(lse=None), "LSE sibling"),
        (dict(lse_s_max=4, lse_strides=(20, 0, 4, 1)), "token- or head-major"),
        (dict(num_splits=0), "int >= 1"),
        (dict(sinks=torch.zeros(4)), "sinks"),
    ],
    ids=["no-lse-without-sibling", "padded", "zero", "sinks"],
)
def test_launch_forward_refuses_splits_it_cannot_merge(change, match):
    t, lens_q, _, lse_shape, _ = _problem(0, False, False, "token_major", False)
    total_q, hq, d = t["q"].shape
    kwargs = dict(
        q=t["q"], k=t["k"], v=t["v"], out=torch.empty(total_q, hq, d, dtype=torch.bfloat16),
        lse=torch.empty(lse_shape), cu_seqlens_q=t["cu_seqlens_q"], cu_seqlens_k=t["cu_seqlens_k"],
        seqused_q=None, seqused_k=None, batch=len(lens_q), max_seqlen_q=max(lens_q), lse_s_max=0,
        softmax_scale=0.25, window_left=-1, window_right=-1, bottom_right=True, lse_strides=(0, hq, hq, 1),
        num_splits=2,
    )  # fmt: skip
    kwargs.update(change)
    with pytest.raises(ValueError, match=f"num_splits: .*{match}"):
        launch_forward(lambda *a: pytest.fail("launched"), **kwargs)


def test_fast_path_splits_decode_rows_and_merges(monkeypatch):
    """BoundKernel.try_launch of an LSE plan: a decode batch (1 query over many keys) on a device of
    132 SMs takes choose_num_splits' count and merges into the out it allocates and a caller's out
    (rows outside the sequences kept); a prefill-sized call stays unsplit."""
    from ragged_attn.fast_launch import BoundKernel
    from ragged_attn.problem import build_problem

    g = torch.Generator().manual_seed(3)
    hq, hkv, d = 8, 2, 128
    lens_k = [700, 1500]
    q = torch.randn(3, hq, d, generator=g).to(torch.bfloat16)  # row 2 is outside both sequences
    k = torch.randn(sum(lens_k), hkv, d, generator=g).to(torch.bfloat16)
    v = torch.randn(sum(lens_k), hkv, d, generator=g).to(torch.bfloat16)
    cu_q = torch.tensor([0, 1, 2], dtype=torch.int32)
    cu_k = torch.tensor([0, 700, 2200], dtype=torch.int32)
    options = dict(causal=True, return_lse=True, lse_layout="token_major")
    problem, _ = build_problem(q, k, v, cu_q, cu_k, 1, 1500, **options)
    model = SplitKernelModel(causal=True)
    bound = BoundKernel(model, problem)
    monkeypatch.setattr(bound, "_num_ctas", 132)
    # The class packs rows (d128: TileConfig.pack_rows): the split count is over the packed tiles.
    want = choose_num_splits(2, 3, 1, 1500, hq, hkv, 132, *bound._split[:3], bound._split[6])
    assert want > 1
    from ragged_attn.reference import attention_reference

    want_o, want_lse = attention_reference(q, k, v, cu_q, cu_k, **options)
    inside = torch.tensor([True, True, False])
    caller_out = torch.full((3, hq, d), math.nan, dtype=torch.bfloat16)
    for out in (None, caller_out):
        got_o, got_lse = bound.try_launch(q, k, v, cu_q, cu_k, 1, None, None, None, out, None, 1500)
        assert model.splits_seen[-1] == want
        err = (got_o[inside].float() - want_o[inside].float()).abs()
        assert (err <= 2e-2 + 2e-2 * want_o[inside].float().abs()).all()
        assert (got_lse[inside] - want_lse[inside]).abs().max() <= 1e-2
    assert torch.isnan(caller_out[2].float()).all(), "a row outside every sequence was written"
    bound.try_launch(q, k, v, cu_q, cu_k, 1, None, None, None, None, None, None)  # no max_seqlen_k: unsplit
    assert model.splits_seen[-1] == 1


# ----------------------------------------------------------------------------- paged K/V and no-LSE calls
def _paged(t, lens_k, page_size, kv_layout, seed):
    """t's ragged k / v as page pools of `page_size` (NHD (num_pages, page_size, H_kv, D) or HND
    (num_pages, H_kv, page_size, D)) in shuffled pages, with two pages nobody references and NaN in
    every slot that holds no key (as tests/cases.py builds them), and the (B, max_pages) int32 table
    (unused entries point at page 0: never read within a sequence's key count)."""
    g = torch.Generator().manual_seed(seed)
    n_pages = [-(-n // page_size) for n in lens_k]
    total = sum(n_pages) + 2
    perm = torch.randperm(total, generator=g).tolist()
    table = torch.zeros(len(lens_k), max(n_pages + [1]), dtype=torch.int32)
    _, hkv, d = t["k"].shape
    pools = [torch.full((total, page_size, hkv, d), math.nan, dtype=t["k"].dtype) for _ in range(2)]
    start, nxt = 0, 0
    for b, (n, m) in enumerate(zip(n_pages, lens_k)):
        table[b, :n] = torch.tensor(perm[nxt : nxt + n], dtype=torch.int32)
        nxt += n
        for j in range(m):
            page, slot = perm[nxt - n + j // page_size], j % page_size
            pools[0][page, slot] = t["k"][start + j]
            pools[1][page, slot] = t["v"][start + j]
        start += m
    if kv_layout == "HND":  # stored head-major; launch_forward views it back as NHD
        pools = [p.transpose(1, 2).contiguous() for p in pools]
    return pools[0], pools[1], table


def _launch_kwargs(t, lens_q, out, lse, lse_strides, causal, log2, num_splits, fresh):
    total_q, hq, d = t["q"].shape
    return dict(
        q=t["q"], k=t["k"], v=t["v"], out=out, lse=lse, cu_seqlens_q=t["cu_seqlens_q"],
        cu_seqlens_k=t["cu_seqlens_k"], seqused_q=t["seqused_q"], seqused_k=None, batch=len(lens_q),
        max_seqlen_q=max(lens_q), lse_s_max=0, softmax_scale=d**-0.5, window_left=-1,
        window_right=-1 if not causal else 0, bottom_right=True, lse_strides=lse_strides,
        lse_base_is_log2=log2, num_splits=num_splits, fresh_outputs=fresh,
    )  # fmt: skip


def _check_out(out, want_o, inside, fresh, split):
    err = (out[inside].float() - want_o[inside].float()).abs()
    assert (err <= 2e-2 + 2e-2 * want_o[inside].float().abs()).all(), f"out: max err {err.max()}"
    if fresh and split:  # merged rows outside every sequence: O = 0
        assert (out[~inside].float() == 0).all()
    elif not fresh:
        assert torch.isnan(out[~inside].float()).all(), "a row outside every sequence was written"


@pytest.mark.parametrize("num_splits", [1, 2, 4])
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("kv_layout", ["NHD", "HND"])
@pytest.mark.parametrize("seed", range(3))
def test_launch_forward_splits_paged(seed, kv_layout, page_size, num_splits, monkeypatch):
    """A paged class with an LSE: launch_forward splits its launch (each split reads the pages of
    its share of the key blocks, as the kernel's producer does), and the merge gives the
    reference's out and LSE; NaN in unreferenced pages and unused slots is never read; key
    lengths from cu_seqlens_k differences or seqused_k (cu_seqlens_k None)."""
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    causal, seqused, log2, fresh = seed != 1, seed == 2, seed == 1, seed == 0
    t, lens_q, lens_k, lse_shape, options = _problem(seed, causal, seqused, "token_major", log2)
    total_q, hq, d = t["q"].shape
    want_o, want_lse = _reference(t, lens_q, options)
    kp, vp, table = _paged(t, lens_k, page_size, kv_layout, seed)
    out = torch.full((total_q, hq, d), math.nan, dtype=torch.bfloat16)
    lse = torch.full(lse_shape, math.nan)
    model = SplitKernelModel(causal)
    kwargs = _launch_kwargs(t, lens_q, out, lse, (0, hq, hq, 1), causal, log2, num_splits, fresh)
    kwargs.update(k=kp, v=vp, page_table=table, kv_layout=kv_layout)
    if seed == 2:
        kwargs.update(cu_seqlens_k=None, seqused_k=torch.tensor(lens_k, dtype=torch.int32))
    launch_forward(model, **kwargs)
    assert model.splits_seen == [num_splits]
    inside = _inside(t, lens_q)
    _check_out(out, want_o, inside, fresh, num_splits > 1)
    got_l, want_l = lse[inside], want_lse[inside]
    assert torch.equal(torch.isinf(got_l), torch.isinf(want_l))
    fin = ~torch.isinf(want_l)
    assert ((got_l[fin] - want_l[fin]).abs() <= 1e-2).all()
    if not fresh:
        assert torch.isnan(lse[~inside]).all()


@pytest.mark.parametrize("num_splits", [1, 2, 3, 4])
@pytest.mark.parametrize("kv", ["ragged", "paged16"])
@pytest.mark.parametrize("fresh", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_launch_forward_nolse_splits_through_the_sibling(seed, fresh, kv, num_splits, monkeypatch):
    """A class without an LSE: with num_splits > 1 the LSE sibling's kernel (split_compiled) runs
    every split and the class's own kernel is not called; the caller gets out only (lse stays None),
    equal to the reference's; rows outside every sequence of a caller's out keep their NaN. With
    num_splits 1 the class's own kernel runs and the sibling is not called."""
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    causal, seqused, log2 = seed % 2 == 0, seed >= 2, seed == 1
    t, lens_q, lens_k, _, options = _problem(seed, causal, seqused, "token_major", log2)
    total_q, hq, d = t["q"].shape
    want_o, _ = _reference(t, lens_q, options)
    out = torch.full((total_q, hq, d), math.nan, dtype=torch.bfloat16)
    own, sibling = SplitKernelModel(causal, has_lse=False), SplitKernelModel(causal, has_lse=True)
    kwargs = _launch_kwargs(t, lens_q, out, None, (0, 0, 0, 0), causal, log2, num_splits, fresh)
    if kv == "paged16":
        kp, vp, table = _paged(t, lens_k, 16, "NHD", seed)
        kwargs.update(k=kp, v=vp, page_table=table)
    launch_forward(own, **kwargs, split_compiled=sibling)
    if num_splits == 1:
        assert own.splits_seen == [1] and sibling.splits_seen == []
    else:
        assert own.splits_seen == [] and sibling.splits_seen == [num_splits]
    _check_out(out, want_o, _inside(t, lens_q), fresh, num_splits > 1)


def _nolse_call(seed=5, paged=False, decode=True):
    """A no-LSE problem of few decode rows over many keys (or prefill-sized with decode False):
    (problem, tensors, want_o, inside)."""
    from ragged_attn.problem import build_problem
    from ragged_attn.reference import attention_reference

    g = torch.Generator().manual_seed(seed)
    hq, hkv, d = 8, 2, 128
    lens_q = [1, 1] if decode else [700, 1500]
    lens_k = [700, 1500]
    total_q = sum(lens_q) + 1  # the last row is outside both sequences
    q = torch.randn(total_q, hq, d, generator=g).to(torch.bfloat16)
    k = torch.randn(sum(lens_k), hkv, d, generator=g).to(torch.bfloat16)
    v = torch.randn(sum(lens_k), hkv, d, generator=g).to(torch.bfloat16)
    cu_q = torch.tensor([0, lens_q[0], sum(lens_q)], dtype=torch.int32)
    cu_k = torch.tensor([0, 700, 2200], dtype=torch.int32)
    options = dict(causal=True, return_lse=False)
    want_o = attention_reference(q, k, v, cu_q, cu_k, **options)
    inside = torch.zeros(total_q, dtype=torch.bool)
    inside[: sum(lens_q)] = True
    tensors = dict(q=q, k=k, v=v, cu_q=cu_q, cu_k=cu_k, max_q=max(lens_q), lens_k=lens_k)
    if paged:
        kp, vp, table = _paged(dict(k=k, v=v), lens_k, 16, "NHD", seed)
        tensors.update(k=kp, v=vp, table=table)
    return tensors, options, want_o, inside


@pytest.mark.parametrize("paged", [False, True])
def test_launch_cute_nolse_runs_the_sibling(paged, monkeypatch):
    """backends.launch_cute of a no-LSE class that splits fetches the LSE sibling's kernel through
    compile_cache.get_kernel (and only then) and returns (out, None); out matches the reference
    and a caller's out keeps the row outside every sequence. Without a sibling to be had
    (NotImplementedError from compile_cache: no DSL, no prebuilt) the call runs unsplit on the
    class's own kernel."""
    import dataclasses

    from ragged_attn import backends, compile_cache
    from ragged_attn.problem import build_problem

    t, options, want_o, inside = _nolse_call(paged=paged)
    extra = dict(page_table=t["table"], seqused_k=torch.tensor(t["lens_k"], dtype=torch.int32)) if paged else {}
    cu_k = None if paged else t["cu_k"]
    for caller_out in (None, torch.full(t["q"].shape[:2] + (128,), math.nan, dtype=torch.bfloat16)):
        problem, tensors = build_problem(
            t["q"], t["k"], t["v"], t["cu_q"], cu_k, t["max_q"], 1500, out=caller_out, **extra, **options
        )  # fmt: skip
        layout_class = backends.layout_class_for(problem)
        assert not layout_class.lse and layout_class.kv == ("paged" if paged else "ragged")
        sibling_class = dataclasses.replace(layout_class, lse=True)
        own, sibling = SplitKernelModel(True, has_lse=False), SplitKernelModel(True, has_lse=True)
        asked = []

        def get_kernel(cls, compile_fn, **kw):
            asked.append(cls)
            return {layout_class: own, sibling_class: sibling}[cls]

        monkeypatch.setattr(compile_cache, "get_kernel", get_kernel)
        monkeypatch.setattr(backends, "num_splits_for", lambda cls, prob: 3)
        monkeypatch.setattr(launch, "sm_count", lambda device: 132)
        out, lse = backends.launch_cute(layout_class, problem, tensors)
        assert lse is None and asked == [layout_class, sibling_class]
        assert own.splits_seen == [] and sibling.splits_seen == [3]
        _check_out(out, want_o, inside, caller_out is None, True)
        if caller_out is not None:
            assert out is caller_out

    def no_sibling(cls, compile_fn, **kw):
        if cls == sibling_class:
            raise NotImplementedError("no prebuilt kernel for the class and no DSL")
        return own

    monkeypatch.setattr(compile_cache, "get_kernel", no_sibling)
    own.splits_seen.clear()
    out, _ = backends.launch_cute(layout_class, problem, tensors)
    assert own.splits_seen == [1]
    _check_out(out, want_o, inside, False, False)


@pytest.mark.parametrize("seed", range(8))
def test_fast_path_prefilter_is_a_necessary_condition(seed):
    """fast_launch's no-LSE prefilter skips choose_num_splits where min(total_q, B * max_seqlen_q) *
    H_q reaches FILL_FRACTION * tile_m * SMs: no call it skips may split, padded q rows included
    (total_q far above the sequences' rows)."""
    from ragged_attn.kernels.sm90.split_kv import FILL_FRACTION

    rng = random.Random(seed)
    for _ in range(400):
        batch = rng.randint(1, 64)
        max_q = rng.choice([1, 2, 3, 7, 64, 130, 700])
        total_q = rng.choice([batch, batch * max_q, rng.randint(1, 4096), 8192])
        h_kv = rng.choice([1, 2, 4, 8])
        h_q = h_kv * rng.choice([1, 2, 4, 7, 8])
        tile_m, sms = rng.choice([128, 192]), rng.choice([1, 16, 132])
        pack_gqa, pack_rows = rng.random() < 0.5, rng.random() < 0.5
        pairs = min(total_q, batch * max_q) * h_q
        if pairs >= FILL_FRACTION * tile_m * sms:
            got = choose_num_splits(batch, total_q, max_q, 1 << 20, h_q, h_kv, sms, tile_m, 128, pack_gqa, pack_rows)
            assert got == 1, (batch, total_q, max_q, h_q, h_kv, tile_m, sms, pack_gqa, pack_rows)


class _Recorder:
    """A stand-in compiled function that records each call's arguments and writes nothing."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


@pytest.mark.parametrize("q_rows", [3, 2048])
@pytest.mark.parametrize("lse_layout", [None, "token_major", "head_major"])
@pytest.mark.parametrize("kv_layout,with_cu_k", [("NHD", False), ("HND", False), ("NHD", True)])
def test_paged_fast_path_splits_as_the_checked_path(kv_layout, with_cu_k, lse_layout, q_rows, monkeypatch):
    """A paged decode call that split-KV splits (132 SMs; d128 causal, GQA 8/2, page 16): the
    checked path (backends.launch_cute, the problem on a CUDA device) and the paged class's fast
    path (BoundKernel.try_launch) choose the same num_splits (> 1) and pack_rows (1) and call the
    same kernel (the class's own; without an LSE its LSE sibling, the own kernel not at all) with
    the same arguments: the pools as (num_pages, page_size, H_kv, D) views, the page table, cu_k
    or cu_seqlens_q in its slot, the scalars; the workspace's out / lse_flat of the same shapes and
    strides (each path allocates its own). q_rows 2048: q padded past its 2 sequences' rows (as
    for a CUDA graph's fixed batch): total_q * H_q passes a wave of tiles, but those rows make no
    tile, so both paths still split."""
    import dataclasses

    from ragged_attn import backends, compile_cache
    from ragged_attn.fast_launch import BoundKernel
    from ragged_attn.problem import build_problem

    t, _, _, _ = _nolse_call(seed=9, paged=True)
    t["q"] = torch.cat([t["q"], torch.randn(q_rows - 3, *t["q"].shape[1:]).to(t["q"].dtype)])
    kp, vp, table = t["k"], t["v"], t["table"]
    if kv_layout == "HND":
        kp, vp = kp.transpose(1, 2).contiguous(), vp.transpose(1, 2).contiguous()
    used_k = torch.tensor(t["lens_k"], dtype=torch.int32)
    cu_k, seqused_k = (t["cu_k"], None) if with_cu_k else (None, used_k)
    total_q, hq, d = t["q"].shape
    options = dict(causal=True, return_lse=lse_layout is not None, lse_layout=lse_layout or "head_major")
    call = (t["q"], kp, vp, t["cu_q"], cu_k, t["max_q"], 1500)
    lse_shape = (total_q, hq) if lse_layout == "token_major" else (hq, total_q)
    # The checked path: a caller's out (and LSE) so that nothing is allocated on the stand-in device.
    out = torch.full((total_q, hq, d), math.nan, dtype=torch.bfloat16)
    lse = torch.full(lse_shape, math.nan) if lse_layout else None
    problem, tensors = build_problem(
        *call, seqused_k=seqused_k, page_table=table, kv_layout=kv_layout, out=out, lse=lse, **options
    )  # fmt: skip
    layout_class = backends.layout_class_for(problem)
    assert layout_class.kv == "paged" and layout_class.lse == (lse_layout is not None)
    sibling_class = dataclasses.replace(layout_class, lse=True)
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    kernels = {}

    def get_kernel(cls, compile_fn, **kw):
        return kernels.setdefault(cls, _Recorder())

    monkeypatch.setattr(compile_cache, "get_kernel", get_kernel)
    cuda_problem = dataclasses.replace(problem, device=torch.device("cuda", 0))  # num_splits_for's SM count
    assert backends.pack_rows_for(layout_class, cuda_problem)
    want_splits = backends.num_splits_for(layout_class, cuda_problem)
    assert want_splits > 1
    backends.launch_cute(layout_class, cuda_problem, tensors)
    checked, kernels = kernels, {}
    # The fast path: the plan's problem (no out / LSE buffer), the SM count of the same device.
    bound_problem, _ = build_problem(*call, seqused_k=seqused_k, page_table=table, kv_layout=kv_layout, **options)
    bound = BoundKernel(get_kernel(layout_class, None), bound_problem, default_scale=True)
    monkeypatch.setattr(bound, "_num_ctas", 132)
    monkeypatch.setattr(bound, "_split_rows", 0 if bound._split is None else bound._split[4] * 132)
    got = bound.try_launch(t["q"], kp, vp, t["cu_q"], cu_k, t["max_q"], None, seqused_k, table, None, None, 1500)
    assert got is not None, "the fast path declined the paged call"
    runs = sibling_class if lse_layout is None else layout_class
    fetched = {layout_class, sibling_class} if lse_layout is None else {layout_class}
    assert set(checked) == set(kernels) == fetched
    if lse_layout is None:
        assert checked[layout_class].calls == kernels[layout_class].calls == [], "the own kernel ran a split call"
    (want_args,), (got_args,) = checked[runs].calls, kernels[runs].calls
    assert len(want_args) == len(got_args) == len(COMPILED_ARGS)
    assert want_args[POS["num_splits"]] == got_args[POS["num_splits"]] == want_splits
    assert want_args[POS["pack_rows"]] == got_args[POS["pack_rows"]] == 1
    assert got_args[POS["page_table"]] is table
    # Allocated by each path: the workspace's out and lse_flat, the tile counter; lse_scale: the
    # base of a no-LSE call's workspace LSE, merged in that base and dropped (the fast path: log2).
    allocated = {POS["out"], POS["lse_flat"], POS["tile_counter"]}
    if lse_layout is None:
        allocated.add(POS["lse_scale"])
    for name, i in POS.items():
        w, g = want_args[i], got_args[i]
        if isinstance(w, torch.Tensor) or isinstance(g, torch.Tensor):
            assert isinstance(w, torch.Tensor) and isinstance(g, torch.Tensor), name
            assert (w.shape, w.stride(), w.dtype) == (g.shape, g.stride(), g.dtype), name
            if i not in allocated:
                assert w.data_ptr() == g.data_ptr(), name
        elif i not in allocated:
            assert (w == pytest.approx(g)) if isinstance(w, float) else w == g, (name, w, g)


def test_fast_path_nolse_splits_through_the_cached_sibling(monkeypatch):
    """BoundKernel.try_launch of a no-LSE plan: a decode call that choose_num_splits splits runs the
    LSE sibling's kernel, fetched from compile_cache at the first split call only and cached on the
    BoundKernel (not at bind time); it returns out only, equal to the reference, into a buffer it
    makes or the caller's (the row outside every sequence kept). A prefill-sized call, a call
    without max_seqlen_k and one with too few keys run the class's own kernel unsplit without
    touching compile_cache."""
    from ragged_attn import compile_cache
    from ragged_attn.fast_launch import BoundKernel
    from ragged_attn.kernels.sm90 import split_kv
    from ragged_attn.problem import build_problem

    t, options, want_o, inside = _nolse_call()
    problem, _ = build_problem(t["q"], t["k"], t["v"], t["cu_q"], t["cu_k"], 1, 1500, **options)
    own, sibling = SplitKernelModel(True, has_lse=False), SplitKernelModel(True, has_lse=True)
    asked = []

    def get_kernel(cls, compile_fn, **kw):
        asked.append(cls)
        assert cls.lse, "only the LSE sibling is fetched"
        return sibling

    monkeypatch.setattr(compile_cache, "get_kernel", get_kernel)
    bound = BoundKernel(own, problem)
    assert asked == [] and bound._split is not None and bound._split[5].lse
    monkeypatch.setattr(bound, "_num_ctas", 132)
    monkeypatch.setattr(bound, "_split_rows", bound._split[4] * 132)
    hq, hkv = 8, 2
    want = split_kv.choose_num_splits(2, 3, 1, 1500, hq, hkv, 132, *bound._split[:3], bound._split[6])
    assert want > 1
    caller_out = torch.full((3, hq, 128), math.nan, dtype=torch.bfloat16)
    for out in (None, caller_out):
        got = bound.try_launch(t["q"], t["k"], t["v"], t["cu_q"], t["cu_k"], 1, None, None, None, out, None, 1500)
        assert isinstance(got, torch.Tensor), "a no-LSE call returns out only"
        assert sibling.splits_seen[-1] == want and own.splits_seen == []
        _check_out(got, want_o, inside, out is None, True)
    assert len(asked) == 1, "the sibling is fetched once and kept"
    bound.try_launch(t["q"], t["k"], t["v"], t["cu_q"], t["cu_k"], 1, None, None, None, None, None, None)
    bound.try_launch(t["q"], t["k"], t["v"], t["cu_q"], t["cu_k"], 1, None, None, None, None, None, 4 * 128)
    assert own.splits_seen == [1, 1] and len(sibling.splits_seen) == 2
    p, _, want_p, inside_p = _nolse_call(decode=False)
    got = bound.try_launch(p["q"], p["k"], p["v"], p["cu_q"], p["cu_k"], p["max_q"], None, None, None, None, None, 1500)
    assert own.splits_seen == [1, 1, 1] and len(asked) == 1
    _check_out(got, want_p, inside_p, True, False)


# ----------------------------------------------------------------------------- a split launch's out
def _decode_split_call(return_lse):
    """A decode batch that splits on 132 SMs (max_seqlen_k 1500), its problem and a bound kernel
    whose entry is the tests' CPU model of the TVM-FFI entry (and the same model as the no-LSE
    class's sibling)."""
    from ragged_attn.fast_launch import BoundKernel
    from ragged_attn.problem import build_problem
    from tests.test_fast_launch import EntryModel

    g = torch.Generator().manual_seed(11)
    hq, hkv, d = 8, 2, 128
    lens_k = [700, 1500]
    q = torch.randn(3, hq, d, generator=g).to(torch.bfloat16)
    k = torch.randn(sum(lens_k), hkv, d, generator=g).to(torch.bfloat16)
    v = torch.randn(sum(lens_k), hkv, d, generator=g).to(torch.bfloat16)
    cu_q = torch.tensor([0, 1, 2], dtype=torch.int32)
    cu_k = torch.tensor([0, 700, 2200], dtype=torch.int32)
    lse = dict(return_lse=True, lse_layout="token_major") if return_lse else dict(return_lse=False)
    problem, _ = build_problem(q, k, v, cu_q, cu_k, 1, 1500, causal=True, **lse)
    entry, sibling = EntryModel(), EntryModel()
    bound = BoundKernel(entry, problem, True)
    bound._num_ctas = 132
    bound._split_rows = bound._split[4] * 132
    if not return_lse:
        bound._sibling = sibling
    return (q, k, v, cu_q, cu_k), bound, entry, sibling


def _bad_outs(total_q, hq, d):
    buf = torch.full((total_q * hq * d + 4,), math.nan, dtype=torch.bfloat16)
    yield "base 8 bytes off 16", buf[4:].view(total_q, hq, d)
    yield "stride 132", torch.full((total_q, hq, 132), math.nan, dtype=torch.bfloat16)[..., :d]
    yield "last stride 2", torch.full((total_q, hq, 2 * d), math.nan, dtype=torch.bfloat16)[..., ::2]


@pytest.mark.parametrize("return_lse", [True, False])
def test_fast_path_declines_a_split_call_whose_out_the_entry_would_refuse(return_lse):
    """A split launch hands the entry a workspace, not the caller's out, and the merge writes out
    with torch ops that take any layout: an out with a base off 16 bytes, a stride not a multiple of
    8 elements or a non-unit last stride must send the call to the checked path (which names it),
    unwritten, as an unsplit call does."""
    from ragged_attn.problem import build_problem

    (q, k, v, cu_q, cu_k), bound, entry, sibling = _decode_split_call(return_lse)
    ok = bound.try_launch(q, k, v, cu_q, cu_k, 1, None, None, None, None, None, 1500)
    assert ok is not None and (entry.calls or sibling.calls), "the good call must be served"
    ran = (entry if return_lse else sibling).calls
    assert ran[-1][COMPILED_ARGS.index("num_splits")] > 1, "the call must split"
    lse = dict(return_lse=True, lse_layout="token_major") if return_lse else dict(return_lse=False)
    for name, out in _bad_outs(*q.shape):
        with pytest.raises(ValueError, match="out"):
            build_problem(q, k, v, cu_q, cu_k, 1, 1500, causal=True, out=out, **lse)
        before = out.clone()
        assert bound.try_launch(q, k, v, cu_q, cu_k, 1, None, None, None, out, None, 1500) is None, name
        assert torch.equal(out.view(torch.int16), before.view(torch.int16)), f"{name}: out was written"


def test_fast_path_declines_a_split_call_whose_out_overlaps_an_input():
    """An out of last stride 2 whose real span runs into v (the span test counts a unit last
    stride): the call goes to the checked path and v is left as it was."""
    (q, k, v, cu_q, cu_k), bound, entry, sibling = _decode_split_call(True)
    total_q, hq, d = q.shape
    pool = torch.randn(total_q * hq * d * 2 + v.numel(), dtype=torch.bfloat16)
    out = pool[: total_q * hq * d * 2].view(total_q, hq, 2 * d)[..., ::2]
    v2 = pool[total_q * hq * d * 2 - d :][: v.numel()].view(v.shape)  # starts inside out's span
    v_before = v2.clone()
    assert bound.try_launch(q, k, v2, cu_q, cu_k, 1, None, None, None, out, None, 1500) is None
    assert torch.equal(v2, v_before)


def test_fast_path_fetches_no_sibling_for_a_call_of_another_dtype(monkeypatch):
    """A no-LSE call that would split but whose q is of another dtype than the class's is refused
    before the LSE sibling is fetched (or compiled): the checked path names the dtype."""
    from ragged_attn import compile_cache

    (q, k, v, cu_q, cu_k), bound, entry, sibling = _decode_split_call(False)
    bound._sibling = None
    asked = []
    monkeypatch.setattr(compile_cache, "get_kernel", lambda cls, compile_fn: asked.append(cls) or sibling)
    assert bound.try_launch(q.half(), k, v, cu_q, cu_k, 1, None, None, None, None, None, 1500) is None
    assert asked == []


def test_a_sibling_that_cannot_be_had_leaves_the_split_state_readable(monkeypatch):
    """Where the LSE sibling cannot be had, later calls launch unsplit; `_split` stays as it was, so
    a thread already past the split test never reads None."""
    from ragged_attn import compile_cache

    (q, k, v, cu_q, cu_k), bound, entry, sibling = _decode_split_call(False)
    bound._sibling = None
    split = bound._split

    def missing(cls, compile_fn):
        raise NotImplementedError("no DSL and no prebuilt sibling")

    monkeypatch.setattr(compile_cache, "get_kernel", missing)
    out = bound.try_launch(q, k, v, cu_q, cu_k, 1, None, None, None, None, None, 1500)
    assert out is not None and entry.calls[-1][COMPILED_ARGS.index("num_splits")] == 1
    assert bound._split is split and bound._split_rows == 0
    out = bound.try_launch(q, k, v, cu_q, cu_k, 1, None, None, None, None, None, 1500)
    assert out is not None and entry.calls[-1][COMPILED_ARGS.index("num_splits")] == 1


def test_fast_path_passes_a_one_head_sinks_tensor_as_the_checked_path_does(monkeypatch):
    """H_q = 1 and a sinks tensor of stride 3: both paths pass a stride-1 view of the same element
    (backends._unit_stride)."""
    from ragged_attn import backends, compile_cache
    from ragged_attn.fast_launch import BoundKernel
    from ragged_attn.problem import build_problem

    g = torch.Generator().manual_seed(0)
    q = torch.randn(5, 1, 64, generator=g).to(torch.bfloat16)
    k = torch.randn(9, 1, 64, generator=g).to(torch.bfloat16)
    v = torch.randn(9, 1, 64, generator=g).to(torch.bfloat16)
    cu_q = torch.tensor([0, 2, 5], dtype=torch.int32)
    cu_k = torch.tensor([0, 4, 9], dtype=torch.int32)
    sinks = torch.tensor([0.5, 9.0, 9.0, 9.0]).as_strided((1,), (3,), 1)
    problem, t = build_problem(q, k, v, cu_q, cu_k, 3, 5, causal=True, sinks=sinks)
    checked, fast = [], []
    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    monkeypatch.setattr(compile_cache, "get_kernel", lambda cls, fn, **kw: (lambda *a: checked.append(a)))
    backends.launch_cute(backends.layout_class_for(problem), problem, t)
    bound = BoundKernel(lambda *a: fast.append(a), problem, True)
    assert bound.try_launch(q, k, v, cu_q, cu_k, 3, None, None, None, None, None, 5, sinks) is not None
    i = len(COMPILED_ARGS)
    for args in (checked[0], fast[0]):
        assert args[i].stride() == (1,) and args[i].data_ptr() == sinks.data_ptr()


# ----------------------------------------------------------------------------- split_kv=False (batch invariance)
def _decode_problem(split_kv: bool, **options):
    from ragged_attn.problem import build_problem

    g = torch.Generator().manual_seed(21)
    hq, hkv, d = 8, 2, 128
    q = torch.randn(2, hq, d, generator=g).to(torch.bfloat16)
    k = torch.randn(2200, hkv, d, generator=g).to(torch.bfloat16)
    v = torch.randn(2200, hkv, d, generator=g).to(torch.bfloat16)
    cu_q = torch.tensor([0, 1, 2], dtype=torch.int32)
    cu_k = torch.tensor([0, 700, 2200], dtype=torch.int32)
    opts = dict(causal=True, return_lse=True, lse_layout="token_major", split_kv=split_kv, **options)
    problem, _ = build_problem(q, k, v, cu_q, cu_k, 1, 1500, **opts)
    return problem, (q, k, v, cu_q, cu_k), opts


def test_split_kv_off_makes_the_checked_launch_unsplit(monkeypatch):
    """backends.num_splits_for: the decode batch splits on 132 SMs by default and not with
    split_kv=False (the problem's other fields equal)."""
    import dataclasses

    from ragged_attn import backends

    monkeypatch.setattr(launch, "sm_count", lambda device: 132)
    counts = {}
    for split_kv in (True, False):
        problem, _, _ = _decode_problem(split_kv)
        problem = dataclasses.replace(problem, device=torch.device("cuda", 0))  # num_splits_for's GPU branch
        counts[split_kv] = backends.num_splits_for(backends.layout_class_for(problem), problem)
    assert counts[True] > 1 and counts[False] == 1


def test_split_kv_off_makes_the_fast_path_unsplit(monkeypatch):
    """The bound fast path of a split_kv=False problem never splits (no split state at all), where
    the same call with the default splits (test_fast_path_splits_decode_rows_and_merges)."""
    from ragged_attn.fast_launch import BoundKernel
    from ragged_attn.reference import attention_reference

    results = {}
    for split_kv in (True, False):
        problem, (q, k, v, cu_q, cu_k), opts = _decode_problem(split_kv)
        model = SplitKernelModel(causal=True)
        bound = BoundKernel(model, problem)
        monkeypatch.setattr(bound, "_num_ctas", 132)
        results[split_kv] = bound.try_launch(q, k, v, cu_q, cu_k, 1, None, None, None, None, None, 1500)
        assert (model.splits_seen[-1] > 1) is split_kv
        assert (bound._split is None) is not split_kv
    want_o, _ = attention_reference(q, k, v, cu_q, cu_k, **opts)
    err = (results[False][0].float() - want_o.float()).abs()
    assert (err <= 2e-2 + 2e-2 * want_o.float().abs()).all()


def test_split_kv_is_a_checked_bool_on_every_entry():
    import ragged_attn
    from ragged_attn.torch_op import attention_op

    _, (q, k, v, cu_q, cu_k), _ = _decode_problem(True)
    want = ragged_attn.attention(q, k, v, cu_q, cu_k, 1, 1500, causal=True)
    for call in (ragged_attn.attention, attention_op):
        assert torch.equal(call(q, k, v, cu_q, cu_k, 1, 1500, causal=True, split_kv=False), want)
        with pytest.raises(TypeError, match="^split_kv: expected a bool, got int"):
            call(q, k, v, cu_q, cu_k, 1, 1500, causal=True, split_kv=1)
    plan = ragged_attn.plan(q, k, v, cu_q, cu_k, 1, 1500, causal=True, split_kv=False)
    assert torch.equal(plan.run(q, k, v, cu_q, cu_k, 1, 1500), want)


@pytest.mark.parametrize("num_splits,split_kv", [(None, True), (1, False), (0, True), (4, True), (True, True)])
def test_torch_varlen_num_splits_one_runs_unsplit(num_splits, split_kv, monkeypatch):
    """torch's varlen_attn(num_splits=1) (FlashAttention 3's "no split") -> attention(split_kv=False);
    None and other counts leave the choice to the library (a bool is not a count)."""
    from ragged_attn.compat import torch_varlen

    seen = {}

    def fake_attention(*args, **kwargs):
        seen.update(kwargs)
        return args[0]

    monkeypatch.setattr(torch_varlen, "attention", fake_attention)
    _, (q, k, v, cu_q, cu_k), _ = _decode_problem(True)
    torch_varlen.varlen_attn(q, k, v, cu_q, cu_k, 1, 1500, enable_gqa=True, num_splits=num_splits)
    assert seen["split_kv"] is split_kv
