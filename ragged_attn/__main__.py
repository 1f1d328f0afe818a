"""`python -m ragged_attn {info,demo,bench,aot}`.

Every subcommand parses its options with argparse: an unknown option is argparse's error (usage
on stderr, exit status 2). Output cut short by the reader (`... --list | head`) ends the command
quietly with status 141 (128 + SIGPIPE, what a shell reports for a tool killed by the broken pipe).
"""

from __future__ import annotations

import os
import sys

# 128 + SIGPIPE: the status a shell shows for a command whose reader went away.
BROKEN_PIPE_STATUS = 141


def main(argv: list[str] | None = None) -> int:
    try:
        status = _dispatch(argv)
        sys.stdout.flush()  # here, not at interpreter exit, so that a broken pipe is caught below
        return status
    except BrokenPipeError:
        # The reader closed the pipe (`| head`): stop writing. Point stdout at /dev/null so that
        # the interpreter's final flush of what is still buffered raises nothing either.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):  # a stdout with no file descriptor (captured): nothing to flush there
            pass
        return BROKEN_PIPE_STATUS


def _dispatch(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"info": _info, "demo": _demo, "bench": _bench, "aot": _aot}
    if argv and argv[0] not in commands and argv[0] not in ("-h", "--help"):
        print(f"python -m ragged_attn: unknown command {argv[0]!r} (choose from info, demo, bench, aot)\n", file=sys.stderr)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        print("usage: python -m ragged_attn {info,demo,bench,aot} [options]\n")
        print("  info   versions, GPU and arch, backends available, cache directory, prebuilt directories")
        print("  demo   embed real sentences with all-MiniLM-L6-v2, attention packed (THD) vs padded")
        print("  bench  ragged_attn beside FA4, FA3, cuDNN and torch on named workloads")
        print("  aot    aot build --out DIR [--classes serving|scores|all|FILE]: prebuilt kernels, no DSL to load them")
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
