"""Ours against the best peer, row by row, from `python -m ragged_attn bench` suite JSONs (GPU-only
TFLOP/s: L2 flushed, sleep head start, systems interleaved).

Usage: python tools/best_peer.py SUITE.json [SUITE.json ...]
Prints one line a timed workload: ours, the fastest peer and its TFLOP/s, ours / best to three places
("<1" marks a row below the floor of issue 10, as rounded); a row where ours has no GPU-only time
(failed, wrong, untimed) says so.
"""

from __future__ import annotations

import json
import sys

OURS = "ragged_attn"


def rows(result: dict) -> list[tuple[str, float | None, str, float | None]]:
    """(workload, ours, best peer, its TFLOP/s) of each workload where a peer ran; ours None where
    ours has no GPU-only time as ok (failed, wrong, untimed; its status stands in the peer's place
    when no peer ran either), so a failing row stays in the table."""
    out = []
    for w in result["workloads"]:
        systems = w["systems"]
        rec = systems.get(OURS, {})
        ours = rec.get("gpu_tflops") if rec.get("status") == "ok" else None
        peers = {
            name: r["gpu_tflops"]
            for name, r in systems.items()
            if name != OURS and r.get("status") == "ok" and r.get("gpu_tflops")
        }
        if peers:
            best = max(peers, key=peers.get)
            out.append((w["workload"]["name"], ours, best, peers[best]))
        elif ours is None and rec:
            out.append((w["workload"]["name"], None, f"(ours {rec.get('status', '?')})", None))
    return out


def main(argv: list[str]) -> int:
    if not argv:
        raise SystemExit(__doc__)
    for path in argv:
        with open(path) as f:
            result = json.load(f)
        print(f"## {result['suite']} ({path})")
        for name, ours, best, theirs in rows(result):
            if ours is None:
                print(f"{name:34s} {'-':>7s}  {best:12s} {theirs or 0:7.1f}  ours: no GPU-only time")
                continue
            ratio = round(ours / theirs, 3)
            print(
                f"{name:34s} {ours:7.1f}  {best:12s} {theirs:7.1f}  {ratio:.3f}{'  <1' if ratio < 1 else ''}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
