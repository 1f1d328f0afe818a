"""Why does the library call time slower than tools/bench_issue10.py's launch of the same class?
(H100, 2026-12-08: 1 x 16384 at 32/8 heads, d128, no mask, 2.7 ms rests: `ragged_attn.attention`
741 TFLOP/s in tools/probe_order.py, `launch_forward` of the prebuilt object 763 in
tools/bench_issue10.py, FA4 757-759 in both.) One process, the same tensors, balanced rounds:

- "library": ragged_attn.attention(q, k, v, cu_q, cu_k, max_q, max_k) as the suites call it (a
  fresh out each call), and "library out=" into one preallocated out;
- "launch jit": launch_forward of compile_forward(class) compiled in this process;
- "launch prebuilt": launch_forward of RAGGED_ATTN_SM90_PREBUILT/<class>.o (compiled on the CPU box),
  into one out, and "launch prebuilt fresh out" into a new out each call;
- "library kernel": launch_forward of the function the library itself holds for the class
  (compile_cache), so its object against the launch path;
- FA4.

Usage: python tools/probe_library_path.py [BxL:Hq/Hkv ...] [--reps 12] [--rest-us 2700]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import ragged_attn
from ragged_attn import compile_cache
from ragged_attn.bench.timing import gpu_ms_interleaved
from ragged_attn.kernels.sm90 import compile_forward, launch_forward
from ragged_attn.layout_class import LayoutClass


def time_row(spec: str, lc, jit, prebuilt, reps: int, rest_us: float, dev) -> None:
    """Check, then time every path of one row (BxL:Hq/Hkv) twice; print the table lines."""
    d = lc.d_qk
    shape, heads = spec.split(":")
    b, n = (int(x) for x in shape.split("x"))
    hq, hkv = (int(x) for x in heads.split("/"))
    g = torch.Generator(device=dev).manual_seed(0)
    total = b * n
    q = torch.randn(total, hq, d, generator=g, device=dev).to(torch.bfloat16)
    k = torch.randn(total, hkv, d, generator=g, device=dev).to(torch.bfloat16)
    v = torch.randn(total, hkv, d, generator=g, device=dev).to(torch.bfloat16)
    cu_q = torch.arange(0, total + 1, n, dtype=torch.int32, device=dev)
    cu_k = cu_q.clone()
    flops = 4 * hq * d * b * n * n

    def launch(kernel, out):
        def call():
            dst = torch.empty_like(q) if out is None else out
            launch_forward(
                kernel, q=q, k=k, v=v, out=dst, lse=None, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                seqused_q=None, seqused_k=None, batch=b, max_seqlen_q=n, lse_s_max=0, softmax_scale=d**-0.5,
                window_left=-1, window_right=-1, bottom_right=True, lse_strides=(0, 0, 0, 0), max_seqlen_k=n,
            )  # fmt: skip
            return dst

        return call

    buf = torch.empty_like(q)
    impls = {
        "library": lambda: ragged_attn.attention(q, k, v, cu_q, cu_k, n, n, causal=False),
        "library out=": lambda: ragged_attn.attention(q, k, v, cu_q, cu_k, n, n, causal=False, out=buf),
    }
    ref = impls["library"]()
    impls["launch jit"] = launch(jit, torch.empty_like(q))
    if prebuilt is not None:
        impls["launch prebuilt"] = launch(prebuilt, torch.empty_like(q))
        impls["launch prebuilt fresh out"] = launch(prebuilt, None)  # a new out each call, as the library
    # the function the library holds for the class (compiled by its first call above, disk-cache entry)
    impls["library kernel"] = launch(compile_cache.get_kernel(lc, compile_forward), torch.empty_like(q))
    try:
        from flash_attn.cute import flash_attn_varlen_func as fa4

        impls["FA4"] = lambda: fa4(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=n,
                                   max_seqlen_k=n, causal=False)[0]  # fmt: skip
    except ImportError:
        pass
    for name, fn in impls.items():
        o = fn()
        torch.cuda.synchronize()
        print(f"{spec} {name}: max diff vs library {(o.float() - ref.float()).abs().max().item():.3g}")
    for run in (1, 2):
        ms = gpu_ms_interleaved(impls, dev, rest_us, reps=reps)
        print(
            f"| {spec} run {run} | "
            + " | ".join(f"{k_} {flops / (t * 1e-3) / 1e12:.1f}" for k_, t in ms.items())
            + " |"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="*", default=["1x16384:32/8", "1x16384:64/8"])
    parser.add_argument("--reps", type=int, default=12)
    parser.add_argument("--rest-us", type=float, default=2700.0)
    parser.add_argument("--d", type=int, default=128)
    args = parser.parse_args(argv)
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(dev), flush=True)
    d = args.d
    lc = LayoutClass("sm_90a", d, d, "bf16", "bf16", "none", False, "ragged")
    jit = compile_forward(lc)
    prebuilt = None
    path = os.path.join(os.environ.get("RAGGED_ATTN_SM90_PREBUILT", ""), lc.name + ".o")
    if os.path.exists(path):
        import cutlass.cute as cute

        prebuilt = cute.runtime.load_module(path, enable_tvm_ffi=True).fwd
    for spec in args.rows:
        time_row(spec, lc, jit, prebuilt, args.reps, args.rest_us, dev)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
