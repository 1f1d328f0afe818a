"""Fill a ragged_attn compile-cache directory on a CPU box with the sm_90a classes the GPU API tests
reach through `attention` (tests/gpu/test_paged_gpu.py, tests/gpu/test_api_gpu.py, the bench
harness's serving suite), so a device
round loads them from disk instead of compiling them there. The entries are keyed by the kernel
sources' digest: rebuild after any change under ragged_attn/kernels/.

Usage: CUTE_DSL_ARCH=sm_90a python tools/prewarm_cache_sm90.py DIR [--jobs N]
On the device: copy DIR to a private directory (mode 0700) and point RAGGED_ATTN_CACHE_DIR at it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def classes():
    from ragged_attn.layout_class import LayoutClass

    def lc(d, dv, dt, mask, lse, kv):
        return LayoutClass("sm_90a", d, dv, dt, dt, mask, lse, kv)

    paged = [lc(128, 128, "bf16", m, True, "paged") for m in ("none", "causal", "window")]
    paged += [
        lc(128, 128, "bf16", "causal", False, "paged"),
        lc(32, 32, "fp16", "causal", True, "paged"),
        lc(64, 64, "bf16", "none", True, "paged"),
        lc(96, 96, "bf16", "window", True, "paged"),
        lc(192, 128, "bf16", "causal", True, "paged"),
        lc(256, 256, "bf16", "causal", True, "paged"),
    ]
    ragged = [
        lc(128, 128, "bf16", "causal", True, "ragged"),
        lc(128, 128, "bf16", "causal", False, "ragged"),
        lc(128, 128, "bf16", "window", True, "ragged"),
        lc(64, 64, "fp16", "causal", True, "ragged"),
        lc(64, 64, "bf16", "window", True, "ragged"),
        lc(256, 256, "bf16", "causal", True, "ragged"),  # test_api_gpu's L2-group test
        lc(192, 128, "bf16", "causal", False, "ragged"),  # the bench harness's deepseek rows
    ]
    return paged + ragged


def _build(lc):
    from ragged_attn import compile_cache
    from ragged_attn.kernels import sm90

    t = time.time()
    compile_cache.get_kernel(lc, sm90.compile_forward)
    return lc.name, time.time() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    os.environ["RAGGED_ATTN_CACHE_DIR"] = os.path.abspath(a.folder)
    with ProcessPoolExecutor(a.jobs) as pool:
        for name, secs in pool.map(_build, classes()):
            print(f"{name}: {secs:.1f} s", flush=True)


if __name__ == "__main__":
    main()
