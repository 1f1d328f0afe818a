"""Prebuilt (ahead-of-time) kernels: find, check and load them without the CuTe DSL.

`python -m ragged_attn aot build --out DIR` (ragged_attn/aot/) writes, per layout class, a shared
library that exports one TVM-FFI function, and a `manifest.json` describing them. This module is
the serving side: it imports neither `cutlass` nor anything of nvidia-cutlass-dsl; loading needs
apache-tvm-ffi (`tvm_ffi.load_module`) and, to run, the CUDA driver (libcuda.so.1). The CUDA
runtime is linked into each library statically (default) or, for a `--cudart shared` build,
`libcudart.so.12` comes from nvidia-cuda-runtime-cu12 (preloaded here from that package).

Rules (tests/test_prebuilt.py enforces them):
- Where: every directory of `RAGGED_ATTN_AOT_DIR` (one or more, os.pathsep-separated), then the
  `prebuilt/` directory of an installed `ragged_attn_kernels` package (found with
  importlib.util.find_spec: the package is never imported), in that order. The first directory
  whose valid manifest lists a class serves it.
- A manifest serves only this installation: its `kernel_source_digest` equals the digest of this
  package's `ragged_attn/kernels/` sources (as the compile cache computes it), its `dsl_version` is
  the DSL release the kernels are written for (`backends.REQUIRED_DSL_VERSION`, installed or not),
  its `tvm_ffi_version` is the installed apache-tvm-ffi, its `machine` is this CPU (platform.machine()),
  its `dsl_settings` are this process's compile-affecting CUTE_DSL_* settings
  (`cache_store.dsl_compile_settings`, read from the environment without importing the DSL: ""
  when none is set, so a build with CUTE_DSL_LINEINFO=1 serves only processes that set it too).
  Anything else is stale or foreign: one `PrebuiltWarning` per directory, and its classes go to
  the JIT cache (compile_cache.py).
- A library is loaded only if it is a regular file, not writable by group/other, of the manifest's
  size and sha256. Anything else, or a failed load, warns once and the class goes to the JIT cache.
- Nothing found on disk raises; each directory's manifest is read once per process (call
  `reset()` after changing `RAGGED_ATTN_AOT_DIR` in a running process).

Directory layout (written by ragged_attn/aot/):
    DIR/manifest.json                 format, versions, digest, arch, machine, cudart, classes
    DIR/<layout_class.name>.so        exports `__tvm_ffi_<function_name>` (one class each)
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import stat
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .layout_class import LayoutClass

AOT_DIR_ENV = "RAGGED_ATTN_AOT_DIR"
KERNELS_PACKAGE = "ragged_attn_kernels"  # an installed package shipping `prebuilt/` (see README)
KERNELS_PACKAGE_SUBDIR = "prebuilt"
MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "ragged_attn-aot"
MANIFEST_VERSION = 1
MAX_MANIFEST_BYTES = 16 << 20  # a few hundred bytes per class; anything larger is not ours

__all__ = [
    "AOT_DIR_ENV",
    "PrebuiltEntry",
    "PrebuiltIndex",
    "PrebuiltWarning",
    "expected_env",
    "get_prebuilt",
    "has_prebuilt",
    "missing_kernel_message",
    "reset",
    "search_dirs",
]


class PrebuiltWarning(UserWarning):
    """A prebuilt directory, manifest or library was refused (stale, foreign, damaged)."""


@dataclass(frozen=True)
class PrebuiltEntry:
    """One class of a valid manifest: its library file and the function it exports."""

    layout_class: LayoutClass
    library: Path
    function_name: str
    sha256: str
    size: int
    cudart: str  # "static" (linked in) or "shared" (libcudart.so.12 from nvidia-cuda-runtime-cu12)


@functools.cache
def expected_env() -> dict:
    """What a manifest must record to serve this installation: kernel_source_digest, dsl_version,
    tvm_ffi_version, machine, dsl_settings (computed once per process, as the DSL reads its
    settings once; hashing the kernel sources takes ~ms)."""
    from .backends import REQUIRED_DSL_VERSION
    from .cache_store import dist_version, dsl_compile_settings, kernel_source_digest

    return {
        "kernel_source_digest": kernel_source_digest(),
        "dsl_version": REQUIRED_DSL_VERSION,
        "tvm_ffi_version": dist_version("apache-tvm-ffi"),
        "machine": platform.machine(),
        "dsl_settings": dsl_compile_settings(),
    }


def search_dirs() -> list[Path]:
    """The prebuilt directories, in lookup order: `RAGGED_ATTN_AOT_DIR`'s entries (empty ones
    skipped, `~` expanded), then `<ragged_attn_kernels package>/prebuilt` if that package is installed and the
    directory exists. Creates and imports nothing."""
    dirs = [Path(p).expanduser() for p in os.environ.get(AOT_DIR_ENV, "").split(os.pathsep) if p.strip()]
    try:
        spec = importlib.util.find_spec(KERNELS_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / KERNELS_PACKAGE_SUBDIR
            if candidate.is_dir():
                dirs.append(candidate)
    return dirs


def _manifest_reason(manifest: object, env: dict) -> str | None:
    """Why `manifest` (parsed JSON) cannot serve this installation, or None."""
    if not isinstance(manifest, dict):
        return "manifest is not a JSON object"
    if manifest.get("format") != MANIFEST_FORMAT or manifest.get("format_version") != MANIFEST_VERSION:
        return (
            f"manifest format {manifest.get('format')!r} version {manifest.get('format_version')!r}, "
            f"this ragged_attn reads {MANIFEST_FORMAT!r} version {MANIFEST_VERSION}"
        )
    for name, want in env.items():
        if manifest.get(name) != want:
            what = "stale" if name == "kernel_source_digest" else "foreign"
            return f"{what}: built with {name}={manifest.get(name)!r}, this installation has {want!r}"
    if not isinstance(manifest.get("classes"), list):
        return "manifest field 'classes' is missing or not a list"
    return None


def function_name(layout_class: LayoutClass) -> str:
    """The TVM-FFI function a class's library exports (ragged_attn/aot/ builds it; the compile cache
    names its entries' functions the same way): derived from the class name, so a library exporting
    it was built for that class."""
    return "ragged_attn_" + "".join(c if c.isalnum() else "_" for c in layout_class.name)


def _entry_of(directory: Path, item: object) -> PrebuiltEntry:
    """A manifest `classes` item as an entry; raises ValueError/TypeError/KeyError when malformed."""
    if not isinstance(item, dict):
        raise TypeError("a classes item is not a JSON object")
    lc = LayoutClass(**item["layout_class"])
    library = item["library"]
    if not isinstance(library, str) or Path(library).name != library or library in ("", ".", ".."):
        raise ValueError(f"library {library!r} is not a file name inside the directory")
    fields = {"function_name": str, "sha256": str, "size": int, "cudart": str}
    for name, typ in fields.items():
        if not isinstance(item.get(name), typ):
            raise TypeError(f"field {name!r} is missing or not a {typ.__name__}")
    if item["function_name"] != function_name(lc):
        # Another class's function (a hand-merged manifest, a library of another class named here)
        # would launch with this class's arguments: refused, never loaded.
        raise ValueError(f"function {item['function_name']!r} is not {lc.name}'s")
    if item["cudart"] not in ("static", "shared"):
        raise ValueError(f"cudart {item['cudart']!r} is neither 'static' nor 'shared'")
    return PrebuiltEntry(
        lc, directory / library, item["function_name"], item["sha256"], item["size"], item["cudart"]
    )


def read_manifest(
    directory: Path, env: dict | None = None
) -> tuple[dict[LayoutClass, PrebuiltEntry], str | None]:
    """The entries of `directory`'s manifest, and why some or all were refused (None if none was).

    Never raises: a missing directory or manifest gives ({}, reason); a stale or foreign manifest
    gives ({}, reason); malformed items are skipped and named in the reason.
    """
    env = expected_env() if env is None else env
    path = directory / MANIFEST_NAME
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return {}, f"{path} is not a regular file"
        if st.st_size > MAX_MANIFEST_BYTES:
            return {}, f"{path} is larger than {MAX_MANIFEST_BYTES} bytes"
        manifest = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}, f"no {MANIFEST_NAME} in {directory}"
    except (OSError, ValueError, RecursionError) as e:
        return {}, f"{path} is unreadable or not JSON ({type(e).__name__}: {str(e)[:200]})"
    reason = _manifest_reason(manifest, env)
    if reason is not None:
        return {}, f"{path}: {reason}"
    entries: dict[LayoutClass, PrebuiltEntry] = {}
    bad = []
    for i, item in enumerate(manifest["classes"]):
        try:
            entry = _entry_of(directory, item)
        except (KeyError, TypeError, ValueError) as e:
            bad.append(f"classes[{i}] ({type(e).__name__}: {str(e)[:120]})")
            continue
        entries.setdefault(entry.layout_class, entry)
    return entries, (f"{path}: skipped malformed {', '.join(bad)}" if bad else None)


def library_reason(entry: PrebuiltEntry) -> str | None:
    """Why `entry.library` must not be loaded (missing, not a regular file, group/other-writable,
    size or sha256 other than the manifest's), or None. Never raises."""
    try:
        st = os.stat(entry.library)
        if not stat.S_ISREG(st.st_mode):
            return f"{entry.library} is not a regular file"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{entry.library} is writable by group/other (mode {stat.S_IMODE(st.st_mode):#o})"
        data = entry.library.read_bytes()
    except OSError as e:
        return f"{entry.library} is unreadable ({type(e).__name__}: {e})"
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != entry.size or digest != entry.sha256:
        return (
            f"{entry.library}: size/sha256 {len(data)} B/{digest[:12]} differ from the manifest's "
            f"{entry.size} B/{entry.sha256[:12]} (truncated or replaced)"
        )
    return None


def _cudart_shared_path() -> str | None:
    """libcudart.so.12 of an installed nvidia-cuda-runtime-cu12, located without importing it."""
    try:
        dist = importlib.metadata.distribution("nvidia-cuda-runtime-cu12")
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name == "libcudart.so.12":
            return str(dist.locate_file(f))
    return None


_PRELOADED: list = []  # ctypes handles kept alive (the dynamic loader then resolves the sonames)


def load_library_function(entry: PrebuiltEntry) -> Callable:
    """`tvm_ffi.load_module(entry.library)` and its `entry.function_name` (a `tvm_ffi.Function`).

    Loading runs no CUDA call (it works on a machine without a GPU driver); calling the function
    needs the CUDA driver. A `cudart="shared"` library first gets libcudart.so.12 from
    nvidia-cuda-runtime-cu12 loaded (else the system's, found by the dynamic loader).
    Raises ImportError without apache-tvm-ffi, and whatever tvm_ffi raises for a bad library.
    """
    if entry.cudart == "shared" and not _PRELOADED:
        path = _cudart_shared_path()
        if path is not None:
            import ctypes

            _PRELOADED.append(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL))
    import tvm_ffi

    module = tvm_ffi.load_module(str(entry.library))  # kept alive by tvm_ffi for the process
    return getattr(module, entry.function_name)


class PrebuiltIndex:
    """The prebuilt entries of `search_dirs()`, read lazily, checked, loaded on request.

    Args:
        dirs: callable returning the directories to search (default `search_dirs`).
        loader: `loader(entry) -> callable` (default `load_library_function`).
        env: the manifest fields to require (default `expected_env()`).
    """

    def __init__(
        self,
        dirs: Callable[[], list[Path]] = search_dirs,
        loader: Callable[[PrebuiltEntry], Callable] = load_library_function,
        env: dict | None = None,
    ) -> None:
        self._dirs = dirs
        self._loader = loader
        self._env = env
        self._lock = threading.RLock()
        self._manifests: dict[Path, dict[LayoutClass, PrebuiltEntry]] = {}
        self._refused: set[PrebuiltEntry] = set()

    def directories(self) -> list[Path]:
        """The directories searched now (see `search_dirs`)."""
        return self._dirs()

    def _entries(self, directory: Path) -> dict[LayoutClass, PrebuiltEntry]:
        entries = self._manifests.get(directory)
        if entries is None:
            entries, reason = read_manifest(directory, self._env if self._env is not None else expected_env())
            # A directory named in RAGGED_ATTN_AOT_DIR without a manifest is a mistake worth a word.
            if reason is not None:
                _warn(f"{reason}; its classes are not served from there")
            self._manifests[directory] = entries
        return entries

    def lookup(self, layout_class: LayoutClass) -> PrebuiltEntry | None:
        """The first valid manifest entry for `layout_class` whose library has not been refused
        in this process, or None. Reads each directory's manifest once; never raises."""
        with self._lock:
            for directory in self.directories():
                entry = self._entries(directory).get(layout_class)
                if entry is not None and entry not in self._refused:
                    return entry
        return None

    def load(self, layout_class: LayoutClass) -> Callable | None:
        """`layout_class`'s prebuilt function, or None (with a `PrebuiltWarning` per refused
        library) when no directory serves it. Tries the next directory after a refused library.
        Never raises for what it finds on disk."""
        with self._lock:
            while True:
                entry = self.lookup(layout_class)
                if entry is None:
                    return None
                reason = library_reason(entry)
                if reason is None:
                    try:
                        return self._loader(entry)
                    except Exception as e:  # noqa: BLE001 -- any failure to load means: not served here
                        reason = (
                            f"{entry.library} failed to load ({type(e).__name__}: {str(e).strip()[:300]})"
                        )
                _warn(f"{reason}; not serving {layout_class.name} from it")
                self._refused.add(entry)

    def reset(self) -> None:
        """Forget every manifest read and library refused (a new process would read them again)."""
        with self._lock:
            self._manifests.clear()
            self._refused.clear()


def _warn(message: str) -> None:
    warnings.warn(f"ragged_attn prebuilt kernels: {message}", PrebuiltWarning, stacklevel=4)


_DEFAULT = PrebuiltIndex()


def _after_fork_in_child() -> None:
    # A fork while another thread held the index's lock would leave it held forever in the child.
    _DEFAULT._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def get_prebuilt(layout_class: LayoutClass) -> Callable | None:
    """The process-wide index's `load` (None when no prebuilt directory serves the class)."""
    return _DEFAULT.load(layout_class)


def has_prebuilt(layout_class: LayoutClass) -> bool:
    """Whether a valid manifest lists the class (its library is checked only when loaded)."""
    return _DEFAULT.lookup(layout_class) is not None


def reset() -> None:
    """Make the process-wide index read the directories and manifests again."""
    _DEFAULT.reset()


def missing_kernel_message(layout_class: LayoutClass, dsl_reason: str) -> str:
    """The error text for a class with neither a prebuilt kernel nor a working JIT path: names the
    class, the directories searched, why the JIT path is out, and both remedies."""
    dirs = [str(d) for d in _DEFAULT.directories()]
    where = f"in {', '.join(dirs)}" if dirs else f"(no prebuilt directory: {AOT_DIR_ENV} is unset)"
    return (
        f"no kernel for layout class {layout_class.name}: no prebuilt kernel {where}, and the JIT path is "
        f"out ({dsl_reason}). Either build it ahead of time on any machine with the cute extra "
        f"(python -m ragged_attn aot build --out DIR --classes FILE, FILE listing {layout_class.name}) "
        f"and point {AOT_DIR_ENV}=DIR at the result, or install the JIT path with "
        f"pip install 'ragged-attn[cute]'"
    )
