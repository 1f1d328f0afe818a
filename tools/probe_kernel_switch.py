"""What a ragged_attn launch pays for following another kernel binary (H100, session 19): in
tools/bench_paged_sm90.py's interleaved rounds the first paged launch of each round (after the
ragged one) ran ~5-7 us slower than the same paged kernel on the next pool, whichever page size came
first, while a ragged launch repeated ran as fast as the first. Here each paged / ragged launch is
timed right after a bf16 GEMM (a model's QKV projection stands before attention), after its own
kind, and after the other kind, every launch preceded by the L2 flush and the sleep head start of
ragged_attn.bench.timing.gpu_ms_interleaved (one process, implementations in this order each round).

--ncu: no timing; the GEMM, the paged kernel twice, the GEMM, the ragged kernel twice, each launch
synchronized and without L2 flush, for ncu with application replay (kernel replay would put every
pass after the previous pass of the same kernel):

    ncu --replay-mode application --cache-control none --clock-control none -k regex:RaggedForwardSm90 \\
        --metrics gpu__time_duration.sum,... python tools/probe_kernel_switch.py --ncu

(profiled launches in order: paged after the GEMM, paged after paged, ragged after the GEMM, ragged
after ragged).

Usage: RAGGED_ATTN_SM90_PREBUILT=DIR [PAGED_BENCH_LENS=...] [PAGED_BENCH_D=64] [PROBE_PAGE=16]
       [PROBE_VARIANT=NAME] python tools/probe_kernel_switch.py [--ncu]
PROBE_VARIANT: also time the paged build in DIR/NAME/ (tools/paged_variants_round.sh build) after
the GEMM and after itself, in the same rounds.
PROBE_CAUSE=1: also the launches that tell where the switch cost lives (session 21): the paged
kernel after a GEMM of little data on every SM (2048 x 2048 x 64: 256 output tiles), after the
ragged kernel on a tiny batch (5 x 128: 160 tiles, a CTA on every SM; its code, not the big batch's
K/V), and after the big GEMM followed by the paged kernel itself (the same loaded module) on 5 x 128
or on 1 x 128 (32 CTAs: the code in L2, most SMs cold). Code state per SM (instruction caches)
predicts: slow, slow, fast, slow; data state (the big pools' translations or lines) predicts:
fast, fast, slow, slow. Measured (H100, session 22): slow, slow, fast, fast at d128 and d64 — code
state shared by the whole GPU (docs/benchmarks/2026-12-07-h100-issue10-session22).
Pools: page PROBE_PAGE (default 16: 16-key TMA boxes; 128: one 128-key box per stage; 5: the
cp.async gather, no box), pages shuffled (tools/bench_paged_sm90.py's make_problem and launches).
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench_paged_sm90 as bp  # noqa: E402

from ragged_attn.bench.timing import gpu_ms_interleaved  # noqa: E402


def main():
    dev = torch.device("cuda")
    lens, q, k, v, cu, used, common, _flops, pools = bp.make_problem(dev)
    ragged_call, paged_call = bp.launches(q, k, v, cu, used, common)
    page = int(os.environ.get("PROBE_PAGE", "16"))
    kvp, vvp, table = pools(page)
    kernels = {"ragged": bp.kernel("ragged"), "paged": bp.kernel("paged")}  # one loaded module each
    paged, ragged = paged_call(kernels["paged"], kvp, vvp, table), ragged_call(kernels["ragged"])
    a = torch.randn(8192, 4096, device=dev, dtype=torch.bfloat16)
    w = torch.randn(4096, 6144, device=dev, dtype=torch.bfloat16)
    gemm = lambda: a @ w  # noqa: E731
    if "--ncu" in sys.argv[1:]:
        for call in (gemm, paged, paged, gemm, ragged, ragged):
            call()
            torch.cuda.synchronize()
        return
    order = {
        "GEMM": gemm,
        "paged after GEMM": paged,
        "paged after paged": paged,
        "ragged after paged": ragged,
        "ragged after ragged": ragged,
        "paged after ragged": paged,
        "GEMM again": gemm,
        "ragged after GEMM": ragged,
    }
    if os.environ.get("PROBE_CAUSE", "0") == "1":
        order.update(cause_launches(dev, gemm, paged, page, kernels))
    variant = os.environ.get("PROBE_VARIANT", "")
    if variant:  # a variant's paged build (RAGGED_ATTN_SM90_PREBUILT/<variant>/) after the GEMM and itself
        other = paged_call(bp.kernel("paged", variant), kvp, vvp, table)
        order.update({"GEMM third": gemm, f"{variant} after GEMM": other, f"{variant} after {variant}": other})
    times = gpu_ms_interleaved(order, dev, head_start_us=300, reps=int(os.environ.get("BENCH_REPS", "20")))
    print(f"{torch.cuda.get_device_name()}: lens {lens[:4]}... ({len(lens)} sequences), d {bp.D}, page {page} shuffled")
    print("| launch | GPU us (median) |")
    print("|---|---|")
    for label, ms in times.items():
        print(f"| {label} | {ms * 1e3:.1f} |")


def tiny_launches(dev, lens: str, page: int, kernels: dict):
    """(ragged, paged) zero-argument launches of main's kernels on a tiny batch (lengths `lens`,
    PAGED_BENCH_LENS's format) of its own tensors and pools (page size `page`). kernels: the big
    batch's loaded kernels, so both batches run the same code at the same addresses (loading the
    .o again would make a second copy)."""
    spec = os.environ.get("PAGED_BENCH_LENS")
    os.environ["PAGED_BENCH_LENS"] = lens
    try:
        _lens, q, k, v, cu, used, common, _flops, pools = bp.make_problem(dev)
    finally:
        if spec is None:
            os.environ.pop("PAGED_BENCH_LENS")
        else:
            os.environ["PAGED_BENCH_LENS"] = spec
    ragged_call, paged_call = bp.launches(q, k, v, cu, used, common)
    return ragged_call(kernels["ragged"]), paged_call(kernels["paged"], *pools(page))


def cause_launches(dev, gemm, paged, page: int, kernels: dict) -> dict:
    """PROBE_CAUSE's entries, in the order gpu_ms_interleaved runs them (each after the one before)."""
    a = torch.randn(2048, 64, device=dev, dtype=torch.bfloat16)
    b = torch.randn(64, 2048, device=dev, dtype=torch.bfloat16)
    small_gemm = lambda: a @ b  # noqa: E731
    _, paged_1 = tiny_launches(dev, "128", page, kernels)
    ragged_5, paged_5 = tiny_launches(dev, "128,128,128,128,128", page, kernels)
    return {
        "GEMM 2048 x 2048 x 64": small_gemm,
        "paged after GEMM 2048 x 2048 x 64": paged,
        "ragged 5 x 128": ragged_5,
        "paged after ragged 5 x 128": paged,
        "GEMM (4)": gemm,
        "paged 5 x 128 after GEMM": paged_5,
        "paged after GEMM, paged 5 x 128": paged,
        "GEMM (5)": gemm,
        "paged 1 x 128 after GEMM": paged_1,
        "paged after GEMM, paged 1 x 128": paged,
    }


if __name__ == "__main__":
    main()
