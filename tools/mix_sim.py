"""Time model of the stream mix (TileConfig.stream_mix) on vLLM's mixed batch, with HBM shared between
the SMs that stream decode rows and the SMs that compute prefill tiles: which dealing of the two kinds
of tiles keeps both busy to the end?

tools/schedule_sim.py deals tiles by cost alone; this model adds the bandwidth that the mix is about.
Each of NUM_CTAS workers takes the next tile of a dealing when it is free (the tile counter). A
streaming tile (a decode row's K/V head, rows packed g = H_q / H_kv) reads len_k keys of K and V from
HBM at min(R_CAP, the HBM bandwidth left by the computing SMs / streaming SMs); a prefill tile costs
its key blocks at T_BLOCK each and draws PREFILL_BW while it runs. Calibrated on the H200 (session
17, tools/probe_mixed_overlap.py): the decode rows alone on 66 / 100 / 132 CTAs drew 3.78 / 4.42 /
4.52 TB/s (so one SM streams at most ~57 GB/s, HBM ~4.5 TB/s), the prefill chunks alone took ~646 us.
A model for ranking dealings, not a prediction of microseconds: it leaves out L2 reuse between a
prefill tile's heads, the tail of each tile's pipeline, and the clock.

Dealings (of the kernel's two sorted lists; streaming tiles sorted by key length, longest first):
  count     the kernel's stream mix: position t takes streaming tile floor(t A / N) where it moves
  cost      streaming tile k at position k + round(P cumS(k) / S): its cumulative share of the
            streaming bytes tracks the prefill tiles' share of their count
  first     the batch order without the mix: streaming tiles first (the longest keys)
  caller    the count dealing with the streaming tiles in the caller's order (session 17's hand-made
            pieces, whose decode rows kept vLLM's order, ran 1483 us against the kernel's 1533)
Usage: python tools/mix_sim.py [--ctas 132] [--seeds 14004,1,2,3]

Written 2026-12-05 (session 18, no GPU). Seed 14004 (the bench's batch: 512 streaming tiles, 1,248
prefill tiles): alone decode 1028 us (measured 1013-1021), prefill 657 (646); first 1670 (measured
1625), count 1315 (measured 1533), caller 1467, cost 1303; seeds 1 / 2: count 1301 / 1240, cost 1383
/ 1257; the prefill tiles in one global longest-first order instead of sequence by sequence: within
0.3%. So the model finds nothing for a dealing by cost (or a global prefill order) to win, and it
misses 218 us of the mix's measured time: something it leaves out (a prefill tile slowed by the
streaming SMs' HBM traffic: a slowdown of 1 / (1 + 0.5 x HBM utilization) brings count to 1537, cost
1546) costs the mix, not the dealing's shape. Measure before building a dealing.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

R_CAP = 57e9  # bytes/s one SM streams (3.78 TB/s over 66 CTAs)
HBM = 4.5e12  # bytes/s of the whole GPU (4.42-4.52 TB/s over 100-132 CTAs)
T_BLOCK = 1.55e-6  # s per 128 x 128 key block of a prefill tile (calibrated below to ~646 us alone)
PREFILL_BW = 128 * 128 * 2 * 2 / 4 / T_BLOCK  # a block's K and V over the 4 query heads sharing them
H_Q, H_KV, TILE = 32, 8, 128


def tiles(lens_q, lens_k):
    """(streaming tiles [(bytes, caller index)], prefill tiles [(blocks, caller index)]) in the kernel's
    order per kind: sequences by key length, longest first; a sequence's tiles slot-major (costliest
    slot first), units fastest."""
    g = H_Q // H_KV
    stream, prefill = [], []
    for b in sorted(range(len(lens_q)), key=lambda i: -lens_k[i]):
        lq, lk = lens_q[b], lens_k[b]
        if lq * g <= 64:
            stream += [(lk * 2 * 128 * 2, b)] * H_KV
            continue
        n = -(-lq // TILE)
        for slot in range(n):
            m = n - 1 - slot
            keys = lk - lq + min((m + 1) * TILE, lq)
            prefill += [(-(-keys // TILE), b)] * H_Q
    return stream, prefill


def deal(stream, prefill, how):
    s, p = len(stream), len(prefill)
    if how == "first":
        return [("s", x) for x in stream] + [("p", x) for x in prefill]
    if how == "caller":
        stream = sorted(stream, key=lambda x: x[1])
    if how in ("count", "caller"):
        n = s + p
        out, si, pi = [], 0, 0
        for t in range(n):
            if (t + 1) * s // n > t * s // n:
                out.append(("s", stream[si]))
                si += 1
            else:
                out.append(("p", prefill[pi]))
                pi += 1
        return out
    assert how == "cost"
    total = sum(x[0] for x in stream)
    pos, cum = [], 0
    for k, x in enumerate(stream):
        pos.append(k + round(p * cum / total))
        cum += x[0]
    out, k = [], 0
    for t in range(s + p):
        if k < s and pos[k] <= t:
            out.append(("s", stream[k]))
            k += 1
        else:
            out.append(("p", prefill[t - k]))
    return out


def simulate(order, ctas: int, dt: float = 0.5e-6) -> float:
    """Makespan (s): each worker takes the next tile when free; the streaming workers share HBM."""
    queue = list(reversed(order))
    work = [None] * ctas  # [kind, remaining bytes or seconds]
    t = 0.0
    while True:
        for w in range(ctas):
            if work[w] is None and queue:
                kind, (amount, _) = queue.pop()
                work[w] = [kind, float(amount) if kind == "s" else amount * T_BLOCK]
        busy = [x for x in work if x is not None]
        if not busy:
            return t
        n_s = sum(1 for x in busy if x[0] == "s")
        n_p = len(busy) - n_s
        rate = min(R_CAP, max(0.0, HBM - n_p * PREFILL_BW) / n_s) if n_s else 0.0
        for w in range(ctas):
            x = work[w]
            if x is None:
                continue
            x[1] -= rate * dt if x[0] == "s" else dt
            if x[1] <= 0:
                work[w] = None
        t += dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctas", type=int, default=132)
    ap.add_argument("--seeds", default="14004,1,2,3")
    args = ap.parse_args()
    from bench_vllm_mixed import vllm_mixed_lengths

    for seed in (int(x) for x in args.seeds.split(",")):
        lq, lk, _ = vllm_mixed_lengths(seed=seed)
        stream, prefill = tiles(lq, lk)
        alone_s = simulate(deal(stream, [], "first"), args.ctas)
        alone_p = simulate(deal([], prefill, "first"), args.ctas)
        row = {how: simulate(deal(stream, prefill, how), args.ctas) for how in ("first", "count", "caller", "cost")}
        print(f"seed {seed}: streaming tiles {len(stream)}, prefill tiles {len(prefill)}; alone: decode "
              f"{alone_s * 1e6:.0f} us, prefill {alone_p * 1e6:.0f} us; "
              + ", ".join(f"{k} {v * 1e6:.0f}" for k, v in row.items()))


if __name__ == "__main__":
    main()
