"""Cold start with prebuilt kernels vs today's JIT disk cache, in fresh processes (issue 13 item 4).

Goal (issue 13): from `import ragged_attn` (after `import torch` and CUDA init) to the first
finished attention call with prebuilt kernels < 0.3 s, and < 5 ms for the first call of each
further class; today's path is measured in the same run for comparison.

Usage (on the GPU machine; the prebuilt directory is built beforehand):
    python -m ragged_attn aot build --out /tmp/aot --classes tools/aot_smoke_classes.txt --jobs 8
    python tools/cold_start_aot.py --aot-dir /tmp/aot [--classes FILE] [--repeats 3] [--out FILE]
    python tools/cold_start_aot.py --aot-dir /tmp/aot --dry-run    # the plan only; no CUDA needed

Modes, each run in `--repeats` fresh processes (this file with `--child MODE`), interleaved:
- "prebuilt": RAGGED_ATTN_AOT_DIR=DIR, every `cutlass` import refused by a meta-path finder
  (tests/gpu/aot_run_classes.py's `_BlockCutlass`) and the DSL reported missing, as on a runtime
  install (`backends.cute_import_error` replaced, as that script does, since the DSL's metadata is
  still installed here); the child checks that no `cutlass` import was attempted or happened.
- "jit disk cache": RAGGED_ATTN_AOT_DIR unset, the DSL importable, RAGGED_ATTN_CACHE_DIR a
  temporary directory that one warm-up child (mode "warm", reported as its own row) filled by
  compiling every class first, so the timed children only load from disk.
Each child: `import torch; torch.cuda.init(); torch.zeros(1, device="cuda")` (not timed), then
time.perf_counter around `import ragged_attn` + the first class's inputs + its first
`ragged_attn.attention(..., backend="cute")` + `torch.cuda.synchronize()`; then, per further
class, its first call alone (inputs built and synchronized outside the timed span). Inputs are
tests/gpu/aot_run_classes.py's `problem()` (B=2, H_q=4, H_kv=2, the class's dims; paged: a 16-token
NHD page pool with a shuffled page table). After the timing every output is checked against
backend="reference" with the same file's `check`. A child prints one JSON line; the parent prints a markdown table of medians.

Exit status: 0 when every child ran, every output matched the reference, the prebuilt children
served every class from the prebuilt directory without a `cutlass` import, and the timed JIT
children loaded every class from disk (the goals themselves are reported, not enforced);
1 when a check failed; 2 for a setup problem (no CUDA, no usable prebuilt directory, bad args).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "tests" / "gpu" / "aot_run_classes.py"  # _BlockCutlass, ATTEMPTS, problem(), check()
DEFAULT_CLASSES = ROOT / "tools" / "aot_smoke_classes.txt"
MODES = ("prebuilt", "jit disk cache")
WARM = "warm"  # the JIT warm-up child: compiles every class into the temporary cache
GOAL_FIRST_S, GOAL_FURTHER_MS = 0.3, 5.0
CHILD_TIMEOUT_S, WARM_TIMEOUT_S = 240, 480
BLOCKED_REASON = "the CuTe DSL is not installed (blocked by tools/cold_start_aot.py)"


# ---- the child: one fresh process, one mode --------------------------------------------------------


def _load_runner():
    """tests/gpu/aot_run_classes.py as a module (it imports only json, sys and time)."""
    spec = importlib.util.spec_from_file_location("_aot_run_classes", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def child(mode: str, fields: list[dict]) -> dict:
    """Time one fresh process's cold start (see the module docstring); returns the JSON record."""
    runner = _load_runner()
    if mode == "prebuilt":
        sys.meta_path.insert(0, runner._BlockCutlass())
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    cutlass_before = "cutlass" in sys.modules
    # problem() reads only the class's fields; plain namespaces keep ragged_attn out of the process
    # until the timed import (LayoutClass itself is built after it, for the names).
    classes = [SimpleNamespace(**f) for f in fields]

    t0 = time.perf_counter()
    import ragged_attn

    t_import = time.perf_counter() - t0
    if mode == "prebuilt":
        from ragged_attn import backends

        backends.cute_import_error = lambda: BLOCKED_REASON
    args, kw = runner.problem(classes[0], torch)
    outs = [ragged_attn.attention(*args, **kw, backend="cute")]
    torch.cuda.synchronize()
    t_first = time.perf_counter() - t0
    inputs = [(args, kw)]
    further = []
    for lc in classes[1:]:
        args, kw = runner.problem(lc, torch)
        torch.cuda.synchronize()
        t = time.perf_counter()
        outs.append(ragged_attn.attention(*args, **kw, backend="cute"))
        torch.cuda.synchronize()
        further.append(time.perf_counter() - t)
        inputs.append((args, kw))

    info = ragged_attn.cache_info()
    cutlass_after = "cutlass" in sys.modules  # before the reference runs (it needs no DSL anyway)
    names = [ragged_attn.LayoutClass(**f).name for f in fields]
    ok, errors = {}, {}
    for name, lc, (args, kw), got in zip(names, classes, inputs, outs):
        want = ragged_attn.attention(*args, **kw, backend="reference")
        ok[name], errors[name] = runner.check(lc, got, want)
    return {
        "mode": mode,
        "import_s": t_import,
        "first_s": t_first,
        "further_s": dict(zip(names[1:], further)),
        "first_class": names[0],
        "info": {"prebuilt_hits": info.prebuilt_hits, "compiles": info.compiles, "disk_hits": info.disk_hits},
        "cutlass": {
            "before_import": cutlass_before,
            "imported": cutlass_after,
            "attempts": list(runner.ATTEMPTS),
        },
        "ok": ok,
        "errors": errors,
        "gpu": torch.cuda.get_device_name(0),
        "torch_cuda": torch.version.cuda,
    }


# ---- the parent: plan, run, aggregate ---------------------------------------------------------------


def _dist(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def plan(aot_dir: Path, classes: list, work: Path) -> list[dict]:
    """The children to run, in order: the warm-up, then the timed modes (their env changes and argv)."""
    fields = json.dumps([lc.as_dict() for lc in classes], separators=(",", ":"))
    cache = {
        "prebuilt": work / "prebuilt_cache",
        "jit disk cache": work / "jit_cache",
        WARM: work / "jit_cache",
    }
    steps = []
    for mode in (WARM, *MODES):
        env = {"RAGGED_ATTN_CACHE_DIR": str(cache[mode]), "PYTHONPATH": str(ROOT)}
        if mode == "prebuilt":
            env["RAGGED_ATTN_AOT_DIR"] = str(aot_dir)
        else:
            env["RAGGED_ATTN_AOT_DIR"] = None  # unset
            env["RAGGED_ATTN_DISK_CACHE"] = "1"
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--fields", fields]
        steps.append({"mode": mode, "env": env, "argv": argv, "cache_dir": cache[mode]})
    return steps


def _shell(step: dict) -> str:
    sets = [f"{k}={shlex.quote(v)}" for k, v in step["env"].items() if v is not None]
    unsets = [f"-u {k}" for k, v in step["env"].items() if v is None]
    return " ".join(["env", *unsets, *sets, shlex.join(step["argv"])])


def run_child(step: dict, work: Path, timeout: int) -> dict:
    env = dict(os.environ)
    for k, v in step["env"].items():
        if v is None:
            env.pop(k, None)
        elif k == "PYTHONPATH":
            env[k] = os.pathsep.join(filter(None, [v, os.environ.get(k, "")]))
        else:
            env[k] = v
    try:
        proc = subprocess.run(
            step["argv"], env=env, cwd=work, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as e:
        tail = (e.stderr or b"")[-3000:]
        raise RuntimeError(f"{step['mode']} child: no result within {timeout} s\n{tail}") from None
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{step['mode']} child exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1])


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


def _row_checks(mode: str, rec: dict, n: int) -> list[str]:
    """What is wrong with one child's record (empty when nothing)."""
    bad = [f"{name}: {rec['errors'][name]}" for name, good in rec["ok"].items() if not good]
    info, cut = rec["info"], rec["cutlass"]
    if mode == "prebuilt":
        if cut["attempts"] or cut["imported"]:
            bad.append(f"cutlass imported or attempted: {cut['attempts']}")
        if info["prebuilt_hits"] != n:
            bad.append(f"prebuilt hits {info['prebuilt_hits']} of {n} classes")
    elif mode == "jit disk cache" and (info["disk_hits"] != n or info["compiles"] or info["prebuilt_hits"]):
        bad.append(f"expected {n} disk hits and nothing else, got {info}")
    return bad


def table(records: dict[str, list[dict]], n: int, repeats: int, meta: dict) -> str:
    lines = [
        (
            f"Cold start, fresh processes: GPU {meta['gpu']}; torch {meta['torch']} (CUDA {meta['torch_cuda']}), "
            f"nvidia-cutlass-dsl {meta['dsl']}, apache-tvm-ffi {meta['tvm_ffi']}; {meta['date']}"
        ),
        "",
        f"Classes ({n}; the first one timed with the import): {', '.join(meta['classes'])}",
        "",
        (
            f"| mode | import + first call (s, median of {repeats}) | further class first call (ms, median "
            "over classes and repeats) | classes | cutlass imported? | import ragged_attn alone (s) | kernels from |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for mode in (*MODES, WARM):
        recs = records.get(mode, [])
        if not recs:
            continue
        further = [t * 1e3 for r in recs for t in r["further_s"].values()]
        imported = sorted(
            {"yes" if (r["cutlass"]["imported"] or r["cutlass"]["attempts"]) else "no" for r in recs}
        )
        info = recs[0]["info"]
        label = mode if mode != WARM else f"jit compile (empty cache; the warm-up, {len(recs)} run)"
        lines.append(
            f"| {label} | {_median([r['first_s'] for r in recs]):.3f} | {_median(further):.2f} | {n} | "
            f"{'/'.join(imported)} | {_median([r['import_s'] for r in recs]):.3f} | "
            f"prebuilt {info['prebuilt_hits']}, disk {info['disk_hits']}, compiled {info['compiles']} |"
        )
    lines += [
        "",
        "Per class, first call (ms, median over repeats; the first class: import + first call):",
        "",
    ]
    shown = [m for m in (*MODES, WARM) if records.get(m)]
    lines += ["| class | " + " | ".join(shown) + " |", "|---|" + "---|" * len(shown)]
    for i, name in enumerate(meta["classes"]):
        cells = []
        for mode in shown:
            recs = records[mode]
            xs = [r["first_s"] if i == 0 else r["further_s"][name] for r in recs]
            cells.append(f"{_median(xs) * 1e3:.1f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    pre = records.get("prebuilt", [])
    if pre:
        first = _median([r["first_s"] for r in pre])
        further = _median([t * 1e3 for r in pre for t in r["further_s"].values()])
        lines += [
            "",
            (
                f"Goal (prebuilt): import + first call < {GOAL_FIRST_S} s: "
                f"{'met' if first < GOAL_FIRST_S else 'NOT met'} ({first:.3f} s); further class < "
                f"{GOAL_FURTHER_MS} ms: {'met' if further < GOAL_FURTHER_MS else 'NOT met'} ({further:.2f} ms)"
            ),
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--aot-dir", help="a prebuilt directory (python -m ragged_attn aot build --out DIR ...)")
    p.add_argument(
        "--classes", default=str(DEFAULT_CLASSES), help="class names, one a line (default: %(default)s)"
    )
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per mode (default: %(default)s)")
    p.add_argument("--out", help="also write the markdown table here (and every child's record to OUT.json)")
    p.add_argument(
        "--dry-run", action="store_true", help="print the plan (classes, modes, commands); no CUDA"
    )
    p.add_argument("--child", choices=(WARM, *MODES), help=argparse.SUPPRESS)
    p.add_argument("--fields", help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    if a.child:
        print(json.dumps(child(a.child, json.loads(a.fields))))
        return 0
    if not a.aot_dir:
        p.error("--aot-dir is required (build one with python -m ragged_attn aot build --out DIR ...)")
    if a.repeats < 1:
        p.error("--repeats must be at least 1")
    sys.path.insert(0, str(ROOT))
    from ragged_attn import aot, prebuilt

    try:
        classes = aot.resolve_classes(a.classes)
    except (OSError, ValueError, TypeError) as e:
        print(f"cold_start_aot: --classes {a.classes}: {e}", file=sys.stderr)
        return 2
    if not classes:
        print(f"cold_start_aot: --classes {a.classes} lists no class", file=sys.stderr)
        return 2
    aot_dir = Path(a.aot_dir).resolve()
    entries, reason = prebuilt.read_manifest(aot_dir)
    missing = [lc.name for lc in classes if lc not in entries]

    if a.dry_run:
        steps = plan(aot_dir, classes, Path(tempfile.gettempdir()) / "cold_start_aot-XXXX")
        print(
            f"cold_start_aot plan: {len(classes)} classes from {a.classes}, {a.repeats} fresh processes per mode"
        )
        for lc in classes:
            print(f"  class {lc.name}")
        print(
            f"prebuilt directory {aot_dir}: "
            + (
                f"serves all {len(classes)}"
                if not missing
                else f"does not serve {len(missing)} ({reason or 'not listed'})"
            )
        )
        print("modes (the timed ones interleaved, repeat by repeat):")
        for step in steps:
            what = (
                "warm-up, once (compiles every class into the JIT cache)" if step["mode"] == WARM else "timed"
            )
            print(f"  mode {step['mode']} [{what}]:\n    {_shell(step)}")
        print(
            f"versions: torch {_dist('torch')}, nvidia-cutlass-dsl {_dist('nvidia-cutlass-dsl')}, "
            f"apache-tvm-ffi {_dist('apache-tvm-ffi')}"
        )
        return 0

    import torch

    if not torch.cuda.is_available():
        print(
            "cold_start_aot: no CUDA device (torch.cuda.is_available() is False); this measurement needs "
            "the H200. Use --dry-run to see the plan.",
            file=sys.stderr,
        )
        return 2
    if missing:
        print(
            f"cold_start_aot: {aot_dir} does not serve {len(missing)} of the classes "
            f"({reason or 'not in its manifest'}): {', '.join(missing)}",
            file=sys.stderr,
        )
        return 2
    if _dist("nvidia-cutlass-dsl") == "not installed":
        print(
            "cold_start_aot: the JIT comparison needs the CuTe DSL (pip install 'ragged-attn[cute]')",
            file=sys.stderr,
        )
        return 2

    t_start = time.perf_counter()
    records: dict[str, list[dict]] = {}
    problems: list[str] = []
    n = len(classes)
    with tempfile.TemporaryDirectory(prefix="cold_start_aot-") as tmp:
        work = Path(tmp)
        steps = {s["mode"]: s for s in plan(aot_dir, classes, work)}
        try:
            print(f"warm-up: compiling {n} classes into {steps[WARM]['cache_dir']} ...", file=sys.stderr)
            warm = run_child(steps[WARM], work, WARM_TIMEOUT_S)
            records[WARM] = [warm]
            problems += [f"warm-up: {b}" for b in _row_checks(WARM, warm, n)]
            for r in range(a.repeats):
                for mode in MODES:
                    rec = run_child(steps[mode], work, CHILD_TIMEOUT_S)
                    records.setdefault(mode, []).append(rec)
                    problems += [f"{mode} run {r + 1}: {b}" for b in _row_checks(mode, rec, n)]
                    print(f"{mode} run {r + 1}: import + first call {rec['first_s']:.3f} s", file=sys.stderr)
        except RuntimeError as e:
            print(f"cold_start_aot: {e}", file=sys.stderr)
            return 1
        if steps["prebuilt"]["cache_dir"].exists():
            problems.append("prebuilt children created the JIT cache directory")
    first = records["prebuilt"][0]
    meta = {
        "gpu": first["gpu"],
        "torch": torch.__version__,
        "torch_cuda": first["torch_cuda"],
        "dsl": _dist("nvidia-cutlass-dsl"),
        "tvm_ffi": _dist("apache-tvm-ffi"),
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "classes": [lc.name for lc in classes],
    }
    text = table(records, n, a.repeats, meta)
    text += f"\nChecks: {'all passed' if not problems else 'FAILED: ' + '; '.join(problems)} "
    text += f"(total {time.perf_counter() - t_start:.0f} s)\n"
    print(text, end="")
    if a.out:
        Path(a.out).write_text(text)
        Path(a.out + ".json").write_text(json.dumps({"meta": meta, "records": records}, indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
