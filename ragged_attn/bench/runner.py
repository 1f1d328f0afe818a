"""Run one suite against the systems: per workload and system, time, check and record.

Per (workload, system) the record holds: status ("ok", "wrong" when the spot check fails, "n/a",
"pending", "error") and its reason; median_ms and tflops (useful FLOPs, workloads.Workload.flops);
host_us; first_call_s (the first synchronized call: compile or graph build included); build_s
(cuDNN's graph build, also reported apart); max_err against the reference and whether it is within
tolerance. Per suite: kernels compiled by each system over the suite (cuDNN: graphs built).
"""

from __future__ import annotations

import datetime
import gc
import platform
import subprocess
import traceback

import torch

from . import check, timing
from .peers import Pending, System, Unsupported
from .workloads import Workload, make_inputs, suite

SEED = 1234  # input set i of every workload is drawn with seed SEED + i


def _short(e: BaseException, limit: int = 240) -> str:
    msg = " ".join(str(e).split())
    return f"{type(e).__name__}: {msg}"[:limit]


def environment(device: torch.device, systems: list[System]) -> dict:
    env = {
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "device": device.type,
    }
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        cap = torch.cuda.get_device_capability(device)
        env["sm"] = f"sm_{cap[0]}{cap[1]}"
        try:
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20, check=False).stdout.strip().splitlines()[0]
        except Exception:  # noqa: BLE001 - optional detail
            env["driver"] = "?"
        try:
            import triton

            env["triton"] = triton.__version__
        except ImportError:
            pass
    else:
        env["gpu"] = f"none (CPU: {platform.processor() or platform.machine()})"
    versions = {}
    for s in systems:
        why = s.availability(device)
        if why:
            versions[s.name] = f"n/a: {why}"
            continue
        try:
            versions.update(s.versions())
        except Exception as e:  # noqa: BLE001 - a peer that cannot say its version is still timed
            versions[s.name] = f"? ({_short(e, 80)})"
    env["versions"] = versions
    return env


def _compiled(s: System, device):
    if s.availability(device):
        return None
    try:
        return s.compiled()
    except Exception:  # noqa: BLE001 - a missing cache counter reads as unknown
        return None


def run_one(s: System, w: Workload, inputs, refs, device, gpu_calls: dict | None = None) -> dict:
    """One system on one workload: first call, check, host us, device median and, when
    `gpu_calls` is None, the GPU-only median here; else its first input set's call goes into
    gpu_calls[s.name] for run_suite to time beside the other systems (interleaved)."""
    rec: dict = {}
    reason = s.availability(device)
    if reason:
        return {"status": "n/a", "reason": reason}
    try:
        build_s = s.setup(w, inputs[0])
        bound = [s.bind(w, inp) for inp in inputs]
        calls = [c for c, _ in bound]
        first_s, out = timing.first_call(calls[0], device)
        if build_s is not None:
            rec["build_s"] = build_s
            first_s += build_s
        rec["first_call_s"] = first_s
        if refs is not None:
            err, ok = check.max_error(bound[0][1](out), refs)
            rec["max_err"], rec["check_ok"] = err, ok
        del out
        if w.timed:
            rec["host_us"] = timing.host_us(calls[0], device)
            ms, method = timing.device_ms(timing.Rotator(calls), device)
            rec["median_ms"] = ms
            rec["timer"] = method
            rec["tflops"] = w.flops / (ms * 1e-3) / 1e12
            if gpu_calls is None or device.type != "cuda":
                g = timing.gpu_ms(timing.Rotator(calls), device, head_start_us=max(200.0, 3 * rec["host_us"]))
                if g is not None:
                    rec["gpu_ms"] = g
                    rec["gpu_tflops"] = w.flops / (g * 1e-3) / 1e12
            elif rec.get("check_ok", True):
                gpu_calls[s.name] = calls[0]  # the L2 flush before each timed call keeps it cold
        rec["status"] = "ok" if rec.get("check_ok", True) else "wrong"
        note = getattr(s, "note", None)
        if note and note():
            rec["note"] = note()
    except Pending as e:
        rec = {"status": "pending", "reason": str(e)[:240]}
    except Unsupported as e:
        rec = {"status": "n/a", "reason": str(e)[:240]}
    except Exception as e:  # noqa: BLE001 - one failing system must not stop the suite
        rec = {"status": "error", "reason": _short(e),
               "where": traceback.format_exc(limit=3).splitlines()[-3:]}
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return rec


def _gpu_only_interleaved(w: Workload, recs: dict, gpu_calls: dict, device: torch.device) -> None:
    """The GPU-only medians of one workload's systems, timed interleaved round by round
    (timing.gpu_ms_interleaved: clock drift under load falls on every system alike, where timing
    them one after the other favoured whichever ran while the GPU was cooler), into their records.
    The head start covers the slowest host: 3 x the largest host time per call, >= 200 us."""
    gpu_calls = {name: call for name, call in gpu_calls.items() if recs[name].get("status") == "ok"}
    if not gpu_calls:
        return
    head_start = max([200.0] + [3 * recs[name].get("host_us", 0.0) for name in gpu_calls])
    try:
        times = timing.gpu_ms_interleaved(gpu_calls, device, head_start_us=head_start)
    except Exception as e:  # noqa: BLE001 - the other columns stay; say why this one is missing
        for name in gpu_calls:
            recs[name]["gpu_error"] = _short(e)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return
    for name, g in (times or {}).items():
        recs[name]["gpu_ms"] = g
        recs[name]["gpu_tflops"] = w.flops / (g * 1e-3) / 1e12


def run_suite(name: str, systems: list[System], device: torch.device, *, check_outputs: bool = True,
              log=print, on_row=None) -> dict:
    """Run every workload of suite `name`; `on_row(partial_result)` after each (so a call cut
    short by its time limit still leaves what it measured)."""
    workloads = suite(name)
    log(header(device))
    before = {s.name: _compiled(s, device) for s in systems}
    results = []
    oracle = None
    for w in workloads:
        probe = make_inputs(w, device, SEED)
        n_sets = timing.num_input_sets(probe.nbytes(), device.type == "cuda") if w.timed else 1
        inputs = [probe] + [make_inputs(w, device, SEED + i) for i in range(1, n_sets)]
        refs = None
        if check_outputs:
            refs, oracle = check.reference_slices(w, inputs[0])
        row = {"workload": w.describe(), "input_sets": n_sets, "systems": {}}
        gpu_calls: dict = {}
        for s in systems:
            row["systems"][s.name] = run_one(s, w, inputs, refs, device, gpu_calls)
        _gpu_only_interleaved(w, row["systems"], gpu_calls, device)
        del gpu_calls
        for s in systems:
            rec = row["systems"][s.name]
            if w.timed or rec["status"] not in ("ok",):
                log(_line(w, s.name, rec, gpu=device.type == "cuda"))
        results.append(row)
        if on_row is not None:
            on_row({"suite": name, "oracle": oracle, "workloads": results, "partial": True,
                    "compiles": {}, "compile_unit": {}})
        del inputs, probe, refs
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    after = {s.name: _compiled(s, device) for s in systems}
    compiles = {}
    for s in systems:
        b, a = before[s.name], after[s.name]
        compiles[s.name] = None if a is None else a - (b or 0)
    return {"suite": name, "oracle": oracle, "workloads": results, "compiles": compiles,
            "compile_unit": {s.name: ("graphs built" if s.name == "cudnn" else "kernels compiled")
                             for s in systems}}


# The columns of the per-row lines run_suite logs (stdout of `python -m ragged_attn bench`), with
# their units; `header()` names them once per suite. A row that is not a number (n/a, pending,
# error) gives its reason after the status instead.
COLUMNS = (("workload", 34), ("system", 13), ("status", 6), ("TFLOP/s", 9), ("median_ms", 10),
           ("host_us/call", 12), ("first_call_s", 12), ("max_err", 9), ("gpu_only_TFLOP/s", 16))


def header(device: torch.device) -> str:
    """The column names of `_line`, and below them what the times are on this device."""
    cols = COLUMNS if device.type == "cuda" else COLUMNS[:-1]  # no GPU-only column on the CPU
    names = " ".join(f"{n:{w}s}" if i < 3 else f"{n:>{w}s}" for i, (n, w) in enumerate(cols))
    if device.type == "cuda":
        how = ("median_ms: triton do_bench median over rotated input sets; host_us/call: host time per call; "
               "gpu_only: each call behind a torch.cuda._sleep head start, the systems interleaved")
    else:
        how = ("median_ms: time.perf_counter median of 5 calls after a warm-up (CPU wall clock; no GPU timing); "
               "host_us/call: the same clock over 20 calls")
    return f"{names}\n# {how}"


def _line(w: Workload, system: str, rec: dict, gpu: bool = True) -> str:
    st = rec["status"]
    (_, ww), (_, ws), (_, wst), (_, wt), (_, wm), (_, wh), (_, wf), (_, we), (_, wg) = COLUMNS
    head = f"{w.name:{ww}s} {system:{ws}s} {st:{wst}s}"
    if st not in ("ok", "wrong"):
        return f"{head} {rec.get('reason', '')}"
    if "tflops" in rec:
        t = f"{rec['tflops']:{wt}.3g} {rec['median_ms']:{wm}.4f} {rec['host_us']:{wh}.1f}"
    else:
        t = f"{'untimed':>{wt}s} {'-':>{wm}s} {'-':>{wh}s}"
    line = f"{head} {t} {rec['first_call_s']:{wf}.3g} {rec.get('max_err', float('nan')):{we}.2e}"
    if gpu:
        line += " " + (f"{rec['gpu_tflops']:{wg}.3g}" if "gpu_tflops" in rec else f"{'-':>{wg}s}")
    return line
