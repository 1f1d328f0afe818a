"""The public API and the adapters on the sm90 kernel, against the reference (device machine)."""

from __future__ import annotations

import math

import pytest
import torch

import ragged_attn
from ragged_attn.compat.flash_attn import flash_attn_varlen_func
from ragged_attn.compat.flashinfer import cudnn_batch_prefill_with_kv_cache
from tests.cases import Case, close, valid_rows
from tests.fast_path_cases import ENTRY_MUTATIONS, PAGED_ENTRY_MUTATIONS, base_arguments, paged_base_arguments

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="needs a CUDA GPU (sm_90a)",
    ),
]


API_CASES = [
    Case(101, [300, 0, 77, 1], [300, 5, 400, 129], 32, 8, 128, 128, dtype=torch.bfloat16, causal=True,
         lse_layout="padded", lse_base="log2"),
    Case(102, [0, 64, 0], [0, 640, 0], 12, 3, 64, 64, dtype=torch.float16, causal="top_left",
         lse_layout="token_major"),
    Case(103, [300], [4096], 8, 1, 128, 128, dtype=torch.bfloat16, window=(333, -1)),
    Case(104, [50, 190], [40, 190], 14, 2, 64, 64, dtype=torch.bfloat16, causal=True, window=(64, 0),
         lse_layout="head_major", q_gaps=True),
]


@pytest.mark.parametrize("case", API_CASES, ids=lambda c: c.id)
def test_attention_auto_on_the_kernel_matches_reference(case):
    args, kwargs = case.make("cuda")
    before = [a.clone() for a in args[:5] if isinstance(a, torch.Tensor)]
    total_q = args[0].shape[0]
    out = torch.full((total_q, case.h_q, case.d_v), math.nan, dtype=case.dtype, device="cuda")
    lse = torch.full(ragged_attn.problem.build_problem(*args, **kwargs, return_lse=True)[0].lse_shape(),
                     math.nan, device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    try:
        got_out, got_lse = ragged_attn.attention(*args, **kwargs, return_lse=True, out=out, lse=lse)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert got_out is out and got_lse is lse
    want_out, want_lse = ragged_attn.attention(*args, **kwargs, return_lse=True, backend="reference")
    rows = valid_rows(case, args[3])
    close(out[rows], want_out[rows], "out")
    if case.lse_layout == "padded":
        close(lse, want_lse, "lse", atol=1e-2, rtol=0)
    elif case.lse_layout == "token_major":
        close(lse[rows], want_lse[rows], "lse", atol=1e-2, rtol=0)
    else:
        close(lse[:, rows], want_lse[:, rows], "lse", atol=1e-2, rtol=0)
    after = [a for a in args[:5] if isinstance(a, torch.Tensor)]
    assert all(torch.equal(a, b) for a, b in zip(after, before)), "an input changed"


def test_plan_runs_other_shapes_without_compiling():
    base = Case(111, [100, 7], [100, 7], 16, 4, 128, 128, dtype=torch.bfloat16, causal=True)
    args, kwargs = base.make("cuda")
    plan = ragged_attn.plan(*args, **kwargs)
    compiles = ragged_attn.cache_info().compiles
    for seed in range(12):
        case = Case(200 + seed, [seed * 37 % 500, 0, 3 + seed], [seed * 53 % 700 + 1, 9, 3 + seed],
                    8 * (1 + seed % 4), 2 * (1 + seed % 2) if seed % 3 else 8, 128, 128,
                    dtype=torch.bfloat16, causal=True)
        if case.h_q % case.h_kv:
            continue
        a, kw = case.make("cuda")
        got = plan.run(*a)
        want = ragged_attn.attention(*a, **kw, backend="reference")
        rows = valid_rows(case, a[3])
        close(got[rows], want[rows], f"plan.run seed {seed}")
    assert ragged_attn.cache_info().compiles == compiles, "a new shape of one class compiled again"


def test_cuda_graph_replay_with_new_lengths():
    h_q, h_kv, d = 16, 4, 128
    total, max_len = 1024, 700
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(total, h_q, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(total, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(total, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    cu = torch.tensor([0, 300, 1000], dtype=torch.int32, device="cuda")
    out = torch.empty(total, h_q, d, device="cuda", dtype=torch.bfloat16)
    plan = ragged_attn.plan(q, k, v, cu, cu, max_len, max_len, causal=True)
    plan.run(q, k, v, cu, cu, max_len, max_len, out=out)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan.run(q, k, v, cu, cu, max_len, max_len, out=out)
    for lengths in ([300, 700], [1, 0], [512, 512], [0, 650]):
        cu.copy_(torch.tensor([0, lengths[0], lengths[0] + lengths[1]], dtype=torch.int32))
        out.fill_(math.nan)
        graph.replay()
        torch.cuda.synchronize()
        want = ragged_attn.attention(q, k, v, cu, cu, max_len, max_len, causal=True, backend="reference")
        rows = list(range(sum(lengths)))
        close(out[rows], want[rows], f"graph replay with lengths {lengths}")


def test_flash_attn_adapter_on_the_kernel():
    case = Case(121, [129, 1, 0, 256], [200, 1, 7, 256], 32, 8, 128, 128, dtype=torch.bfloat16, causal=True)
    args, kwargs = case.make("cuda")
    out, lse, none = flash_attn_varlen_func(*args, causal=True, return_attn_probs=True)
    want, want_lse = ragged_attn.attention(*args, **kwargs, return_lse=True, backend="reference")
    rows = valid_rows(case, args[3])
    assert none is None
    close(out[rows], want[rows], "out")
    close(lse[:, rows], want_lse[:, rows], "lse", atol=1e-2, rtol=0)


def test_flashinfer_adapter_ragged_on_the_kernel():
    case = Case(131, [17, 700, 8], [32, 1066, 8], 4, 1, 128, 128, dtype=torch.bfloat16, causal=True,
                lse_layout="padded", lse_base="log2")
    (q, k, v, cu_q, cu_k, mq, mk), kwargs = case.make("cuda")
    lq = torch.tensor(case.lens_q, dtype=torch.int32, device="cuda")
    lk = torch.tensor(case.lens_k, dtype=torch.int32, device="cuda")
    out, lse = cudnn_batch_prefill_with_kv_cache(
        q, k, v, 1 / math.sqrt(128), None, max_token_per_sequence=mq, max_sequence_kv=mk,
        actual_seq_lens_q=lq.view(-1, 1, 1, 1), actual_seq_lens_kv=lk.view(-1, 1, 1, 1), causal=True,
        return_lse=True, batch_offsets_q=(cu_q * 4 * 128).view(-1, 1, 1, 1),
        batch_offsets_k=(cu_k * 128).view(-1, 1, 1, 1), batch_offsets_v=(cu_k * 128).view(-1, 1, 1, 1),
    )  # fmt: skip
    want, want_lse = ragged_attn.attention(q, k, v, cu_q, cu_k, mq, mk, **kwargs, return_lse=True,
                                           backend="reference")
    rows = valid_rows(case, cu_q)
    close(out[rows], want[rows], "out")
    close(lse, want_lse, "lse", atol=1e-2, rtol=0)
    assert torch.all(lse[2, 8:] == -math.inf)


def test_attention_fast_path_across_shapes_and_still_checks():
    """Repeated calls with the same options take the fast path; results and errors stay right."""
    for seed in range(6):
        case = Case(300 + seed, [seed * 41 % 300 + 1, 17], [seed * 67 % 400 + 1, 60], 8, 8 // (1 + seed % 2) if seed % 3 else 2,
                    64, 64, dtype=torch.float16, causal=True, lse_layout="token_major")
        args, kwargs = case.make("cuda")
        out, lse = ragged_attn.attention(*args, **kwargs, return_lse=True)
        want, want_lse = ragged_attn.attention(*args, **kwargs, return_lse=True, backend="reference")
        rows = valid_rows(case, args[3])
        close(out[rows], want[rows], f"attention seed {seed}")
        close(lse[rows], want_lse[rows], f"lse seed {seed}", atol=1e-2, rtol=0)
    q, k, v, cu_q, cu_k, mq, mk = args
    with pytest.raises(TypeError, match="max_seqlen_k"):
        ragged_attn.attention(q, k, v, cu_q, cu_k, mq, torch.tensor(mk), **kwargs, return_lse=True)
    with pytest.raises(ValueError, match="k: expected H_kv"):
        ragged_attn.attention(q, k[:, :1].expand(-1, 3, -1), v[:, :1].expand(-1, 3, -1), cu_q, cu_k, mq, mk,
                              **kwargs, return_lse=True)
    with pytest.raises(ValueError, match="16 bytes"):
        ragged_attn.attention(q, k, torch.empty(v.shape[0], v.shape[1], 68, device="cuda", dtype=v.dtype)[..., 2:66],
                              cu_q, cu_k, mq, mk, **kwargs, return_lse=True)


def _entry_refuses_then_checked_path_names_it(plan, a, max_k):
    """The mutated call `a` (its out NaN-poisoned here): the compiled entry refuses it before
    launching (try_launch gives None, out stays NaN), then Plan.run's checked path raises the named
    error without writing: ValueError/TypeError, or NotImplementedError where the call is valid but
    not the kernel's (an fp16 out of bf16 inputs runs on backend="reference")."""
    if a["out"].is_floating_point():
        a["out"].fill_(math.nan)
    assert plan._bound.try_launch(**a) is None
    torch.cuda.synchronize()
    assert torch.isnan(a["out"]).all(), "the entry launched although it should have refused"
    with pytest.raises((ValueError, TypeError, NotImplementedError)):
        plan.run(a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], a["max_q"], max_k, seqused_q=a["seqused_q"],
                 seqused_k=a["seqused_k"], page_table=a["page_table"], out=a["out"], lse=a["lse"])  # fmt: skip
    torch.cuda.synchronize()
    assert torch.isnan(a["out"]).all(), "the checked path wrote before raising"


@pytest.mark.parametrize("name", sorted(ENTRY_MUTATIONS))
def test_the_real_entry_rejects_what_the_fast_path_leaves_to_it(name):
    """tests/test_fast_launch.py models the TVM-FFI entry's checks on the CPU; here the compiled entry
    itself must reject each such call before launching (a NaN-poisoned out stays NaN), and Plan.run's
    checked path must then raise the named error."""
    a = base_arguments("cuda", seed=7)
    plan = ragged_attn.plan(a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], 30, 30, causal=True)
    a["out"] = torch.full((40, 8, 128), math.nan, dtype=torch.bfloat16, device="cuda")
    ENTRY_MUTATIONS[name](a)
    _entry_refuses_then_checked_path_names_it(plan, a, max_k=30)


def test_fast_path_serves_the_class_envelope_and_matches_reference():
    """A plan made at d 128 runs d_v 64 and d 120 (same class) on the fast path, without compiling."""
    a = base_arguments("cuda", seed=8)
    plan = ragged_attn.plan(a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], 30, 30, causal=True)
    compiles = ragged_attn.cache_info().compiles
    for d_qk, d_v in ((128, 64), (120, 120), (128, 128)):
        q, k, v = a["q"][..., :d_qk], a["k"][..., :d_qk], a["v"][..., :d_v]
        out = torch.full((40, 8, d_v), math.nan, dtype=torch.bfloat16, device="cuda")
        got = plan._bound.try_launch(q, k, v, a["cu_q"], a["cu_k"], 30, None, None, None, out, None)
        assert got is out, f"({d_qk}, {d_v}) left the fast path"
        want = ragged_attn.attention(q, k, v, a["cu_q"], a["cu_k"], 30, 30, causal=True, backend="reference")
        close(out, want, f"fast path d {d_qk}x{d_v}")
    assert ragged_attn.cache_info().compiles == compiles


@pytest.mark.parametrize("max_seqlen_q", [590, None])
def test_packed_tile_slots_with_gaps_before_between_and_after(max_seqlen_q):
    """Few tokens per sequence slot budget -> the packed grid (binary search over cu_seqlens_q): every
    tile of every sequence runs once; rows before cu_seqlens_q[0], in gaps and after the last sequence
    keep the caller's NaN."""
    g = torch.Generator().manual_seed(11)
    cu_q = torch.tensor([5, 300, 310, 310, 900], dtype=torch.int32, device="cuda")  # one empty sequence
    cu_k = torch.tensor([0, 295, 305, 333, 923], dtype=torch.int32, device="cuda")
    seqused_q = torch.tensor([295, 7, 0, 590], dtype=torch.int32, device="cuda")  # a gap after sequence 1
    q = torch.randn(1000, 8, 128, generator=g).to(torch.bfloat16).cuda()
    k = torch.randn(923, 2, 128, generator=g).to(torch.bfloat16).cuda()
    v = torch.randn(923, 2, 128, generator=g).to(torch.bfloat16).cuda()
    out = torch.full_like(q, math.nan)
    lse = torch.full((1000, 8), math.nan, device="cuda")
    kw = dict(seqused_q=seqused_q, causal=True, return_lse=True, lse_layout="token_major")
    ragged_attn.attention(q, k, v, cu_q, cu_k, max_seqlen_q, 590, out=out, lse=lse, **kw)
    want, want_lse = ragged_attn.attention(q, k, v, cu_q, cu_k, max_seqlen_q, 590, backend="reference", **kw)
    rows = list(range(5, 300)) + list(range(300, 307)) + list(range(310, 900))
    close(out[rows], want[rows], "out")
    close(lse[rows], want_lse[rows], "lse", atol=1e-2, rtol=0)
    outside = [r for r in range(1000) if r not in set(rows)]
    assert torch.isnan(out[outside]).all() and torch.isnan(lse[outside]).all()


@pytest.mark.parametrize("lens", [([300], [12000]), ([300, 10], [12000, 10])], ids=["per-sequence", "packed"])
def test_long_keys_split_heads_into_l2_groups(lens):
    """12000 keys at d 256 make each head's K/V ~12 MB, so the kernel deals the 5 heads out in L2
    groups of 2, 2 and 1 (a partial last group); every (head, tile) must still run exactly once."""
    lens_q, lens_k = lens
    case = Case(12, lens_q, lens_k, 5, 5, 256, 256, dtype=torch.bfloat16, causal=True, lse_layout="token_major")
    args, kwargs = case.make("cuda")
    total_q = args[0].shape[0]
    out = torch.full((total_q, 5, 256), math.nan, dtype=torch.bfloat16, device="cuda")
    lse = torch.full((total_q, 5), math.nan, device="cuda")
    ragged_attn.attention(*args, **kwargs, return_lse=True, out=out, lse=lse)
    want, want_lse = ragged_attn.attention(*args, **kwargs, return_lse=True, backend="reference")
    close(out, want, "out")
    close(lse, want_lse, "lse", atol=1e-2, rtol=0)


def test_max_seqlen_q_at_the_int32_limit_runs_packed():
    """A caller's "no known bound" of 2**31 - 1 must neither overflow the tile count nor make an
    invalid grid: the kernel takes the packed grid (found by an adversarial pass)."""
    a = base_arguments("cuda", seed=9)
    out = torch.full((40, 8, 128), math.nan, dtype=torch.bfloat16, device="cuda")
    ragged_attn.attention(a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], 2**31 - 1, causal=True, out=out)
    want = ragged_attn.attention(a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], 2**31 - 1, causal=True,
                                 backend="reference")  # fmt: skip
    close(out, want, "out")


def test_paged_plan_runs_new_page_tables():
    """A plan made with a page_table runs later calls with their own page tables and lengths."""
    first = Case(56, [5, 90], [60, 300], 8, 2, 128, 128, dtype=torch.bfloat16, causal=True, page_size=16)
    args, kwargs = first.make("cuda")
    plan = ragged_attn.plan(*args, **kwargs)
    other = Case(57, [33, 1, 200], [40, 700, 200], 8, 2, 128, 128, dtype=torch.bfloat16, causal=True, page_size=16)
    args2, kwargs2 = other.make("cuda")
    got = plan.run(*args2, page_table=kwargs2["page_table"], seqused_k=kwargs2["seqused_k"])
    want = ragged_attn.attention(*args2, **kwargs2, backend="reference")
    close(got, want, "paged plan")


# --- page pools on the fast path (branch wip/paged-fast-path) -------------------------------------


def _paged_plan(a, kv_layout):
    return ragged_attn.plan(a["q"], a["k"], a["v"], a["cu_q"], None, 30, 50, page_table=a["page_table"],
                            seqused_k=a["seqused_k"], kv_layout=kv_layout, causal=True)  # fmt: skip


@pytest.mark.parametrize("kv_layout", ["NHD", "HND"])
@pytest.mark.parametrize("name", sorted(PAGED_ENTRY_MUTATIONS))
def test_the_real_entry_rejects_what_the_paged_fast_path_leaves_to_it(name, kv_layout):
    """tests/test_fast_launch.py's EntryModel models a paged class's entry on the CPU; here the
    compiled paged entry must reject each such call before launching, and the checked path name it."""
    a = paged_base_arguments(kv_layout, "cuda", seed=7)
    plan = _paged_plan(a, kv_layout)
    a["out"] = torch.full((40, 8, 128), math.nan, dtype=torch.bfloat16, device="cuda")
    PAGED_ENTRY_MUTATIONS[name](a, kv_layout)
    _entry_refuses_then_checked_path_names_it(plan, a, max_k=50)


@pytest.mark.parametrize("kv_layout", ["NHD", "HND"])
@pytest.mark.parametrize("with_cu_k", [False, True])
def test_paged_fast_path_matches_reference(kv_layout, with_cu_k):
    """A paged plan's fast path (seqused_k or cu_seqlens_k for the key lengths, a one-column table
    of column stride 4 included) against the reference; attention's second paged call is served
    by the fast path (launch_cute is not reached) and the ragged binding of the same options stays."""
    from ragged_attn import api, backends

    a = paged_base_arguments(kv_layout, "cuda", seed=9)
    if with_cu_k:
        a["cu_k"], a["seqused_k"] = torch.tensor([0, 20, 70], dtype=torch.int32, device="cuda"), None
    plan = ragged_attn.plan(a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], 30, 50, page_table=a["page_table"],
                            seqused_k=a["seqused_k"], kv_layout=kv_layout, causal=True)  # fmt: skip
    kw = dict(seqused_k=a["seqused_k"], page_table=a["page_table"], kv_layout=kv_layout, causal=True)
    want = ragged_attn.attention(a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], 30, 50, **kw, backend="reference")
    out = torch.full((40, 8, 128), math.nan, dtype=torch.bfloat16, device="cuda")
    assert plan._bound.try_launch(**dict(a, out=out)) is out
    close(out, want, f"paged fast path {kv_layout}")
    ragged_attn.attention(a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], 30, 50, **kw)  # binds the paged key
    launch_cute = backends.launch_cute
    try:
        backends.launch_cute = lambda *x, **y: pytest.fail("the second paged call took the checked path")
        got = ragged_attn.attention(a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], 30, 50, **kw)
    finally:
        backends.launch_cute = launch_cute
    close(got, want, f"attention paged fast path {kv_layout}")
    assert any(key[-1] is False and key[11] == kv_layout for key in api._FAST_PATHS)
    # One column of column stride 4: the fast path passes it with stride 1 (launch_forward's fix).
    one = torch.zeros(2, 4, dtype=torch.int32, device="cuda")
    one[:, 0] = torch.tensor([3, 5], dtype=torch.int32)
    short = dict(a, page_table=one[:, ::4], cu_k=None, seqused_k=torch.tensor([16, 9], dtype=torch.int32, device="cuda"))
    out = torch.full((40, 8, 128), math.nan, dtype=torch.bfloat16, device="cuda")
    assert plan._bound.try_launch(**dict(short, out=out)) is out
    want = ragged_attn.attention(a["q"], a["k"], a["v"], a["cu_q"], None, 30, 16, seqused_k=short["seqused_k"],
                                 page_table=short["page_table"], kv_layout=kv_layout, causal=True,
                                 backend="reference")  # fmt: skip
    close(out, want, f"one-column table {kv_layout}")
