"""`python -m ragged_attn aot build`: compile layout classes ahead of time into DSL-free libraries.

Each class is compiled for its arch (sm_90a; no GPU needed), exported with the DSL's
`export_to_c` (a relocatable object exporting `__tvm_ffi_<function name>`), and linked by the
system C compiler (`$CC`, else cc, gcc or clang) into `<class.name>.so`:
    the object + the DSL's libcuda_dialect_runtime_static.a (the CUDA-dialect host helpers)
    + a 10-line C shim for the one libcute_dsl_runtime.so helper the objects call
      (CuteDSLRT_TVMFFISetRaisedCudaError: a CUDA error as a TVM-FFI RuntimeError)
    + the CUDA runtime of the DSL flavor's major (cu12 or cu13: the one the DSL compiles with):
      libcudart_static.a (`--cudart static`, the default) or a DT_NEEDED libcudart.so.<major>
      (`--cudart shared`), from nvidia-cuda-runtime-cu12 / nvidia-cuda-runtime 13.x or a CUDA
      toolkit (`toolchain()` says where each file is looked for)
    + libtvm_ffi.so (DT_NEEDED; loaded already by `import tvm_ffi`).
Only `__tvm_ffi_*` symbols are exported (a version script, passed with -Xlinker so that an --out
path with commas links; -Bsymbolic), every symbol must resolve
at link time (-z defs), so a DSL release calling another runtime helper fails the build, not a
serving process. Loading the result needs apache-tvm-ffi only; running it, the CUDA driver (a CUDA
13 one, r580+, for a library linked with the CUDA 13 runtime).

Then `manifest.json` is written last (atomically, under the file lock `.manifest.json.lock` in the
directory, so that builds into one directory at once keep each other's classes): format,
ragged_attn version, the kernel-source digest (`cache_store.kernel_source_digest`, as the compile
cache computes it), the DSL and TVM-FFI versions, arch, machine, the DSL's compile-affecting
CUTE_DSL_* settings (`cache_store.dsl_compile_settings`), cudart mode and per class its library,
function name, size and sha256. prebuilt.py reads it at run time and refuses what does not match.

A build runs only under the DSL release the kernels require (`backends.cute_import_error`, the JIT
path's own check): the manifest records that release, so a build under another one would be
served as if it were right. The CLI exits 2 for bad input (--classes, --out, the DSL) and 1 for a
failed build or file system error, with one line naming the path.

Class sets (`--classes`): `serving` (`serving_classes()`: fp16/bf16 x every head-dim class x
mask none/causal x LSE on/off x ragged/paged, 96 classes), `scores` (`score_classes()`: issue 14's
softcap / sinks / both classes, ragged and paged, 432), `all` (every class served: the serving set,
the window family and the score classes, 576), or a FILE: one class name per line (`LayoutClass.name`,
`#` comments), or a JSON list of names or of LayoutClass field dicts.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import itertools
import json
import multiprocessing
import os
import platform
import re
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
    """A class could not be built (no compiler, a missing library, a failed compile or link, an
    output path that cannot be written)."""


class DslUnavailable(AotBuildError):
    """The installed CuTe DSL cannot build these kernels (missing, or not the required release)."""


MANIFEST_LOCK_NAME = f".{MANIFEST_NAME}.lock"
# Reading the kept entries and replacing the manifest takes milliseconds; a holder past this is stuck.
MANIFEST_LOCK_TIMEOUT_S = 120.0


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


def plain_classes(arch: str = "sm_90a") -> list[LayoutClass]:
    """The classes without softcap or sinks: the serving set and the window family (144)."""
    return [
        LayoutClass(arch, dq, dv, dt, dt, mask, lse, kv)
        for dt, (dq, dv), mask, lse, kv in itertools.product(
            DTYPES, HEAD_DIM_CLASSES, MASK_FAMILIES, (False, True), KV_KINDS
        )
    ]


# Issue 14's class flags, each combination the dispatch chooses (backends.layout_class_for).
SCORE_FLAGS = ({"softcap": True}, {"sinks": True}, {"softcap": True, "sinks": True})


def score_classes(arch: str = "sm_90a") -> list[LayoutClass]:
    """The softcap / sinks classes the kernels serve: softcap, sinks and both x fp16/bf16 x every
    head-dim class x every mask family x LSE on/off x ragged/paged K/V (the paged ones served
    since their GPU tests passed, 2026-12-03): 3 x 2 x 6 x 3 x 2 x 2 = 432 classes."""
    return [
        LayoutClass(arch, dq, dv, dt, dt, mask, lse, kv, **flags)
        for flags, dt, (dq, dv), mask, lse, kv in itertools.product(
            SCORE_FLAGS, DTYPES, HEAD_DIM_CLASSES, MASK_FAMILIES, (False, True), KV_KINDS
        )
    ]


def all_classes(arch: str = "sm_90a") -> list[LayoutClass]:
    """Every class the kernels serve on `arch`: the 144 plain classes, then the 432 softcap /
    sinks classes (576)."""
    return plain_classes(arch) + score_classes(arch)


def _positive_int(text: str) -> int:
    """argparse type of --jobs: an int >= 1 (0 and negatives were taken as 1 silently)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {value}")
    return value


def parse_class_name(name: str) -> LayoutClass:
    """The LayoutClass of a `LayoutClass.name` such as `sm_90a-d128x128-bf16-bf16-causal-lse-ragged`.
    Raises ValueError naming the part that does not parse."""
    parts = name.strip().split("-")
    flags = {}
    for flag in ("sinks", "softcap"):  # optional trailing parts, in `LayoutClass.name`'s order
        if len(parts) > 7 and parts[-1] == flag:
            flags[flag] = True
            parts.pop()
    if len(parts) != 7:
        raise ValueError(
            f"layout class name {name!r}: expected 7 '-'-separated parts, then optionally '-softcap' and "
            f"'-sinks' in that order (e.g. {serving_classes()[0].name}, {serving_classes()[0].name}-softcap-sinks)"
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
    return LayoutClass(arch, d_qk, d_v, dtype, out_dtype, mask, lse == "lse", kv, **flags)


def classes_from_file(path: str | os.PathLike) -> list[LayoutClass]:
    """Classes listed in a file: one name per line (`#` starts a comment), or a JSON list whose
    items are names or LayoutClass field dicts. Raises OSError, ValueError/TypeError (naming the
    line or item) for a bad file."""
    text = Path(path).read_text()
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except RecursionError:
            raise ValueError(f"{path}: JSON nested too deep to parse") from None
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
    """`serving`, `scores`, `all`, or a file (see `classes_from_file`); duplicates dropped, order kept."""
    if arch not in ARCHES:
        raise ValueError(f"arch: expected one of {ARCHES}, got {arch!r}")
    if spec == "serving":
        classes = serving_classes(arch)
    elif spec == "scores":
        classes = score_classes(arch)
    elif spec == "all":
        classes = all_classes(arch)
    else:
        classes = classes_from_file(spec)
    return list(dict.fromkeys(classes))


def function_name(layout_class: LayoutClass) -> str:
    """The TVM-FFI function a class's library exports (the compile cache's name for it too)."""
    from .prebuilt import function_name as prebuilt_function_name

    return prebuilt_function_name(layout_class)


# ---- toolchain -----------------------------------------------------------------------------------
#
# Two layouts are served, found the same way the DSL finds its own runtime (relative to the
# package the import system resolves), with installed distributions' RECORDs as a second source:
#   pip install:  site-packages/nvidia_cutlass_dsl/cu{12,13}/lib/libcuda_dialect_runtime_static.a
#                 (nvidia-cutlass-dsl-libs-cu12 or -cu13), cutlass under
#                 nvidia_cutlass_dsl/dsl_packages (put on sys.path by nvidia_cutlass_dsl_packages.pth)
#   unpacked:     `pip install --target DIR` + PYTHONPATH=DIR/nvidia_cutlass_dsl/dsl_packages:DIR
#                 (the .pth is not run; the dist-info may or may not be on the path)
# The DSL ships one flavor per CUDA major (`_cutlass_ir.cu{N}...so` + `cu{N}/lib/`) and picks the
# newest one the driver supports (the newest without a driver); cu{N}'s dialect runtime is built
# against CUDA N, so the CUDA runtime linked in is of that major: nvidia-cuda-runtime-cu12
# (nvidia/cuda_runtime/lib) for 12, nvidia-cuda-runtime 13.x (nvidia/cu13/lib) for 13, else a CUDA
# toolkit of that major ($CUDA_HOME, $CUDA_PATH, the one of nvcc on PATH, /usr/local/cuda).

DIALECT_RUNTIME = "libcuda_dialect_runtime_static.a"
_CUTLASS_IR_FLAVOR = re.compile(r"^_cutlass_ir\.cu(\d+)\..*\.so$")


def _dist_file(dist: str, name: str) -> Path | None:
    """`name` among the files of installed distribution `dist` (its RECORD), or None."""
    try:
        d = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    found = next((f for f in d.files or () if f.name == name), None)
    return Path(d.locate_file(found)) if found is not None else None


def _dist_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _spec_locations(module: str) -> list[Path]:
    """Where the import system would find top-level `module` (its package directories, or the
    directory of a plain module), without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(p) for p in spec.submodule_search_locations]
    return [Path(spec.origin).parent] if spec.origin else []


def _cutlass_dir() -> Path | None:
    """The `cutlass` package directory the import system resolves (not imported)."""
    locations = _spec_locations("cutlass")
    return locations[0] if locations else None


def _dsl_roots() -> list[Path]:
    """The `nvidia_cutlass_dsl` directories: the ancestor of the importable `cutlass` package
    (`nvidia_cutlass_dsl/dsl_packages/cutlass`), then the `nvidia_cutlass_dsl` package's
    locations. Order kept, duplicates dropped; nothing imported."""
    roots = []
    cutlass_dir = _cutlass_dir()
    if cutlass_dir is not None:
        roots += [p for p in cutlass_dir.parents if p.name == "nvidia_cutlass_dsl"][:1]
    roots += _spec_locations("nvidia_cutlass_dsl")
    return list(dict.fromkeys(p.resolve() for p in roots if p.is_dir()))


def _driver_cuda_major() -> int | None:
    """The CUDA major the installed driver supports (cuDriverGetVersion; no cuInit), or None."""
    try:
        import ctypes

        version = ctypes.c_int(0)
        if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version)) == 0:
            return version.value // 1000
    except (OSError, AttributeError):
        pass
    return None


def dsl_cuda_major() -> int | None:
    """The CUDA major of the DSL flavor a compile here uses: the loaded `_cutlass_ir` module's when
    the DSL is imported, else the DSL's own choice among the `_cutlass_ir.cu{N}` files of the
    importable `cutlass` package (the newest the driver supports; the newest without a driver).
    None when no flavor is found."""
    loaded = sys.modules.get("cutlass._mlir._mlir_libs._cutlass_ir")
    match = _CUTLASS_IR_FLAVOR.match(Path(getattr(loaded, "__file__", None) or "").name)
    if match:
        return int(match.group(1))
    cutlass_dir = _cutlass_dir()
    try:
        names = [p.name for p in (cutlass_dir / "_mlir" / "_mlir_libs").iterdir()] if cutlass_dir else []
    except OSError:
        names = []
    available = sorted({int(m.group(1)) for n in names if (m := _CUTLASS_IR_FLAVOR.match(n))}, reverse=True)
    if not available:
        return None
    driver = _driver_cuda_major()
    compatible = [n for n in available if driver is None or n <= driver]
    return (compatible or available)[0]


def _major_of_dir(path: Path) -> int | None:
    """12 for `.../cu12/lib/<file>`, None for a directory not named by flavor."""
    name = path.parent.parent.name
    return int(name[2:]) if name.startswith("cu") and name[2:].isdigit() else None


def find_dialect_runtime(major: int | None = None) -> tuple[Path, int | None] | None:
    """libcuda_dialect_runtime_static.a of the DSL flavor of CUDA `major` (default
    `dsl_cuda_major()`) and the major it belongs to (None: a directory not named by flavor), or
    None. Looked for next to `CUTE_DSL_LIBS`'s libraries (the DSL's own override), in the
    `nvidia_cutlass_dsl` directories the import system resolves (`cu{N}/lib/`, then `lib/`), then in
    the RECORD of the installed nvidia-cutlass-dsl-libs-cu{N}. Without a major, the newest flavor
    found wins."""
    if major is None:
        major = dsl_cuda_major()
    candidates: list[tuple[int | None, Path]] = []
    for entry in filter(None, os.environ.get("CUTE_DSL_LIBS", "").split(os.pathsep)):
        lib_dir = Path(entry) if Path(entry).is_dir() else Path(entry).parent
        candidates.append((_major_of_dir(lib_dir / DIALECT_RUNTIME), lib_dir / DIALECT_RUNTIME))
    roots = _dsl_roots()
    flavors = [major] if major is not None else [12, 13]
    for root in roots:
        if major is None:
            flavors += sorted(int(p.name[2:]) for p in root.glob("cu*") if p.name[2:].isdigit())
        for n in dict.fromkeys(flavors):
            candidates.append((n, root / f"cu{n}" / "lib" / DIALECT_RUNTIME))
        candidates.append((None, root / "lib" / DIALECT_RUNTIME))
    for n in dict.fromkeys(flavors):
        path = _dist_file(f"nvidia-cutlass-dsl-libs-cu{n}", DIALECT_RUNTIME)
        if path is not None:
            candidates.append((n, path))
    found = [(n, p) for n, p in candidates if p.is_file() and (major is None or n in (None, major))]
    if not found:
        return None
    if major is None:  # the newest flavor found (stable: the first of that flavor)
        found.sort(key=lambda c: -(c[0] or 0))
    n, path = found[0]
    return path, (n if n is not None else major)


def _header_cudart_version(include_dir: Path) -> str | None:
    """'13.0' from `include_dir/cuda_runtime_api.h`'s CUDART_VERSION, or None."""
    try:
        text = (include_dir / "cuda_runtime_api.h").read_text(errors="replace")
    except OSError:
        return None
    m = re.search(r"^#define\s+CUDART_VERSION\s+(\d+)", text, re.MULTILINE)
    return f"{int(m.group(1)) // 1000}.{int(m.group(1)) % 1000 // 10}" if m else None


def _toolkit_roots() -> list[Path]:
    """CUDA toolkit directories: $CUDA_HOME, $CUDA_PATH, the one of `nvcc` on PATH, /usr/local/cuda."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    roots.append("/usr/local/cuda")
    return list(dict.fromkeys(Path(r).resolve() for r in roots if r and Path(r).is_dir()))


def find_cudart(major: int, cudart: str = "static") -> tuple[Path, str] | None:
    """The CUDA `major` runtime to link (`static`: libcudart_static.a, `shared`: libcudart.so.<major>)
    and its version, or None. Looked for in the RECORD of nvidia-cuda-runtime-cu<major> and of
    nvidia-cuda-runtime <major>.x (CUDA 13 wheels dropped the suffix), in the `nvidia` package
    directories the import system resolves (cu<major>/lib for 13+, cuda_runtime/lib for 12), then
    in a CUDA toolkit (lib64, lib, targets/<arch>-linux/lib) whose runtime is of that major."""
    name = "libcudart_static.a" if cudart == "static" else f"libcudart.so.{major}"
    soname = f"libcudart.so.{major}"
    for dist in (f"nvidia-cuda-runtime-cu{major}", "nvidia-cuda-runtime"):
        version = _dist_version(dist)
        if version is None or version.split(".")[0] != str(major):
            continue
        path = _dist_file(dist, name)
        if path is not None and path.is_file():
            return path, version
    for location in _spec_locations("nvidia"):
        for sub in (f"cu{major}", "cuda_runtime"):
            lib_dir = location / sub / "lib"
            if (lib_dir / name).is_file() and (lib_dir / soname).exists():
                return lib_dir / name, _header_cudart_version(lib_dir.parent / "include") or str(major)
    arch_dir = f"{'sbsa' if platform.machine() == 'aarch64' else platform.machine()}-linux"
    for root in _toolkit_roots():
        for lib_dir in (root / "lib64", root / "lib", root / "targets" / arch_dir / "lib"):
            version = _header_cudart_version(lib_dir.parent / "include")
            if (lib_dir / name).is_file() and (
                (lib_dir / soname).exists() or (version or "").split(".")[0] == str(major)
            ):
                return lib_dir / name, version or str(major)
    return None


def _find_cc() -> str | None:
    """`$CC` when set (only it), else the first of cc, gcc, clang on PATH."""
    if os.environ.get("CC"):
        return shutil.which(os.environ["CC"])
    return next(filter(None, map(shutil.which, ("cc", "gcc", "clang"))), None)


def toolchain(cudart: str = "static") -> dict:
    """Paths and tools a link needs: cc, dialect_runtime (.a), cudart_file (static .a or the
    .so.<major>), cuda_major (the DSL flavor's, which the CUDA runtime matches), tvm_ffi_lib
    (libtvm_ffi.so) and cudart_version. Raises AotBuildError naming what is missing and the
    package that carries it."""
    if cudart not in CUDART_MODES:
        raise AotBuildError(f"--cudart: expected one of {CUDART_MODES}, got {cudart!r}")
    cc = _find_cc()
    if cc is None:
        raise AotBuildError(
            f"no C compiler ({os.environ['CC']!r} is not on PATH; set CC or install gcc)"
            if os.environ.get("CC")
            else "no C compiler (none of cc, gcc, clang is on PATH; set CC or install gcc)"
        )
    dialect = find_dialect_runtime()
    if dialect is None:
        major = dsl_cuda_major()
        roots = ", ".join(map(str, _dsl_roots())) or "no nvidia_cutlass_dsl directory importable"
        raise AotBuildError(
            f"{DIALECT_RUNTIME} not found "
            f"({f'for the DSL flavor cu{major}; ' if major else ''}looked in {roots}): "
            "install the cute extra (nvidia-cutlass-dsl)"
        )
    dialect_path, major = dialect
    major = major or 12
    found = find_cudart(major, cudart)
    if found is None:
        package = "nvidia-cuda-runtime-cu12" if major == 12 else f"nvidia-cuda-runtime=={major}.*"
        raise AotBuildError(
            f"the CUDA {major} runtime library (for the DSL's cu{major} flavor) is not found: "
            f"pip install {package}, or set CUDA_HOME to a CUDA {major} toolkit"
        )
    cudart_file, cudart_version = found
    import tvm_ffi.libinfo

    return {
        "cc": cc,
        "dialect_runtime": str(dialect_path),
        "cuda_major": major,
        "cudart_file": str(cudart_file),
        "cudart_version": cudart_version,
        "tvm_ffi_lib": tvm_ffi.libinfo.find_libtvm_ffi(),
    }


def installed_dsl_version() -> str:
    """The installed nvidia-cutlass-dsl release (its metadata, else a libs package's), or 'unknown'."""
    for dist in ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-core"):
        version = _dist_version(dist)
        if version is not None:
            return version
    return "unknown"


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
    # shared: DT_NEEDED libcudart.so.<major> (its soname); prebuilt.py preloads libcudart.so.12 from
    # nvidia-cuda-runtime-cu12; a .so.13 is left to the dynamic loader (or the one torch loaded).
    cudart_args = [tools["cudart_file"]]
    tvm_dir = str(Path(tools["tvm_ffi_lib"]).parent)
    _run(
        [
            tools["cc"], "-shared", "-o", str(out), str(obj), str(shim_o),
            "-Wl,--whole-archive", tools["dialect_runtime"], "-Wl,--no-whole-archive",
            *cudart_args, f"-L{tvm_dir}", "-ltvm_ffi", "-lpthread", "-ldl", "-lrt",
            "-Wl,-z,defs", "-Wl,--exclude-libs,ALL", "-Wl,-Bsymbolic",
            # -Xlinker passes the path whole: -Wl, would split it at commas.
            "-Xlinker", f"--version-script={version_script}",
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
        from .cache_store import DSL_LOCK

        with DSL_LOCK:  # one DSL compile at a time in this process (build() with jobs=1 runs here)
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
        "installed_dsl_version": installed_dsl_version(),
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


def dsl_unavailable() -> str | None:
    """Why the installed CuTe DSL cannot build the kernels (`backends.cute_import_error`: not
    installed, another release than `REQUIRED_DSL_VERSION`, the kernels fail to import), or None."""
    from . import backends

    return backends.cute_import_error()


def check_out_dir(out: Path, classes: list[LayoutClass]) -> None:
    """Before any compile: every path the build will replace (`manifest.json`, each `<class>.so`)
    is missing or a file, and `out` takes a new file. Raises AotBuildError naming the path."""
    for path in [out / MANIFEST_NAME, *(out / f"{lc.name}.so" for lc in classes)]:
        if path.is_dir() and not path.is_symlink():
            raise AotBuildError(f"{path} is a directory, not a file: remove it or choose another --out")
    try:
        fd, probe = tempfile.mkstemp(prefix=".aot-probe-", dir=out)
    except OSError as e:
        raise AotBuildError(
            f"--out {out} takes no new file ({type(e).__name__}: {e.strerror or e})"
        ) from None
    os.close(fd)
    os.unlink(probe)


def write_manifest(out: Path, header: dict, built: list[dict]) -> dict:
    """Under the directory's manifest lock: keep the entries of the manifest there (same header, not
    rebuilt now, library present), add `built`, replace the manifest atomically. Returns it.
    Raises AotBuildError when the lock is held past MANIFEST_LOCK_TIMEOUT_S, OSError from the file
    system; leaves no temp file."""
    import filelock

    lock = filelock.FileLock(str(out / MANIFEST_LOCK_NAME), timeout=MANIFEST_LOCK_TIMEOUT_S, mode=0o644)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise AotBuildError(
            f"{out / MANIFEST_LOCK_NAME} still held after {MANIFEST_LOCK_TIMEOUT_S:g} s "
            "(another aot build writing this directory's manifest?); the manifest is not written"
        ) from None
    try:
        kept = _kept_entries(out, header, {e["name"] for e in built})
        manifest = {**header, "created_unix": time.time(), "classes": kept + built}
        tmp = out / f".{MANIFEST_NAME}.{os.getpid()}.tmp"
        try:
            tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
            os.chmod(tmp, 0o644)
            os.replace(tmp, out / MANIFEST_NAME)
        finally:
            tmp.unlink(missing_ok=True)
        return manifest
    finally:
        lock.release()


def build(
    classes: list[LayoutClass],
    out_dir: str | os.PathLike,
    *,
    jobs: int = 1,
    cudart: str = "static",
    log=None,
) -> dict:
    """Build `classes` into `out_dir` (created if missing) and write its manifest; returns it.

    Needs the `cute` extra at the release the kernels require (the DSL compiles; no GPU), the CUDA
    runtime of the DSL flavor's major (nvidia-cuda-runtime-cu12 for cu12, nvidia-cuda-runtime 13.x
    or a CUDA 13 toolkit for cu13) and a C compiler.
    `jobs` worker processes compile in parallel (~4-8 s and ~1 GB each per class). Entries of an
    existing manifest with the same versions, digest and settings are kept; `log(str)` gets one
    line per class. Raises DslUnavailable (another DSL release, none, or kernels that fail to
    import), AotBuildError (toolchain, compile, link, a directory where an output file belongs,
    an `out_dir` that takes no file), OSError (other file system errors), ValueError for classes
    of several arches; the manifest is not written when any class fails, and no temp file stays.
    """
    if not classes:
        raise ValueError("classes: nothing to build")
    arches = {lc.arch for lc in classes}
    if len(arches) != 1:
        raise ValueError(f"classes: one arch per directory, got {sorted(arches)}")
    arch = arches.pop()
    os.environ.setdefault("CUTE_DSL_ARCH", arch)  # the DSL reads it at import (workers inherit it)
    reason = dsl_unavailable()
    if reason is not None:
        raise DslUnavailable(reason)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    check_out_dir(out, classes)
    tools = toolchain(cudart)
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
    return write_manifest(out, header, built)


# ---- CLI -----------------------------------------------------------------------------------------


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
        f"wrote {len(classes)} classes ({len(manifest['classes'])} in the manifest) to {a.out} in "
        f"{time.perf_counter() - t0:.0f} s; serve them with RAGGED_ATTN_AOT_DIR={os.path.abspath(a.out)}"
    )
    return 0
