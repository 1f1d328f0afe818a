"""Ours against the best peer, row by row, from `python -m ragged_attn bench` suite JSONs (GPU-only
TFLOP/s: L2 flushed, sleep head start, systems interleaved).

Usage: python tools/best_peer.py SUITE.json [SUITE.json ...]
Prints one line a timed workload: ours, the fastest peer and its TFLOP/s, ours / best ("<1" marks a
row below the floor of issue 10).
"""

from __future__ import annotations

import json
import sys

OURS = "ragged_attn"


def rows(result: dict) -> list[tuple[str, float, str, float]]:
    """(workload, ours, best peer, its TFLOP/s) of each workload where ours and a peer ran."""
    out = []
    for w in result["workloads"]:
        systems = w["systems"]
        ours = systems.get(OURS, {})
        if ours.get("status") != "ok" or not ours.get("gpu_tflops"):
            continue
        peers = {
            name: rec["gpu_tflops"]
            for name, rec in systems.items()
            if name != OURS and rec.get("status") == "ok" and rec.get("gpu_tflops")
        }
        if peers:
            best = max(peers, key=peers.get)
            out.append((w["workload"]["name"], ours["gpu_tflops"], best, peers[best]))
    return out


def main(argv: list[str]) -> int:
    if not argv:
        raise SystemExit(__doc__)
    for path in argv:
        with open(path) as f:
            result = json.load(f)
        print(f"## {result['suite']} ({path})")
        for name, ours, best, theirs in rows(result):
            ratio = ours / theirs
            print(
                f"{name:34s} {ours:7.1f}  {best:12s} {theirs:7.1f}  {ratio:.3f}{'  <1' if ratio < 1 else ''}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
