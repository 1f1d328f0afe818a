"""The reference is exact to the one definition of non-finite inputs (tests/nonfinite_cases.py):
a row is NaN only where a key or value it may see holds NaN."""

from __future__ import annotations

import math

import pytest
import torch

from ragged_attn.reference import attention_reference
from tests.nonfinite_cases import CASES, NonFiniteCase, oracle


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_reference_is_exact_to_the_definition(case: NonFiniteCase):
    args, kwargs = case.make()
    out, lse = attention_reference(*args, return_lse=True, **kwargs)
    want, want_lse = oracle(case, *args[:3])
    assert torch.equal(torch.isnan(out), torch.isnan(want)), "NaN where the definition has none, or none where it has"
    assert torch.equal(torch.isinf(out), torch.isinf(want))
    torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-5, equal_nan=True)
    torch.testing.assert_close(lse.double(), want_lse, atol=1e-5, rtol=1e-5, equal_nan=True)


def test_issue_case_makes_exactly_the_rows_that_see_the_key_nan():
    """NaN in V row 0, causal window (4, 0) over 64 rows: 5 rows see key 0, and only they are NaN
    (the reference used to make all 64 NaN through 0 * NaN in probs @ V)."""
    case = CASES[0]
    args, kwargs = case.make()
    out, lse = attention_reference(*args, return_lse=True, **kwargs)
    nan_rows = torch.isnan(out).any(dim=(1, 2)).nonzero().flatten().tolist()
    assert nan_rows == [0, 1, 2, 3, 4]
    assert torch.isnan(out[:5]).all() and torch.isfinite(out[5:]).all()
    assert torch.isfinite(lse).all(), "V does not enter the LSE"


def test_nan_key_makes_the_lse_of_the_rows_that_see_it_nan():
    case = CASES[1]
    args, kwargs = case.make()
    out, lse = attention_reference(*args, return_lse=True, **kwargs)
    assert torch.isnan(lse[:, :5]).all() and torch.isfinite(lse[:, 5:]).all()
    assert torch.isnan(out[:5]).all() and torch.isfinite(out[5:]).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_inputs_follow_the_same_definition(dtype):
    case = CASES[0]
    args, kwargs = case.make(dtype=dtype)
    out = attention_reference(*args, **kwargs)
    assert torch.isnan(out[:5]).all() and torch.isfinite(out[5:].float()).all()


def test_an_all_finite_call_is_unchanged_by_the_masked_path():
    """The masked P @ V is only taken for non-finite V; a finite case is one plain matmul and the
    masked path agrees with it where both apply."""
    from ragged_attn.reference import _masked_pv

    g = torch.Generator().manual_seed(3)
    probs = torch.rand(2, 5, 7, generator=g)
    seen = torch.rand(5, 7, generator=g) > 0.3
    probs = probs * seen
    vf = torch.randn(2, 7, 4, generator=g)
    torch.testing.assert_close(_masked_pv(probs, vf, seen), probs @ vf)
    vf[:, 0, 0] = math.nan
    got = _masked_pv(probs, vf, seen)
    rows_seeing_0 = seen[:, 0]
    assert torch.equal(torch.isnan(got[:, :, 0]), rows_seeing_0.expand(2, 5))
    assert torch.isfinite(got[:, :, 1:]).all()
