"""Small problems of the correctness sweep (tests/sweep_cases.py) for compute-sanitizer: ragged and
paged, several layout classes, each persistent CTA looping over more than one tile. Each problem is
checked against the reference as the sweep does.

Usage: compute-sanitizer --tool memcheck|racecheck python tools/sanitize_sm90.py [COUNT] [MIN_ROWS] [MAX_ROWS]
(COUNT problems, default 8, half of them paged, with MIN_ROWS..MAX_ROWS query tokens x query heads,
default 2048..65536: 16..512 tiles of 128 rows, so the 132 persistent CTAs take several each).
SANITIZE_PACKED=1 adds two problems whose launch packs GQA groups (tile_scheduler.py: 64 x 128 and
16 x 256 tokens at 32/8 heads, d64 and d32, causal, ragged): the items handed over with each tile.
SANITIZE_DQK=192 (a head dim) keeps only the problems of that d_qk's classes (e.g. d192's O block
that the MMA warpgroups take in turns, tile_config.o_turns).
SANITIZE_PAGE=128 (a page size) gives every paged problem that page size (e.g. 128: the d128 paged
class's key blocks by TMA boxes, tile_config.page_tma; the block crossing len_k still gathered).
RAGGED_ATTN_TEST_TILE_CONFIG (tests/gpu/tile_overrides.py) runs every class with those TileConfig
fields replaced (e.g. paged_fence_gathered_only=True), as the GPU tests do.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.gpu.tile_overrides import install_tile_overrides
from tests.sweep_cases import DEFAULT_SEED, draw, expected_class, run_and_check


def main():
    if install_tile_overrides():
        print(f"tile-config variant: {os.environ['RAGGED_ATTN_TEST_TILE_CONFIG']}", flush=True)
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    min_rows = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    max_rows = int(sys.argv[3]) if len(sys.argv) > 3 else 65536
    first = {}  # (head dim, mask family, KV) -> the first sweep problem of the size
    for index in range(5000):
        p = draw(DEFAULT_SEED, index)
        rows = sum(p.lens_q) * p.h_q
        if min_rows <= rows <= max_rows and sum(p.lens_k) * p.h_kv <= 4 * max_rows:
            lc = expected_class(p)
            if os.environ.get("SANITIZE_DQK") and lc.d_qk != int(os.environ["SANITIZE_DQK"]):
                continue
            first.setdefault((lc.d_qk, lc.mask, lc.kv), p)
    # The 192-row classes (ragged d <= 64, not window) first, then ragged and paged in turn.
    order = sorted(first, key=lambda f: (not (f[2] == "ragged" and f[0] <= 64 and f[1] != "window"), f[1] != "causal", f))
    ragged = [f for f in order if f[2] == "ragged"]
    paged = [f for f in order if f[2] == "paged"]
    chosen = ragged[: count - count // 2] + paged[: count // 2]
    picked = [first[f] for f in chosen]
    if os.environ.get("SANITIZE_PACKED") == "1":
        base = first[ragged[0]]
        for lens, d in (((128,) * 64, 64), ((256,) * 16, 32)):
            picked.append(dataclasses.replace(
                base, lens_q=lens, lens_k=lens, h_q=32, h_kv=8, d_qk=d, d_v=d, causal=True, window=(-1, -1),
                gaps_q=None, gaps_k=None, q_lead=0, q_tail=0, k_lead=0, k_tail=0, in_pad=0,
                max_seqlen_q=None, max_seqlen_k=None, lse_layout="token_major",
            ))  # fmt: skip
    if os.environ.get("SANITIZE_PAGE"):
        page = int(os.environ["SANITIZE_PAGE"])
        picked = [dataclasses.replace(p, page_size=page) if p.page_size else p for p in picked]
    for p in picked:
        run_and_check(p, "cuda", sync_debug=False)
        torch.cuda.synchronize()
        print(f"ok: case{p.index} {expected_class(p).name} lens_q={list(p.lens_q)[:6]} page={p.page_size}", flush=True)
    print(f"sanitized problems: {len(picked)}", flush=True)


if __name__ == "__main__":
    main()
