"""`python -m ragged_attn aot build`: compile layout classes ahead of time into DSL-free libraries.

The command line of `builder.build`: --classes (classes.py's sets or a FILE), --out, --arch, --jobs,
--cudart, --list. It exits 2 for bad input (--classes, --out, the DSL) and 1 for a failed build or
file system error, with one line naming the path.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ..layout_class import ARCHES
from .builder import build, dsl_unavailable
from .classes import resolve_classes
from .errors import AotBuildError
from .link import CUDART_MODES


def _positive_int(text: str) -> int:
    """argparse type of --jobs: an int >= 1 (0 and negatives were taken as 1 silently)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    """`python -m ragged_attn aot build --out DIR [--classes serving|scores|all|FILE] [--jobs N] [--cudart static|shared]`."""
    ap = argparse.ArgumentParser(prog="python -m ragged_attn aot", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="compile layout classes into DSL-free shared libraries + manifest.json")
    b.add_argument("--out", help="output directory (point RAGGED_ATTN_AOT_DIR at it); needed unless --list")
    b.add_argument(
        "--classes",
        default="serving",
        help="serving (96 classes), scores (softcap / sinks, 432), all (576) or a FILE of class names",
    )
    b.add_argument("--arch", default="sm_90a", choices=ARCHES)
    b.add_argument(
        "--jobs", type=_positive_int, default=max(1, min(8, (os.cpu_count() or 2) // 2)), help="parallel compiles"
    )
    b.add_argument(
        "--cudart",
        default="static",
        choices=CUDART_MODES,
        help="link the CUDA runtime in, or need libcudart.so.<major> (12 or 13, as the DSL flavor)",
    )
    b.add_argument("--list", action="store_true", help="print the classes and exit")
    a = ap.parse_args(argv)
    try:
        classes = resolve_classes(a.classes, a.arch)
    except (OSError, ValueError, TypeError, RecursionError) as e:
        print(f"python -m ragged_attn aot build: --classes {a.classes}: {e}", file=sys.stderr)
        return 2
    if a.list:
        for lc in classes:
            print(lc.name)
        return 0
    if not classes:
        print(f"python -m ragged_attn aot build: --classes {a.classes}: lists no layout class", file=sys.stderr)
        return 2
    if a.out is None:
        print(
            "python -m ragged_attn aot build: --out DIR is required (only --list runs without it)",
            file=sys.stderr,
        )
        return 2
    reason = dsl_unavailable()
    if reason is not None:
        print(f"python -m ragged_attn aot build: cannot compile the kernels here: {reason}", file=sys.stderr)
        return 2
    try:
        Path(a.out).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"python -m ragged_attn aot build: --out {a.out}: cannot make the directory ({e})", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        manifest = build(classes, a.out, jobs=a.jobs, cudart=a.cudart, log=lambda s: print(s, flush=True))
    except AotBuildError as e:
        print(f"python -m ragged_attn aot build: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # names the path (str(e) carries the file names)
        print(f"python -m ragged_attn aot build: --out {a.out}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(
        f"wrote {len(classes)} class{'es' * (len(classes) != 1)} ({len(manifest['classes'])} in the manifest) to {a.out} in "
        f"{time.perf_counter() - t0:.0f} s; serve them with RAGGED_ATTN_AOT_DIR={os.path.abspath(a.out)}"
    )
    return 0
