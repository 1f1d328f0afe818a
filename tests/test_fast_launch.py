"""Plan.run's fast path: the predicate sends anything unusual to the checked path; arguments are right."""

from __future__ import annotations

import math

import pytest
import torch

from ragged_attn.fast_launch import BoundKernel
from ragged_attn.problem import build_problem


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


def make(total_q=40, total_k=50, h_q=8, h_kv=2, d=128, dtype=torch.bfloat16, **options):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(total_q, h_q, d, generator=g).to(dtype)
    k = torch.randn(total_k, h_kv, d, generator=g).to(dtype)
    v = torch.randn(total_k, h_kv, d, generator=g).to(dtype)
    cu_q = torch.tensor([0, 10, total_q], dtype=torch.int32)
    cu_k = torch.tensor([0, 20, total_k], dtype=torch.int32)
    problem, _ = build_problem(q, k, v, cu_q, cu_k, 30, 30, **options)
    rec = Recorder()
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


@pytest.mark.parametrize(
    "mutate",
    [
        lambda a: a.update(q=a["q"].half()),
        lambda a: a.update(k=a["k"][None]),
        lambda a: a.update(cu_q=a["cu_q"].long()),
        lambda a: a.update(cu_k=a["cu_k"][:-1]),
        lambda a: a.update(max_q=None),
        lambda a: a.update(max_q=0),
        lambda a: a.update(lse=torch.empty(8, 40)),
        lambda a: a.update(q=torch.randn(40, 8, 132).bfloat16()[..., :128]),
        lambda a: a.update(q=a["q"][:0]),
        lambda a: a.update(v=torch.randn(50, 2, 64).bfloat16()),
        lambda a: a.update(k=torch.randn(50, 3, 128).bfloat16(), v=torch.randn(50, 3, 128).bfloat16()),
        lambda a: a.update(out=torch.empty(40, 8, 128, dtype=torch.float16)),
        lambda a: a.update(seqused_q=torch.tensor([1, 2, 3], dtype=torch.int32)),
        lambda a: a.update(page_table=torch.zeros(2, 1, dtype=torch.int32)),
    ],
    ids=["dtype", "rank", "cu-dtype", "cu-length", "max-none", "max-zero", "lse-buffer", "misaligned-stride",
         "empty-q", "head-dim", "gqa-indivisible", "out-dtype", "seqused-shape", "paged"],
)
def test_anything_unusual_goes_to_the_checked_path(mutate):
    bound, rec, (q, k, v, cu_q, cu_k) = make()
    a = dict(q=q, k=k, v=v, cu_q=cu_q, cu_k=cu_k, max_q=30, seqused_q=None, seqused_k=None, page_table=None,
             out=None, lse=None)
    mutate(a)
    assert bound.try_launch(**a) is None
    assert rec.calls == [], "the kernel was called although the predicate failed"


def test_caller_out_is_used_when_apart_from_the_inputs():
    bound, rec, t = make()
    out = torch.empty(40, 8, 128, dtype=torch.bfloat16)
    assert bound.try_launch(*t, 30, None, None, None, out, None) is out
    assert rec.calls[0][3] is out


@pytest.mark.parametrize(
    "make_out",
    [
        lambda q: q,  # out is q
        lambda q: torch.zeros(1, 8, 128, dtype=torch.bfloat16).expand(40, 8, 128),  # self-overlapping
        lambda q: torch.empty(40, 128, 8, dtype=torch.bfloat16).transpose(1, 2),  # last dim strided
        lambda q: torch.empty(40, 8, 128, dtype=torch.bfloat16)[:, :, :].as_strided((40, 8, 128), (128, 128, 1)),
    ],
    ids=["aliases-q", "expanded", "transposed", "heads-share-rows"],
)
def test_unusual_out_goes_to_the_checked_path(make_out):
    bound, rec, t = make()
    assert bound.try_launch(*t, 30, None, None, None, make_out(t[0]), None) is None
    assert rec.calls == []
