"""Host microseconds per call on the GPU machine (issue 4's host budget), printed as a table.

Median over 1000 back-to-back calls on a tiny batch (2 x 64 tokens, 8/2 heads, d128, bf16, causal),
GPU otherwise idle, after a warm-up: the bare TVM-FFI call of the compiled kernel, Plan.run with and
without a caller's out, and ragged_attn.attention. The GPU work per call is a few microseconds, so
back-to-back calls are host-bound and the median wall time per call is the host cost.
"""

import statistics
import time

import torch

import ragged_attn
from ragged_attn import compile_cache
from ragged_attn.kernels import sm90


def per_call_us(fn, calls=1000, rounds=7):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def main():
    dev = "cuda"
    q = torch.randn(128, 8, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(128, 2, 128, device=dev, dtype=torch.bfloat16)
    v = torch.randn(128, 2, 128, device=dev, dtype=torch.bfloat16)
    cu = torch.tensor([0, 64, 128], dtype=torch.int32, device=dev)
    out = torch.empty_like(q)
    plan = ragged_attn.plan(q, k, v, cu, cu, 64, 64, causal=True)
    compiled = compile_cache.get_kernel(plan.layout_class, sm90.compile_forward)
    bare_args = (q, k, v, out, None, cu, cu, cu, cu, 0, 0, 2, 64, 0, 0.088, -1, 0, 1, 0, 0, 0, 0, 0.69, None)
    rows = [
        ("bare TVM-FFI call of the compiled kernel", per_call_us(lambda: compiled(*bare_args))),
        ("Plan.run(..., out=out)", per_call_us(lambda: plan.run(q, k, v, cu, cu, 64, 64, out=out))),
        ("Plan.run(...) (allocates out)", per_call_us(lambda: plan.run(q, k, v, cu, cu, 64, 64))),
        ("ragged_attn.attention(..., out=out)", per_call_us(lambda: ragged_attn.attention(q, k, v, cu, cu, 64, 64, causal=True, out=out))),
        ("ragged_attn.attention(...)", per_call_us(lambda: ragged_attn.attention(q, k, v, cu, cu, 64, 64, causal=True))),
    ]
    want = ragged_attn.attention(q, k, v, cu, cu, 64, 64, causal=True, backend="reference")
    err = (plan.run(q, k, v, cu, cu, 64, 64).float() - want.float()).abs().max().item()
    print(f"| call ({torch.cuda.get_device_name()}, {time.strftime('%Y-%m-%d')}) | host us per call (median of 7 x 1000) |")
    print("|---|---|")
    for name, us in rows:
        print(f"| {name} | {us:.1f} |")
    print(f"max abs err of Plan.run vs reference: {err:.2e}")


if __name__ == "__main__":
    main()
