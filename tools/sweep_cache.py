"""Compile the layout classes of the GPU sweep (tests/gpu/test_sweep_gpu.py) into a disk cache here, on
the CPU box, so that the sweep on the GPU machine compiles nothing.

The sweep's own prewarm compiles its classes on the GPU machine (a fresh one has an empty cache):
with pytest-xdist every worker prewarms every class with RAGGED_ATTN_SWEEP_JOBS / workers processes,
so the 3,000-problem sweep's 144 classes took more than 400 s there before the first case (H200,
session 17). Entries are keyed by the kernel sources' digest and the DSL and TVM-FFI versions
(ragged_attn/compile_cache.py), so build them from the tree that will run, after its last kernel
edit.

Usage (CPU box, ~20 min for 3,000 problems on 2 cores):
    CUTE_DSL_ARCH=sm_90a python tools/sweep_cache.py .devcache/sweepcache [--size 3000] [--jobs 2]
then carry [".devcache/sweepcache"] in a call of its own on the warm GPU machine; the cache keeps
entries in a private `uid<uid>/` subdirectory it only trusts when this user owns it and nobody else
may write it (compile_cache.py), so copy it as the machine's user first:
    rm -rf /tmp/sweepcache && cp -r .devcache/sweepcache /tmp/sweepcache && chmod -R go-w /tmp/sweepcache
    [ -d /tmp/sweepcache/uid$(id -u) ] || mv /tmp/sweepcache/uid* /tmp/sweepcache/uid$(id -u)
    RAGGED_ATTN_CACHE_DIR=/tmp/sweepcache RAGGED_ATTN_SWEEP=3000 \\
        python3 -m pytest tests/gpu/test_sweep_gpu.py -q -n 8 -p no:cacheprovider
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="the cache directory (RAGGED_ATTN_CACHE_DIR on the GPU machine)")
    parser.add_argument("--size", type=int, default=3000, help="problems of the sweep (RAGGED_ATTN_SWEEP)")
    parser.add_argument("--seed", type=int, default=None, help="the sweep's seed (default: its own)")
    parser.add_argument("--jobs", type=int, default=2, help="compiling processes (at least 2)")
    args = parser.parse_args(argv)
    if args.jobs < 2:
        parser.error(f"--jobs: expected at least 2 (prewarm compiles in worker processes), got {args.jobs}")
    os.environ["RAGGED_ATTN_CACHE_DIR"] = os.path.abspath(args.directory)
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    os.environ.pop("RAGGED_ATTN_DISK_CACHE", None)
    from tests.sweep_cases import DEFAULT_SEED, prewarm, sweep_classes

    seed = DEFAULT_SEED if args.seed is None else args.seed
    classes = sweep_classes(seed, range(args.size))
    t0 = time.perf_counter()
    report = prewarm(classes, args.jobs)
    compiled = sum(n for n, _ in report.values())
    print(f"{len(classes)} classes of the {args.size}-problem sweep (seed {seed}): {compiled} compiled, "
          f"{len(classes) - len(report)} already cached, {time.perf_counter() - t0:.0f} s -> {args.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
