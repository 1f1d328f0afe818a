"""Export sm_90a kernels of given layout classes to `<dir>/<class.name>.o` (TVM-FFI symbol `fwd`).

Used to carry kernels compiled on a CPU box to the GPU machine (tests read them through
RAGGED_ATTN_SM90_PREBUILT). Usage: CUTE_DSL_ARCH=sm_90a python tools/prebuild_sm90.py DIR [--jobs N]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_classes():
    from ragged_attn.layout_class import LayoutClass

    out = [
        LayoutClass("sm_90a", d, d, dt, dt, m, True, "ragged")
        for d, dt, m in itertools.product((64, 128), ("bf16", "fp16"), ("none", "causal", "window"))
    ]
    out += [
        LayoutClass("sm_90a", 128, 128, "bf16", "fp16", "causal", True, "ragged"),
        LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", False, "ragged"),
        LayoutClass("sm_90a", 64, 64, "bf16", "bf16", "none", False, "ragged"),
    ]
    return out


def _build(args):
    lc, folder = args
    from ragged_attn.kernels.sm90 import compile_forward

    t = time.time()
    compile_forward(lc).export_to_c(os.path.join(folder, lc.name + ".o"), "fwd")
    return lc.name, time.time() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.folder, exist_ok=True)
    with ProcessPoolExecutor(a.jobs) as ex:
        for name, sec in ex.map(_build, [(lc, a.folder) for lc in test_classes()]):
            print(f"{name}: {sec:.1f} s", flush=True)


if __name__ == "__main__":
    main()
