"""`python -m ragged_attn {info,demo,bench,aot}`."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"info": _info, "demo": _demo, "bench": _bench, "aot": _aot}
    if argv and argv[0] not in commands and argv[0] not in ("-h", "--help"):
        print(f"python -m ragged_attn: unknown command {argv[0]!r} (choose from info, demo, bench, aot)\n", file=sys.stderr)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        print("usage: python -m ragged_attn {info,demo,bench,aot} [options]\n")
        print("  info   versions, GPU and arch, backends available, cache directory")
        print("  demo   embed real sentences with all-MiniLM-L6-v2, attention packed (THD) vs padded")
        print("  bench  ragged_attn beside FA4, FA3, cuDNN and torch on named workloads")
        print("  aot    aot build --out DIR [--classes serving|all|FILE]: prebuilt kernels, no DSL to load them")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return commands[argv[0]](argv[1:])


def _info(argv: list[str]) -> int:
    import argparse

    from .info import collect

    argparse.ArgumentParser(
        prog="python -m ragged_attn info",
        description="Print versions, the GPU and its arch, the backends available and the cache directory.",
    ).parse_args(argv)  # no options: anything else is argparse's error (exit status 2)
    for key, value in collect().items():
        print(f"{key:>18}: {value}")
    return 0


def _demo(argv: list[str]) -> int:
    from . import demo

    return demo.main(argv)


def _bench(argv: list[str]) -> int:
    from . import bench

    return bench.main(argv)


def _aot(argv: list[str]) -> int:
    from . import aot

    return aot.main(argv)


if __name__ == "__main__":
    sys.exit(main())
