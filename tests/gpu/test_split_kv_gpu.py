"""GPU tests of split-KV (kernels/sm90/split_kv.py): the kernel with num_splits forced to 2, 3, 4 and
8 on batches of few queries over many keys, against the float32 reference.

The cases run through tests/gpu/test_kernel_sm90.py's `run_case` (NaN-poisoned caller buffers,
fresh random inputs, `torch.cuda.set_sync_debug_mode("error")`, |out - ref| <= 2e-2 + 2e-2 |ref|,
LSE within 1e-2, -inf where no key is seen, rows outside every sequence untouched) with
launch_forward's num_splits: the kernel writes each split's share into the workspace and the
merge writes the caller's out and LSE. Decode rows, chunked-prefill tails, empty sequences,
causal in both alignments, windows (shares that miss a row's keys entirely), GQA ratios 1..8,
both LSE layouts that split (token- and head-major) in both bases, seqused gaps, non-compact
strides and every store path of the epilogue (TMA O stores: d64 / d128; O staged 64 rows at a
time: d192; O in Q's buffer: d256; an envelope). Then the library's own choice (the heuristic, on
`attention` and `Plan.run`) and a CUDA graph replayed with new lengths.

Run on an H200 (from the repository root):
    python -m pytest tests/gpu/test_split_kv_gpu.py -m gpu -q -p no:cacheprovider
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (sm_90a)"),
]

from tests.gpu.test_kernel_sm90 import check, compiled_for, reference, run_case  # noqa: E402


def _case(**kw):
    c = dict(seed=11, hq=8, hkv=2, d=128, dtype="bf16", mask="causal", lse="token")
    c.update(kw)
    return c


SPLIT_CASES = {
    "decode_rows": _case(lens_q=[1, 1, 1, 1], lens_k=[4000, 1, 700, 9000], hq=32, hkv=8),
    "decode_rows_d64_mha": _case(lens_q=[1, 1, 1], lens_k=[2500, 6000, 129], d=64, hq=4, hkv=4, lse="head"),
    "chunked_prefill_tails": _case(lens_q=[37, 129, 5, 64], lens_k=[3000, 2200, 5000, 64]),
    "tails_gqa8_log2": _case(lens_q=[200, 3], lens_k=[4000, 3000], hq=16, hkv=2, log2=True, lse="head"),
    "empty_sequences": _case(lens_q=[0, 1, 0, 3, 0], lens_k=[500, 0, 900, 2000, 0]),
    "no_keys_anywhere_but_one": _case(lens_q=[2, 5, 1], lens_k=[0, 0, 3000], mask="none"),
    "causal_top_left": _case(lens_q=[3, 70, 1], lens_k=[2000, 1500, 800], bottom_right=False),
    "causal_q_gt_k": _case(lens_q=[300, 9], lens_k=[1200, 2], hq=4, hkv=1),
    "none_gqa5": _case(lens_q=[1, 17, 2], lens_k=[3100, 999, 4500], mask="none", hq=10, hkv=2, lse="head"),
    "window_left": _case(lens_q=[1, 40], lens_k=[5000, 3000], mask="window", left=300, right=0),
    "window_right_only_tl": _case(lens_q=[20, 1], lens_k=[4000, 2500], mask="window", left=-1, right=50,
                                  bottom_right=False),
    "window_both_misses": _case(lens_q=[8, 1], lens_k=[3000, 3000], mask="window", left=0, right=0,
                                bottom_right=False, lse="head"),
    "seqused_gaps": _case(lens_q=[1, 0, 33, 2], lens_k=[1800, 40, 3500, 0], seqused=True),
    "strided_fp16": _case(lens_q=[1, 90], lens_k=[2600, 4100], dtype="fp16", pad_stride=8, log2=True),
    "envelope_d112": _case(lens_q=[1, 9], lens_k=[3000, 2000], d=112, hq=8, hkv=8),
    "d192_o_turns": _case(lens_q=[1, 70, 4], lens_k=[2500, 3300, 900], d=192, dv=128, hq=8, hkv=4),
    "d256_o_in_q": _case(lens_q=[1, 3], lens_k=[2200, 1700], d=256, hq=4, hkv=2, mask="window", left=500, right=-1),
    "d96": _case(lens_q=[2, 1], lens_k=[3000, 5000], d=96, hq=6, hkv=3, lse="head"),
}


@pytest.mark.parametrize("num_splits", [2, 3, 4, 8])
@pytest.mark.parametrize("name", list(SPLIT_CASES))
def test_forced_splits(name, num_splits):
    run_case(dict(SPLIT_CASES[name], num_splits=num_splits))


@pytest.mark.parametrize("num_splits", [1, 16])
def test_one_and_sixteen_splits(num_splits):
    """num_splits 1 is the unsplit kernel (written straight into the caller's buffers); 16 splits of
    a few key blocks leave most shares empty for the shorter sequences."""
    run_case(_case(lens_q=[1, 2, 1], lens_k=[9000, 300, 1000], hq=16, hkv=4, num_splits=num_splits))


def _decode_batch(device, lens_k, hq=32, hkv=8, d=128, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    b = len(lens_k)
    q = torch.randn(b, hq, d, generator=g).to(torch.bfloat16).to(device)
    k = torch.randn(sum(lens_k), hkv, d, generator=g).to(torch.bfloat16).to(device)
    v = torch.randn(sum(lens_k), hkv, d, generator=g).to(torch.bfloat16).to(device)
    cu_q = torch.arange(b + 1, dtype=torch.int32, device=device)
    cu_k = torch.tensor([0] + [sum(lens_k[: i + 1]) for i in range(b)], dtype=torch.int32, device=device)
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("lse_layout", ["token_major", "head_major"])
def test_library_splits_decode_batches_by_itself(lse_layout):
    """attention and Plan.run (its fast path) on a decode batch that the heuristic splits (a few
    tiles on 132 SMs over thousands of keys): the same results as the reference backend, and the
    heuristic's count is > 1 for this call."""
    import ragged_attn
    from ragged_attn import backends
    from ragged_attn.problem import build_problem

    lens_k = [5000, 3000, 7000]
    q, k, v, cu_q, cu_k = _decode_batch("cuda", lens_k)
    opts = dict(causal=True, return_lse=True, lse_layout=lse_layout)
    problem, _ = build_problem(q, k, v, cu_q, cu_k, 1, max(lens_k), **opts)
    assert backends.num_splits_for(backends.layout_class_for(problem), problem) > 1
    want_o, want_lse = ragged_attn.attention(q, k, v, cu_q, cu_k, 1, max(lens_k), backend="reference", **opts)
    got = [ragged_attn.attention(q, k, v, cu_q, cu_k, 1, max(lens_k), **opts)]
    plan = ragged_attn.plan(q, k, v, cu_q, cu_k, 1, max(lens_k), **opts)
    got.append(plan.run(q, k, v, cu_q, cu_k, 1, max(lens_k)))
    got.append(plan.run(q, k, v, cu_q, cu_k, 1, max(lens_k)))  # the bound fast path
    for o, lse in got:
        err = (o.float() - want_o.float()).abs()
        assert (err <= 2e-2 + 2e-2 * want_o.float().abs()).all(), f"out: max err {err.max().item():.4g}"
        assert ((lse - want_lse).abs() <= 1e-2).all(), f"lse: max err {(lse - want_lse).abs().max().item():.4g}"


def test_split_launch_replays_in_a_cuda_graph_with_new_lengths():
    """A launch with num_splits 4 (workspace, kernel, merge, the rows-inside copy-back) captured in
    a CUDA graph and replayed with new lengths written into the same metadata tensors."""
    from ragged_attn.kernels.sm90 import launch_forward
    from ragged_attn.layout_class import LayoutClass

    fn = compiled_for(LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, "ragged"))
    dev, hq, hkv, d, b, cap_q, cap_k = "cuda", 8, 2, 128, 3, 64, 9000
    q = torch.randn(cap_q, hq, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(cap_k, hkv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(cap_k, hkv, d, device=dev, dtype=torch.bfloat16)
    out = torch.full((cap_q, hq, d), float("nan"), device=dev, dtype=torch.bfloat16)
    lse = torch.full((cap_q, hq), float("nan"), device=dev)
    cu_q = torch.tensor([0, 1, 2, 3], dtype=torch.int32, device=dev)
    cu_k = torch.tensor([0, 3000, 6000, 9000], dtype=torch.int32, device=dev)
    kw = dict(
        q=q, k=k, v=v, out=out, lse=lse, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, seqused_q=None,
        seqused_k=None, batch=b, max_seqlen_q=cap_q, lse_s_max=0, softmax_scale=d**-0.5,
        window_left=-1, window_right=-1, bottom_right=True, lse_strides=(0, hq, hq, 1), num_splits=4,
    )
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        launch_forward(fn, **kw)  # warm-up outside capture (the merge kernel compiles here)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch_forward(fn, **kw)
    for lens_q, lens_k in (([1, 1, 1], [8000, 2, 900]), ([0, 40, 3], [7, 6000, 2900]), ([5, 0, 59], [1, 5, 8900])):
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
        check(out[:tq], lse[:tq], ref_o, ref_lse, "token", new_q, lens_q, 0, False, b, hq)
        assert torch.isnan(out[tq:].float()).all() and torch.isnan(lse[tq:]).all(), "rows past the sequences written"


def test_splits_agree_with_the_unsplit_kernel():
    """The same inputs with 1 and 5 splits: outputs within the bf16 rounding of the partials
    (2e-2 absolute), LSE within 1e-3 (float32 partials) -- the split changes nothing else."""
    from ragged_attn.kernels.sm90 import launch_forward
    from ragged_attn.layout_class import LayoutClass

    fn = compiled_for(LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, "ragged"))
    lens_k = [6000, 3, 2500, 4096]
    q, k, v, cu_q, cu_k = _decode_batch("cuda", lens_k, hq=16, hkv=4, seed=4)
    results = []
    for num_splits in (1, 5):
        out = torch.full_like(q, math.nan)
        lse = torch.full(q.shape[:2], math.nan, device="cuda")
        launch_forward(
            fn, q=q, k=k, v=v, out=out, lse=lse, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, seqused_q=None,
            seqused_k=None, batch=len(lens_k), max_seqlen_q=1, lse_s_max=0, softmax_scale=0.1,
            window_left=-1, window_right=-1, bottom_right=True, lse_strides=(0, q.shape[1], q.shape[1], 1),
            num_splits=num_splits,
        )  # fmt: skip
        results.append((out.float(), lse))
    (o1, l1), (o5, l5) = results
    assert ((o1 - o5).abs() <= 2e-2).all() and ((l1 - l5).abs() <= 1e-3).all()


# ----------------------------------------------------------------------------- paged K/V and no-LSE calls
# Paged pools as tests/cases.py builds them: shuffled pages, pages no table references and every
# slot past a sequence's keys hold NaN (nothing outside a sequence's keys may reach S or P V).
# Forced S goes through launch_forward (compiled_for: the class's own kernel, and for a class
# without an LSE its LSE sibling's as split_compiled); the reference backend is the oracle with
# tests/cases.py `close`'s tolerance (|err| <= 2e-2 + 2e-2 |ref|; LSE 1e-2 absolute).


def _paged_case(seed, page_size, kv_layout, lens_q, lens_k, h_q=8, h_kv=2, d=128, causal=True, q_gaps=False):
    from tests.cases import Case

    return Case(seed, lens_q, lens_k, h_q, h_kv, d, d, dtype=torch.bfloat16, causal=causal, page_size=page_size,
                kv_layout=kv_layout, lse_layout="token_major", lse_base="ln", q_gaps=q_gaps)  # fmt: skip


def _forced_launch(case, num_splits, return_lse):
    """launch_forward of the case's paged class with num_splits forced, into NaN-poisoned caller
    buffers (out, and a token-major LSE when return_lse), under sync-debug "error"; then the
    reference's comparison on the sequences' rows and NaN kept everywhere else."""
    import dataclasses

    import ragged_attn
    from ragged_attn import backends
    from ragged_attn.kernels.sm90 import launch_forward
    from ragged_attn.problem import build_problem
    from tests.cases import close, valid_rows

    args, kwargs = case.make("cuda")
    problem, tensors = build_problem(*args, **kwargs, return_lse=return_lse)
    lc = backends.layout_class_for(problem)
    assert lc.kv == "paged" and lc.lse == return_lse
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
        launch_forward(fn, **kw, num_splits=num_splits, split_compiled=sibling)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    want = ragged_attn.attention(*args, **kwargs, return_lse=return_lse, backend="reference")
    want_out = want[0] if return_lse else want
    rows = valid_rows(case, args[3])
    close(out[rows], want_out[rows], f"{case.id} S={num_splits} out")
    others = sorted(set(range(total_q)) - set(rows))
    if others:
        assert torch.isnan(out[others].float()).all(), "a row outside every sequence was written"
    if return_lse:
        close(lse[rows], want[1][rows], f"{case.id} S={num_splits} lse", atol=1e-2, rtol=0)
        if others:
            assert torch.isnan(lse[others]).all(), "an LSE row outside every sequence was written"
    for name, a, b in zip("qkv", args[:3], before):  # the pools hold NaN: compare NaN as a value
        assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)), f"{name} changed"


PAGED_SPLIT_SHAPES = {
    # decode rows, an empty sequence, a key count inside one page, chunked-prefill tails
    "decode": ([1, 1, 0, 1], [3000, 700, 50, 9]),
    "tails": ([37, 1, 130], [2600, 4100, 1500]),
}


@pytest.mark.parametrize("num_splits", [2, 4])
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("kv_layout", ["NHD", "HND"])
@pytest.mark.parametrize("shape", list(PAGED_SPLIT_SHAPES))
@pytest.mark.parametrize("return_lse", [True, False], ids=["lse", "nolse"])
def test_forced_splits_paged(return_lse, shape, kv_layout, page_size, num_splits):
    """Paged K/V with num_splits forced: each split's producer gathers only the pages of its share
    of the key blocks; the merge equals the reference; NaN pool slots never reach the result; a
    class without an LSE runs its splits on the LSE sibling's kernel and writes out only."""
    lens_q, lens_k = PAGED_SPLIT_SHAPES[shape]
    seed = 900 + page_size + (kv_layout == "HND") + 2 * num_splits
    case = _paged_case(seed, page_size, kv_layout, lens_q, lens_k, q_gaps=shape == "tails")
    _forced_launch(case, num_splits, return_lse)


@pytest.mark.parametrize("num_splits", [2, 4])
def test_forced_splits_paged_gqa8_window(num_splits):
    """GQA 8 over a paged window class (shares that miss a row's window entirely), no LSE."""
    from tests.cases import Case

    case = Case(950 + num_splits, [1, 20, 1], [5000, 3000, 64], 16, 2, 128, 128, dtype=torch.bfloat16,
                window=(300, 0), page_size=16, kv_layout="HND")  # fmt: skip
    _forced_launch(case, num_splits, return_lse=False)


@pytest.mark.parametrize("paged", [False, True], ids=["ragged", "paged16"])
@pytest.mark.parametrize("caller_out", [False, True], ids=["fresh_out", "caller_out"])
def test_library_splits_nolse_decode_batches(caller_out, paged):
    """attention and Plan.run without an LSE on a decode batch the heuristic splits: out only, equal
    to the reference backend's; a caller's out keeps its row outside every sequence (NaN). The
    first split call fetches (or compiles) the LSE sibling; Plan.run's second call is the bound
    fast path (ragged and paged: a paged class's BoundKernel splits page-table calls too)."""
    import ragged_attn
    from ragged_attn import backends
    from ragged_attn.problem import build_problem
    from tests.cases import Case, close

    lens_k = [5000, 3000, 7000]
    case = Case(31, [1, 1, 1], lens_k, 32, 8, 128, 128, dtype=torch.bfloat16, causal=True,
                page_size=16 if paged else 0, q_gaps=caller_out)  # fmt: skip
    args, kwargs = case.make("cuda")
    problem, _ = build_problem(*args, **kwargs)
    assert not problem.return_lse and backends.num_splits_for(backends.layout_class_for(problem), problem) > 1
    want = ragged_attn.attention(*args, **kwargs, backend="reference")
    total_q = args[0].shape[0]
    rows = [int(args[3][b]) for b in range(3)]
    others = sorted(set(range(total_q)) - set(rows))

    def out_buf():
        return torch.full((total_q, 32, 128), math.nan, dtype=torch.bfloat16, device="cuda") if caller_out else None

    plan = ragged_attn.plan(*args, **kwargs)
    for call in (
        lambda o: ragged_attn.attention(*args, **kwargs, out=o),
        lambda o: plan.run(*args[:7], out=o, **{k: kwargs[k] for k in ("seqused_q", "seqused_k", "page_table") if k in kwargs}),
        lambda o: plan.run(*args[:7], out=o, **{k: kwargs[k] for k in ("seqused_q", "seqused_k", "page_table") if k in kwargs}),
    ):
        o = out_buf()
        got = call(o)
        assert isinstance(got, torch.Tensor), "a no-LSE call returns out only"
        if o is not None:
            assert got is o
            if others:
                assert torch.isnan(o[others].float()).all(), "a row outside every sequence was written"
        close(got[rows], want[rows], "out")


def _vllm_batch(seed, prefill_q, prefill_k, decode_k):
    """vLLM's mixed V1 batch: prefill chunks (prefill_q queries over prefill_k keys each, the chunk
    at the end of its keys) then decode rows (1 query over decode_k keys each); 32/8 heads, d128,
    bf16, paged NHD page 16, no LSE (tests/cases.py pools: NaN in unused slots)."""
    from tests.cases import Case

    lens_q = list(prefill_q) + [1] * len(decode_k)
    lens_k = list(prefill_k) + list(decode_k)
    return Case(seed, lens_q, lens_k, 32, 8, 128, 128, dtype=torch.bfloat16, causal=True, page_size=16, kv_layout="NHD")


def _vllm_keys(n, lo, hi, seed):
    import random

    r = random.Random(seed)
    return [r.randint(lo, hi) for _ in range(n)]


@pytest.mark.parametrize("num_splits", [1, 2, 4])
def test_vllm_mixed_batch_paged_nolse(num_splits):
    """The issue's target batch, smaller where the float32 reference would be slow: 4 prefill chunks
    of 512-2048 queries (keys: the chunk plus up to 4k of context) and 64 decode rows over 2k-32k
    keys; 32/8 heads, d128, paged page 16, no LSE; num_splits forced (the library's own choice for
    this batch is 1: its tiles fill the SMs, `test_vllm_mixed_batch_library_choice`)."""
    prefill_q = [512, 1024, 1536, 2048]
    prefill_k = [n + c for n, c in zip(prefill_q, _vllm_keys(4, 0, 4096, 1))]
    case = _vllm_batch(77, prefill_q, prefill_k, _vllm_keys(64, 2048, 32768, 2))
    _forced_launch(case, num_splits, return_lse=False)


def test_vllm_mixed_batch_library_choice():
    """attention on the mixed batch without forcing: the library's S (1 here: 4 prefill chunks give
    thousands of tiles) and the reference's out; then the decode rows alone (64 rows, 2k-32k keys,
    the library's S whatever it is) through attention and Plan.run."""
    import ragged_attn
    from ragged_attn import backends
    from ragged_attn.problem import build_problem
    from tests.cases import close, valid_rows

    prefill_q = [512, 1024, 1536, 2048]
    prefill_k = [n + c for n, c in zip(prefill_q, _vllm_keys(4, 0, 4096, 3))]
    for case in (
        _vllm_batch(78, prefill_q, prefill_k, _vllm_keys(64, 2048, 32768, 4)),
        _vllm_batch(79, [], [], _vllm_keys(64, 2048, 32768, 5)),
    ):
        args, kwargs = case.make("cuda")
        problem, _ = build_problem(*args, **kwargs)
        splits = backends.num_splits_for(backends.layout_class_for(problem), problem)
        print(f"{case.id}: library num_splits {splits}")
        want = ragged_attn.attention(*args, **kwargs, backend="reference")
        rows = valid_rows(case, args[3])
        close(ragged_attn.attention(*args, **kwargs)[rows], want[rows], f"{case.id} attention")
        plan = ragged_attn.plan(*args, **kwargs)
        extra = {k: kwargs[k] for k in ("seqused_k", "page_table")}
        close(plan.run(*args[:7], **extra)[rows], want[rows], f"{case.id} plan.run")


@pytest.mark.parametrize("return_lse", [True, False], ids=["lse", "nolse"])
def test_split_kv_off_is_batch_invariant(return_lse):
    """attention(split_kv=False): a decode row over 7,000 keys served alone (a launch the library
    would split: num_splits_for > 1 with the default) and the same row after a 4,096-token prefill
    chunk (a batch that runs unsplit anyway) give bitwise the same out and LSE, on the checked
    path (first call) and the fast path (second); with the default the alone call does split and
    still matches the reference."""
    import ragged_attn
    from ragged_attn import backends
    from ragged_attn.problem import build_problem

    g = torch.Generator(device="cpu").manual_seed(11)
    hq, hkv, d, n_k, n_p = 32, 8, 128, 7000, 4096

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(torch.bfloat16).cuda()

    q_row, k_row, v_row = randn(1, hq, d), randn(n_k, hkv, d), randn(n_k, hkv, d)
    q_p, k_p, v_p = randn(n_p, hq, d), randn(n_p, hkv, d), randn(n_p, hkv, d)

    def i32(*xs):
        return torch.tensor(xs, dtype=torch.int32, device="cuda")

    alone = (q_row, k_row, v_row, i32(0, 1), i32(0, n_k), 1, n_k)
    batch = (torch.cat([q_p, q_row]), torch.cat([k_p, k_row]), torch.cat([v_p, v_row]), i32(0, n_p, n_p + 1),
             i32(0, n_p, n_p + n_k), n_p, n_k)  # fmt: skip
    opts = dict(causal=True, return_lse=return_lse, lse_layout="token_major")
    problem, _ = build_problem(*alone, **opts)
    assert backends.num_splits_for(backends.layout_class_for(problem), problem) > 1, "the default would not split"
    for _ in range(2):  # the checked launch, then the fast path
        got_alone = ragged_attn.attention(*alone, split_kv=False, **opts)
        got_batch = ragged_attn.attention(*batch, split_kv=False, **opts)
        if return_lse:
            assert torch.equal(got_alone[0][0], got_batch[0][n_p]), "out differs with the batch"
            assert torch.equal(got_alone[1][0], got_batch[1][n_p]), "lse differs with the batch"
        else:
            assert torch.equal(got_alone[0], got_batch[n_p]), "out differs with the batch"
    want = ragged_attn.attention(*alone, backend="reference", **opts)
    split = ragged_attn.attention(*alone, **opts)
    want_o, split_o = (want[0], split[0]) if return_lse else (want, split)
    err = (split_o.float() - want_o.float()).abs()
    assert (err <= 2e-2 + 2e-2 * want_o.float().abs()).all()
