"""Host microseconds per call on the GPU machine (issue 4's host budget), printed as a table.

Tiny batch (2 x 64 tokens, 8/2 heads, d128, bf16, causal), GPU otherwise idle, after a warm-up.
Every row is timed in turns with the others (ROUNDS rounds of CALLS back-to-back calls each, rows
interleaved so that a noisy stretch of the shared host hits them all alike); a row's number is the
median over rounds of the mean per call. Rows: the bare TVM-FFI call of the compiled kernel,
Plan.run and ragged_attn.attention with and without a caller's out, and a breakdown (the fast
path's Python with the entry swapped for a no-op, torch allocations). The last line is the GPU
time per call of the tiny kernel back to back: when it exceeds a row's host time, that row's calls
queue up and measure the GPU instead.
"""

import statistics
import time

import torch

import ragged_attn
from ragged_attn import compile_cache
from ragged_attn.fast_launch import BoundKernel
from ragged_attn.kernels import sm90
from ragged_attn.kernels.sm90.launch import sm_count, tile_counter

ROUNDS, CALLS = 21, 500


def interleaved_us(rows):
    """{name: median over rounds of the mean microseconds per call}, rows timed in turns."""
    for _, fn in rows:
        for _ in range(50):
            fn()
    torch.cuda.synchronize()
    samples = {name: [] for name, _ in rows}
    for _ in range(ROUNDS):
        for name, fn in rows:
            start = time.perf_counter()
            for _ in range(CALLS):
                fn()
            samples[name].append((time.perf_counter() - start) / CALLS * 1e6)
            torch.cuda.synchronize()
    return {name: (statistics.median(s), min(s)) for name, s in samples.items()}


def main():
    dev = "cuda"
    q = torch.randn(128, 8, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(128, 2, 128, device=dev, dtype=torch.bfloat16)
    v = torch.randn(128, 2, 128, device=dev, dtype=torch.bfloat16)
    cu = torch.tensor([0, 64, 128], dtype=torch.int32, device=dev)
    out = torch.empty_like(q)
    plan = ragged_attn.plan(q, k, v, cu, cu, 64, 64, causal=True)
    compiled = compile_cache.get_kernel(plan.layout_class, sm90.compile_forward)
    # The compiled kernel's own argument list (launch.launch_forward's call), LSE off.
    bare_args = (
        q, k, v, out, None, cu, cu, cu, cu, 0, 0, 2, 64, 0, 0.088, -1, 0, 1, 0, 0, 0, 0, 0.69,
        sm_count(q.device), tile_counter(q), None, 1, 0, 0,
    )  # fmt: skip
    noop = BoundKernel(lambda *a: None, plan.problem)
    rows = [
        ("bare TVM-FFI call of the compiled kernel", lambda: compiled(*bare_args)),
        ("Plan.run(..., out=out)", lambda: plan.run(q, k, v, cu, cu, 64, 64, out=out)),
        ("Plan.run(...) (allocates out)", lambda: plan.run(q, k, v, cu, cu, 64, 64)),
        ("ragged_attn.attention(..., out=out)", lambda: ragged_attn.attention(q, k, v, cu, cu, 64, 64, causal=True, out=out)),
        ("ragged_attn.attention(...)", lambda: ragged_attn.attention(q, k, v, cu, cu, 64, 64, causal=True)),
        ("breakdown: fast-path Python, out given (no-op entry)",
         lambda: noop.try_launch(q, k, v, cu, cu, 64, None, None, None, out, None)),
        ("breakdown: fast-path Python, allocating (no-op entry)",
         lambda: noop.try_launch(q, k, v, cu, cu, 64, None, None, None, None, None)),
        ("breakdown: torch.empty(shape, dtype=, device=)",
         lambda: torch.empty((128, 8, 128), dtype=torch.bfloat16, device=q.device)),
        ("breakdown: q.new_empty(shape)", lambda: q.new_empty((128, 8, 128))),
    ]  # fmt: skip
    times = interleaved_us(rows)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    torch.cuda._sleep(50_000_000)  # ~25 ms head start: the launches queue before the GPU runs them
    start.record()
    for _ in range(1000):
        compiled(*bare_args)
    end.record()
    torch.cuda.synchronize()
    gpu_us = start.elapsed_time(end)  # ms per 1000 calls = us per call
    want = ragged_attn.attention(q, k, v, cu, cu, 64, 64, causal=True, backend="reference")
    err = (plan.run(q, k, v, cu, cu, 64, 64).float() - want.float()).abs().max().item()
    print(f"| call ({torch.cuda.get_device_name()}, {time.strftime('%Y-%m-%d')}) | host us per call, "
          f"median of {ROUNDS} rounds x {CALLS} | fastest round |")  # fmt: skip
    print("|---|---|---|")
    for name, _ in rows:
        med, best = times[name]
        print(f"| {name} | {med:.1f} | {best:.1f} |")
    print(f"GPU time per call of the tiny kernel, back to back: {gpu_us:.1f} us")
    print(f"max abs err of Plan.run vs reference: {err:.2e}")


if __name__ == "__main__":
    main()
