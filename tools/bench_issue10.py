"""Issue 10's rows, side by side in one process: ours (this tree), ours in tile-config variants,
FlashAttention-3 (`fa3-fwd`), FA4 and torch SDPA on cuDNN over a padded batch (uniform rows; K/V
heads expanded, and native GQA with enable_gqa as `python -m ragged_attn bench` runs it).

Useful TFLOP/s on GPU time alone (ragged_attn.bench.timing.gpu_ms_interleaved: L2 flushed, sleep head
start, the implementations interleaved round by round; BENCH_REPS rounds, default 30),
2 * H_q * (d_qk + d_v) * allowed (query, key) pairs; bf16, LSE on (FA3 always produces it);
ISSUE10_LSE=0: ours' nolse class and FA4 without LSE, the LSE choice of `python -m ragged_attn bench`
(this tool passes no max_seqlen_k: none of the API's split-KV, batch-order or row-packing rules).
Kernels: RAGGED_ATTN_SM90_PREBUILT/<class>.o (tools/prebuild_sm90.py) or compiled here; the
variants named in RAGGED_ATTN_VARIANTS (comma-separated) from RAGGED_ATTN_SM90_PREBUILT/<variant>/<class>.o
when present (the class built with other tile-config fields; one named tail* was built with tail_split=1
and launches with the tail split's rules, kernels/sm90/tail_split.py); the trees named in RAGGED_ATTN_AB_TREES
(label=DIR, tools/ab_tree.sh: another tree's package and kernels, when its kernels take other arguments).
Each output is checked against FA4's (max abs diff).
ISSUE10_ROWS adds uniform rows (`extra_rows`). ISSUE10_REST_US: the sleep before each timed launch
(default 300 us; the closing suites rest 3 x the slowest system's host time, ~2.7 ms on 1 x 16384).
Usage: python tools/bench_issue10.py [ROW_SUBSTRING ...]
"""

from __future__ import annotations

import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ragged_attn.bench.timing import gpu_ms_interleaved  # noqa: E402
from ragged_attn.kernels.sm90 import launch_forward  # noqa: E402
from ragged_attn.layout_class import LayoutClass  # noqa: E402

PREBUILT = os.environ.get("RAGGED_ATTN_SM90_PREBUILT", "")


def issue10_lengths() -> list[int]:
    """The 14 lengths of issue 10: seed 1, uniform in 64..2047 until the sum reaches 16,384."""
    g = torch.Generator().manual_seed(1)
    lens: list[int] = []
    while sum(lens) < 16384:
        lens.append(int(torch.randint(64, 2048, (1,), generator=g)))
    return lens


ROWS = (
    ("2x8192 h64/8 d128 causal", [8192] * 2, 64, 8, 128, True),
    ("2x8192 h64/8 d128 nomask", [8192] * 2, 64, 8, 128, False),
    ("mixed14 h32/8 d128 causal", issue10_lengths(), 32, 8, 128, True),
    ("mixed14 h64/8 d128 causal", issue10_lengths(), 64, 8, 128, True),  # the serving suite's llama3-70b
    ("mixed14 h32/8 d64 causal", issue10_lengths(), 32, 8, 64, True),
    ("mixed14 h32/8 d32 causal", issue10_lengths(), 32, 8, 32, True),
    ("mixed14 h32/8 d96 causal", issue10_lengths(), 32, 8, 96, True),
    ("2x8192 h32/8 d64 causal", [8192] * 2, 32, 8, 64, True),
    ("16x256 h32/8 d64 causal", [256] * 16, 32, 8, 64, True),
    ("64x128 h32/8 d64 causal", [128] * 64, 32, 8, 64, True),
    ("4x512 h32/8 d64 causal", [512] * 4, 32, 8, 64, True),
    ("16x256 h32/8 d32 causal", [256] * 16, 32, 8, 32, True),
    ("64x128 h32/8 d32 causal", [128] * 64, 32, 8, 32, True),
    ("2x8192 h32/8 d32 causal", [8192] * 2, 32, 8, 32, True),
    ("16x256 h32/8 d128 causal", [256] * 16, 32, 8, 128, True),
    ("4x512 h32/8 d128 causal", [512] * 4, 32, 8, 128, True),
    ("64x128 h32/8 d128 causal", [128] * 64, 32, 8, 128, True),
    ("1x16384 h32/8 d128 causal", [16384], 32, 8, 128, True),
    ("1x16384 h28/4 d128 causal", [16384], 28, 4, 128, True),  # the serving suite's qwen2.5-7b
    # The serving suite's DeepSeek rows (d_qk 192, d_v 128, 128/128 heads): "d192/128".
    ("64x128 h128/128 d192/128 causal", [128] * 64, 128, 128, (192, 128), True),
    ("16x256 h128/128 d192/128 causal", [256] * 16, 128, 128, (192, 128), True),
    ("4x512 h128/128 d192/128 causal", [512] * 4, 128, 128, (192, 128), True),
    ("mixed14 h128/128 d192/128 causal", issue10_lengths(), 128, 128, (192, 128), True),
    ("1x16384 h128/128 d192/128 causal", [16384], 128, 128, (192, 128), True),
    # No mask (the serving-full suite's family) and d256 (Gemma's head dim).
    ("mixed14 h32/8 d128 nomask", issue10_lengths(), 32, 8, 128, False),
    ("16x256 h32/8 d128 nomask", [256] * 16, 32, 8, 128, False),
    ("4x512 h32/8 d128 nomask", [512] * 4, 32, 8, 128, False),  # the serving-full suite's rows below 1.0
    ("4x512 h64/8 d128 nomask", [512] * 4, 64, 8, 128, False),
    ("1x16384 h32/8 d128 nomask", [16384], 32, 8, 128, False),
    ("2x8192 h32/8 d256 causal", [8192] * 2, 32, 8, 256, True),
    ("2x8192 h32/8 d256 nomask", [8192] * 2, 32, 8, 256, False),
    ("mixed14 h32/8 d256 causal", issue10_lengths(), 32, 8, 256, True),
    ("16x256 h32/8 d256 causal", [256] * 16, 32, 8, 256, True),
)


def parse_row(spec: str):
    """A uniform row "BxL:Hq/Hkv:d:causal|nomask" (e.g. "33x512:32/8:128:nomask") -> (lens, hq,
    hkv, d, causal); also tools/trace_timeline.py's row argument."""
    shape, heads, d, mask = spec.split(":")
    b, n = (int(x) for x in shape.split("x"))
    hq, hkv = (int(x) for x in heads.split("/"))
    if mask not in ("causal", "nomask"):
        raise SystemExit(f"row {spec!r}: mask: expected causal or nomask, got {mask!r}")
    return [n] * b, hq, hkv, int(d), mask == "causal"


def extra_rows() -> tuple:
    """ISSUE10_ROWS: `parse_row` specs separated by commas: uniform rows beside the table's, for a
    wave-count sweep."""
    rows = []
    for spec in filter(None, os.environ.get("ISSUE10_ROWS", "").split(",")):
        shape, heads, d, mask = spec.split(":")
        rows.append((f"{shape} h{heads} d{d} {mask} (ISSUE10_ROWS)", *parse_row(spec)))
    return tuple(rows)


def load(lc, sub=""):
    path = os.path.join(PREBUILT, sub, lc.name + ".o")
    if PREBUILT and os.path.exists(path):
        import cutlass.cute as cute

        return cute.runtime.load_module(path, enable_tvm_ffi=True).fwd
    if sub:
        return None
    from ragged_attn.kernels.sm90 import compile_forward

    return compile_forward(lc)


def other_trees():
    """RAGGED_ATTN_AB_TREES=label=DIR[,label=DIR...]: [(label, DIR)], DIR as tools/ab_tree.sh wrote it."""
    spec = os.environ.get("RAGGED_ATTN_AB_TREES", "")
    return [tuple(item.split("=", 1)) for item in filter(None, spec.split(","))]


def tree_launch(label, tree):
    """launch_forward of the package ragged_attn_<label> under DIR (imported beside ours)."""
    import importlib

    if tree not in sys.path:
        sys.path.append(tree)
    return importlib.import_module(f"ragged_attn_{label}.kernels.sm90").launch_forward


def pairs(lens, causal):
    return sum(n * (n + 1) // 2 if causal else n * n for n in lens)


def make_impls(lens, hq, hkv, d, causal, dev):
    """The row's inputs and every implementation's call: ({label: call}, flops, total tokens)."""
    torch.manual_seed(0)
    total, b, smax = sum(lens), len(lens), max(lens)
    d, dv = d if isinstance(d, tuple) else (d, d)  # (d_qk, d_v)
    q = torch.randn(total, hq, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(total, hkv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(total, hkv, dv, device=dev, dtype=torch.bfloat16)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=dev)
    out = q.new_empty(total, hq, dv)
    lse = torch.empty(total, hq, device=dev)
    flops = 2 * hq * (d + dv) * pairs(lens, causal)
    mask = "causal" if causal else "none"
    with_lse = os.environ.get("ISSUE10_LSE", "1") != "0"  # 0: as the closing suites call ours and FA4
    lc = LayoutClass("sm_90a", d, dv, "bf16", "bf16", mask, with_lse, "ragged")
    impls = {}
    peers = os.environ.get("ISSUE10_PEERS", "1") != "0"  # 0: ours only (A/B of our kernels, no peer JIT)
    if peers:
        try:
            from flash_attn.cute import flash_attn_varlen_func as fa4

            impls["FA4"] = lambda: fa4(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=smax,
                                       max_seqlen_k=smax, causal=causal, return_lse=with_lse)[0]  # fmt: skip
        except ImportError:
            pass
        try:
            from fa3_fwd_interface import flash_attn_varlen_func as fa3

            def fa3_call():
                o = fa3(q, k, v, cu, cu, smax, smax, causal=causal)
                return o[0] if isinstance(o, tuple) else o

            impls["FA3"] = fa3_call
        except ImportError:
            pass
        if len(set(lens)) == 1:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            from torch.nn.functional import scaled_dot_product_attention as sdpa

            qp = q.view(b, smax, hq, d).transpose(1, 2).contiguous()
            kp = k.view(b, smax, hkv, d).transpose(1, 2).repeat_interleave(hq // hkv, dim=1).contiguous()
            vp = v.view(b, smax, hkv, dv).transpose(1, 2).repeat_interleave(hq // hkv, dim=1).contiguous()

            def sdpa_call():
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    return sdpa(qp, kp, vp, is_causal=causal)  # (B, H, s, D): unpacked outside the timing

            impls["cuDNN SDPA padded"] = sdpa_call
            qg = qp
            kg = k.view(b, smax, hkv, d).transpose(1, 2).contiguous()
            vg = v.view(b, smax, hkv, dv).transpose(1, 2).contiguous()

            def sdpa_gqa_call():  # native GQA (the project bench's peer): K/V not expanded
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    return sdpa(qg, kg, vg, is_causal=causal, enable_gqa=True)

            impls["cuDNN SDPA padded enable_gqa"] = sdpa_gqa_call

    lse_arg, lse_strides = (lse, (0, hq, hq, 1)) if with_lse else (None, (0, 0, 0, 0))

    def ours_call(kernel, dst, launch=launch_forward, **extra):
        """Our kernel `kernel` (this tree's or a variant's, or another tree's with its `launch`)
        writing `dst`; extra: more launch_forward keywords (a tail_split variant's)."""

        def call():
            launch(
                kernel, q=q, k=k, v=v, out=dst, lse=lse_arg, cu_seqlens_q=cu, cu_seqlens_k=cu, seqused_q=None,
                seqused_k=None, batch=b, max_seqlen_q=smax, lse_s_max=0, softmax_scale=d**-0.5,
                window_left=-1, window_right=-1, bottom_right=True, lse_strides=lse_strides, **extra,
            )  # fmt: skip
            return dst

        return call

    impls["ours"] = ours_call(load(lc), out)
    for sub in filter(None, os.environ.get("RAGGED_ATTN_VARIANTS", "").split(",")):
        alt = load(lc, sub)  # the same class built with other tile-config fields
        if alt is not None:
            extra = {}
            if sub.startswith("tail"):  # built with tail_split (prebuild --config tail_split=1)
                import dataclasses

                from ragged_attn.kernels.sm90.tail_split import tail_class
                from ragged_attn.kernels.sm90.tile_config import tile_config

                cfg = dataclasses.replace(tile_config(lc), tail_split=True)
                extra = dict(tail=tail_class(lc, cfg), max_seqlen_k=smax)
            impls[f"ours {sub}"] = ours_call(alt, torch.empty_like(out), **extra)
    for label, tree in other_trees():  # another tree's package and kernels (tools/ab_tree.sh)
        path = os.path.join(tree, "sm90", lc.name + ".o")
        if os.path.exists(path):
            import cutlass.cute as cute

            alt, dst = cute.runtime.load_module(path, enable_tvm_ffi=True).fwd, torch.empty_like(out)
            impls[f"ours {label}"] = ours_call(alt, dst, tree_launch(label, tree))
    return impls, flops, total, dv, (q, k, v, out, lse)


def main():
    picks = sys.argv[1:]
    reps = int(os.environ.get("BENCH_REPS", "30"))
    # The sleep before each timed launch (us): 300 by default; the suites rest ~2.7 ms before a
    # 1 x 16384 launch, and a rested H200 holds its boost clock longer (session 28 section 6).
    rest_us = int(os.environ.get("ISSUE10_REST_US", "300"))
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), flush=True)
    table = []
    for name, lens, hq, hkv, d, causal in ROWS + extra_rows():
        if picks and not any(p in name for p in picks):
            continue
        impls, flops, total, dv, bufs = make_impls(lens, hq, hkv, d, causal, dev)
        ref, good, diffs = None, {}, {}
        for label, call in impls.items():  # each output checked (against the first) before timing
            try:
                o = call()
                torch.cuda.synchronize()
                if o.dim() == 4:  # padded (B, H, s, D) -> (total, H, D)
                    o = o.transpose(1, 2).reshape(total, hq, dv)
                if ref is None:
                    ref = o.float().clone()
                diffs[label] = (o.float() - ref).abs().max().item()
                good[label] = call
            except Exception as e:  # report and go on
                table.append(
                    (name, f"{label} FAILED {type(e).__name__}: {e}"[:150], float("nan"), 0.0, float("nan"))
                )
                print(table[-1], flush=True)
        # Interleaved (timing.gpu_ms_interleaved): every implementation in every round, so clock
        # drift under load falls on all alike.
        times = gpu_ms_interleaved(good, dev, head_start_us=rest_us, reps=reps)
        for label, g in times.items():
            table.append((name, label, g, flops / (g * 1e-3) / 1e12, diffs[label]))
            print(table[-1], flush=True)
        del bufs, impls, good
        torch.cuda.empty_cache()
    print("| workload | impl | ms GPU | TFLOP/s | max diff vs first |")
    print("|---|---|---|---|---|")
    for name, label, g, tf, diff in table:
        print(f"| {name} | {label} | {g:.4f} | {tf:.1f} | {diff:.3g} |")


if __name__ == "__main__":
    main()
