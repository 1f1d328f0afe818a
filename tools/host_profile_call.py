"""Where the host time of one public `attention` call goes, on the GPU machine (cProfile).

tools/bench_vllm_mixed.py measured (H200, 2026-12-03) 0.7-1.4 ms of host time per paged public
call (then the checked path: the fast path declined page tables until commit eeaf943) against
~30 us for the same kernel through `kernels.sm90.launch_forward`; on the CPU (no CUDA) the checked path's Python costs ~40
us, so the rest is CUDA-side (a sync, a module load, an allocation). This tool times the call
with the GPU drained before each call and prints cProfile's top entries by cumulative time.

Usage: python tools/host_profile_call.py [paged|ragged|lse] [CALLS]  (default paged 50)
Batch: tools/bench_vllm_mixed.py's mixed batch at page 16 (paged), its ragged copy (ragged), or
the ragged copy with return_lse=True (lse: the checked path with ragged K/V).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import ragged_attn  # noqa: E402
from tools.bench_vllm_mixed import build_batch, vllm_mixed_lengths  # noqa: E402


def main(argv: list[str]) -> None:
    kind = argv[0] if argv else "paged"
    calls = int(argv[1]) if len(argv) > 1 else 50
    if kind not in ("paged", "ragged", "lse"):
        raise SystemExit(f"kind: expected paged, ragged or lse, got {kind!r}")
    lens_q, lens_k, kinds = vllm_mixed_lengths()
    b = build_batch(lens_q, lens_k, kinds, 16, device="cuda")
    if kind == "paged":
        args = (b.q, b.k_pool, b.v_pool, b.cu_seqlens_q, None, b.max_seqlen_q, b.max_seqlen_k)
        kw = dict(seqused_k=b.seqused_k, page_table=b.page_table, causal=True)
    else:
        k, v, cu_k = b.ragged_kv()
        args = (b.q, k, v, b.cu_seqlens_q, cu_k, b.max_seqlen_q, b.max_seqlen_k)
        kw = dict(causal=True, return_lse=kind == "lse")

    def call():
        return ragged_attn.attention(*args, **kw)

    call()  # compile or load the class
    torch.cuda.synchronize()
    times = []
    prof = cProfile.Profile()
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        prof.enable()
        call()
        prof.disable()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    print(f"{kind}: host us per call, median {statistics.median(times) * 1e6:.0f}, "
          f"min {min(times) * 1e6:.0f}, max {max(times) * 1e6:.0f} (under cProfile)")  # fmt: skip
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main(sys.argv[1:])
