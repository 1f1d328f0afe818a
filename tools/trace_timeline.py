"""Where a launch's time goes, CTA by CTA: the TileConfig.trace_timeline build of a ragged LSE class
(kernels/sm90/trace.py) stamps the global timer at each CTA's entry, each tile's hand-over, Q wait,
key-block loop and stores, and at its exit; this tool launches it on uniform rows and prints, over
REPS launches (medians, microseconds from the launch's first CTA entry):

- the launch's GPU time (CUDA events around it) and the span of its stamps (first entry to last
  exit): their difference is what no CTA sees (launch, teardown);
- entry skew (last CTA entry), the prologue (entry -> barriers' init), the first tile's path:
  decode, hand-over to MMA warpgroup 0, Q's arrival, the key-block loop, the stores;
- each tile's length by its order in the CTA, how long MMA warpgroup 0 waits between tiles (for
  the hand-over, then for Q), and the producer warp's path between tiles (its last loads of a
  tile, the next index from the tile counter, the decode); when CTAs exit (first, median, last).

What runs before each timed launch (`--before`): "flush" (an L2-sized write, then a sleep head
start, as the benchmarks time), "gemm" (a bf16 GEMM: other code on the SMs, as after a QKV
projection) or "self" (the same launch, untimed). The stamps' own cost is a few instructions a
tile; compare launches of this build with each other, not with the shipped class.

Kernel: RAGGED_ATTN_SM90_PREBUILT/trace/<class>.o (tools/prebuild_sm90.py DIR/trace --classes ...
--config trace_timeline=1), else compiled here (a GPU box).
With --tail, the build with TileConfig.tail_split too (RAGGED_ATTN_SM90_PREBUILT/trace/tail/<class>.o), launched
with the tail split's rules: on a uniform no-mask row the CTAs' last exits show the last wave.
Usage: python tools/trace_timeline.py B x L : H_q / H_kv : d : causal|nomask [--before flush|gemm|self] [--reps N] [--tail]
  e.g. python tools/trace_timeline.py 4x512:32/8:128:nomask --before gemm
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench_issue10 import parse_row  # noqa: E402  (tools/, the script's own folder)

from ragged_attn.kernels.sm90 import launch_forward  # noqa: E402
from ragged_attn.kernels.sm90 import trace as tr  # noqa: E402
from ragged_attn.layout_class import LayoutClass  # noqa: E402


def trace_config(lc: LayoutClass, tail: bool = False):
    """The class's tile config with trace_timeline (and tail_split where `tail`)."""
    from ragged_attn.kernels.sm90.tile_config import tile_config

    return dataclasses.replace(tile_config(lc), trace_timeline=True, tail_split=tail)


def load_trace_kernel(lc: LayoutClass, tail: bool = False):
    """The class's trace build: prebuilt under RAGGED_ATTN_SM90_PREBUILT/trace (with the tail split:
    trace/tail, built with --config trace_timeline=1,tail_split=1), else compiled."""
    sub = os.path.join("trace", "tail") if tail else "trace"
    path = os.path.join(os.environ.get("RAGGED_ATTN_SM90_PREBUILT", ""), sub, lc.name + ".o")
    if os.path.exists(path):
        import cutlass.cute as cute

        return cute.runtime.load_module(path, enable_tvm_ffi=True).fwd
    from ragged_attn.kernels.sm90 import compile_forward

    return compile_forward(lc, config=trace_config(lc, tail))


def decode_stamps(buf: torch.Tensor, grid: int) -> torch.Tensor:
    """(grid, TRACE_EVENTS) float64 ns relative to the launch's first entry; NaN where not stamped."""
    raw = buf[: grid * tr.TRACE_EVENTS * 2].view(grid, tr.TRACE_EVENTS, 2).double().cpu()
    ns = raw[..., 0] * 65536 + raw[..., 1]
    entries = ns[:, tr.EV_ENTRY]
    first = entries[~torch.isnan(entries)].min()  # CTAs past the launch's grid keep NaN
    rel = torch.remainder(ns - first, 2.0**32)  # the low 32 bits wrap every 4.29 s
    return torch.where(torch.isnan(ns), torch.full_like(ns, float("nan")), rel)


def summarize(runs: list[tuple[float, torch.Tensor]]) -> list[str]:
    """Medians over launches of the quantities the module docstring lists, in us."""

    def med(xs):
        xs = [x for x in xs if not math.isnan(x)]
        return statistics.median(xs) / 1e3 if xs else float("nan")

    def col(reduce):  # the median over launches of reduce(stamps)
        return med([reduce(t) for _, t in runs])

    def nanmax(x):
        return x[~torch.isnan(x)].max().item()

    def nanmin(x):
        return x[~torch.isnan(x)].min().item()

    lines = []
    gpu = statistics.median(g for g, _ in runs) * 1e3
    span = col(lambda t: nanmax(t[:, [tr.EV_MMA_EXIT, tr.EV_PRODUCER_EXIT]]))
    lines.append(f"GPU time {gpu:.2f} us; stamps span {span:.2f} us (first entry -> last exit)")
    lines.append(f"entry: last CTA {col(lambda t: nanmax(t[:, tr.EV_ENTRY])):.2f} us after the first")
    first_tile = [
        ("init done", tr.EV_INIT),
        ("tile 0 decoded (producer)", tr.EV_DECODED),
        ("tile 0 taken (MMA wg 0)", tr.EV_TAKEN),
        ("tile 0 Q ready", tr.EV_Q_READY),
        ("tile 0 loop done", tr.EV_MAIN_DONE),
        ("tile 0 stores issued", tr.EV_TILE_DONE),
    ]
    for label, ev in first_tile:  # relative to each CTA's own entry, median over CTAs
        lines.append(
            f"  {label:28s} {col(lambda t, ev=ev: (t[:, ev] - t[:, tr.EV_ENTRY]).nanmedian().item()):8.2f} us after its entry"
        )

    def gap(later, earlier):  # median over CTAs of later - earlier (events of one CTA)
        return lambda t: (t[:, later] - t[:, earlier]).nanmedian().item()

    for k in range(1, tr.TRACE_TILES - 1):
        n = statistics.median(int((~torch.isnan(t[:, tr.EV_TILE_DONE + k])).sum()) for _, t in runs)
        if n == 0:
            break
        d = col(gap(tr.EV_TILE_DONE + k, tr.EV_TILE_DONE + k - 1))
        q = col(gap(tr.EV_Q_READY + k, tr.EV_TAKEN + k))
        w = col(gap(tr.EV_TAKEN + k, tr.EV_TILE_DONE + k - 1))
        lines.append(
            f"  tile {k}: stores-to-stores {d:6.2f} us; MMA wg 0 idle after tile {k - 1}'s stores {w:5.2f} "
            f"(taken) + {q:5.2f} (Q) us ({n} CTAs)"
        )
        # The producer between tile k - 1's last loads and tile k's hand-over, against the MMA side.
        nxt = col(gap(tr.EV_NEXT_KNOWN + k - 1, tr.EV_LOADS_ISSUED + k - 1))
        dec = col(gap(tr.EV_DECODED + k, tr.EV_NEXT_KNOWN + k - 1))
        lead = col(gap(tr.EV_TILE_DONE + k - 1, tr.EV_LOADS_ISSUED + k - 1))
        lines.append(
            f"    producer: tile {k - 1}'s loads issued {lead:5.2f} us before its stores; then next index "
            f"{nxt:5.2f}, decode {dec:5.2f} us"
        )
    for label, ev in (("MMA exit", tr.EV_MMA_EXIT), ("producer exit", tr.EV_PRODUCER_EXIT)):
        lo = col(lambda t, ev=ev: nanmin(t[:, ev]))
        mid = col(lambda t, ev=ev: t[:, ev].nanmedian().item())
        hi = col(lambda t, ev=ev: nanmax(t[:, ev]))
        lines.append(f"{label}: first {lo:.2f}, median {mid:.2f}, last {hi:.2f} us")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("row")
    ap.add_argument("--before", default="flush", choices=("flush", "gemm", "self"))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument(
        "--tail", action="store_true",
        help="the build with TileConfig.tail_split, launched with its rules (kernels/sm90/tail_split.py)",
    )  # fmt: skip
    a = ap.parse_args()
    lens, hq, hkv, d, causal = parse_row(a.row)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    total, b, smax = sum(lens), len(lens), max(lens)
    q = torch.randn(total, hq, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(total, hkv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(total, hkv, d, device=dev, dtype=torch.bfloat16)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=dev)
    out = torch.empty_like(q)
    grid = torch.cuda.get_device_properties(dev).multi_processor_count
    buf = torch.empty(max(total * hq, grid * tr.TRACE_EVENTS * 2), device=dev)
    lc = LayoutClass("sm_90a", d, d, "bf16", "bf16", "causal" if causal else "none", True, "ragged")
    kernel = load_trace_kernel(lc, a.tail)
    extra = {}
    if a.tail:
        from ragged_attn.kernels.sm90.tail_split import tail_class

        extra = dict(tail=tail_class(lc, trace_config(lc, True)), max_seqlen_k=smax)

    def launch():
        launch_forward(
            kernel, q=q, k=k, v=v, out=out, lse=buf, cu_seqlens_q=cu, cu_seqlens_k=cu, seqused_q=None,
            seqused_k=None, batch=b, max_seqlen_q=smax, lse_s_max=0, softmax_scale=d**-0.5,
            window_left=-1, window_right=-1, bottom_right=True, lse_strides=(0, hq, hq, 1), **extra,
        )  # fmt: skip

    flush = torch.empty(256 * 2**20 // 4, device=dev)
    ga = torch.randn(8192, 4096, device=dev, dtype=torch.bfloat16)
    gb = torch.randn(4096, 6144, device=dev, dtype=torch.bfloat16)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    runs = []
    for rep in range(a.reps + 2):
        buf.fill_(float("nan"))
        if a.before == "flush":
            flush.fill_(rep)
        elif a.before == "gemm":
            torch.mm(ga, gb)
        else:
            launch()
            buf.fill_(float("nan"))
        torch.cuda._sleep(300_000)  # a head start: the launch below is queued before it runs
        start.record()
        launch()
        end.record()
        torch.cuda.synchronize()
        if rep >= 2:  # the first two warm the allocator and the module
            runs.append((start.elapsed_time(end), decode_stamps(buf, grid)))
    print(f"{a.row} before={a.before} reps={a.reps} tail={a.tail} ({torch.cuda.get_device_name()})")
    for line in summarize(runs):
        print(line)


if __name__ == "__main__":
    main()
