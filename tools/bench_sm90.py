"""First speed reading of the sm_90a kernel beside FA4 (flash_attn.cute.flash_attn_varlen_func).

Useful TFLOP/s = 4 * H_q * d * (exact allowed (query, key) pairs) / time; median of do_bench.
Usage (GPU machine): python tools/bench_sm90.py  [prints a markdown table]
"""

from __future__ import annotations

import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ragged_attn.layout_class import LayoutClass  # noqa: E402
from ragged_attn.kernels.sm90 import launch_forward  # noqa: E402


def load(lc):
    folder = os.environ.get("RAGGED_ATTN_SM90_PREBUILT", "")
    path = os.path.join(folder, lc.name + ".o")
    if folder and os.path.exists(path):
        import cutlass.cute as cute

        return cute.runtime.load_module(path, enable_tvm_ffi=True).fwd
    from ragged_attn.kernels.sm90 import compile_forward

    return compile_forward(lc)


def pairs_causal_br(lq, lk):
    return sum(max(0, min(lk, i + lk - lq + 1)) for i in range(lq))


def bench(B, L, hq, hkv, d=128):
    dev, dt = "cuda", torch.bfloat16
    total = B * L
    q = torch.randn(total, hq, d, device=dev, dtype=dt)
    k = torch.randn(total, hkv, d, device=dev, dtype=dt)
    v = torch.randn(total, hkv, d, device=dev, dtype=dt)
    cu = torch.arange(0, total + 1, L, dtype=torch.int32, device=dev)
    out = torch.empty(total, hq, d, device=dev, dtype=dt)
    lse = torch.empty(total, hq, device=dev)
    fn = load(LayoutClass("sm_90a", d, d, "bf16", "bf16", "causal", True, "ragged"))

    def ours():
        launch_forward(
            fn, q=q, k=k, v=v, out=out, lse=lse, cu_seqlens_q=cu, cu_seqlens_k=cu, seqused_q=None,
            seqused_k=None, batch=B, max_seqlen_q=L, lse_s_max=0, softmax_scale=d**-0.5,
            window_left=-1, window_right=-1, bottom_right=True, lse_strides=(0, hq, hq, 1),
        )

    flops = 4 * hq * d * B * pairs_causal_br(L, L)
    rows = []
    ours()
    torch.cuda.synchronize()
    t = triton.testing.do_bench(ours, warmup=50, rep=300, return_mode="median")
    rows.append(("ragged_attn", t))
    try:
        from flash_attn.cute import flash_attn_varlen_func

        def fa4():
            flash_attn_varlen_func(
                q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=L, max_seqlen_k=L, causal=True,
                return_lse=True,
            )

        fa4()
        torch.cuda.synchronize()
        o4 = flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=L, max_seqlen_k=L, causal=True)
        o4 = o4[0] if isinstance(o4, tuple) else o4
        ours()
        torch.cuda.synchronize()
        diff = (out.float() - o4.float()).abs().max().item()
        t4 = triton.testing.do_bench(fa4, warmup=50, rep=300, return_mode="median")
        rows.append((f"FA4 (max|ours-FA4|={diff:.3g})", t4))
    except Exception as e:  # report, keep our number
        rows.append((f"FA4 failed: {type(e).__name__}: {e}"[:120], float("nan")))
    return [(f"{B}x{L} h{hq}/{hkv} d{d} causal", name, ms, flops / (ms * 1e-3) / 1e12) for name, ms in rows]


def main():
    print(torch.cuda.get_device_name(), flush=True)
    table = []
    for B, L, hq, hkv in ((2, 8192, 64, 8), (4, 512, 32, 8), (64, 128, 32, 8)):
        table += bench(B, L, hq, hkv)
        print(table[-2:], flush=True)
    print("| shape | impl | ms (median) | useful TFLOP/s |\n|---|---|---|---|")
    for shape, name, ms, tf in table:
        print(f"| {shape} | {name} | {ms:.4f} | {tf:.1f} |")


if __name__ == "__main__":
    main()
