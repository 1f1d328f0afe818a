"""Speed of the sm_90a kernel per head-dim class beside FA4 (and torch varlen_attn, FA2).

Useful TFLOP/s = 2 * H_q * (d_qk + d_v) * (exact allowed (query, key) pairs) / time, with the
REAL head dims (an envelope's padding is not useful work). Ours is the compiled kernel called
through `launch_forward` (no API checks). Two times per row: do_bench median (includes the host
launch when that is slower than the GPU work) and the GPU-only median (ragged_attn.bench.timing
.gpu_ms: a `torch.cuda._sleep` head start keeps the host out).

Sections (python tools/bench_sm90.py [floor] [classes] [item2]; classes and item2 by default):
- floor: issue 4's four workloads at d128 (the speed floor): FA4, ours, torch varlen_attn, and a
  baseline build of the same class from an earlier commit when one is prebuilt.
- classes: 2 x 8192 causal, 32/8 heads, every head-dim class: the class's own tiles, the tile
  candidates of tools/prebuild_sm90.py VARIANTS, d32 also through the d64 envelope; FA4.
- item2: issue 4's four workloads (2 x 8192 at 64/8 heads; 14 long-tail sequences, 4 x 512 and
  64 x 128 at 32/8; causal) at d64 and d256: ours, FA4, torch varlen_attn.
Kernels come from RAGGED_ATTN_SM90_PREBUILT (tools/prebuild_sm90.py) or are compiled here.
"""

from __future__ import annotations

import os
import sys

import torch
import triton

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import prebuild_sm90  # noqa: E402

from ragged_attn.bench.timing import gpu_ms  # noqa: E402
from ragged_attn.bench.workloads import longtail_lengths  # noqa: E402
from ragged_attn.kernels.sm90 import launch_forward  # noqa: E402
from ragged_attn.layout_class import HEAD_DIM_CLASSES  # noqa: E402

PREBUILT = os.environ.get("RAGGED_ATTN_SM90_PREBUILT", "")


def load(lc, variant=None):
    name = lc.name if variant is None else prebuild_sm90.variant_name(*variant)
    path = os.path.join(PREBUILT, *(() if variant is None else ("variants",)), name + ".o")
    if PREBUILT and os.path.exists(path):
        import cutlass.cute as cute

        return cute.runtime.load_module(path, enable_tvm_ffi=True).fwd
    from ragged_attn.kernels.sm90 import compile_forward

    return compile_forward(lc, config=None if variant is None else prebuild_sm90.variant_config(variant))


def pairs_causal_br(lens):
    return sum(sum(max(0, min(n, i + 1)) for i in range(n)) for n in lens)


class Problem:
    def __init__(self, lens, hq, hkv, d, dv):
        dev, dt = "cuda", torch.bfloat16
        total = sum(lens)
        self.lens, self.hq, self.hkv, self.d, self.dv = lens, hq, hkv, d, dv
        self.q = torch.randn(total, hq, d, device=dev, dtype=dt)
        self.k = torch.randn(total, hkv, d, device=dev, dtype=dt)
        self.v = torch.randn(total, hkv, dv, device=dev, dtype=dt)
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        self.cu = torch.tensor(cu, dtype=torch.int32, device=dev)
        self.max_len = max(lens)
        self.out = torch.empty(total, hq, dv, device=dev, dtype=dt)
        self.lse = torch.empty(total, hq, device=dev)
        self.flops = 2 * hq * (d + dv) * pairs_causal_br(lens)

    def ours(self, fn):
        def call():
            launch_forward(
                fn, q=self.q, k=self.k, v=self.v, out=self.out, lse=self.lse, cu_seqlens_q=self.cu,
                cu_seqlens_k=self.cu, seqused_q=None, seqused_k=None, batch=len(self.lens),
                max_seqlen_q=self.max_len, lse_s_max=0, softmax_scale=self.d**-0.5, window_left=-1,
                window_right=-1, bottom_right=True, lse_strides=(0, self.hq, self.hq, 1),
            )  # fmt: skip

        return call

    def fa4(self):
        from flash_attn.cute import flash_attn_varlen_func

        def call():
            return flash_attn_varlen_func(
                self.q, self.k, self.v, cu_seqlens_q=self.cu, cu_seqlens_k=self.cu, max_seqlen_q=self.max_len,
                max_seqlen_k=self.max_len, causal=True, return_lse=True,
            )  # fmt: skip

        return call

    def varlen(self):
        from torch.nn.attention.varlen import varlen_attn

        import inspect

        r = self.hq // self.hkv  # this torch's varlen_attn has no GQA: expand K/V heads
        k, v = self.k.repeat_interleave(r, dim=1), self.v.repeat_interleave(r, dim=1)
        causal = "is_causal" in inspect.signature(varlen_attn).parameters
        kw = {"is_causal": True} if causal else {"window_size": (-1, 0)}
        return lambda: varlen_attn(self.q, k, v, self.cu, self.cu, self.max_len, self.max_len, **kw)


def timed(prob, label, make, rows, check_against=None):
    try:
        fn = make()
        out = fn()
        torch.cuda.synchronize()
        out = out[0] if isinstance(out, tuple) else out
        if out is None:
            out = prob.out
        diff = float("nan")
        if check_against is not None:
            diff = (out.float() - check_against.float()).abs().max().item()
        t = triton.testing.do_bench(fn, warmup=20, rep=100, return_mode="median")
        g = gpu_ms(fn, torch.device("cuda"), head_start_us=300, reps=20)
        rows.append((label, t, g, prob.flops / (t * 1e-3) / 1e12, prob.flops / (g * 1e-3) / 1e12, diff))
        return out.clone()
    except Exception as e:  # report, keep going
        nan = float("nan")
        rows.append((f"{label} FAILED {type(e).__name__}: {e}"[:160], nan, nan, 0.0, 0.0, nan))
        return None


def section_classes(table):
    from ragged_attn.layout_class import LayoutClass

    only = os.environ.get("BENCH_DIMS")  # e.g. "32,256": the classes with these d_qk only
    for dq, dv in HEAD_DIM_CLASSES:
        if only and str(dq) not in only.split(","):
            continue
        prob = Problem([8192, 8192], 32, 8, dq, dv)
        shape = f"2x8192 h32/8 d{dq}x{dv} causal"
        rows = []
        lc = LayoutClass("sm_90a", dq, dv, "bf16", "bf16", "causal", True, "ragged")
        ref = timed(prob, "FA4", prob.fa4, rows)
        timed(prob, "ours (class config)", lambda: prob.ours(load(lc)), rows, ref)
        for v in prebuild_sm90.VARIANTS:
            if v[:2] == (dq, dv):
                timed(prob, f"ours n{v[2]} pp{int(v[3])}", lambda v=v: prob.ours(load(lc, v)), rows, ref)
        if (dq, dv) == (32, 32):
            env = LayoutClass("sm_90a", 64, 64, "bf16", "bf16", "causal", True, "ragged")
            timed(prob, "ours via d64 envelope", lambda: prob.ours(load(env)), rows, ref)
        for r in rows:
            print(shape, r, flush=True)
        table += [(shape, *r) for r in rows]
        prob = ref = None  # free before the next shape
        torch.cuda.empty_cache()


ISSUE4_WORKLOADS = (
    ("2x8192 h64/8", [8192] * 2, 64, 8),
    ("longtail14 h32/8", list(longtail_lengths()), 32, 8),
    ("4x512 h32/8", [512] * 4, 32, 8),
    ("64x128 h32/8", [128] * 64, 32, 8),
)


def section_floor(table):
    """Issue 4's speed floor at d128: FA4, ours, torch varlen_attn; and, when RAGGED_ATTN_SM90_PREBUILT
    holds `baseline/<class>.o` (the same class built from an earlier commit), that kernel too."""
    import cutlass.cute as cute

    from ragged_attn.layout_class import LayoutClass

    lc = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, "ragged")
    fn = load(lc)
    base_path = os.path.join(PREBUILT, "baseline", lc.name + ".o")
    base = cute.runtime.load_module(base_path, enable_tvm_ffi=True).fwd if os.path.exists(base_path) else None
    for name, lens, hq, hkv in ISSUE4_WORKLOADS:
        prob = Problem(lens, hq, hkv, 128, 128)
        shape = f"{name} d128 causal"
        rows = []
        ref = timed(prob, "FA4", prob.fa4, rows)
        timed(prob, "ours", lambda prob=prob: prob.ours(fn), rows, ref)
        if base is not None:
            timed(prob, "ours baseline", lambda prob=prob: prob.ours(base), rows, ref)
        timed(prob, "torch varlen_attn (FA2)", prob.varlen, rows, ref)
        for r in rows:
            print(shape, r, flush=True)
        table += [(shape, *r) for r in rows]
        prob = ref = None
        torch.cuda.empty_cache()


def section_item2(table):
    from ragged_attn.layout_class import LayoutClass

    workloads = ISSUE4_WORKLOADS
    for d in (64, 256):
        lc = LayoutClass("sm_90a", d, d, "bf16", "bf16", "causal", True, "ragged")
        fn = load(lc)
        for name, lens, hq, hkv in workloads:
            prob = Problem(lens, hq, hkv, d, d)
            shape = f"{name} d{d} causal"
            rows = []
            ref = timed(prob, "FA4", prob.fa4, rows)
            timed(prob, "ours", lambda: prob.ours(fn), rows, ref)
            timed(prob, "torch varlen_attn (FA2)", prob.varlen, rows, ref)
            for r in rows:
                print(shape, r, flush=True)
            table += [(shape, *r) for r in rows]
            prob = ref = None  # free before the next shape
        torch.cuda.empty_cache()


def main():
    which = sys.argv[1:] or ["classes", "item2"]
    print(torch.cuda.get_device_name(), flush=True)
    table = []
    if "floor" in which:
        section_floor(table)
    if "classes" in which:
        section_classes(table)
    if "item2" in which:
        section_item2(table)
    print("| shape | impl | ms do_bench | ms GPU-only | TFLOP/s do_bench | TFLOP/s GPU-only | diff vs FA4 |")
    print("|---|---|---|---|---|---|---|")
    for shape, name, ms, g, tf, tg, diff in table:
        print(f"| {shape} | {name} | {ms:.4f} | {g:.4f} | {tf:.1f} | {tg:.1f} | {diff:.3g} |")


if __name__ == "__main__":
    main()
