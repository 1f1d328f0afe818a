"""Linking one exported object into a DSL-free shared library, and finding what the link needs.

`link_library` links the relocatable object of a class (the DSL's `export_to_c`, exporting
`__tvm_ffi_<function name>`) with the system C compiler (`$CC`, else cc, gcc or clang) into
`<class.name>.so`:
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
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .errors import AotBuildError

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


# ---- link ----------------------------------------------------------------------------------------


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
