"""SM clock and board power while each system runs one workload back to back: is a long row's gap to
a peer a power-limited clock (the H200 settles from ~1.98 to ~1.6 GHz under long tensor-core loads)
rather than cycles?

For each named workload of a `python -m ragged_attn bench` suite, every system (as the suite binds it:
ragged_attn.bench.peers) runs in phases of PHASE_S seconds of back-to-back launches (no L2 flush, no
sleep: the steady, power-limited state), the systems alternating phase by phase (A B A B ...) so that
drift falls on all alike. `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw.instant -lms 20`
samples in the background (the machine's one GPU); each phase's samples from its second half are
averaged. Printed per system and rest: median ms per launch (CUDA events around each launch, second
halves of the phases), mean SM clock (MHz), mean board power (W) and ms x MHz (thousands of SM cycles
a launch: the work in cycles, whatever the clock). --rest-us adds a torch.cuda._sleep before each
launch (the suites rest ~2.7 ms on 1 x 16384; session 28: our 1 x 16384 ran 674 TFLOP/s after 300 us
rests, 726 after ~2.7 ms). For long rows only: the events around each launch count the host's launch
time too wherever it exceeds the GPU's (FA4 and FA3 need 100-900 us of Python a call).

Usage: python tools/probe_clocks.py WORKLOAD [WORKLOAD ...] [--suite serving-full]
       [--systems ragged_attn,fa4] [--phases 3] [--phase-s 1.5] [--rest-us 0,2700]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ragged_attn.bench.peers import make_systems
from ragged_attn.bench.timing import SLEEP_CYCLES_PER_US
from ragged_attn.bench.workloads import make_inputs, named_workloads


def _samples(path: str) -> list[tuple[float, float, float]]:
    """(unix seconds, SM MHz, W) rows of nvidia-smi's csv log."""
    rows = []
    with open(path) as f:
        for line in f:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 3 or parts[0].startswith("timestamp"):
                continue
            try:
                stamp = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                rows.append((stamp, float(parts[1].split()[0]), float(parts[2].split()[0])))
            except ValueError:
                continue
    return rows


def _phase(call, seconds: float, rest_us: float) -> tuple[list[float], float, float]:
    """Launches for `seconds`, each after a `rest_us` torch.cuda._sleep (0: back to back), the host
    keeping ~4 queued so the GPU never waits for it; (per-launch ms, wall start, wall end)."""
    cycles = int(rest_us * SLEEP_CYCLES_PER_US)
    events = []
    start = time.time()
    while time.time() - start < seconds:
        if cycles:
            torch.cuda._sleep(cycles)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        call()
        b.record()
        events.append((a, b))
        if len(events) > 4:
            events[-5][1].synchronize()
    events[-1][1].synchronize()
    end = time.time()
    return [a.elapsed_time(b) for a, b in events], start, end


def _sampler(log: str) -> subprocess.Popen:
    """nvidia-smi sampling the SM clock and the board power every 20 ms into `log`: the instant
    power where the driver has it (power.draw is a 1 s average on Hopper, which would mix in the
    phase before), else power.draw."""
    for power in ("power.draw.instant", "power.draw"):
        smi = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu=timestamp,clocks.sm,{power}", "--format=csv,noheader", "-lms", "20", "-f", log]
        )  # fmt: skip
        time.sleep(0.5)
        if smi.poll() is None:
            print(f"sampling {power}")
            return smi
    raise SystemExit("nvidia-smi could not sample clocks.sm and power (see its message above)")


def _report(name, rest, calls, args, log) -> None:
    """Alternating phases of every system at one rest; one table line each."""
    phases = {n: [] for n in calls}
    for p in range(args.phases):
        for n in list(calls)[p % len(calls) :] + list(calls)[: p % len(calls)]:
            phases[n].append(_phase(calls[n], args.phase_s, rest))
    time.sleep(1.0)  # the last samples reach the log
    samples = _samples(log)
    for n, runs in phases.items():
        ms = statistics.median(t for times, _, _ in runs for t in times[len(times) // 2 :])
        window = [
            (mhz, w_)
            for s0, s1 in ((a + (b - a) / 2, b) for _, a, b in runs)
            for t, mhz, w_ in samples
            if s0 <= t <= s1
        ]
        mhz = statistics.fmean(m for m, _ in window) if window else float("nan")
        watts = statistics.fmean(x for _, x in window) if window else float("nan")
        print(
            f"| {name} | {rest:.0f} | {n} | {ms:.4f} | {mhz:.0f} | {watts:.0f} | {ms * mhz:.0f} |", flush=True
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "workloads", nargs="+", help="workload names of the suite, e.g. llama3-8b/1x16384-full"
    )
    parser.add_argument("--suite", default="serving-full")
    parser.add_argument("--systems", default="ragged_attn,fa4")
    parser.add_argument("--phases", type=int, default=3, help="phases per system (alternating)")
    parser.add_argument("--phase-s", type=float, default=1.5, help="seconds of launches per phase")
    parser.add_argument(
        "--rest-us", default="0", help="comma-separated rests before each launch, us (0: back to back; "
        "the suites' GPU-only timing rests 3 x the slowest host, ~2,700 us on 1 x 16384)"
    )  # fmt: skip
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    try:
        workloads = named_workloads(args.suite, args.workloads)
    except ValueError as e:
        raise SystemExit(str(e)) from e
    systems = make_systems(args.systems.split(","), "cute")
    fd, log = tempfile.mkstemp(suffix=".csv")
    os.close(fd)
    smi = _sampler(log)
    try:
        print(f"{torch.cuda.get_device_name(device)}; phases {args.phases} x {args.phase_s} s a system")
        print("| workload | rest us | system | ms / launch | SM MHz | W | k-cycles / launch |")
        print("|---|---|---|---|---|---|---|")
        for w in workloads:
            name = w.name
            inp = make_inputs(w, device, 0)
            calls = {}
            for s in systems:
                if s.availability(device) is None:
                    s.setup(w, inp)  # cuDNN's THD graph is built here
                    calls[s.name] = s.bind(w, inp)[0]
            for call in calls.values():
                call()
            torch.cuda.synchronize(device)
            for rest in (float(x) for x in args.rest_us.split(",")):
                _report(name, rest, calls, args, log)
            del inp, calls
            torch.cuda.empty_cache()
    finally:  # also on the SIGINT of `timeout -s INT`: no sampler left running
        smi.terminate()
        smi.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
