"""GPU tests of row packing (tile_scheduler.py, TileConfig.pack_rows: a unit is one K/V head of a
sequence, its g = H_q / H_kv query heads' rows packed token-major into the tile's rows; Q by a
cp.async row gather, O by per-row stores, LSE to (token, head)): the d128 causal classes (ragged
and paged) with row packing forced on (launch_forward(pack_rows=True)) and off, against the
float32 reference; the d64 192-row class, which packs blocks only (tile_config._tiles), takes the
same flag and ignores it.

Ragged cases run through tests/gpu/test_kernel_sm90.py's `run_case` (NaN-poisoned caller buffers,
fresh random inputs, `torch.cuda.set_sync_debug_mode("error")`, |out - ref| <= 2e-2 + 2e-2 |ref|,
LSE within 1e-2, -inf where no key is seen, rows outside every sequence untouched): decode rows
(len_q 1) over long keys, len_q 1..17 and 63 / 64 / 65 with g in {1, 2, 4, 5, 7, 8, 16} (rows of
several tokens and heads in one 64-row block, blocks that straddle tokens), causal in both
alignments, empty sequences, seqused gaps, both LSE layouts and bases, split-KV S 1 / 2 /
4 on top. Paged cases (page 16, NaN in every unused pool slot, NHD and HND) through
test_split_kv_gpu.py's `_forced_launch` pattern. Then the library's own choice on `attention`
and `Plan.run` for vLLM's mixed batch.

Run on an H200 (from the repository root):
    python -m pytest tests/gpu/test_pack_rows_gpu.py -m gpu -q -p no:cacheprovider
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (sm_90a)"),
]

from tests.gpu.test_kernel_sm90 import compiled_for, run_case  # noqa: E402


def _case(**kw):
    c = dict(seed=21, hq=32, hkv=8, d=128, dtype="bf16", mask="causal", lse="token", pack_rows=True)
    c.update(kw)
    return c


ROW_CASES = {
    "decode_rows_long_keys": _case(lens_q=[1, 1, 1, 1, 1], lens_k=[4000, 1, 700, 9000, 32000]),
    "decode_rows_gqa5": _case(lens_q=[1, 1, 1], lens_k=[2000, 3001, 129], hq=10, hkv=2, lse="head"),
    "spec_decode_1_to_17": _case(lens_q=list(range(1, 18)), lens_k=[n + 900 + 37 * n for n in range(1, 18)], hq=16, hkv=2),
    "block_edges_63_64_65": _case(lens_q=[63, 64, 65, 2], lens_k=[640, 64, 1065, 300], hq=8, hkv=1),
    "empty_sequences": _case(lens_q=[0, 1, 0, 3, 0, 1], lens_k=[500, 0, 900, 2000, 0, 1]),
    "causal_top_left": _case(lens_q=[3, 70, 1], lens_k=[2000, 1500, 800], bottom_right=False, hq=28, hkv=4),
    "causal_q_gt_k": _case(lens_q=[300, 9, 5], lens_k=[1200, 2, 0], hq=12, hkv=4),
    "causal_gqa7_log2": _case(lens_q=[1, 17, 2], lens_k=[3100, 999, 4500], hq=14, hkv=2, log2=True),
    # Window and no-mask classes do not pack rows (tile_config._rows): the flag is ignored.
    "window_flag_ignored": _case(lens_q=[1, 40, 6], lens_k=[5000, 3000, 200], mask="window", left=300, right=0),
    "none_flag_ignored": _case(lens_q=[1, 17, 2], lens_k=[3100, 999, 4500], mask="none", hq=14, hkv=2),
    "seqused_gaps": _case(lens_q=[1, 0, 33, 2], lens_k=[1800, 40, 3500, 0], seqused=True, hq=16, hkv=2),
    "strided_fp16": _case(lens_q=[1, 90], lens_k=[2600, 4100], dtype="fp16", pad_stride=8),
    "envelope_d112_gqa64": _case(lens_q=[1, 3], lens_k=[3000, 2000], d=112, hq=64, hkv=1),
    "no_lse": _case(lens_q=[1, 5, 1], lens_k=[1000, 2000, 64], lse="none"),
    "mha_g1_ignored": _case(lens_q=[1, 2], lens_k=[700, 300], hq=8, hkv=8),
    # d64: the 192-row class packs blocks (pack_gqa), not rows: the flag is ignored.
    "d64_decode_rows": _case(lens_q=[1, 1, 1, 1], lens_k=[4000, 1, 700, 9000], d=64),
    "d64_tails_gqa5": _case(lens_q=[37, 1, 130, 3], lens_k=[3000, 2200, 5000, 64], d=64, hq=10, hkv=2, lse="head"),
    "d64_top_left_gqa7": _case(lens_q=[3, 70, 1], lens_k=[2000, 1500, 800], d=64, hq=14, hkv=2, bottom_right=False),
    "d64_blocks_not_rows": _case(lens_q=[256] * 6, lens_k=[256] * 6, d=64, pack_rows=None),  # the library's choice
    "d64_envelope_d48": _case(lens_q=[1, 5], lens_k=[2500, 900], d=48, hq=16, hkv=4),
}


@pytest.mark.parametrize("name", list(ROW_CASES))
def test_row_packing_forced(name):
    run_case(ROW_CASES[name])


@pytest.mark.parametrize("d", [128, 64])
@pytest.mark.parametrize("g", [1, 2, 4, 5, 7, 8, 16])
@pytest.mark.parametrize("len_q", [1, 2, 3, 5, 9, 16, 17, 63, 64, 65])
def test_row_packing_lengths_and_ratios(len_q, g, d):
    """One sequence of len_q queries beside a decode row, H_kv 2, g query heads per K/V head: the
    packed rows straddle tokens and 64-row blocks (and d64's 192-row tiles) in every way the
    lengths allow."""
    run_case(_case(seed=len_q * 31 + g, lens_q=[len_q, 1], lens_k=[len_q + 700, 2500], hq=2 * g, hkv=2, d=d,
                   lse="token" if g % 2 else "head"))  # fmt: skip


@pytest.mark.parametrize("pack_rows", [False, True], ids=["off", "on"])
@pytest.mark.parametrize("bottom_right", [True, False], ids=["br", "tl"])
def test_row_packing_on_and_off_agree_with_the_reference(bottom_right, pack_rows):
    run_case(_case(lens_q=[1, 7, 1, 64, 0, 2], lens_k=[3000, 60, 5, 800, 9, 2], bottom_right=bottom_right,
                   pack_rows=pack_rows))  # fmt: skip


@pytest.mark.parametrize("d", [128, 64])
@pytest.mark.parametrize("num_splits", [1, 2, 4])
@pytest.mark.parametrize("lse", ["token", "head"])
def test_row_packing_with_split_kv(lse, num_splits, d):
    """Split-KV on top of row packing: each split's tile keeps its packed rows and stores them at
    the workspace rows s * total_q + token (seqlen.offset_o)."""
    run_case(_case(lens_q=[1, 1, 4, 1, 13], lens_k=[9000, 300, 5000, 0, 2600], hq=32, hkv=4, lse=lse, d=d,
                   num_splits=num_splits, log2=lse == "head"))  # fmt: skip


# ----------------------------------------------------------------------------- paged K/V
def _paged(seed, lens_q, lens_k, kv_layout, h_q=32, h_kv=8, causal=True, window=(-1, -1), q_gaps=False):
    from tests.cases import Case

    return Case(seed, lens_q, lens_k, h_q, h_kv, 128, 128, dtype=torch.bfloat16, causal=causal, window=window,
                page_size=16, kv_layout=kv_layout, lse_layout="token_major", lse_base="ln", q_gaps=q_gaps)  # fmt: skip


def _paged_launch(case, pack_rows, num_splits=1, return_lse=True):
    """launch_forward of the case's paged class with pack_rows and num_splits forced, into
    NaN-poisoned caller buffers, under sync-debug "error"; the reference on the sequences' rows,
    NaN kept everywhere else, the inputs (NaN pool slots included) unchanged."""
    import dataclasses

    import ragged_attn
    from ragged_attn import backends
    from ragged_attn.kernels.sm90 import launch_forward
    from ragged_attn.problem import build_problem
    from tests.cases import close, valid_rows

    args, kwargs = case.make("cuda")
    problem, tensors = build_problem(*args, **kwargs, return_lse=return_lse)
    lc = backends.layout_class_for(problem)
    assert lc.kv == "paged" and lc.d_qk == 128
    fn = compiled_for(lc)
    sibling = None if return_lse else compiled_for(dataclasses.replace(lc, lse=True))
    q = args[0]
    total_q = q.shape[0]
    out = torch.full((total_q, case.h_q, case.d_v), math.nan, dtype=case.dtype, device="cuda")
    lse = torch.full((total_q, case.h_q), math.nan, device="cuda") if return_lse else None
    kw = backends.kernel_arguments(problem, tensors._replace(out=out, lse=lse), out, lse)
    before = [a.clone() for a in args[:3]]
    torch.cuda.set_sync_debug_mode("error")
    try:
        launch_forward(fn, **kw, num_splits=num_splits, split_compiled=sibling, pack_rows=pack_rows)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    want = ragged_attn.attention(*args, **kwargs, return_lse=return_lse, backend="reference")
    want_out = want[0] if return_lse else want
    rows = valid_rows(case, args[3])
    close(out[rows], want_out[rows], f"{case.id} rows={pack_rows} S={num_splits} out")
    others = sorted(set(range(total_q)) - set(rows))
    if others:
        assert torch.isnan(out[others].float()).all(), "a row outside every sequence was written"
    if return_lse:
        close(lse[rows], want[1][rows], f"{case.id} lse", atol=1e-2, rtol=0)
        if others:
            assert torch.isnan(lse[others]).all(), "an LSE row outside every sequence was written"
    for name, a, b in zip("qkv", args[:3], before):
        assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)), f"{name} changed"


PAGED_SHAPES = {
    "decode": ([1, 1, 0, 1, 1], [3000, 700, 50, 9, 20000]),
    "spec_and_tails": ([4, 1, 17, 65], [2600, 4100, 1500, 900]),
}


@pytest.mark.parametrize("num_splits", [1, 2, 4])
@pytest.mark.parametrize("kv_layout", ["NHD", "HND"])
@pytest.mark.parametrize("shape", list(PAGED_SHAPES))
def test_row_packing_paged(shape, kv_layout, num_splits):
    lens_q, lens_k = PAGED_SHAPES[shape]
    _paged_launch(_paged(700 + num_splits, lens_q, lens_k, kv_layout, q_gaps=shape == "decode"), True, num_splits)


@pytest.mark.parametrize("return_lse", [True, False], ids=["lse", "nolse"])
def test_row_packing_paged_top_left_and_gqa8(return_lse):
    _paged_launch(_paged(5, [1, 9, 3], [4000, 700, 2], "HND", h_q=16, h_kv=2), True, 2, return_lse)
    _paged_launch(_paged(6, [1, 9, 3], [4000, 700, 2], "NHD", causal="top_left"), True, 1, return_lse)


# ----------------------------------------------------------------------------- the library's choice
def vllm_like_call(lens_q, lens_k, seed):
    """(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k) of a ragged batch on the
    GPU: 32/8 heads, d128, bf16, fresh random values."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(sum(lens_q), 32, 128, generator=g).to(torch.bfloat16).cuda()
    k = torch.randn(sum(lens_k), 8, 128, generator=g).to(torch.bfloat16).cuda()
    v = torch.randn(sum(lens_k), 8, 128, generator=g).to(torch.bfloat16).cuda()
    cu_q = torch.tensor([0] + [sum(lens_q[: i + 1]) for i in range(len(lens_q))], dtype=torch.int32).cuda()
    cu_k = torch.tensor([0] + [sum(lens_k[: i + 1]) for i in range(len(lens_k))], dtype=torch.int32).cuda()
    return q, k, v, cu_q, cu_k, max(lens_q), max(lens_k)


def library_calls_match_the_reference(args):
    """`attention` and `Plan.run` (twice: its fast path), causal, without and with a token-major LSE,
    each within the tolerance of the reference backend."""
    import ragged_attn

    for opts in (dict(causal=True), dict(causal=True, return_lse=True, lse_layout="token_major")):
        want = ragged_attn.attention(*args, backend="reference", **opts)
        plan = ragged_attn.plan(*args, **opts)
        for got in (ragged_attn.attention(*args, **opts), plan.run(*args), plan.run(*args)):
            pairs = zip(got, want) if isinstance(got, tuple) else [(got, want)]
            for a, b in pairs:
                err = (a.float() - b.float()).abs()
                tol = 1e-2 if a.dtype == torch.float32 else 2e-2 + 2e-2 * b.float().abs()
                assert (err <= tol).all(), f"max err {err.max().item():.4g}"


def test_library_packs_rows_of_vllms_mixed_batch():
    """vLLM's mixed batch (4 prefill chunks + 64 decode rows, 32/8 heads, d128, causal): the
    library packs rows by itself (split_kv.choose_pack_rows), through attention and Plan.run's
    fast path, with the reference's results."""
    from ragged_attn.kernels.sm90.split_kv import choose_pack_rows

    lens_q = [300, 512, 77, 128] + [1] * 64
    lens_k = [1200, 2048, 4000, 128] + [1000 + 97 * i for i in range(64)]
    assert choose_pack_rows(len(lens_q), sum(lens_q), max(lens_q), 32, 8, 128, 0, max(lens_k)) == 1
    library_calls_match_the_reference(vllm_like_call(lens_q, lens_k, seed=3))
