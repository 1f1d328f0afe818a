"""Disk entries of the compile cache: the build env key, paths, permission checks, atomic
read/write of one entry. `compile_cache.CompileCache` is the only caller; it turns the reasons
returned here into `CompileCacheWarning`s. The layout on disk is described in compile_cache.py.

Rules:
- The mode of a directory this module did not create is never changed: the caller's cache
  directory may be shared (mode 1777, setgid group dirs); everything lives in a private
  subdirectory `private_dir_name()` that this module creates 0700 and checks on every use.
- Reading never writes: a valid entry on a read-only file system is read as it is.
- Every reader returns a reason instead of raising for anything found on disk (wrong type,
  owner, mode, size, unreadable, not JSON, nested too deep); only the caller decides what to do.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .layout_class import LayoutClass

FORMAT_VERSION = 1
KERNELS_ROOT = Path(__file__).resolve().parent / "kernels"

# The CuTe DSL's compile, export and load are not thread-safe (nvidia-cutlass-dsl 4.8.1: two threads
# compiling at once fail with "Please start a session before accessing session data", a missing
# MLIR Location, a TypeError, or abort the process). Every DSL compile / export_to_c / load_module
# in ragged_attn holds this one process-wide lock: the compile cache (each CompileCache instance has
# its own lock besides), the merge kernel (merge.py) and an in-process aot build.
DSL_LOCK = threading.RLock()


# The CuTe DSL settings that change what a compile produces: every setting nvidia-cutlass-dsl 4.8.1
# declares `affects_compile=True` (cutlass/base_dsl/env_manager.py, CuTeDSLEnvironmentManager), as
# (suffix of its CUTE_DSL_ variable, type, value when nothing is set). CUTE_DSL_LINEINFO's default
# is CUTE_DSL_DEBUG's value, as in the DSL. Left out, each for the reason in DSL_SETTINGS_NOT_KEYED.
# tests/test_compile_cache.py::test_dsl_compile_settings_are_the_installed_dsls checks this table
# against the installed DSL's declarations and readers.
DSL_ENV_PREFIX = "CUTE_DSL"
DSL_COMPILE_SETTINGS = (
    ("DEBUG", bool, False),
    ("ENABLE_PYIR", bool, False),
    ("AUTO_M2S", bool, False),
    ("TOLERATE_M2M", bool, True),
    ("LINEINFO", bool, False),
    ("DRYRUN", bool, False),
    ("WARNINGS_AS_ERRORS", bool, False),
    ("COMPILER_OPT", str, ""),
    ("COMPILER_BACKEND", str, "legacy"),
    ("ENABLE_ASSERTIONS", bool, False),
    ("ENABLE_TVM_FFI", bool, False),
    ("LOC_TRACEBACKS", int, 0),
    ("USE_EXTENSION_COMPILER", bool, False),
)
DSL_SETTINGS_NOT_KEYED = {
    # kernels/sm90/launch.py passes the class's arch, which the DSL takes over CUTE_DSL_ARCH.
    "ARCH": "every compile passes the class's arch as --gpu-arch",
    # `shared_libs`: the runtime libraries the DSL's own JIT links when it runs a compile. An
    # exported object does not hold them (loading it links the loader's; aot links its own), and
    # a path in the key would make every manifest foreign on another machine.
    "LIBS": "the runtime libraries' path, linked at load time, not into an exported object",
}
_DSL_TRUE = ("1", "true", "yes", "on")
_DSL_FALSE = ("0", "false", "no", "off")


def _read_dsl_setting(raw: str | None, typ: type, default: object) -> object:
    """`raw` (a CUTE_DSL_ variable, None when unset) read as the DSL's get_*_env_var read it: an
    unset or blank bool/int is the default, bools take 1/true/yes/on and 0/false/no/off (any
    case, whitespace stripped). A value the DSL refuses (it raises at import) is kept as the raw
    string, so it still makes its own key."""
    if raw is None:
        return default
    if typ is str:
        return raw
    text = raw.strip().lower()
    if text == "":
        return default
    if typ is bool:
        return True if text in _DSL_TRUE else False if text in _DSL_FALSE else raw
    try:
        return int(text)
    except ValueError:
        return raw


def dsl_compile_settings(environ: dict | None = None) -> str:
    """The DSL's compile-affecting settings (`DSL_COMPILE_SETTINGS`) that differ from their value
    with no CUTE_DSL_ variable set, read from `environ` (default os.environ) as the DSL reads them,
    e.g. `CUTE_DSL_DEBUG=True;CUTE_DSL_LINEINFO=True`; "" when none differs. Imports nothing."""
    environ = os.environ if environ is None else environ
    values = {}
    for name, typ, default in DSL_COMPILE_SETTINGS:
        if name == "LINEINFO":
            default_now = values["DEBUG"] if isinstance(values["DEBUG"], bool) else default
        else:
            default_now = default
        values[name] = _read_dsl_setting(environ.get(f"{DSL_ENV_PREFIX}_{name}"), typ, default_now)
    changed = [
        f"{DSL_ENV_PREFIX}_{name}={values[name]!r}"
        for name, _, default in DSL_COMPILE_SETTINGS
        if values[name] != default or type(values[name]) is not type(default)
    ]
    return ";".join(changed)


@dataclass(frozen=True)
class BuildEnv:
    """What, besides the layout class, decides the bytes of a compiled kernel: the kernel sources,
    the DSL and TVM-FFI releases, the DSL's compile-affecting settings (`dsl_compile_settings`)
    and the host CPU (an object is native code for it)."""

    kernel_source_digest: str
    dsl_version: str
    tvm_ffi_version: str
    format_version: int = FORMAT_VERSION
    machine: str = dataclasses.field(default_factory=platform.machine)
    dsl_settings: str = ""

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
    for rel, path in kernel_source_files(base):
        data = path.read_bytes()
        h.update(b"%d:%s:%d:" % (len(rel), rel.encode(), len(data)))
        h.update(data)
    return h.hexdigest()


def kernel_source_files(base: Path) -> list[tuple[str, Path]]:
    """(relative posix path, path) of every `*.py` file under base, sorted by the relative path: the
    files `kernel_source_digest` hashes and `kernel_source_stats` fingerprints."""
    return sorted(((p.relative_to(base).as_posix(), p) for p in base.rglob("*.py") if p.is_file()))


def kernel_source_stats(root: str | os.PathLike | None = None) -> tuple:
    """(relative path, size, mtime_ns) of every `*.py` under `root` (default `ragged_attn/kernels/`),
    sorted: a cheap fingerprint (stat only) of the sources this process's kernel modules were
    imported from. () when the directory cannot be listed."""
    base = Path(root) if root is not None else KERNELS_ROOT
    out = []
    try:
        for rel, path in kernel_source_files(base):
            try:
                st = path.stat()
            except OSError:
                continue
            out.append((rel, st.st_size, st.st_mtime_ns))
    except OSError:
        return ()
    return tuple(out)


# The kernel sources as this process found them when `ragged_attn` was imported (ragged_attn/__init__.py
# imports this module before anything else, so before any kernel module). A kernel module imported
# later may read a newer source, but then the sources differ from this snapshot, which
# `kernel_sources_changed` reports: the compile cache then neither stores nor loads an entry,
# since the digest it would key it by need not describe the code this process runs.
KERNEL_SOURCES_AT_IMPORT = kernel_source_stats()


def kernel_sources_changed(snapshot: tuple | None = None, root: str | os.PathLike | None = None) -> str | None:
    """Why the kernel sources differ from `snapshot` (default: as found at `import ragged_attn`),
    naming up to three files, or None when they are the same (path, size and mtime of every file)."""
    before = {p: (n, t) for p, n, t in (KERNEL_SOURCES_AT_IMPORT if snapshot is None else snapshot)}
    now = {p: (n, t) for p, n, t in kernel_source_stats(root)}
    if before == now:
        return None
    changed = sorted(p for p in before.keys() | now.keys() if before.get(p) != now.get(p))
    more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
    return f"{', '.join(changed[:3])}{more} changed since this process imported ragged_attn"


def dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not-installed"


def current_build_env(kernel_root: str | os.PathLike | None = None) -> BuildEnv:
    """The `BuildEnv` of this installation and process: kernel source digest, installed DSL and
    TVM-FFI versions, this CPU (platform.machine()) and the DSL settings of the environment."""
    return BuildEnv(
        kernel_source_digest=kernel_source_digest(kernel_root),
        dsl_version=dist_version("nvidia-cutlass-dsl"),
        tvm_ffi_version=dist_version("apache-tvm-ffi"),
        machine=platform.machine(),
        dsl_settings=dsl_compile_settings(),
    )


def load_tvm_ffi_function(object_path: str | os.PathLike, function_name: str) -> Callable:
    """Load a TVM-FFI object written by `export_to_c` and return its `tvm_ffi.Function`.

    Works without a GPU or CUDA driver (nvidia-cutlass-dsl 4.8.1, checked 2026-11-30): the object
    is JIT-linked in-process; only calling the function needs CUDA. Raises RuntimeError for a
    file that is not a valid object and DSLRuntimeError for a missing file or symbol.
    """
    from cutlass import cute

    with DSL_LOCK:
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


def private_dir_name() -> str:
    """The name of this user's private subdirectory of the cache directory, e.g. `uid1000`."""
    uid = current_uid()
    return f"uid{uid}" if uid is not None else "user"


def prepare_root(root: Path) -> Path:
    """Make sure the caller's cache directory `root` exists and return this user's private
    subdirectory in it, created 0700 if missing, checked if present.

    `root` itself is created (0700, parents as needed) when missing and otherwise only required
    to be a directory (a symlink to one is allowed: the user chose it); its mode and owner are
    never changed or required, so a shared directory (mode 1777, a setgid group directory)
    works and stays as it was. The private subdirectory must be a real directory (not a
    symlink) owned by this uid and not writable by group/other; one that is not is refused,
    never repaired, since this module cannot tell who made it so.

    Raises DiskUnusable (`root` is not a directory; the private subdirectory cannot be trusted)
    or OSError (cannot create or inspect them: read-only file system, no permission).
    """
    if not root.exists():
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not root.is_dir():
        raise DiskUnusable(f"{root} is not a directory")
    private = root / private_dir_name()
    if not os.path.lexists(private):  # looked up first: mkdir on a read-only mount says EROFS
        try:
            private.mkdir(mode=0o700)
        except FileExistsError:  # another process made it just now
            pass
        else:
            os.chmod(private, 0o700)  # made here, so its mode is ours to set (mkdir's passes the umask)
            fsync_dir(root)
            return private
    reason = insecure_reason(private, want_dir=True)
    if reason is not None:
        raise DiskUnusable(f"its private subdirectory {reason} (remove it, or make it this user's with mode 0o700)")
    return private


# A temp file of env.json older than this was left by a writer that died (writing it takes
# milliseconds); removing a live one's only costs that writer its env.json, which is for humans.
STALE_TEMP_SECONDS = 60.0


def clear_slot(path: Path) -> bool:
    """Remove a directory or a symlink found where one of the cache's files belongs (inside the
    private subdirectory only). Returns True when something was removed; never raises."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            os.unlink(path)
            return True
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
            return True
    except OSError:
        pass
    return False


def _write_env_json(directory: Path, env: BuildEnv) -> None:
    """Best effort: env.json is for humans, so a failure to write it (read-only, full) is ignored."""
    try:
        atomic_write_bytes(
            directory / "env.json", json.dumps(dataclasses.asdict(env), indent=1, sort_keys=True).encode()
        )
    except OSError:
        pass


def _repair_env_json(directory: Path, env: BuildEnv) -> None:
    """Best effort: remove temp files of env.json left by writers that died, and write a missing
    env.json (a writer killed between making the directory and writing it leaves neither)."""
    now = time.time()
    try:
        for stale in directory.glob(".env.json.*.tmp"):
            try:
                if now - os.lstat(stale).st_mtime > STALE_TEMP_SECONDS:
                    stale.unlink()
            except OSError:
                pass
        if not os.path.lexists(directory / "env.json"):
            _write_env_json(directory, env)
    except OSError:
        pass


def prepare_env_dir(directory: Path, env: BuildEnv) -> str | None:
    """Create the env directory 0700 with its env.json, or check an existing one.

    `directory` lies in the private subdirectory (`prepare_root`), so whatever is there was made
    by this module or by this user. Returns why the entries in an existing directory must be
    rebuilt (it was group/other-writable; it is set to 0700 first), else None. A file or symlink
    in its place is removed and the directory made anew. Raises DiskUnusable when it cannot be
    made safe (another uid's) or OSError (cannot create or inspect it).
    """
    if os.path.lexists(directory):
        st = os.lstat(directory)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(directory)  # a file or a symlink in the private subdirectory: not an env dir
        else:
            uid = current_uid()
            if uid is not None and st.st_uid != uid:
                raise DiskUnusable(f"{directory} is owned by uid {st.st_uid}, not by this user (uid {uid})")
            _repair_env_json(directory, env)
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                os.chmod(directory, 0o700)
                return f"its directory {directory} was writable by group/other (mode {stat.S_IMODE(st.st_mode):#o})"
            return None
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:  # another process made it just now
        return prepare_env_dir(directory, env)
    os.chmod(directory, 0o700)
    _write_env_json(directory, env)
    fsync_dir(directory.parent)
    return None


_META_FIELDS = {
    "format_version": int,
    "layout_class": dict,
    "kernel_source_digest": str,
    "dsl_version": str,
    "tvm_ffi_version": str,
    "arch": str,
    "machine": str,
    "dsl_settings": str,
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
        ("machine", env.machine),
        ("dsl_settings", env.dsl_settings),
        ("arch", lc.arch),
    ):
        if meta[name] != want:
            return f"foreign entry: built with {name}={meta[name]!r}, this process has {want!r}"
    if meta["layout_class"] != lc.as_dict():
        return f"metadata records layout class {meta['layout_class']}, not {lc.as_dict()}"
    if meta["function_name"] != entry.function_name:
        return f"metadata records function {meta['function_name']!r}, not {entry.function_name!r}"
    return None


# Metadata is a few hundred bytes; anything larger is not ours (and is not parsed).
MAX_META_BYTES = 1 << 20


def read_file(path: Path) -> bytes:
    """The bytes of `path`, opened without following a symlink and without blocking on a FIFO.
    Raises OSError (missing, unreadable, a symlink: ELOOP). The tests replace it to inject faults."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        return f.read()


def read_entry(
    lc: LayoutClass, entry: EntryPaths, env: BuildEnv, loader: Callable[[Path, str], Callable]
) -> tuple[Callable | None, str | None]:
    """Load `lc`'s entry. Safe with or without the entry lock (writers replace files atomically,
    metadata last); writes nothing. Never raises.

    Returns (function, None) for a valid entry, (None, None) when there is no entry, and
    (None, reason) for an insecure, unreadable, corrupt or foreign one. Checks, in order:
    metadata file (owner, mode, regular file, size), its JSON and fields against `env` and `lc`,
    the object file (owner, mode, regular file), its size and sha256 against the metadata, then
    `loader`.
    """
    try:
        has_obj = os.path.lexists(entry.object_path)
        if not os.path.lexists(entry.meta_path):
            return None, ("has an object file but no metadata (interrupted write?)" if has_obj else None)
        reason = insecure_reason(entry.meta_path, want_dir=False)
        if reason is not None:
            return None, reason
        if os.lstat(entry.meta_path).st_size > MAX_META_BYTES:
            return None, f"metadata {entry.meta_path.name} is larger than {MAX_META_BYTES} bytes"
        raw = read_file(entry.meta_path)
    except OSError as e:
        return None, f"metadata {entry.meta_path.name} is unreadable ({type(e).__name__}: {e})"
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError) as e:  # RecursionError: JSON nested too deep to parse
        return None, f"metadata {entry.meta_path.name} is unreadable or not JSON ({type(e).__name__}: {str(e)[:200]})"
    reason = check_meta(lc, entry, env, meta)
    if reason is not None:
        return None, reason
    try:
        if not has_obj:
            return None, "metadata exists but the object file is missing"
        reason = insecure_reason(entry.object_path, want_dir=False)
        if reason is not None:
            return None, reason
        data = read_file(entry.object_path)
    except OSError as e:
        return None, f"object file {entry.object_path.name} is unreadable ({type(e).__name__}: {e})"
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


def entry_stamp(entry: EntryPaths) -> tuple:
    """(inode, size, mtime_ns) of the entry's metadata and object files (None for one missing):
    equal stamps mean no writer replaced either file in between. Never raises."""
    stamps = []
    for path in (entry.meta_path, entry.object_path):
        try:
            st = os.lstat(path)
            stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            stamps.append(None)
    return tuple(stamps)


def remove_stale_temps(entry: EntryPaths) -> None:
    """Remove temp files of this entry left by writers that died. Call with the entry lock held
    (every writer of the entry holds it). Best effort: never raises."""
    try:
        for stale in entry.directory.glob(f".{entry.object_path.stem}.*tmp*"):
            try:
                if stale.is_dir() and not stale.is_symlink():
                    shutil.rmtree(stale)
                else:
                    stale.unlink()
            except OSError:
                pass
    except OSError:
        pass


def write_entry(lc: LayoutClass, entry: EntryPaths, env: BuildEnv, compiled: Any) -> None:
    """Export `compiled` (a TVM-FFI compiled function) as `lc`'s entry. Call with the entry lock held.

    The object goes to a 0600 temp file in the entry directory (`export_to_c`), is fsynced and
    os.replace'd into place; the metadata (with the object's sha256) follows the same way, last,
    so a reader never sees metadata describing a partial object. Temp files of this entry left by
    a writer that died are removed first, and a directory (or symlink) found where the object or
    the metadata belongs is removed before the replace. Raises whatever export or the file
    system raises.
    """
    remove_stale_temps(entry)
    tmp = entry.directory / f".{entry.object_path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp.o"
    try:
        with DSL_LOCK:
            compiled.export_to_c(str(tmp), entry.function_name)
        os.chmod(tmp, 0o600)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
            data = f.read()
        clear_slot(entry.object_path)
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
        "machine": env.machine,
        "dsl_settings": env.dsl_settings,
        "function_name": entry.function_name,
        "object_file": entry.object_path.name,
        "object_sha256": hashlib.sha256(data).hexdigest(),
        "object_size": len(data),
        "created_unix": time.time(),
        "created_by_pid": os.getpid(),
    }
    clear_slot(entry.meta_path)
    atomic_write_bytes(entry.meta_path, json.dumps(meta, indent=1, sort_keys=True).encode())
    fsync_dir(entry.directory)
