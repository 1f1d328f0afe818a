"""`python -m ragged_attn bench`: ragged_attn against FA4, FA3, cuDNN and torch on named workloads.

    python -m ragged_attn bench [--suite NAME ...] [--peers NAME ...] [--out DIR]
                                [--ours-backend auto|cute|reference] [--no-check] [--no-plots]
    python -m ragged_attn bench merge PATH... [--out DIR]

`bench` runs each suite in this process, writes `<suite>.json` per suite and then `report.md` and
the plots over every suite JSON in --out (so several runs into one directory accumulate). `merge`
reads suite JSONs (files or directories, e.g. what several device calls returned) and writes one
report. Default --out: docs/benchmarks/<date>-<gpu>/ (e.g. 2026-11-30-h200; `cpu` without a GPU)
under the current folder; the first line printed names the folder. Stdout: one labelled header
per suite (`runner.COLUMNS`: workload, system, status, TFLOP/s, median_ms, host_us/call,
first_call_s, max_err, gpu_only_TFLOP/s), then one row per workload and system. Suites and their
seeds: ragged_attn/bench/workloads.py; peers: peers.py; timing rules: timing.py; the spot check:
check.py. The device recipe: bench/run_on_device.sh.
"""

from __future__ import annotations

import argparse
import datetime
import re
import shlex
import sys
from pathlib import Path

from .workloads import SUITES

__all__ = ["main"]

DEFAULT_PEERS = ["ragged_attn", "fa4", "fa3", "cudnn", "torch-varlen", "sdpa-cudnn"]


def _gpu_slug(device) -> str:
    import torch

    if device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(device).lower()
    m = re.search(r"\b([a-z]\d{2,4}[a-z]?)\b", name.replace("nvidia", ""))
    return m.group(1) if m else re.sub(r"[^a-z0-9]+", "-", name).strip("-")


def default_out(device) -> Path:
    return Path("docs/benchmarks") / f"{datetime.date.today().isoformat()}-{_gpu_slug(device)}"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ragged_attn bench", description=__doc__.splitlines()[0],
        epilog="python -m ragged_attn bench merge PATH... --out DIR [--no-plots]: one report from suite JSON "
               "files or folders of them (e.g. what several device calls returned).",
    )  # fmt: skip
    p.add_argument("--suite", nargs="+", action="extend", choices=list(SUITES), metavar="NAME",
                   help=f"suites to run (default: dense-long serving on a GPU, smoke on a CPU, where the "
                        f"reference backend would take many minutes per suite); known: {', '.join(SUITES)}")
    p.add_argument("--peers", nargs="+", action="extend", metavar="NAME",
                   help=f"systems to run (default: all: {' '.join(DEFAULT_PEERS)})")
    p.add_argument("--out", type=Path, help="report directory (default: docs/benchmarks/<date>-<gpu>/ under the "
                                            "current folder; printed first)")
    p.add_argument("--ours-backend", default="auto", choices=("auto", "cute", "reference"),
                   help="backend= for ragged_attn.attention (default auto: the kernel on CUDA, the "
                        "PyTorch reference on CPU); 'cute' or 'reference' to force one")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--no-check", action="store_true", help="skip the reference spot check")
    p.add_argument("--no-plots", action="store_true", help="write JSON and markdown only")
    return p


def _merge(argv: list[str]) -> int:
    from .report import load, write_report

    p = argparse.ArgumentParser(prog="python -m ragged_attn bench merge")
    p.add_argument("inputs", nargs="+", help="suite JSON files or directories of them")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--no-plots", action="store_true")
    a = p.parse_args(argv)
    try:
        results = load(a.inputs)
    except (OSError, ValueError) as e:  # a missing path, a file that is not JSON, a folder without suites
        p.error(f"inputs: {e}")
    print(f"# report folder: {a.out.resolve()}", flush=True)
    for f in write_report(results, a.out, plots=not a.no_plots):
        print(f"wrote {f.resolve()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m ragged_attn bench ...` (argv without the word `bench`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        argv = argv[1:]
    if argv and argv[0] == "merge":
        return _merge(argv[1:])
    a = _parser().parse_args(argv)
    import torch

    from .peers import make_systems
    from .report import device_label, load, write_report, write_suite_json
    from .runner import environment, run_suite

    try:
        device = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError as e:
        _parser().error(f"--device: expected a torch device such as cuda, cuda:1 or cpu, got {a.device!r} ({e})")
    if device.type == "cuda" and not torch.cuda.is_available():
        _parser().error(f"--device: {a.device!r} asked for, but torch sees no CUDA GPU here (use --device cpu)")
    if device.type not in ("cuda", "cpu"):
        _parser().error(f"--device: expected cuda or cpu (the suites' two backends), got {a.device!r}")
    try:
        systems = make_systems(a.peers or DEFAULT_PEERS, a.ours_backend)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = a.out or default_out(device)
    print(f"# report folder: {out.resolve()}" + ("" if a.out else " (the default; choose one with --out)"),
          flush=True)
    command = "python -m ragged_attn bench " + " ".join(shlex.quote(x) for x in argv)
    env = environment(device, systems)
    where = f"{env['gpu']} | CUDA {env['cuda']}" if device.type == "cuda" else f"{device_label(env)}, no GPU"
    print(f"# {where} | torch {env['torch']} | " + " | ".join(f"{k} {v}" for k, v in env["versions"].items()),
          flush=True)
    for s in systems:
        why = s.availability(device)
        if why:
            print(f"# {s.name}: n/a: {why}", flush=True)
    suites = a.suite or (["dense-long", "serving"] if device.type == "cuda" else ["smoke"])
    if not a.suite and device.type != "cuda":
        print("# no GPU: running the smoke suite (pass --suite to time others on the reference backend; "
              "they take many minutes each)", flush=True)
    for name in suites:
        print(f"## suite {name}", flush=True)
        path = out / f"{name}.json"
        result = run_suite(name, systems, device, check_outputs=not a.no_check,
                           log=lambda line: print(line, flush=True),
                           on_row=lambda part, path=path: write_suite_json(path, env, command, part))
        write_suite_json(path, env, command, result)
    for f in write_report(load([str(out)]), out, command, plots=not a.no_plots):
        print(f"wrote {f.resolve()}")
    return 0
