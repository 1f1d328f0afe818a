"""GPU tests of the sm_90a forward kernel against a float32 per-sequence PyTorch reference.

Every case poisons out/LSE with NaN, draws fresh random inputs, launches under
`torch.cuda.set_sync_debug_mode("error")`, and checks |out - ref| <= 2e-2 + 2e-2 |ref|, LSE within
1e-2 (in its base), -inf for empty rows and padded LSE rows, and that rows outside every used
sequence range stay untouched. Kernels come from `compile_forward` once per layout class (or from
objects exported by tools/prebuild_sm90.py when RAGGED_ATTN_SM90_PREBUILT names their folder).
"""

from __future__ import annotations

import math
import os
import random
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (sm_90a)"),
]

from ragged_attn.layout_class import LayoutClass, head_dim_class  # noqa: E402

_COMPILED: dict = {}
COMPILES: Counter = Counter()
TORCH_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}


def compiled_for(lc: LayoutClass):
    if lc not in _COMPILED:
        COMPILES[lc] += 1
        prebuilt = os.environ.get("RAGGED_ATTN_SM90_PREBUILT", "")
        path = os.path.join(prebuilt, lc.name + ".o")
        if prebuilt and os.path.exists(path):
            import cutlass.cute as cute

            _COMPILED[lc] = getattr(cute.runtime.load_module(path, enable_tvm_ffi=True), "fwd")
        else:
            from ragged_attn.kernels.sm90 import compile_forward

            _COMPILED[lc] = compile_forward(lc)
    return _COMPILED[lc]


def compiled_tail_for(lc: LayoutClass):
    """The class built with TileConfig.tail_split (kernels/sm90/tail_split.py; no class ships with
    it): RAGGED_ATTN_SM90_PREBUILT/tail/<class>.o (tools/prebuild_sm90.py --config tail_split=1)
    where present, else compiled here. Returns (function, config)."""
    import dataclasses

    from ragged_attn.kernels.sm90.tile_config import tile_config

    cfg = dataclasses.replace(tile_config(lc), tail_split=True)
    key = (lc, "tail")
    if key not in _COMPILED:
        COMPILES[key] += 1
        prebuilt = os.environ.get("RAGGED_ATTN_SM90_PREBUILT", "")
        path = os.path.join(prebuilt, "tail", lc.name + ".o")
        if prebuilt and os.path.exists(path):
            import cutlass.cute as cute

            _COMPILED[key] = getattr(cute.runtime.load_module(path, enable_tvm_ffi=True), "fwd")
        else:
            from ragged_attn.kernels.sm90 import compile_forward

            _COMPILED[key] = compile_forward(lc, config=cfg)
    return _COMPILED[key], cfg


# ----------------------------------------------------------------------------- reference
def reference(q, k, v, starts_q, lens_q, starts_k, lens_k, scale, mask, left, right, bottom_right):
    """Per-sequence float32 attention. Returns out (total_q, H, dv) fp32 (NaN outside sequences)
    and natural-log LSE (total_q, H) (NaN outside sequences, -inf for rows that see no key)."""
    total_q, hq, _ = q.shape
    hkv = k.shape[1]
    out = torch.full((total_q, hq, v.shape[2]), float("nan"), device=q.device)
    lse = torch.full((total_q, hq), float("nan"), device=q.device)
    for sq, lq, sk, lk in zip(starts_q, lens_q, starts_k, lens_k):
        if lq == 0:
            continue
        qs = q[sq : sq + lq].float().transpose(0, 1)  # (H, lq, d)
        ks = k[sk : sk + lk].float().repeat_interleave(hq // hkv, dim=1).transpose(0, 1)
        vs = v[sk : sk + lk].float().repeat_interleave(hq // hkv, dim=1).transpose(0, 1)
        s = torch.matmul(qs, ks.transpose(1, 2)) * scale  # (H, lq, lk)
        i = torch.arange(lq, device=q.device)[:, None]
        j = torch.arange(lk, device=q.device)[None, :]
        off = (lk - lq) if bottom_right else 0
        allowed = torch.ones(lq, lk, dtype=torch.bool, device=q.device)
        if mask == "causal":
            allowed &= j <= i + off
        elif mask == "window":
            if left >= 0:
                allowed &= j >= i + off - left
            if right >= 0:
                allowed &= j <= i + off + right
        s = s.masked_fill(~allowed, float("-inf"))
        row_lse = torch.logsumexp(s, dim=-1) if lk > 0 else torch.full((hq, lq), float("-inf"), device=q.device)
        p = torch.exp(s - row_lse[..., None]).nan_to_num(0.0) if lk > 0 else s.new_zeros(hq, lq, 0)
        o = torch.matmul(p, vs) if lk > 0 else torch.zeros(hq, lq, v.shape[2], device=q.device)
        out[sq : sq + lq] = o.transpose(0, 1)
        lse[sq : sq + lq] = row_lse.transpose(0, 1)
    return out, lse


# ----------------------------------------------------------------------------- one case
def run_case(c: dict, lc_cache=None):
    from ragged_attn.kernels.sm90 import launch_forward

    dev = "cuda"
    g = torch.Generator(device="cpu").manual_seed(c.get("seed", 0))
    lens_q, lens_k = c["lens_q"], c["lens_k"]
    B = len(lens_q)
    hq, hkv, d = c["hq"], c["hkv"], c["d"]
    dv = c.get("dv", d)
    lc = layout_class_of_case(c)
    dt = TORCH_DTYPE[c["dtype"]]
    mask = c["mask"]
    lse_layout = c.get("lse", "token")  # none/token/head/padded
    seqused = c.get("seqused", False)
    # Slots: with seqused the cu_seqlens gaps are longer than the used lengths.
    extra_q = [random.Random(c.get("seed", 0) + 7 * i).randint(0, 5) if seqused else 0 for i in range(B)]
    extra_k = [random.Random(c.get("seed", 0) + 11 * i).randint(0, 9) if seqused else 0 for i in range(B)]
    slots_q = [a + b for a, b in zip(lens_q, extra_q)]
    slots_k = [a + b for a, b in zip(lens_k, extra_k)]
    cu_q = [0]
    for n in slots_q:
        cu_q.append(cu_q[-1] + n)
    cu_k = [0]
    for n in slots_k:
        cu_k.append(cu_k[-1] + n)
    total_q, total_k = cu_q[-1], cu_k[-1]
    pad = c.get("pad_stride", 0)  # extra elements after each head row: non-compact strides

    def rand(n, h, dd):
        buf = torch.randn(max(n, 1), h, dd + pad, generator=g).to(dt).to(dev)
        return buf[:n, :, :dd]

    q, k, v = rand(total_q, hq, d), rand(total_k, hkv, d), rand(total_k, hkv, dv)
    # An envelope (real d_v < the class's) writes into a NaN-poisoned buffer wide enough for every
    # column the class could touch, then checks the columns past d_v stayed NaN.
    out_pad = c.get("out_pad", lc.d_v - dv + 8 if lc.d_v != dv else 0)
    out_dt = TORCH_DTYPE[c["dtype"]]  # a class's output dtype is its input dtype (LayoutClass refuses others)
    out_buf = torch.full((max(total_q, 1), hq, dv + out_pad), float("nan"), dtype=out_dt, device=dev)[:total_q]
    out = out_buf[:, :, :dv]
    cu_q_t = torch.tensor(cu_q, dtype=torch.int32, device=dev)
    cu_k_t = torch.tensor(cu_k, dtype=torch.int32, device=dev)
    su_q = torch.tensor(lens_q, dtype=torch.int32, device=dev) if seqused else None
    su_k = torch.tensor(lens_k, dtype=torch.int32, device=dev) if seqused else None
    scale = c.get("scale", 1.0 / math.sqrt(d))
    log2_base = c.get("log2", False)
    s_max = 0
    lse = None
    strides = (0, 0, 0, 0)
    if lse_layout == "token":
        lse = torch.full((max(total_q, 1), hq), float("nan"), device=dev)[:total_q]
        strides = (0, hq, hq, 1)
    elif lse_layout == "head":
        lse = torch.full((hq, max(total_q, 1)), float("nan"), device=dev)
        strides = (0, 1, 1, lse.stride(0))
    elif lse_layout == "padded":
        s_max = max(lens_q + [0]) + c.get("s_extra", 3)
        order = c.get("order", (0, 2, 1))  # physical order of logical axes (B, H, S)
        phys_shape = [(B, hq, s_max)[a] for a in order]
        buf = torch.full(phys_shape, float("nan"), device=dev)
        lse = buf.permute([order.index(a) for a in range(3)])  # logical (B, H, S) view
        strides = (lse.stride(0), 0, lse.stride(2), lse.stride(1))
    extra = {}
    if "tail" in c:  # the tail split: c["tail"] = (tail_tiles, pieces) forced, or "auto" (the rules)
        from ragged_attn.kernels.sm90.tail_split import tail_class

        fn, cfg = compiled_tail_for(lc)
        force = None if c["tail"] == "auto" else tuple(c["tail"])
        extra = dict(tail=tail_class(lc, cfg, force), max_seqlen_k=max(lens_k + [0]))
    else:
        fn = compiled_for(lc)
    max_seqlen_q = max(lens_q + [0]) + c.get("msq_extra", 0)
    left, right = c.get("left", -1), c.get("right", -1)
    torch.cuda.set_sync_debug_mode("error")
    try:
        launch_forward(
            fn, q=q, k=k, v=v, out=out, lse=lse, cu_seqlens_q=cu_q_t, cu_seqlens_k=cu_k_t,
            seqused_q=su_q, seqused_k=su_k, batch=B, max_seqlen_q=max_seqlen_q, lse_s_max=s_max,
            softmax_scale=scale, window_left=left, window_right=right,
            bottom_right=c.get("bottom_right", True), lse_strides=strides, lse_base_is_log2=log2_base,
            num_splits=c.get("num_splits", 1), pack_rows=c.get("pack_rows"), **extra,
        )
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    ref_o, ref_lse = reference(
        q, k, v, cu_q[:-1], lens_q, cu_k[:-1], lens_k, scale, mask, left, right, c.get("bottom_right", True)
    )
    check(out, lse, ref_o, ref_lse, lse_layout, cu_q, lens_q, s_max, log2_base, B, hq)
    if out_pad:
        assert torch.isnan(out_buf[:, :, dv:].float()).all(), f"an output column past d_v = {dv} was written"


def layout_class_of_case(c: dict) -> LayoutClass:
    """The class a case runs: `cls` (d_qk, d_v) when given, else the one head_dim_class picks."""
    d, dv = c["d"], c.get("dv", c["d"])
    dims = c.get("cls") or head_dim_class(d, dv)
    assert dims is not None and d <= dims[0] and dv <= dims[1], (d, dv, dims)
    lse = c.get("lse", "token") != "none"
    return LayoutClass("sm_90a", dims[0], dims[1], c["dtype"], c["dtype"], c["mask"], lse, "ragged")


def check(out, lse, ref_o, ref_lse, lse_layout, cu_q, lens_q, s_max, log2_base, B, hq):
    valid = ~torch.isnan(ref_o[:, 0, 0]) if ref_o.shape[0] else torch.zeros(0, dtype=torch.bool)
    o = out.float()
    assert not torch.isnan(o[valid]).any(), "NaN in a valid output row"
    err = (o[valid] - ref_o[valid]).abs()
    tol = 2e-2 + 2e-2 * ref_o[valid].abs()
    assert (err <= tol).all(), f"out mismatch: max err {err.max().item():.4g}"
    assert torch.isnan(o[~valid]).all(), "a row outside every used sequence was written"
    if lse is None:
        return
    base = 1.0 / math.log(2.0) if log2_base else 1.0
    want = ref_lse * base  # (total_q, H)
    if lse_layout == "token":
        got = lse
    elif lse_layout == "head":
        got = lse[:, : want.shape[0]].transpose(0, 1)
    else:
        got = torch.full_like(want, float("nan"))
        for b in range(B):
            n = lens_q[b]
            got[cu_q[b] : cu_q[b] + n] = lse[b, :, :n].transpose(0, 1)
            tail = lse[b, :, n:s_max]
            assert torch.isneginf(tail).all(), f"padded LSE rows past len_q of sequence {b} are not -inf"
    gv, wv = got[valid], want[valid]
    assert not torch.isnan(gv).any(), "NaN in a valid LSE entry"
    inf_w = torch.isinf(wv)
    assert torch.equal(torch.isinf(gv), inf_w), "LSE -inf pattern differs from the reference"
    lerr = (gv[~inf_w] - wv[~inf_w]).abs()
    assert lerr.numel() == 0 or lerr.max().item() <= 1e-2, f"LSE mismatch: max err {lerr.max().item():.4g}"
    if lse_layout != "padded":
        assert torch.isnan(got[~valid]).all(), "an LSE entry outside every used sequence was written"


# ----------------------------------------------------------------------------- cases
def _random_case(i: int) -> dict:
    r = random.Random(1000 + i)
    d = r.choice([64, 128])
    hkv = r.choice([1, 2, 4, 8])
    ratio = r.choice([1, 2, 3, 4, 5, 6, 7, 8])
    while hkv * ratio > 64:
        hkv //= 2
    hkv = max(hkv, 1)
    B = r.choice([1, 2, 3, 5, 8])
    maxlen = r.choice([16, 130, 300, 600])
    lens_q = [r.randint(0, maxlen) for _ in range(B)]
    mask = r.choice(["none", "causal", "causal_tl", "window"])
    same = r.random() < 0.4
    lens_k = list(lens_q) if same else [r.randint(0, maxlen) for _ in range(B)]
    c = dict(
        seed=i, lens_q=lens_q, lens_k=lens_k, hq=hkv * ratio, hkv=hkv, d=d,
        dtype="fp16" if r.random() < 0.25 else "bf16",
        mask="causal" if mask == "causal_tl" else mask, bottom_right=mask != "causal_tl",
        lse=r.choice(["token", "head", "padded"]), log2=r.random() < 0.3,
        seqused=r.random() < 0.2, pad_stride=r.choice([0, 0, 8]),
    )
    if c["lse"] == "padded":
        c["order"] = r.choice([(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)])
    if mask == "window":
        c["left"] = r.choice([-1, 0, 17, 64, 200])
        c["right"] = r.choice([-1, 0, 5, 128])
        c["bottom_right"] = r.random() < 0.5
    return c


def _cid(c):
    return (
        f"B{len(c['lens_q'])}-h{c['hq']}x{c['hkv']}-d{c['d']}-{c['dtype']}-{c['mask']}"
        f"{'' if c.get('bottom_right', True) else 'TL'}-lse_{c.get('lse', 'token')}"
    )


RANDOM_CASES = [_random_case(i) for i in range(220)]


@pytest.mark.parametrize("case", RANDOM_CASES, ids=[f"r{i}-{_cid(c)}" for i, c in enumerate(RANDOM_CASES)])
def test_random(case):
    run_case(case)


def _base(**kw):
    c = dict(seed=5, hq=8, hkv=2, d=128, dtype="bf16", mask="causal", lse="token")
    c.update(kw)
    return c


NAMED = {
    "empty_first_middle_last": _base(lens_q=[0, 70, 0, 129, 0], lens_k=[0, 90, 33, 129, 5]),
    "empty_k_rows_zero": _base(lens_q=[5, 64, 3], lens_k=[0, 0, 7], mask="none", lse="padded"),
    "total_q_lt_batch": _base(lens_q=[0, 1, 0, 0, 2, 0, 0, 0], lens_k=[3, 4, 0, 9, 5, 1, 2, 3]),
    "causal_q_gt_k_br": _base(lens_q=[300, 130], lens_k=[100, 7], lse="padded"),
    "causal_q_gt_k_tl": _base(lens_q=[300, 130], lens_k=[100, 7], bottom_right=False),
    "window_333_q300_k4096": _base(lens_q=[300], lens_k=[4096], mask="window", left=333, right=-1, hq=4, hkv=4),
    "window_333_q300_k4096_tl": _base(lens_q=[300], lens_k=[4096], mask="window", left=333, right=-1, bottom_right=False),
    "kv_not_tile_multiple": _base(lens_q=[129, 255], lens_k=[257, 383], mask="none", d=64),
    "single_query_rows": _base(lens_q=[1, 1, 1, 1], lens_k=[1, 500, 129, 0], lse="head"),
    "single_query_window": _base(lens_q=[1, 1], lens_k=[700, 64], mask="window", left=10, right=0),
    "window_both_sides": _base(lens_q=[400], lens_k=[400], mask="window", left=50, right=70, d=64),
    "window_misses_all": _base(lens_q=[10], lens_k=[500], mask="window", left=0, right=0, bottom_right=False, lse="padded"),
    "h64_ratio8_long": _base(lens_q=[600, 590], lens_k=[600, 1000], hq=64, hkv=8),
    "no_lse_causal": _base(lens_q=[200, 31], lens_k=[250, 40], lse="none"),
    "no_lse_none": _base(lens_q=[200, 31], lens_k=[250, 40], lse="none", mask="none", d=64),
    "seqused_padded_lse": _base(lens_q=[50, 0, 140], lens_k=[60, 10, 0], seqused=True, lse="padded"),
    "grid_upper_bound": _base(lens_q=[10, 200], lens_k=[30, 200], msq_extra=300, lse="padded", s_extra=0),
    "padded_smax_beyond_grid": _base(lens_q=[10, 20], lens_k=[30, 200], lse="padded", s_extra=400),
    "log2_base": _base(lens_q=[100], lens_k=[300], log2=True, lse="head"),
    "scale_large": _base(lens_q=[100], lens_k=[300], scale=0.5, mask="none"),
    # Tiles whose last MMA warpgroups hold no rows (1, 65, 130 or 191 of a 128- or 192-row tile)
    # over many key blocks: those warpgroups only release stages and pass turns (forward.py
    # mainloop_idle).
    "idle_warpgroups_d64": _base(lens_q=[1, 65, 130, 191, 193], lens_k=[900, 1000, 700, 640, 193], d=64),
    "idle_warpgroups_d64_none": _base(lens_q=[1, 65, 130, 191], lens_k=[900, 1000, 700, 640], d=64, mask="none"),
    "idle_warpgroups_d32": _base(lens_q=[3, 70, 129, 190], lens_k=[1200, 800, 700, 190], d=32, lse="padded"),
    "idle_warpgroups_d128": _base(lens_q=[2, 63, 64, 65, 127], lens_k=[1500, 900, 640, 513, 127], hq=16, hkv=4),
    # Persistent CTAs (one per SM) taking tens of tiles each from the tile counter, with empty
    # sequences, tiles without rows (padded LSE) and the static stride of the paged class's twin.
    "many_tiles_per_cta": _base(lens_q=[(i * 37) % 300 for i in range(200)],
                                lens_k=[(i * 53) % 400 for i in range(200)], hq=16, hkv=4),
    "many_tiles_padded_lse": _base(lens_q=[(i * 53) % 260 for i in range(150)],
                                   lens_k=[(i * 53) % 260 for i in range(150)], hq=8, hkv=8, lse="padded",
                                   s_extra=200),
    "many_tiles_window_seqused": _base(lens_q=[(i * 29) % 200 for i in range(120)],
                                       lens_k=[(i * 31) % 700 for i in range(120)], hq=12, hkv=3,
                                       mask="window", left=90, right=10, seqused=True, lse="head"),
}


@pytest.mark.parametrize("name", list(NAMED))
def test_named(name):
    run_case(NAMED[name])


# ----------------------------------------------------------------------------- head-dim classes
# (d_qk, d_v, class or None = head_dim_class's pick): every class, and envelopes into each.
HEAD_DIMS = [
    (8, 8, None),  # -> (32, 32)
    (32, 32, None),
    (32, 32, (64, 64)),  # d32 through the d64 envelope (the alternative to its own class)
    (40, 40, None),  # -> (64, 64)
    (96, 96, None),
    (80, 80, None),  # -> (96, 96)
    (112, 112, None),  # -> (128, 128)
    (192, 128, None),
    (160, 96, None),  # -> (192, 128)
    (256, 256, None),
    (200, 136, None),  # -> (256, 256)
]

# Feature mixes run on every head dim: GQA, empty sequences, key lengths off every tile size
# (80, 128), each mask family and alignment, each LSE layout, seqused, fp16 without LSE.
HD_SCENARIOS = {
    "causal_gqa_empty": dict(lens_q=[0, 70, 0, 129, 3], lens_k=[0, 90, 33, 261, 5], hq=8, hkv=2, lse="token"),
    "none_kvtail_padded": dict(lens_q=[129, 255], lens_k=[257, 383], hq=4, hkv=4, mask="none", lse="padded"),
    "window_seqused_head": dict(
        lens_q=[300, 1], lens_k=[500, 700], hq=6, hkv=3, mask="window", left=100, right=20, seqused=True,
        lse="head",
    ),
    "causal_tl_fp16_nolse": dict(lens_q=[200, 31], lens_k=[250, 40], hq=4, hkv=1, bottom_right=False,
                                 dtype="fp16", lse="none"),
}


def _hd_case(dims, scenario):
    d, dv, cls = dims
    c = dict(seed=17, dtype="bf16", mask="causal", d=d, dv=dv, cls=cls)
    c.update(HD_SCENARIOS[scenario])
    return c


def _hd_id(dims):
    d, dv, cls = dims
    return f"d{d}x{dv}" + (f"-in{cls[0]}x{cls[1]}" if cls else "")


@pytest.mark.parametrize("scenario", list(HD_SCENARIOS))
@pytest.mark.parametrize("dims", HEAD_DIMS, ids=_hd_id)
def test_head_dims(dims, scenario):
    run_case(_hd_case(dims, scenario))


def _random_hd_case(i: int) -> dict:
    """Random shapes over every head-dim class and envelope (bf16, LSE on: 3 classes per dims)."""
    r = random.Random(5000 + i)
    d, dv, cls = HEAD_DIMS[i % len(HEAD_DIMS)]
    hkv = r.choice([1, 2, 4])
    B = r.choice([1, 2, 3, 5])
    maxlen = r.choice([16, 81, 200, 450])
    lens_q = [r.randint(0, maxlen) for _ in range(B)]
    lens_k = list(lens_q) if r.random() < 0.4 else [r.randint(0, maxlen) for _ in range(B)]
    mask = r.choice(["none", "causal", "causal_tl", "window"])
    c = dict(
        seed=i, lens_q=lens_q, lens_k=lens_k, hq=hkv * r.choice([1, 2, 3, 4]), hkv=hkv, d=d, dv=dv, cls=cls,
        dtype="bf16", mask="causal" if mask == "causal_tl" else mask, bottom_right=mask != "causal_tl",
        lse=r.choice(["token", "head", "padded"]), log2=r.random() < 0.3, seqused=r.random() < 0.2,
        pad_stride=r.choice([0, 8]),
    )
    gap = (cls or head_dim_class(d, dv))[1] - dv  # columns the class could touch past d_v
    c["out_pad"] = r.choice([gap, gap + 8, 264 - dv]) if gap else r.choice([0, 8, 264 - dv])
    if mask == "window":
        c["left"] = r.choice([-1, 0, 17, 100])
        c["right"] = r.choice([-1, 0, 5, 90])
        c["bottom_right"] = r.random() < 0.5
    return c


RANDOM_HD_CASES = [_random_hd_case(i) for i in range(44)]


@pytest.mark.parametrize(
    "case",
    RANDOM_HD_CASES,
    ids=[f"rh{i}-{_hd_id((c['d'], c['dv'], c['cls']))}-{c['mask']}" for i, c in enumerate(RANDOM_HD_CASES)],
)
def test_random_head_dims(case):
    run_case(case)


def all_cases() -> list[dict]:
    """Every case of this module with its own class (tools/prebuild_sm90.py builds their classes)."""
    hd = [_hd_case(dims, sc) for dims in HEAD_DIMS for sc in HD_SCENARIOS]
    return RANDOM_CASES + list(NAMED.values()) + hd + RANDOM_HD_CASES


def test_one_compile_across_shapes():
    lc = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, "ragged")
    before = COMPILES[lc]
    r = random.Random(3)
    for i in range(12):
        B = r.randint(1, 6)
        hkv = r.choice([1, 2, 4])
        c = _base(
            seed=100 + i, lens_q=[r.randint(0, 400) for _ in range(B)],
            lens_k=[r.randint(0, 400) for _ in range(B)], hkv=hkv, hq=hkv * r.randint(1, 6),
            lse=r.choice(["token", "head", "padded"]), pad_stride=r.choice([0, 8]),
        )
        run_case(c)
    assert COMPILES[lc] - before <= 1 and COMPILES[lc] == 1, f"compiled {COMPILES[lc]} times"


def test_cuda_graph_replay_new_lengths():
    from ragged_attn.kernels.sm90 import launch_forward

    lc = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, "ragged")
    fn = compiled_for(lc)
    dev, hq, hkv, d, B, cap_q, cap_k = "cuda", 8, 2, 128, 3, 600, 900
    q = torch.randn(cap_q, hq, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(cap_k, hkv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(cap_k, hkv, d, device=dev, dtype=torch.bfloat16)
    out = torch.full((cap_q, hq, d), float("nan"), device=dev, dtype=torch.bfloat16)
    lse = torch.full((cap_q, hq), float("nan"), device=dev)
    cu_q = torch.tensor([0, 100, 250, 300], dtype=torch.int32, device=dev)
    cu_k = torch.tensor([0, 150, 300, 420], dtype=torch.int32, device=dev)
    kw = dict(
        q=q, k=k, v=v, out=out, lse=lse, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, seqused_q=None,
        seqused_k=None, batch=B, max_seqlen_q=cap_q, lse_s_max=0, softmax_scale=d**-0.5,
        window_left=-1, window_right=-1, bottom_right=True, lse_strides=(0, hq, hq, 1),
    )
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        launch_forward(fn, **kw)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch_forward(fn, **kw)
    for lens_q, lens_k in (([100, 150, 50], [150, 150, 120]), ([0, 599, 1], [7, 880, 13]), ([200, 0, 200], [1, 5, 800])):
        new_q = [0]
        for n in lens_q:
            new_q.append(new_q[-1] + n)
        new_k = [0]
        for n in lens_k:
            new_k.append(new_k[-1] + n)
        cu_q.copy_(torch.tensor(new_q, dtype=torch.int32))
        cu_k.copy_(torch.tensor(new_k, dtype=torch.int32))
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        q.normal_()
        graph.replay()
        torch.cuda.synchronize()
        ref_o, ref_lse = reference(
            q[: new_q[-1]], k, v, new_q[:-1], lens_q, new_k[:-1], lens_k, d**-0.5, "causal", -1, -1, True
        )
        tq = new_q[-1]
        check(out[:tq], lse[:tq], ref_o, ref_lse, "token", new_q, lens_q, 0, False, B, hq)


def test_streams_side_by_side_and_tile_counter_left_zero():
    """Launches on two streams at once (each stream its own tile counter), tile counts changing from
    launch to launch: every result right, and each counter back at 0 afterwards."""
    from ragged_attn.kernels.sm90 import launch_forward, tile_counter

    lc = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, "ragged")
    fn = compiled_for(lc)
    dev, hq, hkv, d = "cuda", 16, 4, 128
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    jobs = []
    for i, stream in enumerate(streams):
        for rep in range(3):
            lens = [(j * (31 + 7 * i) + 11 * rep) % (200 + 150 * rep) for j in range(40 + 30 * i)]
            cu = [0]
            for n in lens:
                cu.append(cu[-1] + n)
            total = cu[-1]
            q = torch.randn(total, hq, d, device=dev, dtype=torch.bfloat16)
            k = torch.randn(total, hkv, d, device=dev, dtype=torch.bfloat16)
            v = torch.randn(total, hkv, d, device=dev, dtype=torch.bfloat16)
            out = torch.full((total, hq, d), float("nan"), device=dev, dtype=torch.bfloat16)
            lse = torch.full((total, hq), float("nan"), device=dev)
            cu_t = torch.tensor(cu, dtype=torch.int32, device=dev)
            jobs.append((stream, lens, cu, q, k, v, out, lse, cu_t))
    torch.cuda.synchronize()
    for rep in range(3):  # interleave: both streams busy at once
        for stream, lens, cu, q, k, v, out, lse, cu_t in (jobs[rep], jobs[3 + rep]):
            with torch.cuda.stream(stream):
                launch_forward(
                    fn, q=q, k=k, v=v, out=out, lse=lse, cu_seqlens_q=cu_t, cu_seqlens_k=cu_t, seqused_q=None,
                    seqused_k=None, batch=len(lens), max_seqlen_q=max(lens), lse_s_max=0, softmax_scale=d**-0.5,
                    window_left=-1, window_right=-1, bottom_right=True, lse_strides=(0, hq, hq, 1),
                )
    torch.cuda.synchronize()
    for stream, lens, cu, q, k, v, out, lse, cu_t in jobs:
        ref_o, ref_lse = reference(q, k, v, cu[:-1], lens, cu[:-1], lens, d**-0.5, "causal", -1, -1, True)
        check(out, lse, ref_o, ref_lse, "token", cu, lens, 0, False, len(lens), hq)
        with torch.cuda.stream(stream):
            assert tile_counter(q).item() == 0, "a launch left its stream's tile counter non-zero"
