"""A caller's out / lse that torch would refuse to write in place (one that requires grad while grad
mode is on, an inference tensor outside torch.inference_mode()) is a ValueError naming it, raised
before anything is written. Found by an adversarial pass (session 21): the reference writes sequence
by sequence, so torch's own RuntimeError came after sequence 0's rows of out (or a padded LSE's -inf
fill) had been written. Also the FlashInfer adapter's own out (zeros in rows no sequence covers, on
the CPU, as `attention`'s) and FlashAttention's causal given as numpy's bool_."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ragged_attn
from ragged_attn.compat.flash_attn import flash_attn_varlen_func as fa2_varlen
from ragged_attn.compat.flashinfer import cudnn_batch_prefill_with_kv_cache
from tests.cases import Case

H_Q, D = 4, 32


def _args(seed):
    args, _ = Case(seed, [5, 7], [6, 9], H_Q, 2, D, D).make()
    return list(args)  # q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k


def _poisoned(shape, requires_grad=False, inference=False):
    if inference:
        with torch.inference_mode():
            return torch.full(shape, float("nan"))
    return torch.full(shape, float("nan"), requires_grad=requires_grad)


def _assert_refused(call, name: str, kind: str, *buffers) -> None:
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"{name}: expected "), message
    words = {"grad": ("requires_grad=True", "torch.no_grad()"), "inference": ("inference tensor", "torch.inference_mode()")}
    for w in words[kind]:
        assert w in message, f"message lacks {w!r}: {message!r}"
    for buf in buffers:
        assert torch.isnan(buf).all(), f"a buffer was written before the error ({name}, {kind})"


@pytest.mark.parametrize("backend", ["auto", "reference", "cute"])
@pytest.mark.parametrize("kind", ["grad", "inference"])
def test_attention_refuses_an_out_it_cannot_write_in_place(backend, kind):
    args = _args(2100)
    out = _poisoned((args[0].shape[0], H_Q, D), requires_grad=kind == "grad", inference=kind == "inference")
    _assert_refused(lambda: ragged_attn.attention(*args, out=out, causal=True, backend=backend), "out", kind, out)


@pytest.mark.parametrize("layout", ["head_major", "token_major", "padded"])
@pytest.mark.parametrize("kind", ["grad", "inference"])
def test_attention_refuses_an_lse_it_cannot_write_in_place(layout, kind):
    args = _args(2101)
    total_q = args[0].shape[0]
    shape = {"head_major": (H_Q, total_q), "token_major": (total_q, H_Q), "padded": (2, args[5], H_Q)}[layout]
    lse = _poisoned(shape, requires_grad=kind == "grad", inference=kind == "inference")
    out = _poisoned((total_q, H_Q, D))
    _assert_refused(
        lambda: ragged_attn.attention(*args, out=out, lse=lse, return_lse=True, lse_layout=layout),
        "lse", kind, lse, out,
    )  # fmt: skip


def test_the_same_buffers_are_served_where_torch_allows_the_write():
    """Under torch.no_grad() an out that requires grad is written; under inference mode an
    inference out is; both give the output of a call without out."""
    args = _args(2102)
    want = ragged_attn.attention(*args, causal=True)
    out = _poisoned(tuple(want.shape), requires_grad=True)
    with torch.no_grad():
        ragged_attn.attention(*args, causal=True, out=out)
    assert torch.equal(out.detach(), want)
    with torch.inference_mode():
        out = _poisoned(tuple(want.shape))
        ragged_attn.attention(*args, causal=True, out=out)
    assert torch.equal(out, want)


def test_plan_run_and_flash_attn_refuse_an_inference_out():
    args = _args(2103)
    plan = ragged_attn.plan(*args, causal=True)
    out = _poisoned((args[0].shape[0], H_Q, D), inference=True)
    _assert_refused(lambda: plan.run(*args, out=out), "out", "inference", out)
    _assert_refused(lambda: fa2_varlen(*args, causal=True, out=out), "out", "inference", out)


def _flashinfer_case(seed):
    """Token-unit indptrs with a gap: q rows 0 and 13.. belong to no sequence."""
    (q, k, v, cu_q, cu_k, mq, mk), _ = Case(seed, [5, 7], [6, 9], H_Q, 2, D, D, dtype=torch.bfloat16).make()
    q = torch.cat([torch.randn(1, H_Q, D).to(q.dtype), q, torch.randn(2, H_Q, D).to(q.dtype)])
    return q, k, v, cu_q + 1, cu_k, mq, mk


def _flashinfer(q, k, v, cu_q, cu_k, mq, mk, **kw):
    return cudnn_batch_prefill_with_kv_cache(
        q, k, v, D**-0.5, None, max_token_per_sequence=mq, max_sequence_kv=mk, batch_offsets_q=cu_q,
        batch_offsets_k=cu_k, batch_offsets_units="tokens", causal=True, **kw,
    )  # fmt: skip


def test_flashinfer_allocated_out_holds_zeros_in_uncovered_rows_on_the_cpu():
    q, k, v, cu_q, cu_k, mq, mk = _flashinfer_case(2104)
    for _ in range(3):  # fresh allocations may reuse freed memory: each must come back zeroed
        junk = torch.full((q.shape[0] * H_Q * D * 4,), 7.0)  # dirty the allocator's memory
        del junk
        out, _ = _flashinfer(q, k, v, cu_q, cu_k, mq, mk, return_lse=False)
        assert torch.equal(out[0], torch.zeros_like(out[0])) and torch.equal(out[13:], torch.zeros_like(out[13:]))
    want = ragged_attn.attention(q, k, v, cu_q, cu_k, mq, mk, causal=True)
    assert torch.equal(out[1:13], want[1:13])


def test_flashinfer_refuses_a_separate_out_it_cannot_write_in_place():
    """With batch_offsets_o apart from q's, `attention` writes a scratch out and the rows are copied
    into the caller's afterwards: the adapter's own check names the caller's out first."""
    q, k, v, cu_q, cu_k, mq, mk = _flashinfer_case(2105)
    out = torch.full((20, H_Q, D), float("nan"), dtype=torch.bfloat16, requires_grad=True)
    cu_o = torch.tensor([0, 5, 12], dtype=torch.int32)
    _assert_refused(
        lambda: _flashinfer(q, k, v, cu_q, cu_k, mq, mk, return_lse=False, out=out, batch_offsets_o=cu_o),
        "out", "grad", out.detach(),
    )  # fmt: skip


@pytest.mark.parametrize("flag", [np.True_, np.False_])
def test_flash_attn_takes_numpy_bool_causal(flag):
    args = _args(2106)
    assert torch.equal(fa2_varlen(*args, causal=flag), fa2_varlen(*args, causal=bool(flag)))


def test_flashinfer_names_decreasing_token_offsets():
    """Lengths taken from a token-unit indptr that decreases: the indptr is named, as offsets that
    decrease (not as a negative length the caller never passed)."""
    q, k, v, _, cu_k, mq, mk = _flashinfer_case(2107)
    bad = torch.tensor([1, 6, 4], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^batch_offsets_q: expected non-decreasing offsets .* got 6 then 4 at sequence 1"):
        _flashinfer(q, k, v, bad, cu_k, mq, mk, return_lse=False)
