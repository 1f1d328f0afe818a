"""Plan.run's fast path: the predicate sends anything unusual to the checked path; arguments are right."""

from __future__ import annotations

import math

import pytest
import torch

from ragged_attn.fast_launch import BoundKernel
from ragged_attn.problem import build_problem
from tests.fast_path_cases import (
    ENTRY_MUTATIONS,
    PAGED_ENTRY_MUTATIONS,
    PAGED_PREDICATE_MUTATIONS,
    PREDICATE_MUTATIONS,
    base_arguments,
    paged_base_arguments,
)


class EntryModel:
    """A stand-in for the compiled TVM-FFI entry on the CPU: it records calls and raises ValueError
    where the real entry does (kernels/sm90/launch.py lists its checks; tests/gpu/test_api_gpu.py
    runs the same mutations against the real one)."""

    def __init__(self, dtype=torch.bfloat16):
        self.dtype = dtype
        self.calls = []

    def __call__(self, *args):
        q, k, v, out, lse, cu_q, cu_k, su_q, su_k = args[:9]
        page_table = args[25] if len(args) > 25 else None
        kv_rank = 3 if page_table is None else 4  # a paged class: (num_pages, page_size, H_kv, D) pools
        for name, t, dtype, rank in (("q", q, self.dtype, 3), ("k", k, self.dtype, kv_rank),
                                     ("v", v, self.dtype, kv_rank), ("out", out, self.dtype, 3),
                                     ("cu_seqlens_q", cu_q, torch.int32, 1), ("cu_seqlens_k", cu_k, torch.int32, 1),
                                     ("seqused_q", su_q, torch.int32, 1), ("seqused_k", su_k, torch.int32, 1)):  # fmt: skip
            if t.dtype != dtype or t.dim() != rank or t.stride(-1) != 1:
                raise ValueError(f"Mismatched Tensor on argument {name}")
            if rank >= 3 and (t.data_ptr() % 16 or any(s % 8 for s in t.stride()[:-1]) or t.shape[-1] % 8):
                raise ValueError(f"Misaligned Tensor on argument {name}")
        if page_table is not None and (
            page_table.dtype != torch.int32 or page_table.dim() != 2 or page_table.stride(1) != 1
        ):
            raise ValueError("Mismatched Tensor on argument page_table")
        if lse is not None and (lse.dtype != torch.float32 or lse.dim() != 1):
            raise ValueError("Mismatched Tensor on argument lse")
        shared = ((q.shape[0], out.shape[0]), (q.shape[1], out.shape[1]), (k.shape[:-1], v.shape[:-1]),
                  (q.shape[2], k.shape[-1]), (v.shape[-1], out.shape[2]), (cu_q.shape, cu_k.shape))  # fmt: skip
        if any(a != b for a, b in shared):
            raise ValueError("Mismatched shape")
        self.calls.append(args)


def make(total_q=40, total_k=50, h_q=8, h_kv=2, d=128, dtype=torch.bfloat16, **options):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(total_q, h_q, d, generator=g).to(dtype)
    k = torch.randn(total_k, h_kv, d, generator=g).to(dtype)
    v = torch.randn(total_k, h_kv, d, generator=g).to(dtype)
    cu_q = torch.tensor([0, 10, total_q], dtype=torch.int32)
    cu_k = torch.tensor([0, 20, total_k], dtype=torch.int32)
    problem, _ = build_problem(q, k, v, cu_q, cu_k, 30, 30, **options)
    rec = EntryModel(dtype)
    return BoundKernel(rec, problem), rec, (q, k, v, cu_q, cu_k)


def test_arguments_in_kernel_order_with_padded_lse():
    bound, rec, (q, k, v, cu_q, cu_k) = make(
        causal="top_left", softmax_scale=0.5, return_lse=True, lse_layout="padded", lse_base="log2"
    )
    out, lse = bound.try_launch(q, k, v, cu_q, cu_k, 30, None, None, None, None, None)
    (args,) = rec.calls
    assert args[0] is q and args[3] is out and args[5] is cu_q and args[7] is cu_q  # seqused dummy = cu_seqlens
    assert args[9:14] == (0, 0, 2, 30, 30)  # flags, batch, max_seqlen_q, lse_s_max
    assert args[14:18] == (0.5, -1, 0, 0)  # scale, window (causal right = 0), top-left
    assert args[18:22] == (30 * 8, 0, 8, 1) and args[22] == 1.0
    assert args[23] == 1 and args[24].dtype == torch.int32 and args[24].tolist() == [0]  # CTAs, tile counter
    assert args[25] is None  # page_table
    assert lse.shape == (2, 30, 8) and args[4].data_ptr() == lse.data_ptr()


def test_head_major_lse_strides_and_ln_scale():
    bound, rec, t = make(return_lse=True)
    out, lse = bound.try_launch(*t, 30, None, None, None, None, None)
    args = rec.calls[0]
    assert lse.shape == (8, 40) and args[18:22] == (0, 1, 1, 40) and args[22] == pytest.approx(math.log(2))


def test_seqused_passes_flags_and_zeroes_allocated_out():
    bound, rec, (q, k, v, cu_q, cu_k) = make()
    used = torch.tensor([5, 7], dtype=torch.int32)
    out = bound.try_launch(q, k, v, cu_q, cu_k, 30, used, used, None, None, None)
    args = rec.calls[0]
    assert args[7] is used and args[8] is used and args[9:11] == (1, 1)
    assert torch.all(out == 0)


def _base_bound():
    a = base_arguments()
    problem, _ = build_problem(a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], 30, 30, causal=True)
    rec = EntryModel()
    return BoundKernel(rec, problem), rec, a


def test_base_arguments_take_the_fast_path():
    bound, rec, a = _base_bound()
    out = bound.try_launch(**a)
    assert out.shape == (40, 8, 128) and len(rec.calls) == 1 and rec.calls[0][3] is out


@pytest.mark.parametrize("name", sorted(PREDICATE_MUTATIONS))
def test_predicate_sends_the_call_to_the_checked_path(name):
    bound, rec, a = _base_bound()
    PREDICATE_MUTATIONS[name](a)
    assert bound.try_launch(**a) is None
    assert rec.calls == [], "the kernel was called although the predicate failed"


@pytest.mark.parametrize("name", sorted(ENTRY_MUTATIONS))
def test_entry_rejections_send_the_call_to_the_checked_path(name):
    """The predicate leaves these to the entry; its ValueError means None (no launch happened)."""
    bound, rec, a = _base_bound()
    ENTRY_MUTATIONS[name](a)
    assert bound.try_launch(**a) is None
    assert rec.calls == []


def test_served_envelope_dims_take_the_fast_path():
    """(128, 64) belongs to the (128, 128) class, as the checked path would choose."""
    bound, rec, a = _base_bound()
    a["v"] = a["v"][..., :64]
    out = bound.try_launch(**a)
    assert out.shape == (40, 8, 64) and len(rec.calls) == 1


def test_caller_out_is_used_when_apart_from_the_inputs():
    bound, rec, t = make()
    out = torch.empty(40, 8, 128, dtype=torch.bfloat16)
    assert bound.try_launch(*t, 30, None, None, None, out, None) is out
    assert rec.calls[0][3] is out


def test_default_scale_follows_each_calls_head_dim():
    """softmax_scale=None means 1/sqrt(d_qk) of the call's q (as the checked path computes it), not of
    the tensors the plan was made with; an explicit scale stays fixed."""
    a = base_arguments()
    problem, _ = build_problem(a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], 30, 30, causal=True)
    for default_scale, want in ((True, 120**-0.5), (False, 128**-0.5)):
        rec = EntryModel()
        b = dict(a, q=a["q"][..., :120], k=a["k"][..., :120])
        assert BoundKernel(rec, problem, default_scale).try_launch(**b) is not None
        assert rec.calls[0][14] == pytest.approx(want)


@pytest.mark.parametrize("max_k", [-5, 2**31, 3.5, "30"])
def test_bad_max_seqlen_k_never_takes_the_fast_path(max_k):
    """max_seqlen_k is not a kernel argument, but the checked path rejects these: Plan.run and
    attention must not launch them either (found by an adversarial pass)."""
    from ragged_attn.api import Plan
    from ragged_attn.backends import layout_class_for

    a = base_arguments()
    problem, _ = build_problem(a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], 30, 30, causal=True)
    rec = EntryModel()
    plan = Plan(problem, "cute", layout_class_for(problem), {"causal": True}, BoundKernel(rec, problem, True))
    with pytest.raises((TypeError, ValueError)):
        plan.run(a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], 30, max_k)
    assert rec.calls == []


def test_missing_cu_seqlens_k_goes_to_the_checked_path():
    bound, rec, a = _base_bound()
    a["cu_k"] = None
    assert bound.try_launch(**a) is None and rec.calls == []


@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_inputs_that_require_grad_go_to_the_checked_path_with_grad_on(name):
    """The fast path declines an input that requires grad while grad mode is on (the checked path
    raises, naming it: tests/test_forward_only.py) and launches it under torch.no_grad()."""
    bound, rec, a = _base_bound()
    a[name] = a[name].clone().requires_grad_(True)
    assert torch.is_grad_enabled()
    assert bound.try_launch(**a) is None and rec.calls == []
    with torch.no_grad():
        assert bound.try_launch(**a) is not None and len(rec.calls) == 1


@pytest.mark.parametrize("kind", ["grad", "inference"])
def test_an_out_torch_would_not_write_goes_to_the_checked_path(kind):
    """An out that requires grad (grad mode on) or an inference tensor (outside inference mode): the
    fast path declines it (the checked path names it: tests/test_output_buffers_writable.py) and
    launches it where torch allows the write."""
    bound, rec, a = _base_bound()
    if kind == "grad":
        a["out"] = torch.empty(40, 8, 128, dtype=a["q"].dtype, requires_grad=True)
        allowed = torch.no_grad
    else:
        with torch.inference_mode():
            a["out"] = torch.empty(40, 8, 128, dtype=a["q"].dtype)
        allowed = torch.inference_mode
    assert bound.try_launch(**a) is None and rec.calls == []
    with allowed():
        assert bound.try_launch(**a) is a["out"] and len(rec.calls) == 1


def test_plan_run_names_an_input_that_requires_grad_before_any_launch():
    from ragged_attn.api import Plan
    from ragged_attn.backends import layout_class_for

    a = base_arguments()
    problem, _ = build_problem(a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], 30, 30, causal=True)
    rec = EntryModel()
    plan = Plan(problem, "cute", layout_class_for(problem), {"causal": True}, BoundKernel(rec, problem, True))
    with pytest.raises(ValueError, match="^k: expected a tensor that does not require grad"):
        plan.run(a["q"], a["k"].clone().requires_grad_(True), a["v"], a["cu_q"], a["cu_k"], 30, 30)
    assert rec.calls == []


# --- page pools: a paged class's fast path --------------------------------------------------------


def _paged_bound(kv_layout, **options):
    a = paged_base_arguments(kv_layout)
    problem, _ = build_problem(
        a["q"], a["k"], a["v"], a["cu_q"], None, 30, 50, seqused_k=a["seqused_k"], page_table=a["page_table"],
        kv_layout=kv_layout, causal=True, **options,
    )  # fmt: skip
    rec = EntryModel()
    return BoundKernel(rec, problem), rec, a


@pytest.mark.parametrize("kv_layout", ["NHD", "HND"])
def test_paged_arguments_in_kernel_order(kv_layout):
    """Pools reach the entry as launch_forward passes them: (num_pages, page_size, H_kv, D) views
    (HND transposed, the same memory), the call's page table, cu_seqlens_q standing in for the
    missing cu_seqlens_k and seqused_k giving the key lengths."""
    bound, rec, a = _paged_bound(kv_layout)
    out = bound.try_launch(**a)
    (args,) = rec.calls
    k, v = args[1], args[2]
    assert k.shape == v.shape == (8, 16, 2, 128)
    assert k.data_ptr() == a["k"].data_ptr() and v.data_ptr() == a["v"].data_ptr()
    want = a["k"].stride() if kv_layout == "NHD" else a["k"].transpose(1, 2).stride()
    assert k.stride() == v.stride() == want
    assert args[0] is a["q"] and args[3] is out and out.shape == (40, 8, 128)
    assert args[5] is a["cu_q"] and args[6] is a["cu_q"] and args[7] is a["cu_q"] and args[8] is a["seqused_k"]
    assert args[9:14] == (0, 1, 2, 30, 0)  # flags (seqused_k on), batch, max_seqlen_q, no padded LSE
    assert args[14:18] == (pytest.approx(128**-0.5), -1, 0, 1)  # scale, causal window, bottom-right
    assert args[25] is a["page_table"]
    # num_splits 1 (one SM on the CPU: the tiles fill it), pack_rows 1 (d128 causal packs rows, GQA
    # 8 / 2 over short rows: split_kv.choose_pack_rows), batch_order 0 (no max_seqlen_k: the
    # caller's order, split_kv.choose_batch_order), as launch_forward passes them.
    assert args[26:] == (1, 1, 0)


@pytest.mark.parametrize("kv_layout", ["NHD", "HND"])
def test_paged_call_with_cu_seqlens_k_and_a_one_column_table(kv_layout):
    """cu_seqlens_k gives the key lengths (no seqused_k); a one-column table of any column stride
    reaches the entry with stride 1 there (the entry's page table has unit column stride)."""
    bound, rec, a = _paged_bound(kv_layout)
    cu_k = torch.tensor([0, 10, 26], dtype=torch.int32)
    table = torch.tensor([[3, 9, 9, 9], [5, 9, 9, 9]], dtype=torch.int32)[:, ::4]
    assert table.shape == (2, 1) and table.stride() == (4, 4)
    assert bound.try_launch(**dict(a, cu_k=cu_k, seqused_k=None, page_table=table)) is not None
    (args,) = rec.calls
    assert args[6] is cu_k and args[8] is cu_k and args[9:11] == (0, 0)
    assert args[25].shape == (2, 1) and args[25].stride() == (4, 1) and args[25].data_ptr() == table.data_ptr()


@pytest.mark.parametrize("kv_layout", ["NHD", "HND"])
@pytest.mark.parametrize("name", sorted(PAGED_PREDICATE_MUTATIONS))
def test_paged_predicate_sends_the_call_to_the_checked_path(name, kv_layout):
    bound, rec, a = _paged_bound(kv_layout)
    assert bound.try_launch(**a) is not None and len(rec.calls) == 1  # the base call is served
    PAGED_PREDICATE_MUTATIONS[name](a, kv_layout)
    assert bound.try_launch(**a) is None
    assert len(rec.calls) == 1, "the kernel was called although the predicate failed"


@pytest.mark.parametrize("kv_layout", ["NHD", "HND"])
@pytest.mark.parametrize("name", sorted(PAGED_ENTRY_MUTATIONS))
def test_paged_entry_rejections_send_the_call_to_the_checked_path(name, kv_layout):
    bound, rec, a = _paged_bound(kv_layout)
    PAGED_ENTRY_MUTATIONS[name](a, kv_layout)
    assert bound.try_launch(**a) is None
    assert rec.calls == []


@pytest.mark.parametrize("name", sorted(PAGED_PREDICATE_MUTATIONS) + sorted(PAGED_ENTRY_MUTATIONS))
def test_paged_mutations_are_refused_by_the_checked_path(name):
    """Each paged mutation is a call the checked path refuses (ValueError / TypeError, or
    NotImplementedError for a valid call the kernel does not serve), or one it serves otherwise
    than this class's launch with these arguments (a ragged call, another class, an LSE buffer, an
    empty pool or no queries: the fills; max_seqlen_q 0 or None: no launch / total_q's grid)."""
    from ragged_attn import backends

    a = paged_base_arguments("NHD")
    mutate = PAGED_PREDICATE_MUTATIONS.get(name) or PAGED_ENTRY_MUTATIONS[name]
    mutate(a, "NHD")
    # (a zero-width page table is valid input; the fast path leaves it to the checked path)
    served_otherwise = {"ragged-call", "empty-pool", "page-table-no-columns", "empty-q", "no-sequences",
                        "head-dims-of-another-class", "sinks-to-a-plain-class", "lse-buffer", "max-q-none",
                        "max-q-zero", "k-requires-grad"}  # fmt: skip
    try:
        problem, _ = build_problem(
            a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], a["max_q"], a.get("max_k", 50), seqused_q=a["seqused_q"],
            seqused_k=a["seqused_k"], page_table=a["page_table"], out=a["out"], lse=a["lse"], causal=True,
            sinks=a.get("sinks"), return_lse=a["lse"] is not None,
        )  # fmt: skip
        backends.check_kernel_limits(problem)
    except (ValueError, TypeError, NotImplementedError):
        assert name not in served_otherwise
    else:
        assert name in served_otherwise, name


def _same_argument(x, y):
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        return (
            isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.data_ptr() == y.data_ptr()
            and x.shape == y.shape and x.stride() == y.stride() and x.dtype == y.dtype
        )  # fmt: skip
    return x == y if not isinstance(x, float) else x == pytest.approx(y)


@pytest.mark.parametrize(
    "kv_layout,with_cu_k,options",
    [
        ("NHD", False, {}),
        ("HND", False, {}),
        ("NHD", True, {"causal": False}),
        ("HND", True, {"window_size": (7, 3), "causal": False}),
        ("HND", False, {"return_lse": True, "lse_layout": "padded", "lse_base": "log2"}),
        ("NHD", False, {"return_lse": True, "lse_layout": "token_major", "softmax_scale": 0.25}),
        ("HND", False, {"softcap": 20.0}),
        ("NHD", True, {"sinks": True, "softcap": 5.0, "return_lse": True}),
    ],
)
@pytest.mark.parametrize("caller_out", [False, True])
def test_paged_fast_path_passes_what_the_checked_path_passes(monkeypatch, kv_layout, with_cu_k, options, caller_out):
    """The same paged call through backends.launch_cute (build_problem's tensors, launch_forward)
    and through BoundKernel.try_launch reaches the compiled function with the same arguments:
    the same tensors (data pointer, shape, strides, dtype) and scalars; out / LSE are allocated by
    each path (same shapes and strides), and the CTA count is the device's (1 for the CPU here)."""
    from ragged_attn import backends, compile_cache
    from ragged_attn.kernels.sm90 import launch as sm90_launch

    options = dict(options)
    checked, fast = EntryModel(), EntryModel()
    monkeypatch.setattr(sm90_launch, "sm_count", lambda device: 1)
    monkeypatch.setattr(compile_cache, "get_kernel", lambda lc, compile_fn: checked)
    a = paged_base_arguments(kv_layout, seed=3)
    if with_cu_k:
        a["cu_k"], a["seqused_k"] = torch.tensor([0, 20, 70], dtype=torch.int32), None
    if options.pop("sinks", False):
        a["sinks"] = torch.randn(8)
    out = torch.empty(40, 8, 128, dtype=torch.bfloat16) if caller_out else None
    default_scale = "softmax_scale" not in options
    options.setdefault("causal", True)
    problem, t = build_problem(
        a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], 30, 50, seqused_k=a["seqused_k"], page_table=a["page_table"],
        kv_layout=kv_layout, out=out, sinks=a.get("sinks"), **options,
    )  # fmt: skip
    backends.launch_cute(backends.layout_class_for(problem), problem, t)
    got = BoundKernel(fast, problem, default_scale).try_launch(
        a["q"], a["k"], a["v"], a["cu_q"], a["cu_k"], 30, None, a["seqused_k"], a["page_table"], out, None, 50,
        a.get("sinks"),
    )  # fmt: skip
    assert got is not None
    (want_args,), (got_args,) = checked.calls, fast.calls
    assert len(want_args) == len(got_args)
    allocated = {4, 24} | (set() if caller_out else {3})  # lse_flat, tile counter, out the paths allocate
    if not problem.return_lse:  # lse_scale: read by the LSE epilogue only (1.0 here, ln 2 there)
        allocated.add(22)
    for i, (w, g) in enumerate(zip(want_args, got_args)):
        if i in allocated:
            if isinstance(w, torch.Tensor):
                assert g.shape == w.shape and g.stride() == w.stride() and g.dtype == w.dtype, i
        else:
            assert _same_argument(w, g), (i, w, g)
