"""merge_state / merge_states on CUDA tensors: correctness against the float64 oracle, no host
sync, CUDA-graph capture, and the bandwidth on 32k tokens x 32 heads x d128 (printed; run with -s).

Issue 14 item 3 asks for at least 70% of the H200's measured copy bandwidth; the torch-op
implementation makes several memory passes, so the test prints the fraction without asserting it
(a fused kernel is what will reach the target)."""

from __future__ import annotations

import math

import pytest
import torch

import ragged_attn
from ragged_attn.merge import merge_states_reference

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

TOL = {torch.float32: {"rtol": 2**-22, "atol": 4e-6}, torch.bfloat16: {"rtol": 2**-8, "atol": 2**-8},
       torch.float16: {"rtol": 2**-11, "atol": 2**-11}}  # fmt: skip


def _state(gen, t, n, h, d, dtype):
    v = torch.randn(t, n, h, d, generator=gen, device="cuda").to(dtype)
    s = torch.randn(t, n, h, generator=gen, device="cuda") * 4.0
    s[torch.rand(s.shape, generator=gen, device="cuda") < 0.1] = -math.inf
    s[: max(1, t // 10)] = -math.inf  # rows with no key at all
    return v, s


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("lse_base", ["log2", "ln"])
@pytest.mark.parametrize("states", [0, 1, 2, 7])
def test_merge_on_cuda_matches_reference(dtype, lse_base, states):
    gen = torch.Generator(device="cuda").manual_seed(1 + states)
    v, s = _state(gen, 257, states, 8, 128, dtype)
    if states:
        v[s == -math.inf] = math.nan  # not read
    torch.cuda.set_sync_debug_mode("error")  # no device-to-host read anywhere
    try:
        v_m, s_m = ragged_attn.merge_states(v, s, lse_base=lse_base)
        if states == 2:
            v2, s2 = ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1], lse_base=lse_base)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    v_ref, s_ref = merge_states_reference(v, s, lse_base=lse_base)
    torch.testing.assert_close(v_m.double(), v_ref, **TOL[dtype])
    torch.testing.assert_close(s_m.double(), s_ref, rtol=2e-6, atol=2e-6)
    if states == 2:
        assert torch.equal(v2, v_m) and torch.equal(s2, s_m)


def test_merge_state_captures_in_a_cuda_graph():
    gen = torch.Generator(device="cuda").manual_seed(9)
    v, s = _state(gen, 64, 2, 4, 64, torch.bfloat16)
    args = [v[:, 0].clone(), s[:, 0].clone(), v[:, 1].clone(), s[:, 1].clone()]
    ragged_attn.merge_state(*args)  # warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        v_out, s_out = ragged_attn.merge_state(*args)
    for seed in (10, 11):  # new values in the same buffers, replayed
        v_new, s_new = _state(torch.Generator(device="cuda").manual_seed(seed), 64, 2, 4, 64, torch.bfloat16)
        for dst, src in zip(args, (v_new[:, 0], s_new[:, 0], v_new[:, 1], s_new[:, 1])):
            dst.copy_(src)
        graph.replay()
        v_ref, s_ref = merge_states_reference(v_new, s_new)
        torch.testing.assert_close(v_out.double(), v_ref, **TOL[torch.bfloat16])
        torch.testing.assert_close(s_out.double(), s_ref, rtol=2e-6, atol=2e-6)


def _median_ms(fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


@pytest.mark.parametrize("states", [2, 4])
def test_merge_bandwidth_32k_tokens_32_heads_d128(states):
    t, h, d, dtype = 32768, 32, 128, torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(123)
    v = torch.randn(t, states, h, d, generator=gen, device="cuda", dtype=dtype)
    s = torch.randn(t, states, h, generator=gen, device="cuda") * 4.0
    s[::97] = -math.inf
    if states == 2:
        parts = (v[:, 0].contiguous(), s[:, 0].contiguous(), v[:, 1].contiguous(), s[:, 1].contiguous())
        fn = lambda: ragged_attn.merge_state(*parts)
        name = "merge_state"
    else:
        fn = lambda: ragged_attn.merge_states(v, s)
        name = f"merge_states (S={states})"
    v_m, s_m = fn()
    v_ref, s_ref = merge_states_reference(v, s)  # correctness on the timed problem
    torch.testing.assert_close(v_m.double(), v_ref, **TOL[dtype])
    torch.testing.assert_close(s_m.double(), s_ref, rtol=2e-6, atol=2e-6)
    del v_ref, s_ref
    # Bytes a single-pass merge must move: every input read once, every output written once.
    moved = v.numel() * v.element_size() + s.numel() * 4 + v_m.numel() * v_m.element_size() + s_m.numel() * 4
    ms = _median_ms(fn)
    src = torch.empty(moved // 2, dtype=torch.uint8, device="cuda")  # a copy moving the same bytes
    dst = torch.empty_like(src)
    copy_ms = _median_ms(lambda: dst.copy_(src))
    bw, copy_bw = moved / ms / 1e9, moved / copy_ms / 1e9  # TB/s: bytes / (ms * 1e-3 s) / 1e12
    print(
        f"\n{name} {t} tokens x {h} heads x d{d} bf16 on {torch.cuda.get_device_name()}: {ms:.3f} ms, "
        f"{bw:.2f} TB/s moved (single-pass bytes {moved / 1e9:.2f} GB); torch copy of the same bytes "
        f"{copy_ms:.3f} ms = {copy_bw:.2f} TB/s; merge / copy = {bw / copy_bw:.1%} (issue 14 target: >= 70%)"
    )
    assert ms > 0 and copy_ms > 0
