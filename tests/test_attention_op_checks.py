"""`attention_op` (the torch custom op) refuses what `attention` refuses, with `attention`'s error,
before its schema converts or rejects the value (a bool window bound, a tensor max_seqlen, an int
return_lse, a tensor scale); a softmax_scale beyond float range is a ValueError naming it (CPU;
found by an adversarial session, 2026-12-04)."""

from __future__ import annotations

import pytest
import torch

import ragged_attn


def _i32(*x):
    return torch.tensor(x, dtype=torch.int32)


def test_softmax_scale_beyond_float_range_is_a_named_value_error():
    q, k, v = (torch.randn(4, 2, 16) for _ in range(3))
    cu = _i32(0, 4)
    with pytest.raises(ValueError, match=r"^softmax_scale: expected a finite positive float"):
        ragged_attn.attention(q, k, v, cu, cu, 4, 4, softmax_scale=10**400)


@pytest.mark.parametrize(
    "kwargs,error,name",
    [({"window_size": (True, -1)}, ValueError, "window_size"), ({"window_size": (1.5, -1)}, ValueError, "window_size"),
     ({"max_seqlen_q": torch.tensor(4)}, TypeError, "max_seqlen_q"), ({"max_seqlen_q": 4.0}, TypeError, "max_seqlen_q"),
     ({"max_seqlen_k": True}, TypeError, "max_seqlen_k"), ({"return_lse": 1}, TypeError, "return_lse"),
     ({"softmax_scale": torch.tensor(0.5)}, TypeError, "softmax_scale"),
     ({"causal": torch.tensor(True)}, ValueError, "causal")],
    ids=["window-bool", "window-float", "max-q-tensor", "max-q-float", "max-k-bool", "return-lse-int",
         "scale-tensor", "causal-tensor"],
)  # fmt: skip
def test_attention_op_refuses_what_attention_refuses(kwargs, error, name):
    q, k, v = (torch.randn(4, 2, 16) for _ in range(3))
    cu = _i32(0, 4)
    args = {"max_seqlen_q": 4, "max_seqlen_k": 4}
    args.update(kwargs)
    mq, mk = args.pop("max_seqlen_q"), args.pop("max_seqlen_k")
    with pytest.raises(error, match=rf"^{name}: expected"):
        ragged_attn.attention(q, k, v, cu, cu, mq, mk, **args)
    with pytest.raises(error, match=rf"^{name}: expected"):
        ragged_attn.attention_op(q, k, v, cu, cu, mq, mk, **args)
