"""Export sm_90a kernels to `<dir>/<class.name>.o` (TVM-FFI symbol `fwd`), and tile candidates to
`<dir>/variants/<class.name>--n<tile_n>-pp<0|1>.o`.

Used to carry kernels compiled on a CPU box to the GPU machine: tests/gpu/test_kernel_sm90.py
reads the classes its cases use through RAGGED_ATTN_SM90_PREBUILT, tools/bench_sm90.py the
classes and the candidates of `VARIANTS`.
Usage: CUTE_DSL_ARCH=sm_90a python tools/prebuild_sm90.py DIR [--jobs N] [--no-variants] [--classes A,B]
       [--config FIELD=VALUE,...]
(run it from another checkout, e.g. `git worktree add`, to time that tree's kernels beside this one's
as a RAGGED_ATTN_VARIANTS entry of tools/bench_issue10.py). --config replaces fields of the class's own
config, which TileConfig then checks: the d128 ragged no-mask nolse class has q_ahead with
ticket_early 2 (tile_config._q_ahead), so a variant of it with q_stages=1 or ticket_early=0 also
needs q_ahead=0.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# Tile candidates timed beside each class's own config (bf16, causal, LSE on):
# (d_qk, d_v, tile_n, pingpong). Results: ragged_attn/kernels/sm90/tile_config.py.
VARIANTS = (
    (32, 32, 128, True),
    (32, 32, 256, True),
    (64, 64, 192, True),
    (96, 96, 144, True),
    (192, 128, 128, True),
    (192, 128, 112, False),
    (192, 128, 96, False),
    (256, 256, 80, True),
    (256, 256, 64, False),
    (256, 256, 64, True),
)


def variant_class(d_qk, d_v):
    from ragged_attn.layout_class import LayoutClass

    return LayoutClass("sm_90a", d_qk, d_v, "bf16", "bf16", "causal", True, "ragged")


def variant_name(d_qk, d_v, tile_n, pingpong) -> str:
    return f"{variant_class(d_qk, d_v).name}--n{tile_n}-pp{int(pingpong)}"


def variant_config(variant):
    from ragged_attn.kernels.sm90.tile_config import TileConfig

    _, _, tile_n, pingpong = variant
    return TileConfig(128, tile_n, 2, pingpong=pingpong, overlap=True)


def test_classes():
    """Every class the GPU kernel tests run, plus the bench's (bf16 causal LSE per head-dim class)."""
    from ragged_attn.layout_class import HEAD_DIM_CLASSES
    from tests.gpu.test_kernel_sm90 import all_cases, layout_class_of_case

    classes = {layout_class_of_case(c) for c in all_cases()}
    classes |= {variant_class(dq, dv) for dq, dv in HEAD_DIM_CLASSES}
    classes |= {dataclasses.replace(variant_class(128, 128), kv="paged")}  # tools/bench_paged_sm90.py
    return sorted(classes, key=lambda lc: lc.name)


def _build(job):
    lc, path, variant = job
    from ragged_attn.kernels.sm90 import compile_forward
    from ragged_attn.kernels.sm90.tile_config import tile_config

    if isinstance(variant, dict):  # --config: the class's own config with these fields replaced
        config = dataclasses.replace(tile_config(lc), **variant)
    else:
        config = None if variant is None else variant_config(variant)
    t = time.time()
    compile_forward(lc, config=config).export_to_c(path, "fwd")
    return os.path.basename(path), time.time() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--no-variants", action="store_true")
    ap.add_argument("--classes", help="comma-separated class names: build only these (no variants)")
    ap.add_argument(
        "--config",
        help="comma-separated TileConfig fields, FIELD=VALUE (e.g. l2_kv_head_groups=1): each class built with its own "
        "config and these fields replaced (a variant folder for tools/bench_issue10.py's RAGGED_ATTN_VARIANTS)",
    )
    a = ap.parse_args()
    override = None
    if a.config:
        from ragged_attn.kernels.sm90.tile_config import TileConfig

        types = {f.name: f.type for f in dataclasses.fields(TileConfig)}
        override = {}
        for item in a.config.split(","):
            field, _, value = item.partition("=")
            if field not in types:
                ap.error(f"--config: unknown TileConfig field {field!r} (fields: {', '.join(types)})")
            if types[field] in (bool, "bool"):
                override[field] = bool(int(value))
            elif types[field] in (str, "str"):
                override[field] = value
            else:
                override[field] = int(value)
    os.makedirs(os.path.join(a.folder, "variants"), exist_ok=True)
    classes = test_classes()
    if a.classes:
        from ragged_attn.aot import parse_class_name

        classes = [parse_class_name(n) for n in a.classes.split(",")]
    jobs = [(lc, os.path.join(a.folder, lc.name + ".o"), override) for lc in classes]
    if not a.no_variants and not a.classes and override is None:
        jobs += [
            (variant_class(v[0], v[1]), os.path.join(a.folder, "variants", variant_name(*v) + ".o"), v)
            for v in VARIANTS
        ]
    with ProcessPoolExecutor(a.jobs) as ex:
        for name, sec in ex.map(_build, jobs):
            print(f"{name}: {sec:.1f} s", flush=True)


if __name__ == "__main__":
    main()
