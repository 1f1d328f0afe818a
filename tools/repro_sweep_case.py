"""Run sweep problems (tests/sweep_cases.py) through the public API, REPEAT times each, with the
kernels of a folder of exported objects (tools/prebuild_sm90.py) instead of the compile cache's
where one is there: to tell a kernel regression from a flaky one, A against B in one process.
Usage: python tools/repro_sweep_case.py [--seed S] [--repeat N] [--kernels DIR] INDEX [INDEX ...]
(one folder per process: the API keeps launch state across calls)
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ragged_attn import compile_cache
from tests.sweep_cases import DEFAULT_SEED, draw, expected_class, run_and_check


def use_kernels(folder: str | None) -> None:
    """Point the process-wide cache at `folder`'s objects (None: the cache's own kernels)."""
    import cutlass.cute as cute

    original = compile_cache.CompileCache.get_kernel

    def get_kernel(self, layout_class, compile_fn, **kw):
        path = os.path.join(folder or "", layout_class.name + ".o")
        if folder and os.path.exists(path):
            return cute.runtime.load_module(path, enable_tvm_ffi=True).fwd
        return original(self, layout_class, compile_fn, **kw)

    compile_cache.CompileCache.get_kernel = get_kernel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("index", type=int, nargs="+")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kernels", default="", help="a folder of <class>.o; '' = the compile cache")
    a = ap.parse_args()
    use_kernels(a.kernels or None)
    for index in a.index:
        p = draw(a.seed, index)
        fails, last = 0, ""
        for _ in range(a.repeat):
            try:
                run_and_check(p, "cuda", sync_debug=False)
            except AssertionError as e:
                fails += 1
                last = str(e).splitlines()[-1]
        torch.cuda.synchronize()
        note = f" (last: {last})" if fails else ""
        print(f"{a.kernels or 'cache'}: case{index} {expected_class(p).name}: {fails}/{a.repeat} failed{note}", flush=True)


if __name__ == "__main__":
    main()
