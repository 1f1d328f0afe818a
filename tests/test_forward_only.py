"""ragged_attn is forward-only on every backend: inputs that require grad are refused while grad
mode is enabled (a newcomer found that on the CPU such a call returned an output with a grad_fn
and backward silently worked, while the GPU kernel has no backward).

Every refusal is a ValueError naming the tensor (in the adapter's own name through an adapter),
saying forward-only and pointing to torch.no_grad() / torch.inference_mode(); nothing is written.
"""

from __future__ import annotations

import pytest
import torch

import ragged_attn
from ragged_attn.compat.flash_attn import flash_attn_varlen_func as fa2_varlen
from ragged_attn.compat.flash_attn_cute import flash_attn_varlen_func as fa4_varlen
from ragged_attn.compat.flashinfer import cudnn_batch_prefill_with_kv_cache
from ragged_attn.compat.torch_varlen import varlen_attn
from tests.cases import Case


def _args(seed):
    args, _ = Case(seed, [4, 7], [6, 7], 4, 2, 32, 32).make()
    return list(args)


def _assert_refused(call, name: str, out: torch.Tensor | None = None) -> None:
    before = out.clone() if out is not None else None
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"{name}: "), message
    for words in ("forward-only", "requires_grad=True", "torch.no_grad()", "torch.inference_mode()"):
        assert words in message, f"message lacks {words!r}: {message!r}"
    if out is not None:
        assert torch.equal(out, before), "out was written before the error"


@pytest.mark.parametrize("position,name", [(0, "q"), (1, "k"), (2, "v")])
@pytest.mark.parametrize("backend", ["auto", "reference", "cute"])
def test_attention_refuses_an_input_that_requires_grad(position, name, backend):
    """On every backend, before the backend is chosen ("cute" on CPU tensors would otherwise be a
    NotImplementedError about the device)."""
    args = _args(500 + position)
    args[position].requires_grad_(True)
    out = torch.full((args[0].shape[0], 4, 32), 3.0)
    _assert_refused(lambda: ragged_attn.attention(*args, out=out, backend=backend), name, out)


def test_attention_refuses_sinks_that_require_grad():
    args = _args(503)
    sinks = torch.randn(4, requires_grad=True)
    _assert_refused(lambda: ragged_attn.attention(*args, sinks=sinks), "sinks")


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "set_grad_enabled"])
def test_attention_serves_inputs_that_require_grad_with_grad_mode_off(mode):
    args = _args(504)
    want = ragged_attn.attention(*args, causal=True)
    for x in args[:3]:
        x.requires_grad_(True)
    context = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode,
               "set_grad_enabled": lambda: torch.set_grad_enabled(False)}[mode]()  # fmt: skip
    with context:
        got = ragged_attn.attention(*args, causal=True)
    assert got.grad_fn is None and not got.requires_grad
    assert torch.equal(got, want)


def test_plan_run_refuses_an_input_that_requires_grad():
    args = _args(505)
    plan = ragged_attn.plan(*args, causal=True)
    args[2].requires_grad_(True)
    _assert_refused(lambda: plan.run(*args), "v")
    with torch.no_grad():
        assert plan.run(*args).grad_fn is None


def test_torch_varlen_refuses_query_that_requires_grad():
    args = _args(506)
    args[0].requires_grad_(True)
    _assert_refused(lambda: varlen_attn(*args, enable_gqa=True), "query")


def test_flash_attn_refuses_k_that_requires_grad():
    args = _args(507)
    args[1].requires_grad_(True)
    _assert_refused(lambda: fa2_varlen(*args, causal=True), "k")


def test_flash_attn_cute_refuses_a_learnable_sink_that_requires_grad():
    q, k, v, cu_q, cu_k, mq, mk = _args(508)
    sink = torch.nn.Parameter(torch.randn(4))  # FA4's learnable_sink is a model parameter
    _assert_refused(
        lambda: fa4_varlen(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=mq, max_seqlen_k=mk,
                           learnable_sink=sink),
        "learnable_sink",
    )  # fmt: skip


def test_flashinfer_refuses_v_cache_that_requires_grad():
    case = Case(509, [4, 7], [6, 7], 4, 2, 32, 32, dtype=torch.bfloat16)
    (q, k, v, cu_q, cu_k, mq, mk), _ = case.make()
    v.requires_grad_(True)
    out = torch.full_like(q, 3.0)
    _assert_refused(
        lambda: cudnn_batch_prefill_with_kv_cache(
            q, k, v, 0.125, None, max_token_per_sequence=mq, max_sequence_kv=mk, batch_offsets_q=cu_q,
            batch_offsets_k=cu_k, batch_offsets_units="tokens", causal=True, return_lse=False, out=out),
        "v_cache", out,
    )  # fmt: skip
