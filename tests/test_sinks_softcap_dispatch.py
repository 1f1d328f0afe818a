"""Issue 14 items 1-2 on the kernel backend, without a GPU: which layout class sinks / softcap
choose, what is declined with which message, Plan and fast-path behaviour, the arguments that
reach the compiled function, and the launch path's fills for rows that see no key.

The CUDA side is simulated: problems are described as on cuda:0 while the tensors stay on the
CPU, and the compiled function is a recorder (tests/test_fast_launch.py's EntryModel). The kernel
itself runs in tests/gpu/test_softcap_sinks_gpu.py and tests/gpu/test_sinks_softcap_api_gpu.py.
"""

from __future__ import annotations

import dataclasses
import inspect
import math

import pytest
import torch

import ragged_attn
from ragged_attn import api, backends, compile_cache
from ragged_attn.fast_launch import BoundKernel
from ragged_attn.kernels import sm90
from ragged_attn.kernels.sm90 import launch as sm90_launch
from ragged_attn.problem import build_problem
from ragged_attn.reference import attention_reference
from tests.cases import Case
from tests.test_fast_launch import EntryModel

LOG2_E = 1.0 / math.log(2.0)


def _sinks(h_q: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(h_q, generator=g) * 2.0).float()


def _meta(h_q=8, h_kv=2, d=128, pool=None, dtype=torch.bfloat16, **options):
    """layout_class_of arguments on meta tensors (no GPU); pool=(num_pages, page_size, max_pages)
    or (num_pages, page_size, max_pages, kv_layout) ("NHD" without one)."""
    meta = {"dtype": dtype, "device": "meta"}
    q = torch.empty(30, h_q, d, **meta)
    cu = torch.empty(3, dtype=torch.int32, device="meta")
    if pool is None:
        k, v = torch.empty(40, h_kv, d, **meta), torch.empty(40, h_kv, d, **meta)
        return dict(q=q, k=k, v=v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=20, **options)
    num_pages, page_size, max_pages, kv_layout = (*pool, "NHD")[:4]
    dims = (num_pages, page_size, h_kv) if kv_layout == "NHD" else (num_pages, h_kv, page_size)
    k = torch.empty(*dims, d, **meta)
    v = torch.empty(*dims, d, **meta)
    table = torch.empty(2, max_pages, dtype=torch.int32, device="meta")
    seqused = torch.empty(2, dtype=torch.int32, device="meta")
    return dict(q=q, k=k, v=v, cu_seqlens_q=cu, page_table=table, seqused_k=seqused, max_seqlen_q=20,
                kv_layout=kv_layout, **options)  # fmt: skip


def _meta_sinks(h_q=8, stride=1):
    return torch.empty(h_q * stride, device="meta")[::stride]


# --- which class ----------------------------------------------------------------------------------


SCORE_OPTIONS = pytest.mark.parametrize(
    "options,suffix",
    [
        ({"softcap": 30.0}, "-softcap"),
        ({"sinks": "sinks"}, "-sinks"),
        ({"softcap": 5, "sinks": "sinks"}, "-softcap-sinks"),
    ],
    ids=["softcap", "sinks", "both"],
)


def _score_classes(options, pool=None):
    """(plain class, class with `options`) of one causal LSE-on call (`_meta`; "sinks" stands for a
    meta sinks tensor)."""
    options = {k: (_meta_sinks() if v == "sinks" else v) for k, v in options.items()}
    plain = ragged_attn.layout_class_of(**_meta(pool=pool, causal=True, return_lse=True))
    return plain, ragged_attn.layout_class_of(**_meta(pool=pool, causal=True, return_lse=True, **options))


@SCORE_OPTIONS
def test_layout_class_of_names_the_score_class(options, suffix):
    plain, lc = _score_classes(options)
    assert lc.name == plain.name + suffix
    assert lc == dataclasses.replace(plain, softcap="softcap" in options, sinks="sinks" in options)
    assert sm90.compiled_args(lc) == (*sm90.COMPILED_ARGS, "sinks", "softcap")
    assert sm90.compiled_args(plain) == sm90.COMPILED_ARGS


def test_the_cap_and_the_sink_values_are_run_time():
    """One class for every cap (and every sinks tensor): only on/off is in the key."""
    classes = {
        ragged_attn.layout_class_of(**_meta(window_size=(w, 0), softcap=cap, softmax_scale=scale))
        for cap in (2**-126, 1.0, 30.0, 50, 3e38)
        for w in (1, 100)
        for scale in (None, 0.3)
    }
    assert len(classes) == 1 and next(iter(classes)).softcap and next(iter(classes)).mask == "window"
    a = ragged_attn.layout_class_of(**_meta(sinks=_meta_sinks(8)))
    b = ragged_attn.layout_class_of(**_meta(h_q=16, h_kv=4, sinks=_meta_sinks(16)))
    assert a == b and a.sinks and not a.softcap


def test_softcap_zero_and_no_sinks_keep_the_plain_class():
    plain = ragged_attn.layout_class_of(**_meta())
    assert ragged_attn.layout_class_of(**_meta(softcap=0.0, sinks=None)) == plain
    assert ragged_attn.layout_class_of(**_meta(softcap=0)) == plain
    assert "softcap" not in plain.as_dict() and "sinks" not in plain.as_dict()


# --- page pools: the paged score classes ----------------------------------------------------------


@SCORE_OPTIONS
def test_page_pools_get_the_paged_score_classes(options, suffix):
    """With page pools, sinks / softcap pick the paged class with the flags (served since the paged
    cases of tests/gpu/test_softcap_sinks_gpu.py passed on an H200, 2026-12-03)."""
    plain, lc = _score_classes(options, pool=(10, 16, 4))
    assert plain.kv == lc.kv == "paged"
    assert lc.name == plain.name + suffix and lc.name.endswith("-paged" + suffix)
    assert lc == dataclasses.replace(plain, softcap="softcap" in options, sinks="sinks" in options)
    assert sm90.compiled_args(lc) == (*sm90.COMPILED_ARGS, "sinks", "softcap")
    _, ragged = _score_classes(options)
    assert lc == dataclasses.replace(ragged, kv="paged")  # the same flags as the ragged call's class


def test_paged_score_classes_keep_the_cap_and_the_pool_geometry_run_time():
    """One paged class for every cap, page size, page count, table width and pool layout."""
    classes = {
        ragged_attn.layout_class_of(**_meta(pool=pool, window_size=(w, 0), softcap=cap, sinks=_meta_sinks(8)))
        for cap in (2**-126, 12.5, 50, 3e38)
        for w in (1, 100)
        for pool in ((10, 16, 4), (3, 1, 3, "NHD"), (50, 256, 2, "HND"), (0, 8, 1, "HND"))
    }
    assert len(classes) == 1
    (lc,) = classes
    assert (lc.kv, lc.mask, lc.softcap, lc.sinks) == ("paged", "window", True, True)


def test_every_score_class_is_what_the_dispatch_picks():
    """aot's `scores` set (built by `aot build --classes scores / all`) is the set of classes the
    dispatch picks for problems with softcap / sinks: ragged and paged, every dtype, head-dim
    class, mask family and LSE choice."""
    from ragged_attn import aot

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    masks = {"none": {}, "causal": {"causal": True}, "window": {"window_size": (64, 0)}}
    picked = []
    for lc in aot.score_classes():
        options = dict(
            masks[lc.mask], return_lse=lc.lse, softcap=7.0 if lc.softcap else 0.0,
            sinks=_meta_sinks() if lc.sinks else None,
        )  # fmt: skip
        pool = (12, 16, 5) if lc.kv == "paged" else None
        assert lc.d_qk == lc.d_v or (lc.d_qk, lc.d_v) == (192, 128)
        call = _meta(d=lc.d_qk, pool=pool, dtype=dtypes[lc.dtype], **options)
        if lc.d_v != lc.d_qk:
            call["v"] = call["v"][..., : lc.d_v]
        picked.append(ragged_attn.layout_class_of(**call))
    assert picked == aot.score_classes()
    assert {lc.kv for lc in picked} == {"ragged", "paged"}


def test_check_support_returns_the_paged_score_class(monkeypatch):
    """check_support itself (a problem described as on cuda:0, the DSL reported present) returns the
    paged class with the flags for a paged problem with sinks and softcap, and still declines a
    strided sinks tensor there."""
    monkeypatch.setattr(backends, "arch_of", lambda device: "sm_90a")
    monkeypatch.setattr(backends, "cute_import_error", lambda: None)
    args, kwargs = Case(1450, [3, 4], [3, 6], 4, 2, 64, 64, dtype=torch.float16, causal=True, page_size=4,
                        kv_layout="HND").make()  # fmt: skip
    for sinks, softcap in ((_sinks(4), 0.0), (None, 12.5), (_sinks(4), 3.0)):
        problem, t = build_problem(*args, **kwargs, sinks=sinks, softcap=softcap, return_lse=True)
        problem = dataclasses.replace(problem, device=torch.device("cuda", 0))
        lc = backends.check_support(problem)
        plain = backends.check_support(dataclasses.replace(problem, has_sinks=False, softcap=0.0))
        assert (lc.kv, lc.softcap, lc.sinks) == ("paged", softcap != 0.0, sinks is not None)
        assert lc == dataclasses.replace(plain, softcap=softcap != 0.0, sinks=sinks is not None)
        assert (lc.d_qk, lc.dtype, lc.mask, lc.lse) == (64, "fp16", "causal", True)
        out = torch.empty(7, 4, 64, dtype=torch.float16)
        ka = backends.kernel_arguments(problem, t, out, torch.empty(4, 7))
        assert ka["extended"] is True and ka["sinks"] is sinks and ka["softcap"] == softcap
        assert ka["page_table"] is kwargs["page_table"] and ka["kv_layout"] == "HND"
    strided = torch.zeros(8)[::2]
    problem, _ = build_problem(*args, **kwargs, sinks=strided)
    with pytest.raises(NotImplementedError, match=r"^sinks: .*got stride 2; pass sinks\.contiguous\(\)"):
        backends.check_support(dataclasses.replace(problem, device=torch.device("cuda", 0)))


# --- what declines ----------------------------------------------------------------------------------


def test_sinks_of_another_stride_decline_and_one_head_takes_any_stride():
    with pytest.raises(NotImplementedError, match=r'^sinks: .*contiguous \(H_q,\).*got stride 2; pass sinks\.contiguous\(\), or pass backend="reference"'):
        ragged_attn.layout_class_of(**_meta(sinks=_meta_sinks(8, stride=2)))
    expanded = torch.empty(1, device="meta").expand(8)
    with pytest.raises(NotImplementedError, match=r"^sinks: .*got stride 0"):
        ragged_attn.layout_class_of(**_meta(sinks=expanded))
    # One head: any stride names the same element; the kernel gets a stride-1 view of it.
    lc = ragged_attn.layout_class_of(**_meta(h_q=1, h_kv=1, sinks=_meta_sinks(1, stride=3)))
    assert lc.sinks
    args, kwargs = Case(1450, [3], [4], 1, 1, 64, 64, dtype=torch.bfloat16).make()
    base = torch.tensor([0.5, 9.0, 9.0, 9.0])
    problem, t = build_problem(*args, **kwargs, sinks=base.as_strided((1,), (3,), 1), return_lse=True)
    ka = backends.kernel_arguments(problem, t, torch.empty(3, 1, 64, dtype=torch.bfloat16), torch.empty(1, 3))
    assert ka["sinks"].stride() == (1,) and ka["sinks"].data_ptr() == base[1:].data_ptr()


@pytest.fixture
def on_cuda(monkeypatch):
    """Calls described as on cuda:0 (sm_90a) with CPU tensors: `attention` / `plan` / `Plan.run`
    take the kernel path. launch_cute records its arguments instead of launching, and _bind
    records what it would bind (a Bound stand-in whose try_launch records and declines)."""
    real = api.build_problem

    def on_cuda_build(*args, **kwargs):
        problem, tensors = real(*args, **kwargs)
        return dataclasses.replace(problem, device=torch.device("cuda", 0)), tensors

    launches, binds = [], []

    def launch(layout_class, problem, t):
        launches.append((layout_class, problem, t))
        out = torch.zeros(problem.total_q, problem.h_q, problem.d_v, dtype=problem.dtype)
        lse = torch.zeros(problem.lse_shape()) if problem.return_lse else None
        return out, lse

    class Bound:
        def __init__(self, layout_class):
            self.layout_class, self.calls = layout_class, []

        def try_launch(self, *a):
            self.calls.append(a)

    def bind(layout_class, problem, default_scale):
        bound = Bound(layout_class)
        binds.append((layout_class, bound))
        return bound

    monkeypatch.setattr(api, "build_problem", on_cuda_build)
    monkeypatch.setattr(backends, "arch_of", lambda device: "sm_90a")
    monkeypatch.setattr(backends, "launch_cute", launch)
    monkeypatch.setattr(api, "_bind", bind)
    monkeypatch.setattr(api, "_FAST_PATHS", {})
    monkeypatch.setattr(compile_cache, "get_kernel", lambda *a, **k: pytest.fail("a kernel was compiled"))
    return launches, binds


@pytest.mark.parametrize("backend", ["auto", "cute"])
@pytest.mark.parametrize("option", ["sinks", "softcap", "both"])
def test_paged_calls_launch_the_paged_score_classes(on_cuda, option, backend):
    """attention and plan / Plan.run with a page table and sinks / softcap reach the kernel's paged
    score class, with the call's own page table, sinks and cap in the launch."""
    launches, binds = on_cuda
    args, kwargs = Case(1451, [3, 4], [3, 6], 4, 2, 64, 64, dtype=torch.float16, causal=True, page_size=4).make()
    table, used_k = kwargs["page_table"], kwargs["seqused_k"]
    sinks = _sinks(4) if option in ("sinks", "both") else None
    softcap = 30.0 if option in ("softcap", "both") else 0.0
    flags = (softcap != 0.0, sinks is not None)
    ragged_attn.attention(*args, **kwargs, sinks=sinks, softcap=softcap, backend=backend)
    ((lc, problem, t),) = launches
    assert (lc.kv, lc.softcap, lc.sinks) == ("paged", *flags)
    assert lc.name.startswith("sm_90a-d64x64-fp16-fp16-causal-nolse-paged")
    assert t.page_table is table and t.seqused_k is used_k and t.sinks is sinks and problem.softcap == softcap
    ((bound_lc, _),) = binds  # the paged class is bound under a paged key of its own
    assert bound_lc == lc and [key[-1] for key in api._FAST_PATHS] == [False]  # page_table is None: False

    p = ragged_attn.plan(*args, **kwargs, sinks=sinks, softcap=softcap, backend=backend)
    assert p.layout_class == lc and len(launches) == 1  # planned, nothing launched
    run_sinks = _sinks(4, seed=7) if sinks is not None else None
    p.run(*args, page_table=table, seqused_k=used_k, sinks=run_sinks)
    run_lc, run_problem, run_t = launches[-1]
    assert run_lc == lc and run_t.page_table is table and run_t.sinks is run_sinks
    assert run_problem.softcap == softcap and run_problem.kv == "paged"
    assert len(p._bound.calls) == 1  # offered to the fast path first (the stand-in declines)
    assert p._bound.calls[0][8] is table  # the run's page table


def test_flash_attn_adapters_pass_learnable_sink_and_softcap_with_a_page_table(on_cuda):
    """FA2's block_table and FA4's page_table with learnable_sink / softcap: the adapters pass them
    through (sinks widened to float32) to the paged score class."""
    from ragged_attn.compat import flash_attn_cute
    from ragged_attn.compat.flash_attn import flash_attn_varlen_func

    launches, _ = on_cuda
    args, kwargs = Case(1452, [3, 4], [3, 6], 4, 2, 64, 64, dtype=torch.float16, page_size=4).make()
    q, k, v, cu_q, _, mq, mk = args
    table, used_k = kwargs["page_table"], kwargs["seqused_k"]
    sink = _sinks(4).to(torch.bfloat16)
    _, lse, none = flash_attn_varlen_func(
        q, k, v, cu_q, None, mq, mk, softcap=9.0, learnable_sink=sink, block_table=table, seqused_k=used_k,
        return_attn_probs=True,
    )  # fmt: skip
    assert none is None and lse is not None
    lc, problem, t = launches[-1]
    assert (lc.kv, lc.softcap, lc.sinks, lc.lse) == ("paged", True, True, True)
    assert t.page_table is table and problem.softcap == 9.0
    assert t.sinks.dtype == torch.float32 and torch.equal(t.sinks, sink.float())
    _, lse = flash_attn_cute.flash_attn_varlen_func(
        q, k, v, cu_seqlens_q=cu_q, max_seqlen_q=mq, max_seqlen_k=mk, page_table=table, seqused_k=used_k,
        learnable_sink=sink.float(),
    )  # fmt: skip
    assert lse is None
    lc2, problem, t = launches[-1]
    assert lc2 == dataclasses.replace(lc, softcap=False, lse=False) and problem.softcap == 0.0
    assert t.page_table is table and torch.equal(t.sinks, sink.float())
    # What the kernel still declines is named in the adapter's spelling: a strided float32 sink.
    with pytest.raises(NotImplementedError, match=r"^learnable_sink: .*stride 1.*got stride 2"):
        flash_attn_varlen_func(q, k, v, cu_q, None, mq, mk, learnable_sink=torch.zeros(8)[::2],
                               block_table=table, seqused_k=used_k)  # fmt: skip
    assert len(launches) == 2


# --- what runs: attention, plan, Plan.run -----------------------------------------------------------


@pytest.mark.parametrize("backend", ["auto", "cute"])
def test_attention_launches_the_score_classes(on_cuda, backend):
    launches, binds = on_cuda
    args, kwargs = Case(1453, [3, 4], [3, 6], 4, 2, 64, 64, dtype=torch.bfloat16, causal=True).make()
    sinks = _sinks(4)
    ragged_attn.attention(*args, **kwargs, softcap=20.0, backend=backend)
    ragged_attn.attention(*args, **kwargs, sinks=sinks, return_lse=True, backend=backend)
    ragged_attn.attention(*args, **kwargs, sinks=sinks, softcap=7.0, backend=backend)
    names = [lc.name for lc, _, _ in launches]
    assert names == [
        "sm_90a-d64x64-bf16-bf16-causal-nolse-ragged-softcap",
        "sm_90a-d64x64-bf16-bf16-causal-lse-ragged-sinks",
        "sm_90a-d64x64-bf16-bf16-causal-nolse-ragged-softcap-sinks",
    ]
    assert [p.softcap for _, p, _ in launches] == [20.0, 0.0, 7.0]
    assert launches[1][2].sinks is sinks and launches[2][2].sinks is sinks
    # Each call's options bound a fast path (sinks on / off is part of the options' key).
    assert [lc.name for lc, b in binds] == names


def test_attention_fast_path_serves_softcap_by_its_value(on_cuda):
    launches, binds = on_cuda
    args, kwargs = Case(1454, [3, 4], [3, 6], 4, 2, 64, 64, dtype=torch.bfloat16).make()
    ragged_attn.attention(*args, **kwargs, softcap=20.0)
    ((_, bound),) = binds
    ragged_attn.attention(*args, **kwargs, softcap=20.0)  # the same options: the bound kernel's turn
    assert len(bound.calls) == 1 and len(launches) == 2  # the stand-in declined: the checked path ran
    ragged_attn.attention(*args, **kwargs, softcap=21.0)  # another cap: another key, a fresh binding
    assert len(binds) == 3 and binds[1][1].calls == [] and len(launches) == 3
    assert {lc for lc, _ in binds} == {launches[0][0]}  # one class for both caps


def test_kernel_plans_with_softcap_and_sinks(on_cuda):
    launches, binds = on_cuda
    args, kwargs = Case(1455, [3, 4], [3, 6], 4, 2, 64, 64, dtype=torch.bfloat16, window=(2, 0)).make()
    p = ragged_attn.plan(*args, **kwargs, softcap=9.0)
    assert p.layout_class.name.endswith("-window-nolse-ragged-softcap") and p._bound is binds[-1][1]
    p.run(*args)
    assert len(p._bound.calls) == 1 and launches[-1][1].softcap == 9.0  # fast path first, then checked
    with pytest.raises(ValueError, match="^sinks: this plan was made without sinks"):  # needs a -sinks plan
        p.run(*args, sinks=_sinks(4))
    assert len(p._bound.calls) == 2  # offered to the fast path (whose real kernel declines it), then named

    ps = ragged_attn.plan(*args, **kwargs, sinks=_sinks(4), softcap=9.0, return_lse=True)
    assert ps.layout_class.name.endswith("-window-lse-ragged-softcap-sinks") and ps._bound is binds[-1][1]
    for seed in (1, 2):
        s = _sinks(4, seed)
        ps.run(*args, sinks=s)
        assert ps._bound.calls[-1][-1] is s  # the fast path first (the stand-in declines), then checked
        lc, problem, t = launches[-1]
        assert lc == ps.layout_class and t.sinks is s and problem.softcap == 9.0
    with pytest.raises(ValueError, match="^sinks: this plan was made with sinks; pass them"):
        ps.run(*args)
    with pytest.raises(NotImplementedError, match="^sinks: .*stride"):
        ps.run(*args, sinks=torch.zeros(8)[::2])


def test_plain_plan_refuses_sinks_by_name(on_cuda):
    launches, binds = on_cuda
    args, kwargs = Case(1456, [3, 4], [3, 6], 4, 2, 64, 64, dtype=torch.float16).make()
    p = ragged_attn.plan(*args, **kwargs)
    with pytest.raises(ValueError, match="^sinks: this plan was made without sinks, got a tensor"):
        p.run(*args, sinks=_sinks(4))
    assert len(p._bound.calls) == 1 and launches == []  # the stand-in declined; nothing launched


# --- the arguments that reach the compiled function -------------------------------------------------


@pytest.fixture
def cpu_launch(monkeypatch):
    """launch_forward runs on CPU tensors with a recorder for the compiled function."""
    monkeypatch.setattr(sm90_launch, "sm_count", lambda device: 132)
    rec = EntryModel()
    monkeypatch.setattr(compile_cache, "get_kernel", lambda lc, compile_fn: rec)
    return rec


@pytest.mark.parametrize("sinks,softcap", [(True, 0.0), (False, 12.0), (True, 3.0)], ids=["sinks", "softcap", "both"])
def test_launch_cute_passes_sinks_and_softcap_in_compiled_args_order(cpu_launch, sinks, softcap):
    args, kwargs = Case(1457, [3, 4], [3, 6], 4, 2, 64, 64, dtype=torch.bfloat16, causal=True).make()
    s = _sinks(4) if sinks else None
    problem, t = build_problem(*args, **kwargs, sinks=s, softcap=softcap, return_lse=True)
    lc = backends.layout_class_for(problem)
    ka = backends.kernel_arguments(problem, t, torch.empty(7, 4, 64, dtype=torch.bfloat16), torch.empty(4, 7))
    assert set(ka) <= set(inspect.signature(sm90.launch_forward).parameters)
    assert ka["extended"] is True and ka["sinks"] is s and ka["softcap"] == softcap
    backends.launch_cute(lc, problem, t)
    (call,) = cpu_launch.calls
    named = dict(zip(sm90.compiled_args(lc), call, strict=True))
    assert named["sinks"] is s and named["softcap"] == softcap and named["softmax_scale"] == problem.softmax_scale


def test_plain_problems_pass_no_extended_arguments(cpu_launch):
    args, kwargs = Case(1458, [3, 4], [3, 6], 4, 2, 64, 64, dtype=torch.bfloat16).make()
    problem, t = build_problem(*args, **kwargs)
    ka = backends.kernel_arguments(problem, t, torch.empty(7, 4, 64, dtype=torch.bfloat16), None)
    assert ka["extended"] is False and ka["sinks"] is None and ka["softcap"] == 0.0
    backends.launch_cute(backends.layout_class_for(problem), problem, t)
    assert len(cpu_launch.calls[0]) == len(sm90.COMPILED_ARGS)


def test_bound_kernel_appends_the_cap_and_leaves_the_plain_call_alone():
    args, kwargs = Case(1459, [3, 4], [3, 6], 8, 2, 128, 128, dtype=torch.bfloat16).make()
    q, k, v, cu_q, cu_k, mq, _ = args
    plain_problem, _ = build_problem(*args, **kwargs)
    rec = EntryModel()
    plain = BoundKernel(rec, plain_problem)
    assert plain._compiled is rec  # the plain classes' hot path calls the compiled function itself
    problem, _ = build_problem(*args, **kwargs, softcap=15.0, return_lse=True)
    rec = EntryModel()
    bound = BoundKernel(rec, problem)
    out, lse = bound.try_launch(q, k, v, cu_q, cu_k, mq, None, None, None, None, None)
    (call,) = rec.calls
    lc = backends.layout_class_for(problem)
    named = dict(zip(sm90.compiled_args(lc), call, strict=True))
    assert named["sinks"] is None and named["softcap"] == 15.0 and named["lse_flat"].numel() == lse.numel()
    # A plain or -softcap class's fast path declines any call with sinks.
    assert bound.try_launch(q, k, v, cu_q, cu_k, mq, None, None, None, None, None, None, _sinks(8)) is None
    assert len(rec.calls) == 1


def test_bound_kernel_of_a_sinks_class_takes_each_calls_sinks_as_the_kernel_reads_them():
    args, kwargs = Case(1460, [3, 4], [3, 6], 8, 2, 128, 128, dtype=torch.bfloat16, causal=True).make()
    q, k, v, cu_q, cu_k, mq, _ = args
    problem, _ = build_problem(*args, **kwargs, sinks=_sinks(8), softcap=6.0)
    lc = backends.layout_class_for(problem)
    rec = EntryModel()
    bound = BoundKernel(rec, problem)
    for s in (_sinks(8, 1), torch.nn.Parameter(_sinks(8, 2), requires_grad=False)):  # gpt-oss: a Parameter
        out = bound.try_launch(q, k, v, cu_q, cu_k, mq, None, None, None, None, None, None, s)
        named = dict(zip(sm90.compiled_args(lc), rec.calls[-1], strict=True))
        assert named["sinks"] is s and named["softcap"] == 6.0 and named["out"] is out
        assert bound._sinks_slot.sinks is None  # nothing kept alive after the call
    declined = [
        None,  # a -sinks class needs them
        _sinks(8).double(),  # not float32
        _sinks(4),  # not (H_q,)
        torch.zeros(16)[::2],  # not stride 1
    ]
    for s in declined:
        assert bound.try_launch(q, k, v, cu_q, cu_k, mq, None, None, None, None, None, None, s) is None
    out = torch.empty(7, 8, 128, dtype=torch.bfloat16)
    inside = out.view(-1)[:16].view(torch.float32)[:8]  # sinks inside out's bytes: the checked path
    assert bound.try_launch(q, k, v, cu_q, cu_k, mq, None, None, None, out, None, None, inside) is None
    assert len(rec.calls) == 2
    assert bound._sinks_slot.sinks is None  # declined calls keep nothing alive either


def test_a_sinks_call_declined_after_its_checks_keeps_no_sinks_alive():
    """A padded-LSE call past the kernel's padded-row limit is declined after the sinks passed
    their checks: the slot must stay empty (found by a breaking session, 2026-12-03)."""
    args, kwargs = Case(1465, [3, 4], [3, 6], 8, 2, 128, 128, dtype=torch.bfloat16, causal=True,
                        lse_layout="padded").make()  # fmt: skip
    q, k, v, cu_q, cu_k, mq, _ = args
    problem, _ = build_problem(*args, **kwargs, sinks=_sinks(8), return_lse=True)
    rec = EntryModel()
    bound = BoundKernel(rec, problem)
    s = _sinks(8, 3)
    too_many_rows = backends.MAX_PADDED_LSE_ROWS + 1
    assert bound.try_launch(q, k, v, cu_q, cu_k, too_many_rows, None, None, None, None, None, None, s) is None
    assert rec.calls == [] and getattr(bound._sinks_slot, "sinks", None) is None
    out, lse = bound.try_launch(q, k, v, cu_q, cu_k, mq, None, None, None, None, None, None, s)
    named = dict(zip(sm90.compiled_args(backends.layout_class_for(problem)), rec.calls[-1], strict=True))
    assert named["sinks"] is s and named["lse_flat"].numel() == lse.numel() and bound._sinks_slot.sinks is None


# --- the launch path's fills: rows that see no key ------------------------------------------------


def _fill_case(lse_layout, lse_base, q_gaps, seed):
    """A call in which no row sees a key (every key length 0), rows outside every sequence
    included (gaps with seqused_q, rows after the last sequence)."""
    case = Case(seed, [3, 0, 5, 2], [0, 0, 0, 0], 6, 2, 64, 64, dtype=torch.bfloat16, causal=True,
                lse_layout=lse_layout, lse_base=lse_base, q_gaps=q_gaps)  # fmt: skip
    args, kwargs = case.make()
    q, k, v, cu_q, cu_k, mq, mk = args
    # Rows after the last sequence too: q grows, cu_seqlens_q keeps its end.
    q = torch.cat([q, torch.randn(2, 6, 64).to(q.dtype)])
    return (q, k, v, cu_q, cu_k, mq, mk), kwargs


@pytest.mark.parametrize("lse_base", ["ln", "log2"])
@pytest.mark.parametrize("lse_layout", ["head_major", "token_major", "padded"])
@pytest.mark.parametrize("q_gaps", [False, True], ids=["packed", "gaps"])
def test_fill_without_keys_gives_the_sink_to_rows_of_sequences(lse_layout, lse_base, q_gaps):
    """launch_forward's fill branch (out of another dtype than q: the kernel cannot stand q in for
    v; an empty page pool takes it too) against the reference on the same call."""
    args, kwargs = _fill_case(lse_layout, lse_base, q_gaps, 1461)
    sinks = _sinks(6, 1461)
    sinks[4] = -math.inf  # no sink for head 4: -inf as without sinks
    problem, t = build_problem(*args, **kwargs, sinks=sinks, return_lse=True)
    # Poisoned caller buffers: rows outside every sequence (gaps, the rows after the last one) must
    # keep the poison, as on the reference given the same buffers (api.attention: never written).
    out = torch.full((problem.total_q, 6, 64), 7.0, dtype=torch.float16)  # another dtype than q
    lse = torch.full(problem.lse_shape(), math.nan)
    want_o, want_lse = attention_reference(
        *args, **kwargs, sinks=sinks, return_lse=True, out=out.to(args[0].dtype), lse=lse.clone()
    )  # fmt: skip (the reference writes q's dtype; 7.0 and 0 are exact in both)
    ka = backends.kernel_arguments(problem, t, out, lse)
    sm90.launch_forward(lambda *a: pytest.fail("launched"), **ka)
    assert torch.equal(out, want_o.to(out.dtype))
    inside = want_o[:, 0, 0] == 0  # the sequences' rows (O = 0); the others kept 7.0
    assert inside.any() and (lse_layout == "padded" or not inside.all())
    assert torch.equal(torch.isnan(lse), torch.isnan(want_lse)) and torch.equal(torch.isinf(lse), torch.isinf(want_lse))
    fin = torch.isfinite(want_lse)
    assert torch.allclose(lse[fin], want_lse[fin], atol=1e-6, rtol=0), (lse, want_lse)
    assert torch.equal(lse[torch.isinf(want_lse)], want_lse[torch.isinf(want_lse)])


def test_fill_without_keys_is_minus_inf_without_sinks_and_keeps_a_permuted_padded_buffer():
    args, kwargs = _fill_case("padded", "log2", True, 1462)
    sinks = _sinks(6, 1462)
    out = torch.empty(args[0].shape[0], 6, 64, dtype=torch.float16)
    # A padded buffer stored (H_q, B, s_max) in memory: the logical (B, s_max, H_q) view is permuted.
    lse = torch.full((6, 4, args[5]), math.nan).permute(1, 2, 0)
    problem, t = build_problem(*args, **kwargs, sinks=sinks, return_lse=True, lse=lse)
    sm90.launch_forward(lambda *a: pytest.fail("launched"), **backends.kernel_arguments(problem, t, out, lse))
    want = attention_reference(*args, **kwargs, sinks=sinks, return_lse=True)[1]
    fin = torch.isfinite(want)
    assert torch.allclose(lse[fin], want[fin]) and torch.equal(lse[~fin], want[~fin])
    assert torch.allclose(lse[0, :3], sinks * LOG2_E)  # sequence 0's rows, base 2
    problem, t = build_problem(*args, **kwargs, return_lse=True)
    lse2 = torch.full(problem.lse_shape(), math.nan)
    sm90.launch_forward(lambda *a: pytest.fail("launched"), **backends.kernel_arguments(problem, t, out, lse2))
    assert (lse2 == -math.inf).all()  # padded: every row is a sequence's row or a padded row past one


@pytest.mark.parametrize("lse_base", ["ln", "log2"])
def test_fill_on_an_empty_page_pool_with_sinks(cpu_launch, lse_base):
    """The paged fill branch (a pool with no pages) follows the same rule, on the dispatched path:
    the paged score class, then launch_cute, which fills instead of launching; against the
    reference on the same call."""
    args, kwargs = Case(1463, [4, 2], [0, 0], 4, 4, 64, 64, dtype=torch.bfloat16, lse_layout="token_major",
                        lse_base=lse_base).make()  # fmt: skip
    q, _, _, cu_q, _, mq, _ = args
    pool = torch.empty(0, 16, 4, 64, dtype=torch.bfloat16)
    call = dict(kwargs, page_table=torch.zeros(2, 1, dtype=torch.int32), sinks=_sinks(4, 1463), softcap=6.0,
                seqused_k=torch.zeros(2, dtype=torch.int32), return_lse=True)  # fmt: skip
    out = torch.full((6, 4, 64), math.nan, dtype=torch.bfloat16)
    lse = torch.full((6, 4), math.nan)
    problem, t = build_problem(q, pool, pool, cu_q, None, mq, 0, **call, out=out, lse=lse)
    lc = backends.layout_class_for(problem)
    assert (lc.kv, lc.softcap, lc.sinks) == ("paged", True, True)
    got_out, got_lse = backends.launch_cute(lc, problem, t)
    assert got_out is out and got_lse is lse and cpu_launch.calls == []  # filled, not launched
    want_out, want_lse = attention_reference(q, pool, pool, cu_q, None, mq, 0, **call)
    assert (out == 0).all() and torch.equal(out, want_out)
    assert torch.allclose(lse, want_lse, atol=1e-6, rtol=0) and not torch.isinf(lse).any()


@pytest.mark.parametrize("with_sinks", [True, False], ids=["sinks", "plain"])
def test_fill_on_an_empty_page_pool_keeps_rows_outside_every_sequence(cpu_launch, with_sinks):
    """A caller's out / lse rows that no sequence covers (here rows 3-4 after the only sequence)
    are never written, on the fill branch too (found by a breaking session, 2026-12-03: the fill
    zeroed the whole out and set the whole LSE to -inf)."""
    gen = torch.Generator().manual_seed(1464)
    q = torch.randn(5, 2, 64, generator=gen).bfloat16()
    pool = torch.empty(0, 16, 2, 64, dtype=torch.bfloat16)
    cu = torch.tensor([0, 3], dtype=torch.int32)
    sinks = torch.randn(2, generator=gen) if with_sinks else None
    call = dict(page_table=torch.zeros(1, 1, dtype=torch.int32), seqused_k=torch.zeros(1, dtype=torch.int32),
                sinks=sinks, return_lse=True)  # fmt: skip
    out = torch.full((5, 2, 64), 7.0).bfloat16()
    lse = torch.full((2, 5), 7.0)
    want_o, want_lse = attention_reference(q, pool, pool, cu, None, 3, 0, **call, out=out.clone(), lse=lse.clone())
    problem, t = build_problem(q, pool, pool, cu, None, 3, 0, **call, out=out, lse=lse)
    backends.launch_cute(backends.layout_class_for(problem), problem, t)
    assert cpu_launch.calls == []  # filled, not launched
    assert torch.equal(out, want_o) and (out[:3] == 0).all() and (out[3:] == 7.0).all()
    assert torch.allclose(lse, want_lse, atol=1e-6, rtol=0) and (lse[:, 3:] == 7.0).all()
    if with_sinks:
        assert torch.allclose(lse[:, :3], sinks[:, None].expand(2, 3))
    else:
        assert (lse[:, :3] == -math.inf).all()


@pytest.mark.parametrize("lse_layout", ["head_major", "padded"])
def test_no_query_rows_keep_minus_inf_with_sinks(cpu_launch, lse_layout):
    """total_q == 0 (launch_cute's fill): only padded rows past a length remain: -inf, sinks or not."""
    q = torch.empty(0, 4, 64, dtype=torch.bfloat16)
    k = torch.randn(5, 2, 64).to(torch.bfloat16)
    cu_q = torch.zeros(3, dtype=torch.int32)
    cu_k = torch.tensor([0, 2, 5], dtype=torch.int32)
    problem, t = build_problem(q, k, k, cu_q, cu_k, 3, 3, sinks=_sinks(4), return_lse=True, lse_layout=lse_layout)
    out, lse = backends.launch_cute(backends.layout_class_for(problem), problem, t)
    assert out.shape == (0, 4, 64) and (lse == -math.inf).all() and lse.shape == problem.lse_shape()
    assert cpu_launch.calls == []


def test_ragged_and_paged_calls_keep_a_binding_each(on_cuda):
    """Ragged and paged calls with the same options alternate (a serving step's prefill and decode
    halves): each kind has a key of its own (page_table is None ends the key), so a paged call
    neither evicts the ragged binding nor is offered to it, and vice versa (rebinding after every
    checked call cost ~0.8 ms of host time per paged call on the H200, tools/bench_vllm_mixed.py,
    2026-12-03)."""
    launches, binds = on_cuda
    ragged_args, ragged_kw = Case(1452, [3, 4], [5, 6], 4, 2, 64, 64, dtype=torch.float16, causal=True).make()
    paged_args, paged_kw = Case(1453, [3, 4], [5, 6], 4, 2, 64, 64, dtype=torch.float16, causal=True,
                                page_size=4).make()  # fmt: skip
    for _ in range(3):
        ragged_attn.attention(*ragged_args, **ragged_kw)
        ragged_attn.attention(*paged_args, **paged_kw)
    # The stand-in's try_launch declines, so every call takes the checked path and binds again,
    # under its own kind's key: two bindings live side by side.
    assert [c[0].kv for c in launches] == ["ragged", "paged"] * 3
    assert [lc.kv for lc, _ in binds] == ["ragged", "paged"] * 3
    assert sorted(b.layout_class.kv for b in api._FAST_PATHS.values()) == ["paged", "ragged"]
    keys = {b.layout_class.kv: key for key, b in api._FAST_PATHS.items()}
    ragged_key, paged_key = keys["ragged"], keys["paged"]
    assert ragged_key[:-1] == paged_key[:-1] and (ragged_key[-1], paged_key[-1]) == (True, False)
    # Each binding is offered only the next call of its kind; the last two were offered none.
    assert [len(b.calls) for _, b in binds] == [1, 1, 1, 1, 0, 0]
    assert all((call[8] is None) == (lc.kv == "ragged") for lc, b in binds for call in b.calls)


def test_paged_calls_of_each_kv_layout_keep_a_binding_each(on_cuda):
    """kv_layout is part of the key: NHD and HND pools of the same options bind one class each
    (the same paged class: the layout is run time) and are never offered to the other's binding."""
    launches, binds = on_cuda
    calls = [
        Case(1460, [3, 4], [5, 6], 4, 2, 64, 64, dtype=torch.float16, page_size=4, kv_layout=layout).make()
        for layout in ("NHD", "HND")
    ]
    for _ in range(2):
        for args, kw in calls:
            ragged_attn.attention(*args, **kw)
    assert [t.page_table is not None for _, _, t in launches] == [True] * 4
    assert len(api._FAST_PATHS) == 2 and {key[11] for key in api._FAST_PATHS} == {"NHD", "HND"}
    assert len({lc for lc, _ in binds}) == 1  # one paged class serves both layouts
    assert [len(b.calls) for _, b in binds] == [1, 1, 0, 0]
