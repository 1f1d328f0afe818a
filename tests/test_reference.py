"""The reference backend against an independent float64 per-sequence loop (tests/cases.py)."""

from __future__ import annotations

import math

import pytest
import torch

from ragged_attn import attention
from ragged_attn.reference import attention_reference
from tests.cases import Case, oracle_float64, random_case, valid_rows

GRID = [random_case(seed) for seed in range(60)]
# Named corners the random grid may miss.
GRID += [
    Case(1001, [0, 7, 0], [5, 9, 0], 6, 2, 64, 64, causal=True, lse_layout="padded"),
    Case(1002, [300], [300], 7, 1, 32, 32, causal=True, window=(33, 0), page_size=3, kv_layout="HND"),
    Case(1003, [20, 1], [4, 100], 5, 1, 128, 128, causal=True),  # q_len > kv_len: early rows see nothing
    Case(1004, [1, 1, 1], [250, 64, 1], 8, 1, 64, 64, page_size=64, kv_layout="NHD", lse_base="log2"),
    Case(1005, [17, 9], [40, 33], 6, 3, 192, 128, causal="top_left", window=(5, 0), lse_layout="token_major"),
    Case(1006, [13], [31], 4, 4, 64, 64, window=(2, 3), page_size=1, q_gaps=True),
]


@pytest.mark.parametrize("case", GRID, ids=lambda c: c.id)
def test_reference_matches_float64_oracle(case: Case):
    args, kwargs = case.make()
    out, lse = attention_reference(*args, return_lse=True, **kwargs)
    want, want_lse = oracle_float64(case, args, kwargs)
    rows = valid_rows(case, args[3])
    if rows:
        err = (out[rows].double() - want[rows]).abs().max().item()
        assert err < 1e-4, f"max |out - oracle| = {err}"
    assert torch.isfinite(out[rows]).all(), "NaN/inf reached a valid row (NaN-filled pool slots leaked?)"
    for (b, i, h), value in want_lse.items():
        if case.lse_layout == "head_major":
            got = lse[h, int(args[3][b]) + i].item()
        elif case.lse_layout == "token_major":
            got = lse[int(args[3][b]) + i, h].item()
        else:
            got = lse[b, i, h].item()
        if math.isinf(value):
            assert got == value, f"lse at (b={b}, i={i}, h={h}): expected {value}, got {got}"
        else:
            assert abs(got - value) < 1e-4, f"lse at (b={b}, i={i}, h={h}): expected {value}, got {got}"
    if case.lse_layout == "padded":
        for b, lq in enumerate(case.lens_q):
            assert torch.all(lse[b, lq:] == -math.inf), f"padded LSE rows past length {lq} of sequence {b} are not -inf"


def test_fully_masked_rows_are_zero_with_minus_inf_lse():
    case = Case(7, [6], [2], 2, 1, 64, 64, causal=True)  # rows 0..3 see no key (bottom-right)
    args, kwargs = case.make()
    out, lse = attention_reference(*args, return_lse=True, **kwargs)
    assert torch.all(out[:4] == 0)
    assert torch.all(lse[:, :4] == -math.inf)
    assert torch.isfinite(out[4:]).all() and torch.isfinite(lse[:, 4:]).all()


def test_padded_lse_buffer_in_any_dim_order_is_filled_in_place():
    case = Case(8, [3, 5], [4, 6], 4, 2, 64, 64, lse_layout="padded")
    args, kwargs = case.make()
    _, want = attention_reference(*args, return_lse=True, **kwargs)
    storage = torch.full((2, 4, 7), 123.0)  # (B, H_q, s_max) in memory
    buf = storage.permute(0, 2, 1)  # logical (B, s_max, H_q)
    _, got = attention_reference(*args, return_lse=True, lse=buf, **kwargs)
    assert got.data_ptr() == storage.data_ptr()
    assert torch.equal(got[:, :5], want)
    assert torch.all(storage.permute(0, 2, 1)[:, 5:] == -math.inf)


def test_caller_out_is_written_in_place_and_inputs_unchanged():
    case = Case(9, [11, 4], [9, 12], 6, 2, 64, 64, dtype=torch.bfloat16, causal=True)
    args, kwargs = case.make()
    before = [a.clone() for a in args[:5]]
    out = torch.full((15, 6, 64), float("nan"), dtype=torch.bfloat16)
    got = attention(*args, out=out, **kwargs)
    assert got is out and torch.isfinite(out).all()
    for a, b in zip(args[:5], before):
        assert torch.equal(a, b), "an input changed"


def test_reference_rejects_out_of_order_cu_seqlens_before_writing():
    case = Case(10, [4, 4], [4, 4], 2, 1, 64, 64)
    (q, k, v, cu_q, cu_k, mq, mk), kwargs = case.make()
    out = torch.full((8, 2, 64), 7.0)
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        attention(q, k, v, torch.tensor([0, 6, 3], dtype=torch.int32), cu_k, mq, mk, out=out)
    assert torch.all(out == 7.0), "out was written before the error"


def test_reference_rejects_lengths_above_max_seqlen():
    case = Case(11, [4, 9], [4, 9], 2, 1, 64, 64)
    (q, k, v, cu_q, cu_k, _, mk), kwargs = case.make()
    with pytest.raises(ValueError, match="max_seqlen_q"):
        attention(q, k, v, cu_q, cu_k, 5, mk)


def test_reference_rejects_page_ids_outside_the_pool():
    case = Case(12, [3], [20], 2, 1, 64, 64, page_size=16)
    args, kwargs = case.make()
    kwargs["page_table"] = kwargs["page_table"].clone()
    kwargs["page_table"][0, 1] = 10_000
    with pytest.raises(ValueError, match="page_table"):
        attention(*args, **kwargs)


def test_allocated_outputs_outside_every_sequence_are_zero_and_minus_inf():
    q = torch.randn(8, 2, 16)
    k = v = torch.randn(3, 2, 16)
    cu_q, cu_k = torch.tensor([2, 5], dtype=torch.int32), torch.tensor([0, 3], dtype=torch.int32)
    out, lse = attention(q, k, v, cu_q, cu_k, 3, 3, return_lse=True)
    outside = [0, 1, 5, 6, 7]
    assert torch.all(out[outside] == 0) and torch.all(lse[:, outside] == -math.inf)
    assert torch.isfinite(out[2:5]).all()


def test_padded_lse_shorter_than_a_sequence_is_refused_before_writing():
    q = k = v = torch.randn(7, 2, 16)
    cu = torch.tensor([0, 5, 7], dtype=torch.int32)
    out, lse = torch.zeros(7, 2, 16), torch.zeros(2, 3, 2)
    with pytest.raises(ValueError, match="lse"):
        attention(q, k, v, cu, cu, None, None, return_lse=True, lse_layout="padded", out=out, lse=lse)
    assert torch.all(out == 0) and torch.all(lse == 0), "an output was written before the error"
