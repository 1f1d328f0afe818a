"""Makespan model of the persistent kernel's tile order: is a batch's order (sequences in the caller's
order, each sequence's costliest tile first) far from longest-processing-time-first across the batch?

FA3's varlen scheduler sorts its batches by key blocks, longest first, in a prepare kernel
(../shared/PERSISTENT_SCHEDULING_NOTES.md); ours takes the batch in the caller's order. This model
deals tiles in the kernel's linear order to NUM_CTAS workers, each taking the next tile when it is
free (the tile counter), a tile costing its key blocks plus FIXED (in key-block units), and prints
the makespan in the caller's order, with sequences sorted by key length (longest first), and the
lower bound total / NUM_CTAS. It models neither bandwidth sharing (a memory-bound tail runs faster
on fewer CTAs) nor L2 groups: a lead finder, not a prediction of microseconds.

Usage: python tools/schedule_sim.py [--ctas 132] [--fixed 1.0]
Batches: vLLM's mixed batch in its three orders and its decode rows alone (32/8 heads, rows packed
g = 4 as the d128 class does), issue 10's 14-sequence mix and the bench's longtail14 (32 heads,
unpacked). Written 2026-12-04 (session 13), fixed 1: the decode rows alone model 702 key-block
units in the caller's order against 553 sorted (lower bound 536); the mixed batch 953 (decode rows
first) / 1,103-1,104 (chunks first or shuffled) against 940 sorted; issue 10's mix and longtail14
within 0-2% (their costliest tiles are many and similar).
"""

from __future__ import annotations

import argparse
import heapq
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))


def makespan(costs, workers: int) -> float:
    """Greedy dynamic dealing: each tile to the worker that frees up first, in order."""
    free = [0.0] * workers
    for c in costs:
        heapq.heappush(free, heapq.heappop(free) + c)
    return max(free)


def sequence_tiles(len_q: int, len_k: int, units: int, g: int, fixed: float, tile_m: int = 128, tile_n: int = 128):
    """A sequence's tile costs in the kernel's order (units fastest, then slots, costliest slot first),
    bottom-right causal: packed row tile m covers tokens up to min((m + 1) tile_m / g, len_q)."""
    tiles = -(-(len_q * g) // tile_m)
    costs = []
    for slot in range(tiles):
        m = tiles - 1 - slot
        keys = len_k - len_q + min((m + 1) * tile_m // g, len_q)
        costs += [fixed + -(-keys // tile_n)] * units
    return costs


def batch_costs(seqs, units: int, g: int, fixed: float, longest_first: bool):
    order = sorted(seqs, key=lambda s: -s[1]) if longest_first else seqs
    return [c for lq, lk in order for c in sequence_tiles(lq, lk, units, g, fixed)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctas", type=int, default=132, help="persistent CTAs (an H200's SMs)")
    ap.add_argument("--fixed", type=float, default=1.0, help="per-tile cost beside its key blocks, in key blocks")
    args = ap.parse_args()

    from bench_vllm_mixed import vllm_mixed_lengths

    from ragged_attn.bench.workloads import longtail_lengths, uniform_lengths_until

    batches = []
    for order in ("decode_first", "prefill_first", "shuffled"):
        q, k, kinds = vllm_mixed_lengths(order=order)
        batches.append((f"vLLM mixed, {order}", list(zip(q, k)), 8, 4))
    q, k, kinds = vllm_mixed_lengths()
    batches.append(("vLLM decode rows alone", [(a, b) for a, b, c in zip(q, k, kinds) if c == "decode"], 8, 4))
    batches.append(("issue 10 mix (16,879 tokens)", [(n, n) for n in uniform_lengths_until(16384)], 32, 1))
    batches.append(("longtail14", [(n, n) for n in longtail_lengths()], 32, 1))
    print(f"| batch | caller's order | longest first | lower bound | caller's / longest first |  ({args.ctas} CTAs, fixed {args.fixed})")
    print("|---|---|---|---|---|")
    for name, seqs, units, g in batches:
        asis = makespan(batch_costs(seqs, units, g, args.fixed, False), args.ctas)
        lpt = makespan(batch_costs(seqs, units, g, args.fixed, True), args.ctas)
        bound = sum(batch_costs(seqs, units, g, args.fixed, False)) / args.ctas
        print(f"| {name} | {asis:.0f} | {lpt:.0f} | {bound:.0f} | {asis / lpt:.3f} |")


if __name__ == "__main__":
    main()
