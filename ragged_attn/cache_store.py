"""Disk entries of the compile cache: the build env key, paths, permission checks, atomic
read/write of one entry. `compile_cache.CompileCache` is the only caller; it turns the reasons
returned here into `CompileCacheWarning`s. The layout on disk is described in compile_cache.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import stat
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .layout_class import LayoutClass

FORMAT_VERSION = 1
KERNELS_ROOT = Path(__file__).resolve().parent / "kernels"


@dataclass(frozen=True)
class BuildEnv:
    """What, besides the layout class, decides the bytes of a compiled kernel."""

    kernel_source_digest: str
    dsl_version: str
    tvm_ffi_version: str
    format_version: int = FORMAT_VERSION

    def digest(self) -> str:
        """sha256 (hex) of the fields, in a stable JSON form."""
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()

    @property
    def dir_name(self) -> str:
        """The entry directory's name, e.g. `dsl4.8.1-1a2b3c4d5e6f` (version for humans, digest for keys)."""
        version = "".join(c if c.isalnum() or c in "._" else "_" for c in self.dsl_version)
        return f"dsl{version}-{self.digest()[:12]}"


@dataclass(frozen=True)
class EntryPaths:
    """The files of one cache entry (see the module docstring for the layout)."""

    directory: Path
    object_path: Path
    meta_path: Path
    lock_path: Path
    function_name: str


def kernel_source_digest(root: str | os.PathLike | None = None) -> str:
    """sha256 (hex) over every `*.py` file under `root` (default: `ragged_attn/kernels/`).

    Files are taken in sorted order of their POSIX path relative to `root`; each contributes its
    relative path and its bytes, so a rename, an edit, an added or a removed file changes the
    digest. `__pycache__` holds no .py files and is ignored by construction. Raises OSError if a
    file cannot be read.
    """
    base = Path(root) if root is not None else KERNELS_ROOT
    h = hashlib.sha256()
    files = sorted(
        (p for p in base.rglob("*.py") if p.is_file()), key=lambda p: p.relative_to(base).as_posix()
    )
    for path in files:
        data = path.read_bytes()
        rel = path.relative_to(base).as_posix().encode()
        h.update(b"%d:%s:%d:" % (len(rel), rel, len(data)))
        h.update(data)
    return h.hexdigest()


def dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not-installed"


def current_build_env(kernel_root: str | os.PathLike | None = None) -> BuildEnv:
    """The `BuildEnv` of this installation: kernel source digest + installed DSL and TVM-FFI versions."""
    return BuildEnv(
        kernel_source_digest=kernel_source_digest(kernel_root),
        dsl_version=dist_version("nvidia-cutlass-dsl"),
        tvm_ffi_version=dist_version("apache-tvm-ffi"),
    )


def load_tvm_ffi_function(object_path: str | os.PathLike, function_name: str) -> Callable:
    """Load a TVM-FFI object written by `export_to_c` and return its `tvm_ffi.Function`.

    Works without a GPU or CUDA driver (nvidia-cutlass-dsl 4.8.1, checked 2026-11-30): the object
    is JIT-linked in-process; only calling the function needs CUDA. Raises RuntimeError for a
    file that is not a valid object and DSLRuntimeError for a missing file or symbol.
    """
    from cutlass import cute

    module = cute.runtime.load_module(str(object_path), enable_tvm_ffi=True)
    return getattr(module, function_name)


def current_uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def insecure_reason(path: Path, *, want_dir: bool) -> str | None:
    """Why `path` must not be trusted (symlink, wrong type, foreign owner, group/other-writable), or None."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if want_dir and not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if not want_dir and not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    uid = current_uid()
    if uid is not None and st.st_uid != uid:
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by group/other (mode {stat.S_IMODE(st.st_mode):#o})"
    return None


class DiskUnusable(Exception):
    """The cache directory cannot be used safely; compile in memory only."""


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a private temp file in the same directory (0600, fsync, replace)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def prepare_root(root: Path) -> str | None:
    """Create `root` 0700, or check an existing one (a symlink to it is allowed: the user chose it).

    Returns a message when an existing root was group/other-writable and was set to 0700, else None.
    Raises DiskUnusable (not a directory, another uid's) or OSError (cannot create).
    """
    if not root.exists():
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(root, 0o700)
    st = os.stat(root)
    if not stat.S_ISDIR(st.st_mode):
        raise DiskUnusable(f"{root} is not a directory")
    uid = current_uid()
    if uid is not None and st.st_uid != uid:
        raise DiskUnusable(f"{root} is owned by uid {st.st_uid}, not by this user (uid {uid})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.chmod(root, 0o700)
        return f"cache directory {root} was writable by group/other (mode {stat.S_IMODE(st.st_mode):#o}); set it to 0o700"
    return None


def prepare_env_dir(directory: Path, env: BuildEnv) -> str | None:
    """Create the env directory 0700 with its env.json, or check an existing one.

    Returns why the entries in an existing directory must be rebuilt (it was group/other-writable;
    it is set to 0700 first), else None. Raises DiskUnusable when it cannot be made safe (another
    uid's, a symlink, not a directory) or OSError.
    """
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:
        reason = insecure_reason(directory, want_dir=True)
        if reason is None:
            return None
        st = os.lstat(directory)
        uid = current_uid()
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or (uid is not None and st.st_uid != uid):
            raise DiskUnusable(reason) from None
        os.chmod(directory, 0o700)
        return f"its directory {reason}"
    os.chmod(directory, 0o700)
    atomic_write_bytes(
        directory / "env.json", json.dumps(dataclasses.asdict(env), indent=1, sort_keys=True).encode()
    )
    fsync_dir(directory.parent)
    return None


_META_FIELDS = {
    "format_version": int,
    "layout_class": dict,
    "kernel_source_digest": str,
    "dsl_version": str,
    "tvm_ffi_version": str,
    "arch": str,
    "function_name": str,
    "object_sha256": str,
    "object_size": int,
}


def check_meta(lc: LayoutClass, entry: EntryPaths, env: BuildEnv, meta: Any) -> str | None:
    """Why `meta` does not describe `lc`'s entry under `env` (bad shape, foreign, other class), or None."""
    if not isinstance(meta, dict):
        return "metadata is not a JSON object"
    for name, typ in _META_FIELDS.items():
        if not isinstance(meta.get(name), typ):
            return f"metadata field {name!r} is missing or not a {typ.__name__}"
    for name, want in (
        ("format_version", env.format_version),
        ("dsl_version", env.dsl_version),
        ("tvm_ffi_version", env.tvm_ffi_version),
        ("kernel_source_digest", env.kernel_source_digest),
        ("arch", lc.arch),
    ):
        if meta[name] != want:
            return f"foreign entry: built with {name}={meta[name]!r}, this process has {want!r}"
    if meta["layout_class"] != lc.as_dict():
        return f"metadata records layout class {meta['layout_class']}, not {lc.as_dict()}"
    if meta["function_name"] != entry.function_name:
        return f"metadata records function {meta['function_name']!r}, not {entry.function_name!r}"
    return None


def read_entry(
    lc: LayoutClass, entry: EntryPaths, env: BuildEnv, loader: Callable[[Path, str], Callable]
) -> tuple[Callable | None, str | None]:
    """Load `lc`'s entry. Call with the entry lock held.

    Returns (function, None) for a valid entry, (None, None) when there is no entry, and
    (None, reason) for an insecure, corrupt or foreign one. Checks, in order: metadata file
    (owner, mode, regular file), its JSON and fields against `env` and `lc`, the object file
    (owner, mode, regular file), its size and sha256 against the metadata, then `loader`.
    """
    has_obj = os.path.lexists(entry.object_path)
    if not os.path.lexists(entry.meta_path):
        return None, ("has an object file but no metadata (interrupted write?)" if has_obj else None)
    reason = insecure_reason(entry.meta_path, want_dir=False)
    if reason is not None:
        return None, reason
    try:
        meta = json.loads(entry.meta_path.read_bytes())
    except (OSError, ValueError) as e:
        return None, f"metadata {entry.meta_path.name} is unreadable or not JSON ({e})"
    reason = check_meta(lc, entry, env, meta)
    if reason is not None:
        return None, reason
    if not has_obj:
        return None, "metadata exists but the object file is missing"
    reason = insecure_reason(entry.object_path, want_dir=False)
    if reason is not None:
        return None, reason
    data = entry.object_path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != meta["object_size"] or digest != meta["object_sha256"]:
        return None, (
            f"object file sha256/size mismatch (metadata {meta['object_sha256'][:12]}/"
            f"{meta['object_size']} B, file {digest[:12]}/{len(data)} B: truncated or modified)"
        )
    try:
        return loader(entry.object_path, entry.function_name), None
    except Exception as e:  # noqa: BLE001 -- any failure to load means: rebuild
        return None, f"failed to load ({type(e).__name__}: {str(e).strip()[:300]})"


def write_entry(lc: LayoutClass, entry: EntryPaths, env: BuildEnv, compiled: Any) -> None:
    """Export `compiled` (a TVM-FFI compiled function) as `lc`'s entry. Call with the entry lock held.

    The object goes to a 0600 temp file in the entry directory (`export_to_c`), is fsynced and
    os.replace'd into place; the metadata (with the object's sha256) follows the same way, last,
    so a reader never sees metadata describing a partial object. Temp files of this entry left by
    a writer that died are removed first. Raises whatever export or the file system raises.
    """
    for stale in entry.directory.glob(f".{entry.object_path.stem}.*tmp*"):
        stale.unlink(missing_ok=True)
    tmp = entry.directory / f".{entry.object_path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp.o"
    try:
        compiled.export_to_c(str(tmp), entry.function_name)
        os.chmod(tmp, 0o600)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
            data = f.read()
        os.replace(tmp, entry.object_path)
    finally:
        tmp.unlink(missing_ok=True)
    meta = {
        "format_version": env.format_version,
        "layout_class": lc.as_dict(),
        "layout_class_name": lc.name,
        "kernel_source_digest": env.kernel_source_digest,
        "dsl_version": env.dsl_version,
        "tvm_ffi_version": env.tvm_ffi_version,
        "arch": lc.arch,
        "function_name": entry.function_name,
        "object_file": entry.object_path.name,
        "object_sha256": hashlib.sha256(data).hexdigest(),
        "object_size": len(data),
        "created_unix": time.time(),
        "created_by_pid": os.getpid(),
    }
    atomic_write_bytes(entry.meta_path, json.dumps(meta, indent=1, sort_keys=True).encode())
    fsync_dir(entry.directory)
