"""`python -m ragged_attn aot build`: compile layout classes ahead of time into DSL-free libraries.

Each class is compiled for its arch (sm_90a; no GPU needed), exported with the DSL's
`export_to_c` (a relocatable object exporting `__tvm_ffi_<function name>`), and linked by the
system C compiler (`$CC`, else `cc`) into `<class.name>.so`:
    the object + the DSL's libcuda_dialect_runtime_static.a (the CUDA-dialect host helpers)
    + a 10-line C shim for the one libcute_dsl_runtime.so helper the objects call
      (CuteDSLRT_TVMFFISetRaisedCudaError: a CUDA error as a TVM-FFI RuntimeError)
    + the CUDA runtime: libcudart_static.a of nvidia-cuda-runtime-cu12 (`--cudart static`, the
      default) or a DT_NEEDED libcudart.so.12 (`--cudart shared`)
    + libtvm_ffi.so (DT_NEEDED; loaded already by `import tvm_ffi`).
Only `__tvm_ffi_*` symbols are exported (a version script; -Bsymbolic), every symbol must resolve
at link time (-z defs), so a DSL release calling another runtime helper fails the build, not a
serving process. Loading the result needs apache-tvm-ffi only; running it, the CUDA driver.

Then `manifest.json` is written last (atomically): format, ragged_attn version, the kernel-source
digest (`cache_store.kernel_source_digest`, as the compile cache computes it), the DSL and TVM-FFI
versions, arch, machine, cudart mode and per class its library, function name, size and sha256.
prebuilt.py reads it at run time and refuses what does not match.

Class sets (`--classes`): `serving` (`serving_classes()`: fp16/bf16 x every head-dim class x
mask none/causal x LSE on/off x ragged/paged, 96 classes), `all` (adds the window family, 144),
or a FILE: one class name per line (`LayoutClass.name`, `#` comments), or a JSON list of names or
of LayoutClass field dicts.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import itertools
import json
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from .layout_class import ARCHES, DTYPES, HEAD_DIM_CLASSES, KV_KINDS, MASK_FAMILIES, LayoutClass
from .prebuilt import MANIFEST_FORMAT, MANIFEST_NAME, MANIFEST_VERSION, expected_env

CUDART_MODES = ("static", "shared")

# The one libcute_dsl_runtime.so helper the exported objects call (nvidia-cutlass-dsl 4.8.1,
# CuteDSLRuntime.h): it turns a CUDA error code into a raised TVM-FFI error.
_SHIM_C = r"""
#include <stdint.h>
#include <stdio.h>
const char *cudaGetErrorName(int);
const char *cudaGetErrorString(int);
typedef void (*SetRaisedFn)(const char *kind, const char **parts, int32_t num_parts);
void CuteDSLRT_TVMFFISetRaisedCudaError(SetRaisedFn set_error, int32_t code) {
  char num[16];
  snprintf(num, sizeof num, "%d", (int)code);
  const char *parts[] = {"CUDA error ", num, " (", cudaGetErrorName(code), "): ", cudaGetErrorString(code)};
  set_error("RuntimeError", parts, 6);
}
"""
_VERSION_SCRIPT = "{ global: __tvm_ffi_*; local: *; };\n"


class AotBuildError(RuntimeError):
    """A class could not be built (no compiler, a missing library, a failed compile or link)."""


# ---- class sets ----------------------------------------------------------------------------------


def serving_classes(arch: str = "sm_90a") -> list[LayoutClass]:
    """The documented serving set: fp16 and bf16 (out dtype = input dtype), every head-dim class,
    masks none and causal, LSE on and off, ragged and paged KV (2 x 6 x 2 x 2 x 2 = 96 classes)."""
    return [
        LayoutClass(arch, dq, dv, dt, dt, mask, lse, kv)
        for dt, (dq, dv), mask, lse, kv in itertools.product(
            DTYPES, HEAD_DIM_CLASSES, ("none", "causal"), (False, True), KV_KINDS
        )
    ]


def all_classes(arch: str = "sm_90a") -> list[LayoutClass]:
    """Every class the kernels serve on `arch`: the serving set and the window family (144)."""
    return [
        LayoutClass(arch, dq, dv, dt, dt, mask, lse, kv)
        for dt, (dq, dv), mask, lse, kv in itertools.product(
            DTYPES, HEAD_DIM_CLASSES, MASK_FAMILIES, (False, True), KV_KINDS
        )
    ]


def parse_class_name(name: str) -> LayoutClass:
    """The LayoutClass of a `LayoutClass.name` such as `sm_90a-d128x128-bf16-bf16-causal-lse-ragged`.
    Raises ValueError naming the part that does not parse."""
    parts = name.strip().split("-")
    if len(parts) != 7:
        raise ValueError(
            f"layout class name {name!r}: expected 7 '-'-separated parts (e.g. {serving_classes()[0].name})"
        )
    arch, dims, dtype, out_dtype, mask, lse, kv = parts
    if not (dims.startswith("d") and "x" in dims):
        raise ValueError(f"layout class name {name!r}: head dims {dims!r} are not 'd<d_qk>x<d_v>'")
    try:
        d_qk, d_v = (int(x) for x in dims[1:].split("x"))
    except ValueError:
        raise ValueError(f"layout class name {name!r}: head dims {dims!r} are not 'd<d_qk>x<d_v>'") from None
    if lse not in ("lse", "nolse"):
        raise ValueError(f"layout class name {name!r}: {lse!r} is neither 'lse' nor 'nolse'")
    return LayoutClass(arch, d_qk, d_v, dtype, out_dtype, mask, lse == "lse", kv)


def classes_from_file(path: str | os.PathLike) -> list[LayoutClass]:
    """Classes listed in a file: one name per line (`#` starts a comment), or a JSON list whose
    items are names or LayoutClass field dicts. Raises OSError, ValueError/TypeError (naming the
    line or item) for a bad file."""
    text = Path(path).read_text()
    if text.lstrip().startswith("["):
        items = json.loads(text)
        out = []
        for i, item in enumerate(items):
            if isinstance(item, str):
                out.append(parse_class_name(item))
            elif isinstance(item, dict):
                out.append(LayoutClass(**item))
            else:
                raise TypeError(f"{path}: item {i} is neither a class name nor a dict: {item!r}")
        return out
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line:
            try:
                out.append(parse_class_name(line))
            except ValueError as e:
                raise ValueError(f"{path}:{lineno}: {e}") from None
    return out


def resolve_classes(spec: str, arch: str = "sm_90a") -> list[LayoutClass]:
    """`serving`, `all`, or a file (see `classes_from_file`); duplicates dropped, order kept."""
    if arch not in ARCHES:
        raise ValueError(f"arch: expected one of {ARCHES}, got {arch!r}")
    if spec == "serving":
        classes = serving_classes(arch)
    elif spec == "all":
        classes = all_classes(arch)
    else:
        classes = classes_from_file(spec)
    return list(dict.fromkeys(classes))


def function_name(layout_class: LayoutClass) -> str:
    """The TVM-FFI function a class's library exports (the compile cache's name for it too)."""
    return "ragged_attn_" + "".join(c if c.isalnum() else "_" for c in layout_class.name)


# ---- toolchain -----------------------------------------------------------------------------------


def _dist_file(dist: str, name: str) -> Path | None:
    try:
        files = importlib.metadata.distribution(dist).files or ()
        found = next((f for f in files if f.name == name), None)
        return Path(importlib.metadata.distribution(dist).locate_file(found)) if found else None
    except importlib.metadata.PackageNotFoundError:
        return None


def toolchain(cudart: str = "static") -> dict:
    """Paths and tools a link needs: cc, dialect_runtime (.a), cudart (static .a or the .so.12),
    tvm_ffi_lib (libtvm_ffi.so) and their package versions. Raises AotBuildError naming what is
    missing and the package that carries it."""
    if cudart not in CUDART_MODES:
        raise AotBuildError(f"--cudart: expected one of {CUDART_MODES}, got {cudart!r}")
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        raise AotBuildError(
            f"no C compiler ({os.environ.get('CC', 'cc')!r} is not on PATH; set CC or install gcc)"
        )
    dialect = None
    for dist in ("nvidia-cutlass-dsl-libs-cu12", "nvidia-cutlass-dsl"):
        dialect = dialect or _dist_file(dist, "libcuda_dialect_runtime_static.a")
    if dialect is None:
        raise AotBuildError(
            "libcuda_dialect_runtime_static.a not found: install the cute extra (nvidia-cutlass-dsl)"
        )
    cudart_file = _dist_file(
        "nvidia-cuda-runtime-cu12", "libcudart_static.a" if cudart == "static" else "libcudart.so.12"
    )
    if cudart_file is None:
        raise AotBuildError("the CUDA 12 runtime library is not found: pip install nvidia-cuda-runtime-cu12")
    import tvm_ffi.libinfo

    return {
        "cc": cc,
        "dialect_runtime": str(dialect),
        "cudart_file": str(cudart_file),
        "cudart_version": importlib.metadata.version("nvidia-cuda-runtime-cu12"),
        "tvm_ffi_lib": tvm_ffi.libinfo.find_libtvm_ffi(),
    }


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise AotBuildError(f"{what} failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-4000:]}")


def link_library(obj: Path, out: Path, tools: dict, cudart: str, work: Path) -> None:
    """Link the exported object `obj` into the shared library `out` (see the module docstring).
    Raises AotBuildError with the linker's message."""
    shim_o = work / "cute_dsl_rt_shim.o"
    if not shim_o.exists():
        shim_c = work / "cute_dsl_rt_shim.c"
        shim_c.write_text(_SHIM_C)
        _run(
            [tools["cc"], "-c", "-fPIC", "-O2", str(shim_c), "-o", str(shim_o)], "compiling the runtime shim"
        )
    version_script = work / "exports.map"
    version_script.write_text(_VERSION_SCRIPT)
    # shared: DT_NEEDED libcudart.so.12 (its soname), which prebuilt.py preloads from the package.
    cudart_args = [tools["cudart_file"]]
    tvm_dir = str(Path(tools["tvm_ffi_lib"]).parent)
    _run(
        [
            tools["cc"], "-shared", "-o", str(out), str(obj), str(shim_o),
            "-Wl,--whole-archive", tools["dialect_runtime"], "-Wl,--no-whole-archive",
            *cudart_args, f"-L{tvm_dir}", "-ltvm_ffi", "-lpthread", "-ldl", "-lrt",
            "-Wl,-z,defs", "-Wl,--exclude-libs,ALL", f"-Wl,--version-script={version_script}", "-Wl,-Bsymbolic",
        ],
        f"linking {out.name}",
    )  # fmt: skip


# ---- build ---------------------------------------------------------------------------------------


def _build_one(job: tuple) -> dict:
    """Compile, export and link one class into `out_dir/<name>.so` (atomic). Runs in a worker."""
    lc, out_dir, tools, cudart = job
    from .kernels.sm90 import compile_forward

    out_dir = Path(out_dir)
    fn_name = function_name(lc)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=".aot-", dir=out_dir) as tmp:
        work = Path(tmp)
        obj = work / f"{lc.name}.o"
        compile_forward(lc).export_to_c(str(obj), fn_name)
        t1 = time.perf_counter()
        lib_tmp = work / f"{lc.name}.so"
        link_library(obj, lib_tmp, tools, cudart, work)
        os.chmod(lib_tmp, 0o644)
        data = lib_tmp.read_bytes()
        os.replace(lib_tmp, out_dir / f"{lc.name}.so")
    return {
        "layout_class": lc.as_dict(),
        "name": lc.name,
        "library": f"{lc.name}.so",
        "function_name": fn_name,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "cudart": cudart,
        "compile_seconds": round(t1 - t0, 2),
        "link_seconds": round(time.perf_counter() - t1, 2),
    }


def manifest_header(tools: dict, cudart: str, arch: str) -> dict:
    """The manifest fields besides `classes` (prebuilt.expected_env's fields among them)."""
    from . import __version__

    return {
        "format": MANIFEST_FORMAT,
        "format_version": MANIFEST_VERSION,
        "ragged_attn_version": __version__,
        **expected_env(),
        "installed_dsl_version": importlib.metadata.version("nvidia-cutlass-dsl"),
        "arch": arch,
        "system": platform.system(),
        "cudart": cudart,
        "cudart_version": tools["cudart_version"],
    }


def _kept_entries(out_dir: Path, header: dict, building: set[str]) -> list[dict]:
    """Entries of an existing manifest in `out_dir` built for the same header, not rebuilt now,
    whose library is still there: kept, so a directory can be built up in several runs."""
    try:
        old = json.loads((out_dir / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(old, dict) or any(old.get(k) != v for k, v in header.items()):
        return []
    return [
        e for e in old.get("classes", [])
        if isinstance(e, dict) and e.get("name") not in building and (out_dir / str(e.get("library"))).is_file()
    ]  # fmt: skip


def build(
    classes: list[LayoutClass],
    out_dir: str | os.PathLike,
    *,
    jobs: int = 1,
    cudart: str = "static",
    log=None,
) -> dict:
    """Build `classes` into `out_dir` (created if missing) and write its manifest; returns it.

    Needs the `cute` extra (the DSL compiles; no GPU), nvidia-cuda-runtime-cu12 and a C compiler.
    `jobs` worker processes compile in parallel (~4-8 s and ~1 GB each per class). Entries of an
    existing manifest with the same versions and digest are kept; `log(str)` gets one line per
    class. Raises AotBuildError (toolchain, compile or link), ValueError for classes of several
    arches; the manifest is not written when any class fails.
    """
    if not classes:
        raise ValueError("classes: nothing to build")
    arches = {lc.arch for lc in classes}
    if len(arches) != 1:
        raise ValueError(f"classes: one arch per directory, got {sorted(arches)}")
    arch = arches.pop()
    os.environ.setdefault("CUTE_DSL_ARCH", arch)  # the DSL reads it at import (workers inherit it)
    tools = toolchain(cudart)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    header = manifest_header(tools, cudart, arch)
    built: list[dict] = []
    job_list = [(lc, str(out), tools, cudart) for lc in classes]
    if jobs <= 1:
        results = map(_build_one, job_list)
        for entry in results:
            built.append(entry)
            if log:
                log(
                    f"{entry['name']}: compiled {entry['compile_seconds']:.1f} s, linked {entry['size'] >> 10} KiB"
                )
    else:
        # spawn: a forked child of a process that already runs the DSL's threads may hang.
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as ex:
            for entry in ex.map(_build_one, job_list):
                built.append(entry)
                if log:
                    log(
                        f"{entry['name']}: compiled {entry['compile_seconds']:.1f} s, linked {entry['size'] >> 10} KiB"
                    )
    kept = _kept_entries(out, header, {e["name"] for e in built})
    manifest = {**header, "created_unix": time.time(), "classes": kept + built}
    tmp = out / f".{MANIFEST_NAME}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    os.chmod(tmp, 0o644)
    os.replace(tmp, out / MANIFEST_NAME)
    return manifest


# ---- CLI -----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """`python -m ragged_attn aot build --out DIR [--classes serving|all|FILE] [--jobs N] [--cudart static|shared]`."""
    ap = argparse.ArgumentParser(prog="python -m ragged_attn aot", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="compile layout classes into DSL-free shared libraries + manifest.json")
    b.add_argument("--out", help="output directory (point RAGGED_ATTN_AOT_DIR at it); needed unless --list")
    b.add_argument(
        "--classes", default="serving", help="serving (96 classes), all (144) or a FILE of class names"
    )
    b.add_argument("--arch", default="sm_90a", choices=ARCHES)
    b.add_argument(
        "--jobs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)), help="parallel compiles"
    )
    b.add_argument(
        "--cudart",
        default="static",
        choices=CUDART_MODES,
        help="link the CUDA runtime in, or need libcudart.so.12",
    )
    b.add_argument("--list", action="store_true", help="print the classes and exit")
    a = ap.parse_args(argv)
    try:
        classes = resolve_classes(a.classes, a.arch)
    except (OSError, ValueError, TypeError) as e:
        print(f"python -m ragged_attn aot build: --classes {a.classes}: {e}", file=sys.stderr)
        return 2
    if a.list:
        for lc in classes:
            print(lc.name)
        return 0
    if a.out is None:
        print("python -m ragged_attn aot build: --out DIR is required (only --list runs without it)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        manifest = build(classes, a.out, jobs=a.jobs, cudart=a.cudart, log=lambda s: print(s, flush=True))
    except AotBuildError as e:
        print(f"python -m ragged_attn aot build: {e}", file=sys.stderr)
        return 1
    print(
        f"wrote {len(classes)} classes ({len(manifest['classes'])} in the manifest) to {a.out} in "
        f"{time.perf_counter() - t0:.0f} s; serve them with RAGGED_ATTN_AOT_DIR={os.path.abspath(a.out)}"
    )
    return 0
