"""Issue 14 items 1-2 through the public API on the sm90 kernel: sinks and softcap, against the reference.

`ragged_attn.attention`, `ragged_attn.plan(...).run`, the FlashAttention adapters (softcap,
learnable_sink) and the transformers adapter (softcap, s_aux) on CUDA tensors, routed to the
kernel's `-softcap` / `-sinks` layout classes (backends.layout_class_for), with outputs poisoned
(NaN), fresh random inputs per run (the seed is in every failure message; RAGGED_ATTN_TEST_SEED
replays one) and `torch.cuda.set_sync_debug_mode("error")` around the kernel calls, compared with
`attention(..., backend="reference")`. Covers GQA, causal (both alignments) and windows, empty
sequences, rows that see no key (O = 0, LSE = the sink, in the LSE's base), every LSE layout and
base, the launch path's fills (backends.launch_cute / kernels/sm90/launch.py fill_without_keys),
CUDA-graph replay of a sinks plan, page pools (the paged `-softcap` / `-sinks` classes, served
since 2026-12-03: attention, a paged plan, the FlashAttention adapters' page_table / block_table,
an empty pool), and what still declines (strided sinks).

Tolerances (docs/DESIGN.md): out |err| <= 2e-2 + 2e-2 |ref|; LSE within 1e-2, 2e-2 with a
softcap (the kernel's tanh is tanh.approx.f32, ~2^-11 relative: a cap c moves a score by up to
~c * 5e-4; the caps here are <= 10). About ten layout classes compile (~20 s each on an H200).
Run: PYTHONPATH=$PWD python3 -m pytest tests/gpu/test_sinks_softcap_api_gpu.py -m gpu -q -n 8
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os

import pytest
import torch

import ragged_attn
from ragged_attn import backends
from ragged_attn.problem import build_problem
from tests.cases import Case, close, valid_rows

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="needs a CUDA GPU (sm_90a)",
    ),
]

LOG2_E = 1.0 / math.log(2.0)


def _seed() -> int:
    """A fresh seed per test; RAGGED_ATTN_TEST_SEED replays one."""
    fixed = os.environ.get("RAGGED_ATTN_TEST_SEED")
    return int(fixed) if fixed else int(torch.randint(0, 2**31 - 1, ()).item())


def _sinks(h_q: int, seed: int, no_sink_head: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(h_q, generator=g) * 2.0
    if no_sink_head:
        s[0] = -math.inf  # head 0: no sink (as sinks=None for that head)
    return s.float().cuda()


class sync_forbidden:
    """`torch.cuda.set_sync_debug_mode("error")` for the block: a device-to-host read raises."""

    def __enter__(self):
        torch.cuda.set_sync_debug_mode("error")

    def __exit__(self, *exc):
        torch.cuda.set_sync_debug_mode(0)


def _lse_rows(case: Case, lse: torch.Tensor, cu_q) -> torch.Tensor:
    """The LSE entries of rows inside a sequence (all of a padded buffer: its padding is -inf)."""
    if case.lse_layout == "padded":
        return lse
    rows = valid_rows(case, cu_q)
    return lse[rows] if case.lse_layout == "token_major" else lse[:, rows]


def _check(case: Case, seed: int, cu_q, got, want, lse_tol: float) -> None:
    (out, lse), (want_out, want_lse) = got, want
    rows = valid_rows(case, cu_q)
    close(out[rows], want_out[rows], f"seed {seed}: out")
    close(_lse_rows(case, lse, cu_q), _lse_rows(case, want_lse, cu_q), f"seed {seed}: lse", atol=lse_tol, rtol=0)


# --- attention: the feature grid --------------------------------------------------------------------
# (case, sinks on, softcap). softmax_scale 0.5 with a cap puts the scores (std ~4-8) into tanh's bend.
GRID = [
    # GQA 4:1, causal bottom-right with q_len > k_len (early rows see no key), empty sequences,
    # padded LSE in base 2: the -softcap-sinks class, d128.
    (Case(1, [300, 0, 77, 1, 40], [300, 5, 400, 129, 0], 32, 8, 128, 128, dtype=torch.bfloat16, causal=True,
          lse_layout="padded", lse_base="log2", extra={"softmax_scale": 0.5}), True, 8.0),
    # fp16 d64, causal window, seqused_q gaps, token-major LSE: sinks only.
    (Case(2, [50, 190, 0], [40, 190, 33], 14, 2, 64, 64, dtype=torch.float16, causal=True, window=(64, 0),
          lse_layout="token_major", q_gaps=True), True, 0.0),
    # top-left window (0, 0) with q_len > k_len: rows i >= k_len see no key; a sequence with no keys.
    (Case(3, [200, 90, 7], [64, 40, 0], 6, 2, 128, 128, dtype=torch.bfloat16, causal="top_left", window=(0, 0),
          lse_layout="head_major", lse_base="log2"), True, 0.0),
    # softcap only, top-left causal, token-major, GQA 6:1.
    (Case(4, [130, 77, 1], [64, 190, 1], 12, 2, 64, 64, dtype=torch.bfloat16, causal="top_left",
          lse_layout="token_major", extra={"softmax_scale": 0.7}), False, 5.0),
    # d256, a two-sided window without causal, both options, base 2.
    (Case(5, [150, 1, 260], [100, 7, 333], 8, 2, 256, 256, dtype=torch.bfloat16, window=(50, 7),
          lse_base="log2", extra={"softmax_scale": 0.3}), True, 10.0),
    # DeepSeek's (192, 128), causal, sinks, padded LSE.
    (Case(6, [129, 0, 64], [200, 9, 64], 16, 16, 192, 128, dtype=torch.bfloat16, causal=True,
          lse_layout="padded"), True, 0.0),
    # d80 rides the (96, 96) envelope; fp16, causal, both options.
    (Case(7, [33, 200], [50, 260], 8, 4, 80, 80, dtype=torch.float16, causal=True, lse_layout="token_major",
          extra={"softmax_scale": 0.5}), True, 6.0),
]


@pytest.mark.parametrize("case,with_sinks,softcap", GRID, ids=lambda x: x.id if isinstance(x, Case) else str(x))
def test_attention_matches_reference(case, with_sinks, softcap):
    _attention_matches_reference(case, with_sinks, softcap, "ragged")


def _tensors(args, kwargs) -> list[torch.Tensor]:
    return [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]


def _unchanged(now: list[torch.Tensor], before: list[torch.Tensor]) -> bool:
    """Equal, NaN included (the pools hold NaN in unreferenced slots)."""
    return all(
        torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
        for a, b in zip(now, before, strict=True)
    )


def _attention_matches_reference(case: Case, with_sinks: bool, softcap: float, kv: str) -> None:
    """`attention` on the kernel (the class with the options' flags and K/V kind `kv`) into poisoned
    out / lse, with no sync, against the reference: rows outside every sequence stay unwritten,
    the inputs unchanged, and a call that allocates gives the same numbers."""
    seed = _seed()
    case = dataclasses.replace(case, seed=seed)
    args, kwargs = case.make("cuda")
    if softcap:
        kwargs["softcap"] = softcap
    if with_sinks:
        kwargs["sinks"] = _sinks(case.h_q, seed, no_sink_head=seed % 2 == 0)
    problem, _ = build_problem(*args, **kwargs, return_lse=True)
    lc = backends.layout_class_for(problem)
    assert (lc.softcap, lc.sinks, lc.kv) == (bool(softcap), with_sinks, kv), lc.name
    before = [a.clone() for a in _tensors(args, kwargs)]
    out = torch.full((problem.total_q, case.h_q, case.d_v), math.nan, dtype=case.dtype, device="cuda")
    lse = torch.full(problem.lse_shape(), math.nan, device="cuda")
    with sync_forbidden():
        got = ragged_attn.attention(*args, **kwargs, return_lse=True, out=out, lse=lse, backend="cute")
    assert got[0] is out and got[1] is lse
    want = ragged_attn.attention(*args, **kwargs, return_lse=True, backend="reference")
    _check(case, seed, args[3], got, want, 2e-2 if softcap else 1e-2)
    rows = valid_rows(case, args[3])
    others = sorted(set(range(problem.total_q)) - set(rows))
    if others:
        assert torch.isnan(out[others]).all(), f"seed {seed}: rows outside every sequence were written"
    assert _unchanged(_tensors(args, kwargs), before), f"seed {seed}: an input changed"
    # Without out / lse (allocated by the call; the options' fast path is bound after it): the same numbers.
    again = ragged_attn.attention(*args, **kwargs, return_lse=True)
    assert torch.equal(again[0][rows], out[rows]), f"seed {seed}: out differs between calls"


def test_rows_without_keys_get_zero_and_the_sink_in_each_base():
    """total_k == 0 (the kernel runs with q and out standing in for k and v) and a sequence whose
    window leaves rows without keys: O = 0, LSE = sinks[h] (ln) or sinks[h] * log2(e) (log2)."""
    seed = _seed()
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(75, 4, 128, generator=g).to(torch.bfloat16).cuda()
    k = torch.empty(0, 2, 128, dtype=torch.bfloat16, device="cuda")
    cu_q = torch.tensor([0, 5, 75], dtype=torch.int32, device="cuda")
    cu_k = torch.zeros(3, dtype=torch.int32, device="cuda")
    sinks = _sinks(4, seed)
    for base, factor in (("ln", 1.0), ("log2", LOG2_E)):
        out = torch.full((75, 4, 128), math.nan, dtype=torch.bfloat16, device="cuda")
        with sync_forbidden():
            o, lse = ragged_attn.attention(q, k, k, cu_q, cu_k, 70, 0, causal=True, sinks=sinks, softcap=4.0,
                                           return_lse=True, lse_base=base, out=out)  # fmt: skip
        assert (o == 0).all(), f"seed {seed}: O of rows without keys"
        close(lse, (sinks * factor)[:, None].expand(4, 75), f"seed {seed}: LSE = the sink ({base})", atol=1e-5, rtol=0)


@pytest.mark.parametrize("lse_layout", ["head_major", "token_major", "padded"])
def test_launch_fills_put_the_sink_in_rows_of_sequences(lse_layout):
    """The fill of kernels/sm90/launch.py (fill_without_keys) on the GPU, on the stream, with no
    sync: out of another dtype than q (so the kernel cannot stand q in for v) and no keys. The
    sequences' rows get O = 0 and LSE = the sink, padded LSE rows past a length -inf; rows outside
    every sequence (gaps, the tail) are not written (the caller's NaN stays in out and a token-row
    LSE: launch_forward's contract)."""
    from ragged_attn.kernels import sm90

    seed = _seed()
    case = Case(seed, [3, 0, 5, 2], [0, 0, 0, 0], 6, 2, 64, 64, dtype=torch.bfloat16, causal=True,
                lse_layout=lse_layout, lse_base="log2", q_gaps=True)  # fmt: skip
    args, kwargs = case.make("cuda")
    sinks = _sinks(6, seed, no_sink_head=True)
    problem, t = build_problem(*args, **kwargs, sinks=sinks, return_lse=True)
    want = ragged_attn.attention(*args, **kwargs, sinks=sinks, return_lse=True, backend="reference")[1]
    out = torch.full((problem.total_q, 6, 64), math.nan, dtype=torch.float16, device="cuda")
    lse = torch.full(problem.lse_shape(), math.nan, device="cuda")
    with sync_forbidden():
        sm90.launch_forward(lambda *a: pytest.fail("launched"), **backends.kernel_arguments(problem, t, out, lse))
    torch.cuda.synchronize()
    rows = valid_rows(case, args[3])
    assert (out[rows] == 0).all(), f"seed {seed}: O of the sequences' rows"
    close(_lse_rows(case, lse, args[3]), _lse_rows(case, want, args[3]), f"seed {seed}: lse", atol=1e-5, rtol=0)
    outside = sorted(set(range(problem.total_q)) - set(rows))
    assert outside, "the case has rows outside every sequence (q_gaps)"
    assert torch.isnan(out[outside]).all(), f"seed {seed}: out rows outside every sequence written"
    if lse_layout == "padded":
        assert not torch.isnan(lse).any(), f"seed {seed}: padded LSE rows left unwritten"
    else:
        gap = lse[outside] if lse_layout == "token_major" else lse[:, outside]
        assert torch.isnan(gap).all(), f"seed {seed}: LSE rows outside every sequence written"


def test_no_query_rows_with_sinks_leave_padded_lse_minus_inf():
    """total_q == 0 (launch_cute's fill, no launch): every padded row is past its length."""
    q = torch.empty(0, 4, 64, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(5, 2, 64, device="cuda").to(torch.bfloat16)
    cu_q = torch.zeros(3, dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 2, 5], dtype=torch.int32, device="cuda")
    lse = torch.full((2, 3, 4), math.nan, device="cuda")
    sinks = _sinks(4, 0)  # a host-to-device copy: before the block that forbids synchronizing
    with sync_forbidden():
        out, got = ragged_attn.attention(q, k, k, cu_q, cu_k, 3, 3, sinks=sinks, return_lse=True,
                                         lse_layout="padded", lse=lse, backend="cute")  # fmt: skip
    assert got is lse and out.shape == (0, 4, 64) and (lse == -math.inf).all()


# --- plans and the fast path --------------------------------------------------------------------------


def test_softcap_plan_runs_new_shapes_on_the_fast_path_without_compiling():
    seed = _seed()
    base = Case(seed, [100, 7], [100, 7], 16, 4, 128, 128, dtype=torch.bfloat16, causal=True,
                extra={"softmax_scale": 0.5, "softcap": 7.5})  # fmt: skip
    args, kwargs = base.make("cuda")
    plan = ragged_attn.plan(*args, **kwargs)
    assert plan.layout_class.softcap and not plan.layout_class.sinks and plan._bound is not None
    compiles = ragged_attn.cache_info().compiles
    for i in range(6):
        case = Case(seed + i, [i * 37 % 300, 0, 3 + i], [i * 53 % 400 + 1, 9, 3 + i], 8 * (1 + i % 3), 2, 128, 128,
                    dtype=torch.bfloat16, causal=True)  # fmt: skip
        a, _ = case.make("cuda")
        with sync_forbidden():
            got = plan.run(*a)
        want = ragged_attn.attention(*a, **kwargs, backend="reference")
        rows = valid_rows(case, a[3])
        close(got[rows], want[rows], f"seed {seed}: plan.run {i}")
    # attention's own fast path with the same options: the second call takes it, same numbers.
    first = ragged_attn.attention(*args, **kwargs)
    with sync_forbidden():
        second = ragged_attn.attention(*args, **kwargs)
    assert torch.equal(first, second)
    assert ragged_attn.cache_info().compiles == compiles, "a new shape of one class compiled again"


def test_sinks_plan_takes_each_runs_sinks():
    seed = _seed()
    case = Case(seed, [60, 0, 130], [90, 4, 130], 8, 2, 128, 128, dtype=torch.bfloat16, causal=True,
                lse_layout="padded", lse_base="log2", extra={"softmax_scale": 0.5, "softcap": 8.0})  # fmt: skip
    args, kwargs = case.make("cuda")
    plan = ragged_attn.plan(*args, **kwargs, sinks=_sinks(8, seed), return_lse=True)
    assert plan.layout_class.name.endswith("-causal-lse-ragged-softcap-sinks") and plan._bound is not None
    results = []
    for i in range(3):
        sinks = _sinks(8, seed + i, no_sink_head=i == 1)
        with sync_forbidden():
            got = plan.run(*args, sinks=sinks)
        want = ragged_attn.attention(*args, **kwargs, sinks=sinks, return_lse=True, backend="reference")
        _check(case, seed, args[3], got, want, 2e-2)
        results.append(got[0])
    assert not torch.equal(results[0], results[2]), "the run's sinks were not used"
    with pytest.raises(ValueError, match="^sinks: this plan was made with sinks"):
        plan.run(*args)


def test_sinks_plan_replays_in_a_cuda_graph_with_new_lengths_and_sinks():
    """Contract 4: captured once, replayed with new lengths written into the same cu_seqlens and
    new sink values written into the same sinks tensor."""
    seed = _seed()
    total_q, total_k, h_q, h_kv, d = 256, 320, 8, 2, 128
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(total_q, h_q, d, generator=g).to(torch.bfloat16).cuda()
    k = torch.randn(total_k, h_kv, d, generator=g).to(torch.bfloat16).cuda()
    v = torch.randn(total_k, h_kv, d, generator=g).to(torch.bfloat16).cuda()
    cu_q = torch.tensor([0, 100, 256], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 120, 320], dtype=torch.int32, device="cuda")
    sinks = _sinks(h_q, seed)
    plan = ragged_attn.plan(q, k, v, cu_q, cu_k, 256, 320, causal=True, sinks=sinks, return_lse=True)
    out = torch.empty(total_q, h_q, d, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(h_q, total_q, device="cuda")
    plan.run(q, k, v, cu_q, cu_k, 256, 320, sinks=sinks, out=out, lse=lse)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan.run(q, k, v, cu_q, cu_k, 256, 320, sinks=sinks, out=out, lse=lse)
    for i, (starts_q, starts_k) in enumerate((([0, 100, 256], [0, 120, 320]), ([0, 0, 200], [0, 10, 10]))):
        cu_q.copy_(torch.tensor(starts_q, dtype=torch.int32))
        cu_k.copy_(torch.tensor(starts_k, dtype=torch.int32))
        sinks.copy_(_sinks(h_q, seed + 1 + i, no_sink_head=i == 0))
        out.fill_(math.nan)
        lse.fill_(math.nan)
        graph.replay()
        want_o, want_l = ragged_attn.attention(q, k, v, cu_q, cu_k, 256, 320, causal=True, sinks=sinks,
                                               return_lse=True, backend="reference")  # fmt: skip
        rows = [r for b in range(2) for r in range(starts_q[b], starts_q[b + 1])]
        close(out[rows], want_o[rows], f"seed {seed}: replay {i} out")
        close(lse[:, rows], want_l[:, rows], f"seed {seed}: replay {i} lse", atol=1e-2, rtol=0)


# --- adapters --------------------------------------------------------------------------------------------


def test_flash_attn_adapters_softcap_and_learnable_sink():
    from ragged_attn.compat import flash_attn_cute
    from ragged_attn.compat.flash_attn import flash_attn_varlen_func

    seed = _seed()
    case = Case(seed, [70, 0, 129], [70, 3, 300], 8, 2, 128, 128, dtype=torch.bfloat16, causal=True)
    (q, k, v, cu_q, cu_k, mq, mk), _ = case.make("cuda")
    sink_bf16 = _sinks(8, seed).to(torch.bfloat16)
    opts = dict(causal=True, softmax_scale=0.5, softcap=6.0)
    want_o, want_l = ragged_attn.attention(q, k, v, cu_q, cu_k, mq, mk, **opts, sinks=sink_bf16.float(),
                                           return_lse=True, backend="reference")  # fmt: skip
    rows = valid_rows(case, cu_q)
    with sync_forbidden():
        o, lse = flash_attn_cute.flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=mq,
                                                        max_seqlen_k=mk, learnable_sink=sink_bf16, return_lse=True,
                                                        backend="cute", **opts)  # fmt: skip
    close(o[rows], want_o[rows], f"seed {seed}: FA4 out")
    close(lse[:, rows], want_l[:, rows], f"seed {seed}: FA4 lse", atol=2e-2, rtol=0)
    want_o = ragged_attn.attention(q, k, v, cu_q, cu_k, mq, mk, **opts, backend="reference")
    with sync_forbidden():
        o = flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, mk, backend="cute", **opts)
    close(o[rows], want_o[rows], f"seed {seed}: FA2 softcap out")


@pytest.mark.parametrize("masked", [False, True], ids=["rows", "padding-mask"])
def test_transformers_attention_forward_softcap_and_s_aux(masked):
    """The function transformers calls per layer (compat.transformers.attention_forward, what
    attn_implementation="ragged_attn" registers) with Gemma 2's softcap and gpt-oss's s_aux in bf16."""
    import ragged_attn.compat.transformers as rt

    seed = _seed()
    g = torch.Generator().manual_seed(seed)
    batch, length, h_q, h_kv, d = 2, 96, 8, 2, 64
    module = torch.nn.Module()
    module.is_causal = True
    q, k, v = (torch.randn(batch, h, length, d, generator=g).to(torch.bfloat16).cuda() for h in (h_q, h_kv, h_kv))
    s_aux = _sinks(h_q, seed).to(torch.bfloat16)
    mask = None
    if masked:  # left padding on the second row, as a batched generate() prefill has
        mask = torch.ones(batch, length, dtype=torch.long, device="cuda")
        mask[1, :30] = 0
    opts = dict(scaling=0.5, softcap=5.0, sliding_window=40, s_aux=s_aux)
    got, _ = rt.attention_forward(module, q, k, v, mask, backend="cute", **opts)
    want, _ = rt.attention_forward(module, q, k, v, mask, backend="reference", **opts)
    keep = slice(None) if mask is None else mask.bool()
    close(got[keep], want[keep], f"seed {seed}: transformers out")


# --- page pools: the paged -softcap / -sinks classes -------------------------------------------------------
# (case, sinks on, softcap), as GRID, with K/V in page pools: pages in shuffled order, NaN in every slot
# no sequence references (tests/cases.py), key lengths from seqused_k.
PAGED_GRID = [
    # GQA 4:1, NHD pages of 16, causal bottom-right with q_len > k_len (early rows see no key), a
    # sequence without keys and one without queries, padded LSE in base 2: both options, d128.
    (Case(21, [300, 0, 77, 1, 40], [300, 5, 400, 129, 0], 16, 4, 128, 128, dtype=torch.bfloat16, causal=True,
          page_size=16, lse_layout="padded", lse_base="log2", extra={"softmax_scale": 0.5}), True, 8.0),
    # fp16 d64, HND pages of 64, a causal window, seqused_q gaps, token-major LSE: sinks only.
    (Case(22, [50, 190, 0], [40, 190, 33], 14, 2, 64, 64, dtype=torch.float16, causal=True, window=(64, 0),
          page_size=64, kv_layout="HND", lse_layout="token_major", q_gaps=True), True, 0.0),
    # top-left window (0, 0) with q_len > k_len: rows i >= k_len see no key; a sequence with no
    # keys; pages of 3 tokens (partial last pages).
    (Case(23, [200, 90, 7], [64, 40, 0], 6, 2, 128, 128, dtype=torch.bfloat16, causal="top_left",
          window=(0, 0), page_size=3, lse_base="log2"), True, 0.0),
    # softcap only, top-left causal, NHD pages of 128 (longer than two of the sequences), GQA 6:1, d64.
    (Case(24, [130, 77, 1], [64, 190, 1], 12, 2, 64, 64, dtype=torch.bfloat16, causal="top_left",
          page_size=128, lse_layout="token_major", extra={"softmax_scale": 0.7}), False, 5.0),
]


@pytest.mark.parametrize(
    "case,with_sinks,softcap", PAGED_GRID, ids=lambda x: x.id if isinstance(x, Case) else str(x)
)
def test_paged_attention_matches_reference(case, with_sinks, softcap):
    _attention_matches_reference(case, with_sinks, softcap, "paged")


def test_paged_plan_runs_new_pools_and_sinks_and_ragged_calls_follow_paged_ones():
    """A plan with a page table, sinks and a softcap takes each run's pool, page table, lengths and
    sinks (through the paged fast path, or the checked path where its predicate declines),
    compiling nothing more. Then attention with the same options on page pools, on ragged K/V and on
    page pools again: ragged and paged calls bind a class each, under keys of their own."""
    seed = _seed()
    extra = {"softmax_scale": 0.5, "softcap": 6.0}
    case = Case(seed, [70, 0, 129], [70, 3, 300], 8, 2, 128, 128, dtype=torch.bfloat16, causal=True,
                page_size=16, extra=extra)  # fmt: skip
    args, kwargs = case.make("cuda")
    plan = ragged_attn.plan(*args, **kwargs, sinks=_sinks(8, seed), return_lse=True)
    assert (plan.layout_class.kv, plan.layout_class.softcap, plan.layout_class.sinks) == ("paged", True, True)
    compiles = ragged_attn.cache_info().compiles
    for i, page_size in enumerate((16, 1, 64)):
        run_case = Case(seed + 1 + i, [33 * i + 1, 0, 200 - 50 * i], [90 * i, 7, 250], 8, 2, 128, 128,
                        dtype=torch.bfloat16, causal=True, page_size=page_size, extra=extra)  # fmt: skip
        a, kw = run_case.make("cuda")
        sinks = _sinks(8, seed + 1 + i, no_sink_head=i == 1)
        out = torch.full((a[0].shape[0], 8, 128), math.nan, dtype=torch.bfloat16, device="cuda")
        with sync_forbidden():
            got = plan.run(*a, page_table=kw["page_table"], seqused_k=kw["seqused_k"], sinks=sinks, out=out)
        assert got[0] is out
        want = ragged_attn.attention(*a, **kw, sinks=sinks, return_lse=True, backend="reference")
        _check(run_case, seed, a[3], got, want, 2e-2)
    assert ragged_attn.cache_info().compiles == compiles, "a new pool or page size compiled again"

    sinks = _sinks(8, seed + 7)
    ragged = dataclasses.replace(case, page_size=0)  # the same options (kv_layout: "NHD", the default)
    r_args, r_kwargs = ragged.make("cuda")
    for c, a, kw in ((case, args, kwargs), (ragged, r_args, r_kwargs), (case, args, kwargs)):
        with sync_forbidden():
            got = ragged_attn.attention(*a, **kw, sinks=sinks, return_lse=True)
        want = ragged_attn.attention(*a, **kw, sinks=sinks, return_lse=True, backend="reference")
        _check(c, seed, a[3], got, want, 2e-2)


def test_flash_attn_adapters_with_a_page_table_softcap_and_learnable_sink():
    """FA4's page_table (key lengths from seqused_k) and FA2's block_table (key lengths from
    cu_seqlens_k) with softcap and a bf16 learnable_sink, on the kernel's paged class; a sequence
    without keys gets O = 0 and LSE = its head's sink."""
    from ragged_attn.compat import flash_attn_cute
    from ragged_attn.compat.flash_attn import flash_attn_varlen_func

    seed = _seed()
    case = Case(seed, [70, 0, 129, 5], [70, 3, 300, 0], 8, 2, 128, 128, dtype=torch.bfloat16, causal=True,
                page_size=16)  # fmt: skip
    (q, k, v, cu_q, _, mq, mk), kwargs = case.make("cuda")
    table, used_k = kwargs["page_table"], kwargs["seqused_k"]
    cu_k = torch.tensor([0, *itertools.accumulate(case.lens_k)], dtype=torch.int32, device="cuda")
    sink_bf16 = _sinks(8, seed).to(torch.bfloat16)
    opts = {"causal": True, "softmax_scale": 0.5, "softcap": 6.0}
    want_o, want_l = ragged_attn.attention(
        q, k, v, cu_q, None, mq, mk, page_table=table, seqused_k=used_k, **opts, sinks=sink_bf16.float(),
        return_lse=True, backend="reference",
    )  # fmt: skip
    rows = valid_rows(case, cu_q)
    with sync_forbidden():
        o, lse = flash_attn_cute.flash_attn_varlen_func(
            q, k, v, cu_seqlens_q=cu_q, max_seqlen_q=mq, max_seqlen_k=mk, page_table=table, seqused_k=used_k,
            learnable_sink=sink_bf16, return_lse=True, backend="cute", **opts,
        )  # fmt: skip
    close(o[rows], want_o[rows], f"seed {seed}: FA4 paged out")
    close(lse[:, rows], want_l[:, rows], f"seed {seed}: FA4 paged lse", atol=2e-2, rtol=0)
    last = slice(int(cu_q[3]), int(cu_q[3]) + 5)  # the sequence without keys
    assert (o[last] == 0).all(), f"seed {seed}: O of a sequence without keys"
    sink_rows = sink_bf16.float()[:, None].expand(8, 5)
    close(lse[:, last], sink_rows, f"seed {seed}: LSE = the sink", atol=1e-5, rtol=0)
    out = torch.full_like(q, math.nan)
    with sync_forbidden():
        o, lse, _ = flash_attn_varlen_func(
            q, k, v, cu_q, cu_k, mq, mk, block_table=table, learnable_sink=sink_bf16, return_attn_probs=True,
            out=out, backend="cute", **opts,
        )  # fmt: skip
    assert o is out
    close(o[rows], want_o[rows], f"seed {seed}: FA2 block_table out")
    close(lse[:, rows], want_l[:, rows], f"seed {seed}: FA2 block_table lse", atol=2e-2, rtol=0)


def test_empty_page_pool_with_sinks_and_softcap():
    """A pool with no pages (launch_cute fills instead of launching): O = 0, LSE = the sink in the
    rows of the sequences, with no sync."""
    seed = _seed()
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(9, 8, 128, generator=g).to(torch.bfloat16).cuda()
    pool = torch.empty(0, 16, 2, 128, dtype=torch.bfloat16, device="cuda")
    cu_q = torch.tensor([0, 4, 9], dtype=torch.int32, device="cuda")
    call = {
        "page_table": torch.zeros(2, 1, dtype=torch.int32, device="cuda"),
        "seqused_k": torch.zeros(2, dtype=torch.int32, device="cuda"),
        "causal": True, "softcap": 6.0, "sinks": _sinks(8, seed), "return_lse": True,
    }  # fmt: skip
    out = torch.full((9, 8, 128), math.nan, dtype=torch.bfloat16, device="cuda")
    lse = torch.full((8, 9), math.nan, device="cuda")
    with sync_forbidden():
        got = ragged_attn.attention(q, pool, pool, cu_q, None, 5, 0, **call, out=out, lse=lse, backend="cute")
    assert got[0] is out and got[1] is lse
    want_o, want_l = ragged_attn.attention(q, pool, pool, cu_q, None, 5, 0, **call, backend="reference")
    assert (out == 0).all() and torch.equal(out, want_o)
    close(lse, want_l, f"seed {seed}: LSE = the sink", atol=1e-5, rtol=0)


# --- what still declines ---------------------------------------------------------------------------------


def test_strided_sinks_decline_and_a_contiguous_copy_runs():
    seed = _seed()
    case = Case(seed, [33, 64], [40, 64], 4, 2, 128, 128, dtype=torch.bfloat16, causal=True,
                extra={"softcap": 4.0, "return_lse": True})  # fmt: skip
    args, kwargs = case.make("cuda")
    strided = _sinks(8, seed)[::2]
    with pytest.raises(NotImplementedError, match=r"^sinks: .*stride 1.*got stride 2"):
        ragged_attn.attention(*args, **kwargs, sinks=strided)
    got = ragged_attn.attention(*args, **kwargs, sinks=strided.contiguous())
    want = ragged_attn.attention(*args, **kwargs, sinks=strided, backend="reference")
    _check(case, seed, args[3], got, want, 2e-2)
