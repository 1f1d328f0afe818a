"""GPU tests of the sm_90a kernel's softcap and sinks classes (issue 14) against ragged_attn.reference.

These tests compile the `-softcap` / `-sinks` layout classes directly, launch them through
`launch_forward(..., extended=True, sinks=, softcap=)` with out and LSE poisoned (NaN), and compare
with `attention_reference` (the exact semantics). They were the gate for letting check_support
serve them: the ragged classes (20 passed on an H200, 2026-12-03), then the paged ones (the paged
cases below, on an H200 2026-12-03, within a full tests/gpu run of 1044 passed); the public API's
path is tests/gpu/test_sinks_softcap_api_gpu.py. Inputs come from `build_problem` +
`backends.kernel_arguments` (which carries extended / sinks / softcap), the product's own path.

Tolerances: out |err| <= 2e-2 + 2e-2 |ref| (bf16 out); LSE within 1e-2, 2e-2 with a softcap (the
kernel's tanh is PTX tanh.approx.f32, relative error ~2^-11, so a cap c moves a score by up to
c * 5e-4; the caps here are <= 10), and the same +-inf pattern.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (sm_90a)"),
]

_COMPILED: dict = {}


def compiled_for(lc):
    if lc not in _COMPILED:
        from ragged_attn.kernels.sm90 import compile_forward

        _COMPILED[lc] = compile_forward(lc)
    return _COMPILED[lc]


def run(
    lens_q, lens_k, hq, hkv, d, *, causal=False, window=(-1, -1), softcap=0.0, sinks=False, lse_layout="head_major",
    lse_base="ln", scale=None, q_gain=1.0, seed=0, sink_values=None, dtype=torch.bfloat16, page_size=0,
):  # fmt: skip
    """One launch of the class with `softcap` / `sinks` against the reference; returns the class.
    page_size > 0: K/V in an NHD page pool (pages in random order, NaN in the unused ones) read
    through a page table and seqused_k: the paged classes' softcap / sinks code (0 spills; served
    by check_support since these cases passed on an H200, 2026-12-03)."""
    from ragged_attn import backends
    from ragged_attn.kernels.sm90 import compiled_args, launch_forward
    from ragged_attn.problem import build_problem
    from ragged_attn.reference import attention_reference

    dev = "cuda"
    g = torch.Generator(device="cpu").manual_seed(seed)
    total_q, total_k = sum(lens_q), sum(lens_k)
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0).tolist()), dtype=torch.int32, device=dev)
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0).tolist()), dtype=torch.int32, device=dev)
    q = (torch.randn(total_q, hq, d, generator=g) * q_gain).to(dtype).to(dev)
    k = torch.randn(total_k, hkv, d, generator=g).to(dtype).to(dev)
    v = torch.randn(total_k, hkv, d, generator=g).to(dtype).to(dev)
    sinks_t = None
    if sinks:
        vals = sink_values if sink_values is not None else (torch.randn(hq, generator=g) * 2.0).tolist()
        sinks_t = torch.tensor(vals, dtype=torch.float32, device=dev)
    mq, mk = max(lens_q + [0]), max(lens_k + [0])
    kw = {
        "causal": causal, "window_size": window, "softmax_scale": scale, "return_lse": True,
        "lse_layout": lse_layout, "lse_base": lse_base, "sinks": sinks_t, "softcap": softcap,
    }  # fmt: skip
    want_o, want_lse = attention_reference(q, k, v, cu_q, cu_k, mq, mk, **kw)

    if page_size:
        n_pages = [-(-n // page_size) for n in lens_k]
        perm = torch.randperm(sum(n_pages) + 3, generator=g)
        table = torch.zeros(len(lens_k), max(n_pages + [1]), dtype=torch.int32)
        pools = [torch.full((len(perm), page_size, hkv, d), float("nan"), dtype=dtype, device=dev) for _ in "kv"]
        used = 0
        for b, (n, lk) in enumerate(zip(n_pages, lens_k)):
            table[b, :n] = perm[used : used + n].to(torch.int32)
            used += n
            for pool, src in zip(pools, (k, v)):
                rows = src[int(cu_k[b]) : int(cu_k[b]) + lk]
                for j in range(n):
                    part = rows[j * page_size : (j + 1) * page_size]
                    pool[int(table[b, j]), : part.shape[0]] = part
        k, v = pools
        seqused_k = torch.tensor(lens_k, dtype=torch.int32, device=dev)
        problem, t = build_problem(q, k, v, cu_q, None, mq, mk, seqused_k=seqused_k, page_table=table.to(dev), **kw)
    else:
        problem, t = build_problem(q, k, v, cu_q, cu_k, mq, mk, **kw)
    out = torch.full((total_q, hq, d), float("nan"), dtype=dtype, device=dev)
    lse = torch.full(problem.lse_shape(), float("nan"), dtype=torch.float32, device=dev)
    plain = backends.layout_class_for(dataclasses.replace(problem, has_sinks=False, softcap=0.0))
    lc = dataclasses.replace(plain, softcap=bool(softcap), sinks=sinks)
    assert lc == backends.layout_class_for(problem)  # the dispatch picks the class these tests built
    assert lc.kv == ("paged" if page_size else "ragged")
    assert compiled_args(lc)[-2:] == ("sinks", "softcap")
    fn = compiled_for(lc)
    kernel_args = backends.kernel_arguments(problem, t, out, lse)
    assert kernel_args["extended"] and kernel_args["sinks"] is sinks_t and kernel_args["softcap"] == softcap
    torch.cuda.set_sync_debug_mode("error")
    try:
        launch_forward(fn, **kernel_args)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()

    o, w = out.float(), want_o.float()
    assert not torch.isnan(o).any(), "a poisoned output row was not written"
    err = (o - w).abs()
    assert (err <= 2e-2 + 2e-2 * w.abs()).all(), f"{lc.name}: out mismatch, max err {err.max().item():.4g}"
    assert not torch.isnan(lse).any(), "a poisoned LSE entry was not written"
    assert torch.equal(torch.isinf(lse), torch.isinf(want_lse)) and torch.equal(
        lse[torch.isinf(lse)], want_lse[torch.isinf(want_lse)]
    ), f"{lc.name}: LSE +-inf pattern differs"
    fin = torch.isfinite(want_lse)
    lerr = (lse[fin] - want_lse[fin]).abs()
    tol = 2e-2 if softcap else 1e-2
    assert lerr.numel() == 0 or lerr.max().item() <= tol, f"{lc.name}: LSE mismatch, max err {lerr.max().item():.4g}"
    return lc, out, lse, want_lse


# ----------------------------------------------------------------------------- softcap
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("cap", [5.0, 10.0])
def test_softcap_causal_gqa(d, cap):
    # q_gain 3: scores well into tanh's nonlinear range (|s| up to ~ cap and beyond).
    run([37, 200, 1, 129], [37, 260, 5, 300], 8, 2, d, causal=True, softcap=cap, q_gain=3.0, seed=d)


@pytest.mark.parametrize("d", [64, 128])
def test_softcap_window_gqa(d):
    run([150, 64, 300], [150, 90, 333], 6, 3, d, window=(40, 7), softcap=10.0, q_gain=3.0, seed=1)


def test_softcap_no_mask_and_top_left_causal():
    run([77, 130], [190, 64], 4, 4, 128, softcap=8.0, q_gain=2.0, seed=2)
    run([77, 130], [190, 64], 4, 1, 64, causal="top_left", softcap=8.0, q_gain=2.0, seed=3)


def test_softcap_saturated_scores_and_log2_lse():
    # Scores far past the cap: every score is ~+-cap, the softmax nearly uniform over the + ones.
    run([64, 129], [200, 129], 4, 2, 64, causal=True, softcap=5.0, q_gain=30.0, lse_base="log2", seed=4)


# ----------------------------------------------------------------------------- sinks
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("lse_base", ["ln", "log2"])
def test_sinks_causal_gqa(d, lse_base):
    run([33, 200, 129], [50, 200, 300], 8, 2, d, causal=True, sinks=True, lse_base=lse_base, seed=10 + d)


@pytest.mark.parametrize("lse_layout", ["head_major", "token_major", "padded"])
def test_sinks_empty_sequences(lse_layout):
    """Sequences with no keys (every row: O = 0, LSE = the sink) and with no queries."""
    _, out, _, _ = run([20, 0, 65, 7], [0, 30, 100, 0], 4, 2, 128, causal=True, sinks=True,
                         lse_layout=lse_layout, seed=11)  # fmt: skip
    assert (out[:20].float() == 0).all() and (out[-7:].float() == 0).all()


def test_sinks_no_keys_at_all():
    """total_k == 0: launch_forward runs the kernel with q and out standing in for k and v."""
    _, out, _, _ = run([5, 70], [0, 0], 4, 4, 64, sinks=True, seed=12, lse_base="log2")
    assert (out.float() == 0).all()


@pytest.mark.parametrize("lse_base", ["ln", "log2"])
def test_sinks_fully_masked_rows_window(lse_base):
    """A top-left window (0, 0) with len_q > len_k: rows i >= len_k see no key (O = 0, LSE = sink)."""
    _, out, lse, want = run([200, 90], [64, 40], 6, 2, 128, causal="top_left", window=(0, 0), sinks=True,
                            lse_base=lse_base, seed=13)  # fmt: skip
    assert (out[64:200].float() == 0).all()
    assert torch.allclose(lse[:, 64:200], want[:, 64:200]) and not torch.isinf(lse[:, 64:200]).any()


def test_sinks_extreme_values():
    """-inf (no sink), a dominant sink (+40: nearly all the mass), a small one, +inf (O = 0, LSE = +inf)."""
    run([40, 130], [80, 130], 4, 2, 64, causal=True, sinks=True, sink_values=[-math.inf, 40.0, -3.0, 0.5], seed=14)
    _, out, lse, _ = run([40, 9], [80, 0], 2, 1, 64, sinks=True, sink_values=[math.inf, 0.0], seed=15)
    assert (out[:, 0].float() == 0).all() and torch.isposinf(lse[0]).all()


def test_softcap_and_sinks_together_window_gqa():
    run([150, 1, 260], [100, 7, 333], 8, 2, 128, window=(50, 0), softcap=10.0, sinks=True, q_gain=3.0,
        lse_base="log2", seed=16)  # fmt: skip
    run([150, 1, 260], [100, 7, 333], 8, 4, 64, causal=True, softcap=10.0, sinks=True, q_gain=3.0,
        lse_layout="padded", seed=17)  # fmt: skip


# ---------------------------------------------------------------- paged (served since 2026-12-03)
@pytest.mark.parametrize("page_size", [16, 64, 128])
def test_paged_softcap_and_sinks_causal_gqa(page_size):
    run([37, 200, 1, 129], [90, 260, 5, 300], 8, 2, 128, causal=True, softcap=10.0, sinks=True, q_gain=3.0,
        seed=30 + page_size, page_size=page_size)  # fmt: skip


def test_paged_sinks_window_empty_and_keyless_sequences_d64():
    _, out, _, _ = run([20, 0, 65, 7], [0, 30, 100, 0], 4, 2, 64, window=(30, 0), sinks=True, lse_base="log2",
                       seed=41, page_size=8)  # fmt: skip
    assert (out[:20].float() == 0).all()  # a sequence without keys: O = 0 (its LSE is the sink)


def test_paged_softcap_d256():
    run([70, 129], [150, 129], 4, 2, 256, causal=True, softcap=8.0, q_gain=2.0, seed=42, page_size=32)
