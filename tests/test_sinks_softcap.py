"""Issue 14 items 1-2: attention sinks (`sinks=`) and the logit softcap (`softcap=`) on the CPU.

The reference backend against the float64 oracle of tests/cases.py (which applies both from the
definition: a sink is one more softmax column per query head with no value, natural log, not
scaled; softcap maps the scaled scores to softcap * tanh(s / softcap) before the mask). Their
dispatch to the GPU kernel's -softcap / -sinks classes (and what it declines) is tested in
tests/test_sinks_softcap_dispatch.py.
"""

from __future__ import annotations

import math

import pytest
import torch

import ragged_attn
from ragged_attn.compat import flash_attn_cute
from ragged_attn.compat.flash_attn import flash_attn_varlen_func
from ragged_attn.reference import attention_reference
from tests.cases import Case, oracle_float64, valid_rows

CASES = [
    # GQA 3:1, causal bottom-right with q_len > kv_len (early rows see no key), an empty key range.
    Case(1401, [6, 4, 0, 3], [2, 9, 5, 0], 6, 2, 64, 64, causal=True),
    Case(1402, [9, 13], [30, 13], 8, 2, 32, 32, window=(3, 2), lse_layout="token_major", lse_base="log2"),
    Case(1403, [7, 1, 12], [7, 40, 20], 4, 1, 64, 64, causal=True, window=(4, 0), lse_layout="padded"),
    Case(1404, [5, 11], [17, 11], 6, 3, 128, 128, causal="top_left", page_size=3, kv_layout="HND",
         lse_layout="padded", lse_base="log2"),  # fmt: skip
    Case(1405, [10, 3], [25, 14], 4, 2, 64, 64, window=(0, 0), page_size=16, q_gaps=True),
    Case(1406, [20, 2], [8, 30], 8, 8, 192, 128, causal=True, window=(5, 0), lse_layout="token_major"),
]
MODES = {"sinks": (True, 0.0), "softcap": (False, 2.5), "both": (True, 4.0)}


def _sinks(h_q: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(h_q, generator=g) * 2.0).float()


def _lse_at(case, lse, cu_q, b, i, h):
    if case.lse_layout == "head_major":
        return lse[h, int(cu_q[b]) + i].item()
    if case.lse_layout == "token_major":
        return lse[int(cu_q[b]) + i, h].item()
    return lse[b, i, h].item()


def _check_against_oracle(case, args, kwargs, out, lse, tol=1e-4):
    want, want_lse = oracle_float64(case, args, kwargs)
    rows = valid_rows(case, args[3])
    if rows:
        err = (out[rows].double() - want[rows]).abs().max().item()
        assert err < tol, f"max |out - oracle| = {err}"
    for (b, i, h), value in want_lse.items():
        got = _lse_at(case, lse, args[3], b, i, h)
        if math.isinf(value):
            assert got == value, f"lse at (b={b}, i={i}, h={h}): expected {value}, got {got}"
        else:
            assert abs(got - value) < tol, f"lse at (b={b}, i={i}, h={h}): expected {value}, got {got}"
    if case.lse_layout == "padded":
        for b, lq in enumerate(case.lens_q):
            assert torch.all(lse[b, lq:] == -math.inf), f"padded LSE rows past length {lq} of sequence {b}"


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_reference_matches_float64_oracle(case, mode):
    with_sinks, softcap = MODES[mode]
    args, kwargs = case.make()
    if with_sinks:
        kwargs["sinks"] = _sinks(case.h_q, case.seed)
    if softcap:
        kwargs["softcap"] = softcap
        kwargs["softmax_scale"] = 0.6  # scores of a few units: the cap bends them
    out, lse = ragged_attn.attention(*args, return_lse=True, **kwargs)
    _check_against_oracle(case, args, kwargs, out, lse)
    got = attention_reference(*args, return_lse=True, **kwargs)
    assert torch.equal(got[0], out) and torch.equal(got[1], lse)


def test_rows_without_keys_give_zero_and_the_sink_in_the_lse_base():
    case = Case(1410, [6, 2], [2, 0], 4, 2, 64, 64, causal=True)  # rows 0..3 of seq 0 and all of seq 1 see nothing
    args, kwargs = case.make()
    sinks = torch.tensor([0.5, -1.25, 3.0, -math.inf])
    for base, factor in (("ln", 1.0), ("log2", 1.0 / math.log(2.0))):
        out, lse = ragged_attn.attention(*args, **dict(kwargs, lse_base=base), sinks=sinks, return_lse=True)
        empty = [0, 1, 2, 3, 6, 7]
        assert torch.all(out[empty] == 0)
        assert torch.equal(lse[:, empty], (sinks * factor).unsqueeze(1).expand(4, 6))
        assert torch.isfinite(out[4:6]).all() and torch.isfinite(lse[:3, 4:6]).all()


def test_a_minus_inf_sink_is_no_sink_and_others_only_shrink_the_output():
    case = Case(1411, [5, 7], [9, 7], 4, 2, 64, 64, causal=True)
    args, kwargs = case.make()
    plain, plain_lse = ragged_attn.attention(*args, **kwargs, return_lse=True)
    off = torch.full((4,), -math.inf)
    out, lse = ragged_attn.attention(*args, **kwargs, sinks=off, return_lse=True)
    assert torch.equal(out, plain) and torch.equal(lse, plain_lse)
    # A finite sink rescales each row by exp(lse_plain - lse) < 1 (the same weights, a larger denominator).
    sinks = torch.tensor([0.0, 1.0, -2.0, 4.0])
    out, lse = ragged_attn.attention(*args, **kwargs, sinks=sinks, return_lse=True)
    assert torch.allclose(lse, torch.logaddexp(plain_lse, sinks.unsqueeze(1)), atol=1e-6)
    factor = torch.exp(plain_lse - lse).t().unsqueeze(-1)  # (total_q, H_q, 1)
    torch.testing.assert_close(out, plain * factor, atol=1e-6, rtol=1e-5)


def test_non_finite_sinks_follow_ieee_per_head():
    case = Case(1412, [4], [6], 3, 1, 64, 64)
    args, kwargs = case.make()
    sinks = torch.tensor([math.inf, math.nan, 0.5])
    out, lse = ragged_attn.attention(*args, **kwargs, sinks=sinks, return_lse=True)
    assert torch.all(out[:, 0] == 0) and torch.all(lse[0] == math.inf)
    assert torch.isnan(out[:, 1]).all() and torch.isnan(lse[1]).all()
    assert torch.isfinite(out[:, 2]).all() and torch.isfinite(lse[2]).all()


def test_sinks_merge_as_a_state_with_no_value():
    """attention(sinks) == merge(attention, (0, sinks)): the LSE includes the sink (item 3's merge)."""
    case = Case(1413, [6, 9], [11, 4], 6, 3, 64, 64, causal=True)
    args, kwargs = case.make()
    sinks = _sinks(6, 1413)
    kwargs["lse_layout"] = "token_major"
    out, lse = ragged_attn.attention(*args, **kwargs, sinks=sinks, return_lse=True)
    plain, plain_lse = ragged_attn.attention(*args, **kwargs, return_lse=True)
    sink_lse = sinks.expand_as(plain_lse).contiguous()
    v, s = ragged_attn.merge_state(plain, plain_lse, torch.zeros_like(plain), sink_lse, lse_base="ln")
    torch.testing.assert_close(v, out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(s, lse, atol=1e-6, rtol=1e-6)


def test_softcap_bounds_the_scores_and_a_huge_cap_is_no_cap():
    case = Case(1414, [5], [8], 2, 2, 64, 64)
    args, kwargs = case.make()
    scale = 50.0  # scores in the hundreds
    out, lse = ragged_attn.attention(*args, **kwargs, softmax_scale=scale, softcap=1.0, return_lse=True)
    assert torch.all(lse <= 1.0 + math.log(8) + 1e-5) and torch.all(lse >= -1.0 + math.log(8) - 1e-5)
    _check_against_oracle(case, args, dict(kwargs, softmax_scale=scale, softcap=1.0), out, lse)
    plain, plain_lse = ragged_attn.attention(*args, **kwargs, return_lse=True)
    big, big_lse = ragged_attn.attention(*args, **kwargs, softcap=1e30, return_lse=True)
    torch.testing.assert_close(big, plain, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(big_lse, plain_lse, atol=1e-6, rtol=1e-6)


def test_bf16_inputs_compute_in_float32_and_write_bf16():
    case = Case(1415, [7, 3], [7, 12], 4, 2, 64, 64, dtype=torch.bfloat16, causal=True)
    args, kwargs = case.make()
    kwargs.update(sinks=_sinks(4, 1415), softcap=3.0)
    out, lse = ragged_attn.attention(*args, return_lse=True, **kwargs)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    want, _ = oracle_float64(case, args, kwargs)
    assert (out.double() - want).abs().max().item() < 2e-2


def test_caller_lse_and_out_buffers_with_sinks():
    case = Case(1416, [3, 5], [4, 6], 4, 2, 64, 64, lse_layout="padded")
    args, kwargs = case.make()
    sinks = _sinks(4, 1416)
    want, want_lse = ragged_attn.attention(*args, **kwargs, sinks=sinks, return_lse=True)
    out = torch.full_like(want, math.nan)
    lse = torch.full((2, 7, 4), 123.0)
    got, got_lse = ragged_attn.attention(*args, **kwargs, sinks=sinks, return_lse=True, out=out, lse=lse)
    assert got is out and got_lse is lse
    assert torch.equal(out, want) and torch.equal(lse[:, :5], want_lse) and torch.all(lse[:, 5:] == -math.inf)


# --- the reference Plan -------------------------------------------------------------------------

def test_reference_plan_runs_sinks_per_call_and_softcap_fixed():
    case = Case(1417, [4, 6], [5, 6], 4, 2, 64, 64, causal=True)
    args, kwargs = case.make()
    p = ragged_attn.plan(*args, **kwargs, sinks=_sinks(4, 1), softcap=2.0, return_lse=True)
    assert p.reference_class.endswith("-sinks")
    for seed in (2, 3):
        sinks = _sinks(4, seed)
        got = p.run(*args, seqused_q=kwargs.get("seqused_q"), sinks=sinks)
        want = ragged_attn.attention(*args, **kwargs, sinks=sinks, softcap=2.0, return_lse=True)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    with pytest.raises(ValueError, match="^sinks: this plan was made with sinks; pass them"):
        p.run(*args)
    plain = ragged_attn.plan(*args, **kwargs)
    with pytest.raises(ValueError, match="^sinks: this plan was made without sinks, got a tensor"):
        plain.run(*args, sinks=_sinks(4, 4))


# --- argument checks ----------------------------------------------------------------------------

@pytest.mark.parametrize(
    "sinks,error,match",
    [
        (torch.zeros(4, dtype=torch.bfloat16), TypeError, r"sinks: expected dtype float32.*bfloat16"),
        (torch.zeros(4, dtype=torch.float64), TypeError, r"sinks: expected dtype float32"),
        (torch.zeros(2), ValueError, r"sinks: expected shape \(4,\)"),
        (torch.zeros(1, 4), ValueError, r"sinks: expected shape \(4,\)"),
        (torch.zeros(()), ValueError, r"sinks: expected shape \(4,\)"),
        ([0.0] * 4, TypeError, r"sinks: expected a float32 torch.Tensor"),
        (torch.zeros(4, device="meta"), ValueError, r"sinks: expected a tensor on cpu"),
    ],
    ids=["bf16", "fp64", "short", "2d", "scalar", "list", "device"],
)
def test_bad_sinks_are_named(sinks, error, match):
    args, kwargs = Case(1420, [3], [3], 4, 2, 64, 64).make()
    with pytest.raises(error, match=match):
        ragged_attn.attention(*args, **kwargs, sinks=sinks)
    with pytest.raises(error, match=match):
        ragged_attn.plan(*args, **kwargs, sinks=sinks)


@pytest.mark.parametrize(
    "softcap,error",
    [(-1.0, ValueError), (math.nan, ValueError), (math.inf, ValueError), (1e-40, ValueError), (True, TypeError),
     (torch.tensor(1.0), TypeError), ("30", TypeError), (None, TypeError)],
    ids=["negative", "nan", "inf", "subnormal", "bool", "tensor", "str", "none"],
)  # fmt: skip
def test_bad_softcap_is_named(softcap, error):
    args, kwargs = Case(1421, [3], [3], 4, 2, 64, 64).make()
    with pytest.raises(error, match="softcap"):
        ragged_attn.attention(*args, **kwargs, softcap=softcap)


def test_softcap_accepts_ints_and_zero_is_off():
    args, kwargs = Case(1422, [3, 4], [5, 4], 4, 2, 64, 64).make()
    plain = ragged_attn.attention(*args, **kwargs)
    assert torch.equal(ragged_attn.attention(*args, **kwargs, softcap=0), plain)
    assert torch.equal(ragged_attn.attention(*args, **kwargs, softcap=30), ragged_attn.attention(*args, **kwargs, softcap=30.0))


def test_out_overlapping_sinks_is_named():
    args, kwargs = Case(1423, [2], [2], 4, 2, 8, 8).make()
    out = torch.zeros(2, 4, 8)
    with pytest.raises(ValueError, match="out: .*overlapping sinks"):
        ragged_attn.attention(*args, **kwargs, sinks=out[0, :, 0], out=out)


# --- adapters -----------------------------------------------------------------------------------

def test_flash_attn_adapters_pass_softcap_and_learnable_sink_through():
    case = Case(1440, [5, 7], [9, 7], 4, 2, 64, 64, causal=True)
    args, _ = case.make()
    q, k, v, cu_q, cu_k, mq, mk = args
    sink_bf16 = _sinks(4, 1440).to(torch.bfloat16)
    want, want_lse = ragged_attn.attention(*args, causal=True, softcap=5.0, sinks=sink_bf16.float(), return_lse=True)
    out, lse, _ = flash_attn_varlen_func(*args, causal=True, softcap=5.0, learnable_sink=sink_bf16,
                                         return_attn_probs=True)  # fmt: skip
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    out, lse = flash_attn_cute.flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=mq,
                                                      max_seqlen_k=mk, causal=True, learnable_sink=sink_bf16,
                                                      softcap=5.0, return_lse=True)  # fmt: skip
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    plain = ragged_attn.attention(*args, causal=True)
    assert torch.equal(flash_attn_varlen_func(*args, causal=True, softcap=None), plain)
    assert torch.equal(flash_attn_cute.flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                                              causal=True, softcap=0.0)[0], plain)  # fmt: skip


def test_flash_attn_adapters_name_a_bad_sink():
    args, _ = Case(1441, [3], [3], 4, 2, 64, 64).make()
    with pytest.raises(ValueError, match="learnable_sink: expected shape"):
        flash_attn_varlen_func(*args, learnable_sink=torch.zeros(3))
    with pytest.raises(ValueError, match="softcap"):
        flash_attn_cute.flash_attn_varlen_func(args[0], args[1], args[2], cu_seqlens_q=args[3], cu_seqlens_k=args[4],
                                               softcap=-1.0)  # fmt: skip


def test_under_torch_compile_sinks_and_softcap_go_through_the_op():
    case = Case(1442, [4, 5], [4, 7], 4, 2, 32, 32, causal=True)
    args, _ = case.make()
    sinks = _sinks(4, 1442)

    def f(q, k, v, sinks):
        return ragged_attn.attention(q, k, v, *args[3:], causal=True, sinks=sinks, softcap=3.0, return_lse=True)

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(*args[:3], sinks)
    want = ragged_attn.attention(*args, causal=True, sinks=sinks, softcap=3.0, return_lse=True)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    q, k, v, cu_q, cu_k, mq, mk = args
    torch.library.opcheck(
        torch.ops.ragged_attn.attention.default,
        (q, k, v, cu_q, cu_k, mq, mk, None, None, None, "NHD", "bottom_right", -1, 0, None, True, "head_major",
         "ln", "auto", sinks, 3.0),
        test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"),
    )  # fmt: skip


def test_review_edges_softcap_overflow_nan_sink_and_fa_sink_dtype():
    """Found by a review (2026-12-03): an int beyond float range is a ValueError naming softcap; a NaN
    sink makes its head's rows NaN, rows without a key included; FA's learnable_sink names its dtypes."""
    from ragged_attn.compat.flash_attn import sinks_of

    q = torch.randn(6, 4, 16)
    k = torch.randn(9, 2, 16)
    cq, ck = torch.tensor([0, 6], dtype=torch.int32), torch.tensor([0, 9], dtype=torch.int32)
    with pytest.raises(ValueError, match="^softcap: expected 0.0 .* got 1000"):
        ragged_attn.attention(q, k, k, cq, ck, 6, 9, softcap=10**400)
    with pytest.raises(ValueError, match=r"3\.4028234663852886e\+38\]"):
        ragged_attn.attention(q, k, k, cq, ck, 6, 9, softcap=3.5e38)
    sinks = torch.tensor([float("nan"), 0.5, -1.0, 2.0])
    no_keys = torch.randn(0, 2, 16)
    out, lse = ragged_attn.attention(q, no_keys, no_keys, cq, torch.tensor([0, 0], dtype=torch.int32), 6, 0,
                                     sinks=sinks, return_lse=True)  # fmt: skip
    assert torch.isnan(out[:, 0]).all() and torch.isnan(lse[0]).all()
    assert (out[:, 1:] == 0).all() and torch.equal(lse[1:], sinks[1:, None].expand(3, 6))
    with pytest.raises(TypeError, match="^learnable_sink: expected dtype float16, bfloat16 or float32 .* got float64"):
        sinks_of(torch.zeros(4, dtype=torch.float64))
