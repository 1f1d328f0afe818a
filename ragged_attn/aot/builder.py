"""Building layout classes into a prebuilt directory: compile, export and link each class
(`link.link_library`), in worker processes, then write the directory's manifest.

Each class is compiled for its arch (sm_90a; no GPU needed), exported with the DSL's
`export_to_c` and linked into `<class.name>.so` (link.py says how). Then `manifest.json` is written
last (atomically, under the file lock `.manifest.json.lock` in the directory, so that builds into
one directory at once keep each other's classes): format, ragged_attn version, the kernel-source
digest (`cache_store.kernel_source_digest`, as the compile cache computes it), the DSL and TVM-FFI
versions, arch, machine, the DSL's compile-affecting CUTE_DSL_* settings
(`cache_store.dsl_compile_settings`), cudart mode and per class its library, function name, size
and sha256. prebuilt.py reads it at run time and refuses what does not match.

A build runs only under the DSL release the kernels require (`backends.cute_import_error`, the JIT
path's own check): the manifest records that release, so a build under another one would be
served as if it were right.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import platform
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from ..layout_class import LayoutClass
from ..prebuilt import MANIFEST_FORMAT, MANIFEST_NAME, MANIFEST_VERSION, expected_env
from .errors import AotBuildError, DslUnavailable
from .link import installed_dsl_version, link_library, toolchain

MANIFEST_LOCK_NAME = f".{MANIFEST_NAME}.lock"
# Reading the kept entries and replacing the manifest takes milliseconds; a holder past this is stuck.
MANIFEST_LOCK_TIMEOUT_S = 120.0


def function_name(layout_class: LayoutClass) -> str:
    """The TVM-FFI function a class's library exports (the compile cache's name for it too)."""
    from ..prebuilt import function_name as prebuilt_function_name

    return prebuilt_function_name(layout_class)


def _build_one(job: tuple) -> dict:
    """Compile, export and link one class into `out_dir/<name>.so` (atomic). Runs in a worker."""
    lc, out_dir, tools, cudart = job
    from ..kernels.sm90 import compile_forward

    out_dir = Path(out_dir)
    fn_name = function_name(lc)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=".aot-", dir=out_dir) as tmp:
        work = Path(tmp)
        obj = work / f"{lc.name}.o"
        from ..cache_store import DSL_LOCK

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
    from .. import __version__

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
    from .. import backends

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
