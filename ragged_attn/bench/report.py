"""Reports: per-suite JSON in, one markdown table and three PNG plots out.

Files in a report directory: `<suite>.json` (one per suite run; `merge` reads any number of them,
from several device calls), `report.md`, `tflops.png` (useful TFLOP/s per workload per system),
`compiles.png` (kernels compiled / graphs built per suite) and `host_us.png` (host microseconds
per call). Only plain-file names in letters, digits, '.', '_' and '-' (the device's $OUT rule).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SYSTEM_ORDER = ["ragged_attn", "fa4", "fa3", "cudnn", "torch-varlen", "sdpa-cudnn"]
COLORS = {"ragged_attn": "#d62728", "fa4": "#1f77b4", "fa3": "#17becf", "cudnn": "#2ca02c",
          "torch-varlen": "#ff7f0e", "sdpa-cudnn": "#9467bd"}


def write_suite_json(path: Path, env: dict, command: str, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"env": env, "command": command, **result}, indent=1, default=float))
    os.replace(tmp, path)


def load(paths: list[str]) -> list[dict]:
    """Suite results from JSON files or directories of them; a suite seen twice keeps the last
    complete run (a partial one only when there is nothing else)."""
    files = []
    for p in map(Path, paths):
        files += sorted(p.glob("*.json")) if p.is_dir() else [p]
    by_suite = {}
    for f in files:
        try:
            data = json.loads(f.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{f}: not a suite JSON ({e})") from None
        if "suite" in data and "workloads" in data:
            old = by_suite.get(data["suite"])
            if old is None or not data.get("partial") or old.get("partial"):  # a partial never replaces a whole run
                by_suite[data["suite"]] = data
    if not by_suite:
        raise ValueError(f"no suite results (*.json with 'suite' and 'workloads') in {paths}")
    return list(by_suite.values())


def _systems(results: list[dict]) -> list[str]:
    seen = []
    for r in results:
        for row in r["workloads"]:
            for s in row["systems"]:
                if s not in seen:
                    seen.append(s)
    return sorted(seen, key=lambda s: SYSTEM_ORDER.index(s) if s in SYSTEM_ORDER else 99)


def _cell(rec: dict) -> str:
    st = rec["status"]
    if st == "ok":
        if "tflops" not in rec:
            return "ok"
        return _tf(rec["tflops"]) + (f" ({_tf(rec['gpu_tflops'])})" if "gpu_tflops" in rec else "")
    if st == "wrong":
        t = _tf(rec["tflops"]) + " " if "tflops" in rec else ""
        return f"WRONG {t}(err {rec.get('max_err', float('nan')):.2g})"
    return {"n/a": "n/a", "pending": "pending", "error": "error"}[st]


def _tf(x: float) -> str:
    return f"{x:.1f}" if x >= 10 else f"{x:.3g}"


def _fmt(x, spec):
    return "" if x is None else format(x, spec)


def _on_gpu(env: dict) -> bool:
    """Whether a suite ran on a CUDA device (older JSONs without "device" name a GPU in "gpu")."""
    return env.get("device", "cuda" if not str(env.get("gpu", "")).startswith("none") else "cpu") == "cuda"


def device_label(env: dict) -> str:
    """'NVIDIA H200' for a GPU run, 'CPU (x86_64)' for a CPU one (env["gpu"] reads 'none (CPU: ...)')."""
    if _on_gpu(env):
        return env.get("gpu", "?")
    gpu = str(env.get("gpu", ""))
    return f"CPU ({gpu[len('none (CPU: '):-1]})" if gpu.startswith("none (CPU: ") else "CPU"


# How the times were taken, per device kind: a CPU report must not describe GPU timing methods.
_GPU_METHOD = ("Useful TFLOP/s = 2 * H_q * (d_qk + d_v) * (exact allowed (query, key) pairs) / median time "
               "(`triton.testing.do_bench`, median, inputs rotated over >= 256 MiB so the L2 holds none). "
               "In parentheses where measured: GPU-only TFLOP/s, each timed call preceded by a "
               "`torch.cuda._sleep` head start so that host launch time stays out (do_bench's median includes "
               "it whenever the host needs longer per call than the GPU; see host us), after an L2 flush, the "
               "systems of a workload interleaved round by round (30 rounds) so that clock drift falls on all alike.")
_CPU_METHOD = ("On the CPU (no GPU): useful TFLOP/s = 2 * H_q * (d_qk + d_v) * (exact allowed (query, key) "
               "pairs) / median time, the time being the host wall clock (`time.perf_counter`) median of 5 "
               "calls after one warm-up call, one input set; host us per call is the same clock's median over "
               "20 calls. ragged_attn runs its exact PyTorch reference backend here, so these numbers time "
               "PyTorch on this CPU (a smoke test of the harness), not a kernel.")


def markdown(results: list[dict], command: str = "") -> str:
    env = results[0]["env"]
    systems = _systems(results)
    gpu_runs = [r for r in results if _on_gpu(r["env"])]
    cpu_runs = [r for r in results if not _on_gpu(r["env"])]
    out = [f"# ragged_attn benchmarks: {device_label(env)} ({env.get('date', '?')})", ""]
    out += ["| | |", "|---|---|"]
    if _on_gpu(env):
        out += [f"| GPU | {env.get('gpu', '?')} ({env.get('sm', '?')}) |", f"| driver | {env.get('driver', '?')} |",
                f"| CUDA (torch) | {env.get('cuda', '?')} |", f"| torch | {env.get('torch', '?')} |",
                f"| triton | {env.get('triton', '?')} |", f"| python | {env.get('python', '?')} |"]
    else:
        out += [f"| device | {device_label(env)}, no GPU |", f"| torch | {env.get('torch', '?')} |",
                f"| python | {env.get('python', '?')} |"]
    for k, v in env.get("versions", {}).items():
        out.append(f"| {k} | {v} |")
    out += ["", f"Command: `{command or results[0].get('command', '')}`", ""]
    if cpu_runs and gpu_runs:
        where = ", ".join(f"`{r['suite']}`" for r in cpu_runs)
        out += [f"GPU suites: {_GPU_METHOD}", "", f"CPU suites ({where}): {_CPU_METHOD}", ""]
    else:
        out += [_GPU_METHOD if gpu_runs else _CPU_METHOD, ""]
    out += [("bf16. Causal is bottom-right. `WRONG`: the output failed the reference spot check "
            "(|err| <= 2e-2 + 2e-2 |ref|). `pending`: the ragged_attn kernel has not landed; `n/a`: the "
            "system does not serve the workload or is absent (reasons below)."), ""]
    reasons: dict[str, set] = {}
    for r in results:
        part = " (partial: the call ended before the suite did)" if r.get("partial") else ""
        out += [f"## Suite `{r['suite']}`{part}", "", f"Reference for the spot check: {r.get('oracle')}.", ""]
        out.append("| workload | B | total_q | H_q/H_kv | d | TFLOP (useful) | " + " | ".join(systems) + " |")
        out.append("|---" * (6 + len(systems)) + "|")
        timed_rows = [row for row in r["workloads"] if row["workload"]["timed"]]
        for row in timed_rows:
            w = row["workload"]
            d = f"{w['d_qk']}" if w["d_qk"] == w["d_v"] else f"{w['d_qk']}/{w['d_v']}"
            cells = [_cell(row["systems"][s]) if s in row["systems"] else "" for s in systems]
            out.append(f"| {w['name']} | {w['batch']} | {w['total_q']} | {w['h_q']}/{w['h_kv']} | {d} | "
                       f"{w['flops'] / 1e12:.3f} | " + " | ".join(cells) + " |")
        untimed = len(r["workloads"]) - len(timed_rows)
        if untimed:
            bad = [(row["workload"]["name"], s) for row in r["workloads"] for s, rec in row["systems"].items()
                   if rec["status"] in ("wrong", "error")]
            out += ["", (f"{untimed} more workloads ran once each (compiles, graph builds and the spot check "
                        f"count over all {len(r['workloads'])}) without timing; failures among all: "
                        f"{', '.join(f'{n} ({s})' for n, s in bad) or 'none'}.")]
        gpu = _on_gpu(r["env"])
        if gpu:
            out += ["", ("Details (timed workloads): do_bench median ms / GPU-only median ms / host us per call / "
                        "first call s (cuDNN: of which graph build s) / max abs err vs reference."), ""]
        else:
            out += ["", ("Details (timed workloads, CPU): perf_counter median ms / host us per call / "
                        "first call s / max abs err vs reference."), ""]
        out.append("| workload | " + " | ".join(systems) + " |")
        out.append("|---" * (1 + len(systems)) + "|")
        for row in timed_rows:
            cells = []
            for s in systems:
                rec = row["systems"].get(s, {"status": "n/a"})
                if rec["status"] in ("ok", "wrong"):
                    build = f" ({rec['build_s']:.3f})" if "build_s" in rec else ""
                    gpu_ms = f" / {_fmt(rec.get('gpu_ms'), '.4f') or '-'}" if gpu else ""
                    cells.append(f"{_fmt(rec.get('median_ms'), '.4f')}{gpu_ms} / "
                                 f"{_fmt(rec.get('host_us'), '.0f')} / "
                                 f"{rec['first_call_s']:.3f}{build} / {_fmt(rec.get('max_err'), '.1e')}")
                else:
                    cells.append(rec["status"])
            out.append(f"| {row['workload']['name']} | " + " | ".join(cells) + " |")
        for row in r["workloads"]:
            for s, rec in row["systems"].items():
                if rec["status"] in ("n/a", "pending", "error"):
                    reasons.setdefault(f"{s} {rec['status']}", set()).add(rec.get("reason", ""))
                if rec.get("note"):
                    reasons.setdefault(f"{s} note", set()).add(rec["note"])
        out.append("")
    out += ["## Kernels compiled over each suite", "", "| suite | " + " | ".join(systems) + " |",
            "|---" * (1 + len(systems)) + "|"]
    for r in results:
        cells = []
        for s in systems:
            n = r["compiles"].get(s)
            unit = r.get("compile_unit", {}).get(s, "")
            cells.append("-" if n is None else f"{n}" + (" graphs" if unit == "graphs built" else ""))
        out.append(f"| {r['suite']} ({len(r['workloads'])} workloads) | " + " | ".join(cells) + " |")
    out += ["", ("`-`: compiles nothing at run time (precompiled) or keeps no counter; cuDNN counts graphs "
                "built (one per shape, as FlashInfer builds them)."), ""]
    if reasons:
        out += ["## Why a cell is not a number", ""]
        for k in sorted(reasons):
            for why in sorted(reasons[k]):
                out.append(f"- {k}: {why}")
        out.append("")
    out += ["Plots: `tflops.png`, `compiles.png`, `host_us.png`.", ""]
    return "\n".join(out)


def _bars(results, systems, key, xlabel, path, log=False):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = [r for r in results if any(row["workload"]["timed"] for row in r["workloads"])]
    heights = [max(2.0, 0.28 * sum(row["workload"]["timed"] for row in r["workloads"]) * len(systems) / 2.2)
               for r in suites]
    fig, axes = plt.subplots(len(suites), 1, figsize=(11, sum(heights) + 1.0 * len(suites)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, r in zip(axes[:, 0], suites):
        rows = [row for row in r["workloads"] if row["workload"]["timed"]]
        n = len(systems)
        width = 0.8 / n
        for k, s in enumerate(systems):
            ys, xs = [], []
            for i, row in enumerate(rows):
                rec = row["systems"].get(s, {})
                if rec.get("status") == "ok" and key in rec:
                    ys.append(i + (k - (n - 1) / 2) * width)
                    xs.append(rec[key])
            ax.barh(ys, xs, height=width, color=COLORS.get(s), label=s)
            if key == "tflops":  # GPU-only throughput as a tick on each bar
                gy = [i + (k - (n - 1) / 2) * width for i, row in enumerate(rows)
                      if row["systems"].get(s, {}).get("status") == "ok" and "gpu_tflops" in row["systems"][s]]
                gx = [row["systems"][s]["gpu_tflops"] for row in rows
                      if row["systems"].get(s, {}).get("status") == "ok" and "gpu_tflops" in row["systems"][s]]
                if gx:
                    ax.scatter(gx, gy, marker="|", color="black", s=25, linewidths=1.2, zorder=3,
                               label="GPU-only" if not ax.collections else None)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([row["workload"]["name"] for row in rows], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"suite {r['suite']}", fontsize=10)
        ax.set_xlabel(xlabel)
        if log and any(c.get_width() > 0 for c in ax.patches):  # a log axis needs a positive bar
            ax.set_xscale("log")
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=7, loc="best", framealpha=0.9)
    env = results[0]["env"]
    fig.suptitle(f"{xlabel} — {device_label(env)}, {env.get('date', '')} (bf16; missing bar: n/a, pending or "
                 f"wrong)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _compiles_plot(results, systems, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.5))
    n = len(systems)
    width = 0.8 / n
    systems = [s for s in systems if any(r["compiles"].get(s) is not None for r in results)]
    n = len(systems)
    width = 0.8 / max(1, n)
    for k, s in enumerate(systems):
        xs, hs = [], []
        for i, r in enumerate(results):
            c = r["compiles"].get(s)
            if c is not None:
                xs.append(i + (k - (n - 1) / 2) * width)
                hs.append(c)
        ax.bar(xs, hs, width=width, color=COLORS.get(s), label=s)
        for x, h in zip(xs, hs):
            ax.text(x, h, str(h), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels([f"{r['suite']}\n({len(r['workloads'])} workloads)" for r in results], fontsize=8)
    ax.set_ylabel("kernels compiled (cuDNN: graphs built)")
    ax.set_title(f"Compiles over each suite — {device_label(results[0]['env'])} (no bar: nothing compiled at "
                 f"run time / no counter)", fontsize=9)
    if systems:
        ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(results: list[dict], out_dir: Path, command: str = "", plots: bool = True) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    order = {"serving": 0, "serving-full": 1, "dense-long": 2, "paged": 3, "flashinfer-cudnn": 4}
    results = sorted(results, key=lambda r: order.get(r["suite"], 9))
    written = [out_dir / "report.md"]
    (out_dir / "report.md").write_text(markdown(results, command))
    if plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("plots skipped: matplotlib is not installed")
            return written
        systems = _systems(results)
        _bars(results, systems, "tflops", "useful TFLOP/s", out_dir / "tflops.png")
        _bars(results, systems, "host_us", "host microseconds per call", out_dir / "host_us.png", log=True)
        _compiles_plot(results, systems, out_dir / "compiles.png")
        written += [out_dir / "tflops.png", out_dir / "host_us.png", out_dir / "compiles.png"]
    return written
