"""Issue 12 item 3 on the kernel: torch.compile(fullgraph=True) and CUDA-graph replay (device machine)."""

from __future__ import annotations

import pytest
import torch

import ragged_attn
from tests.cases import close

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="needs a CUDA GPU (sm_90a)",
    ),
]


def _layer(q, k, v, cu_q, cu_k, max_q: int, max_k: int):
    out, lse = ragged_attn.attention(q * 1.5, k, v, cu_q, cu_k, max_q, max_k, causal=True, return_lse=True)
    return out.float().sum(-1), lse


def _batch(lens, h_q=8, h_kv=2, d=128, total=None, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    total = total or sum(lens)
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    q = torch.randn(total, h_q, d, device="cuda", generator=g).bfloat16()
    k = torch.randn(total, h_kv, d, device="cuda", generator=g).bfloat16()
    v = torch.randn(total, h_kv, d, device="cuda", generator=g).bfloat16()
    return q, k, v, cu


def _reference(q, k, v, cu, max_len):
    out, lse = ragged_attn.attention(q * 1.5, k, v, cu, cu, max_len, max_len, causal=True, return_lse=True,
                                     backend="reference")  # fmt: skip
    return out.float().sum(-1), lse


@torch.no_grad()
def test_fullgraph_compile_runs_the_kernel():
    torch._dynamo.reset()
    q, k, v, cu = _batch([300, 17, 129])
    explanation = torch._dynamo.explain(_layer)(q, k, v, cu, cu, 300, 300)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    got = torch.compile(_layer, fullgraph=True)(q, k, v, cu, cu, 300, 300)
    want = _reference(q, k, v, cu, 300)
    close(got[0], want[0], "out row sums", atol=1.0, rtol=2e-2)
    close(got[1], want[1], "lse", atol=1e-2, rtol=0)


@torch.no_grad()
def test_reduce_overhead_cuda_graph_replays_new_lengths():
    torch._dynamo.reset()
    compiled = torch.compile(_layer, fullgraph=True, mode="reduce-overhead")
    total, max_len = 512, 512
    q, k, v, cu = _batch([200, 200, 112], total=total, seed=1)
    for lens in ([200, 200, 112], [1, 500, 11], [512, 0, 0], [100, 100, 100]):
        # Same tensors, new lengths written into the same cu_seqlens: the graph replays.
        cu.copy_(torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32))
        for _ in range(3):  # warm-up, record, replay
            got = compiled(q, k, v, cu, cu, max_len, max_len)
        want = _reference(q, k, v, cu, max_len)
        rows = sum(lens)
        close(got[0][:rows], want[0][:rows], f"out row sums, lengths {lens}", atol=1.0, rtol=2e-2)
        close(got[1][:, :rows], want[1][:, :rows], f"lse, lengths {lens}", atol=1e-2, rtol=0)
