"""The compile cache: one compiled kernel per layout class, in memory and on disk.

`cute.compile` never hits a disk cache and re-traces every time (CUTE_DSL_HOPPER_NOTES.md pitfall 15,
~2-3 s per attention class), so this module owns the persistent cache, built on the DSL's own
TVM-FFI export (`compiled.export_to_c(path, name)`) and load (`cute.runtime.load_module`).

Rules (each with the test in tests/test_compile_cache.py that enforces it):
- The key is the `LayoutClass` plus a `BuildEnv` (digest of every .py under `ragged_attn/kernels/`,
  the nvidia-cutlass-dsl and apache-tvm-ffi versions, this file's format number, the host CPU
  (platform.machine()) and the DSL's compile-affecting CUTE_DSL_* settings that are not at their
  defaults, `cache_store.dsl_compile_settings`); the arch is the class's own `arch` field.
  Nothing else enters it (test_build_env_*, test_dsl_settings_*).
- A class compiles at most once per process, and at most once per machine while its entry is
  valid: a valid entry is read without the lock; a missing or bad one is compiled under the
  entry's file lock, and a second process waits on that lock, then loads (test_two_processes_*,
  test_a_valid_entry_is_read_without_waiting_for_the_lock).
- Writes are atomic (temp file in the same directory, fsync, os.replace; metadata last).
- Loading an entry runs its code, so an entry is loaded only if its directory and files are
  owned by this uid and not writable by group/other, its metadata matches the current build
  env and class, and the sha256 of its object file matches the metadata. Anything else is
  rebuilt with a `CompileCacheWarning` naming the entry and the reason, never an error
  (test_corrupt_*, test_bad_metadata_*, test_foreign_*, test_group_or_other_writable_*,
  test_*_owned_by_another_uid_*, test_symlinked_*; tests/test_cache_faults.py keeps the whole
  damage catalogue).
- The cache never raises for what it finds on disk, and never changes the mode of a directory
  it did not create: the caller's directory (`RAGGED_ATTN_CACHE_DIR`, possibly shared, mode
  1777 or a setgid group directory) keeps its mode; entries live in a private subdirectory
  `uid<uid>/` that the cache creates 0700. A private subdirectory that is a symlink, another
  uid's or group/other-writable is refused: warning, memory only.
- An entry lock that cannot be taken for a missing or bad entry (read-only mount, a directory
  without write permission, a lock file of mode 0400, a directory or symlink in its place: the
  last two are removed and the lock retried once; held past LOCK_TIMEOUT_S) warns and falls back
  to reading the entry without the lock, which is safe (writers replace files atomically,
  metadata last): an entry that became valid meanwhile is a disk hit, anything else compiles in
  memory only and writes nothing.
- Prebuilt kernels come first: the process-wide cache asks `prebuilt.get_prebuilt` (directories of
  `RAGGED_ATTN_AOT_DIR` and an installed `ragged_attn_kernels` package; prebuilt.py says which
  entries it refuses) before the disk cache, and counts `prebuilt_hits`; a class no prebuilt
  directory serves goes to the disk cache and the compiler. With neither (the DSL missing or of
  another release) `get_kernel` raises NotImplementedError naming the class and both remedies
  (tests/test_prebuilt.py).
The disk mechanics (paths, permission checks, atomic read/write of one entry) live in cache_store.py.

On-disk layout (`cache_dir()`: created 0700 when missing, never changed when present):
    <cache_dir>/uid<uid>/                       this user's private subdirectory, 0700
      <env dir>/                                one per BuildEnv, e.g. `dsl4.8.1-1a2b3c4d5e6f`, 0700
        env.json                                the BuildEnv, for humans
        <layout_class.name>.o                   TVM-FFI object exporting `__tvm_ffi_<function name>`
        <layout_class.name>.json                metadata: class, build env, function name, sha256
        <layout_class.name>.lock                filelock of the entry

Environment:
    RAGGED_ATTN_CACHE_DIR   the cache directory, `~` expanded
                            (default `platformdirs.user_cache_dir("ragged_attn")`)
    RAGGED_ATTN_DISK_CACHE  "0"/"false"/"off"/"no" turns the disk cache off (memory only);
                            "1"/"true"/"on"/"yes"/unset keeps it on. Neither changes what compiles.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import cache_store
from .cache_store import (
    BuildEnv,
    EntryPaths,
    current_build_env,
    kernel_source_digest,
    load_tvm_ffi_function,
)
from .layout_class import LayoutClass

__all__ = [
    "BuildEnv",
    "CacheInfo",
    "CompileCache",
    "CompileCacheWarning",
    "EntryPaths",
    "cache_dir",
    "cache_info",
    "clear_memory",
    "current_build_env",
    "get_kernel",
    "kernel_source_digest",
    "load_tvm_ffi_function",
]

CACHE_DIR_ENV = "RAGGED_ATTN_CACHE_DIR"
DISK_CACHE_ENV = "RAGGED_ATTN_DISK_CACHE"
# A second process waits this long for the first one's compile before compiling in memory only.
LOCK_TIMEOUT_S = 900.0
# After this long waiting for an entry lock, one line on stderr says what the process waits for.
LOCK_NOTICE_S = 10.0
_TRUE = ("1", "true", "on", "yes", "")
_FALSE = ("0", "false", "off", "no")


class CompileCacheWarning(UserWarning):
    """A cache entry or directory was refused, rebuilt or could not be written."""


@dataclass(frozen=True)
class CacheInfo:
    """Per-process counters of a `CompileCache` (reset by `clear_memory`).

    compiles: calls of a `compile_fn`; memory_hits / disk_hits / prebuilt_hits: `get_kernel` calls
    served from the in-memory dict / from a valid disk entry / from a prebuilt directory;
    compile_seconds: wall seconds spent inside `compile_fn` (not export or load); classes: the
    layout classes compiled or loaded, in order.
    """

    compiles: int = 0
    memory_hits: int = 0
    disk_hits: int = 0
    compile_seconds: float = 0.0
    classes: tuple[LayoutClass, ...] = ()
    prebuilt_hits: int = 0


class CompileCache:
    """In-memory dict + persistent on-disk cache of compiled kernels, keyed by `LayoutClass`.

    Args:
        directory: the cache directory; None reads `RAGGED_ATTN_CACHE_DIR`, else
            `platformdirs.user_cache_dir("ragged_attn")`, at every miss (so tests may monkeypatch it).
        disk: True/False turns the disk cache on/off; None reads `RAGGED_ATTN_DISK_CACHE` at every miss.
        loader: `loader(object_path, function_name) -> callable`; default `load_tvm_ffi_function`.
        build_env: the `BuildEnv` to key entries by; default `current_build_env()` (computed once).
        prebuilt: `prebuilt(layout_class) -> callable | None`, asked first on a miss (the
            process-wide cache passes `prebuilt.get_prebuilt`); None asks nothing.
        jit_unavailable: `jit_unavailable() -> str | None`, why `compile_fn` cannot run (the
            process-wide cache passes `backends.cute_import_error`); None never asks.
    """

    def __init__(
        self,
        directory: str | os.PathLike | None = None,
        *,
        disk: bool | None = None,
        loader: Callable[[Path, str], Callable] | None = None,
        build_env: BuildEnv | None = None,
        prebuilt: Callable[[LayoutClass], Callable | None] | None = None,
        jit_unavailable: Callable[[], str | None] | None = None,
    ) -> None:
        self._directory = Path(directory) if directory is not None else None
        self._disk = disk
        self._loader = loader if loader is not None else load_tvm_ffi_function
        self._build_env = build_env
        # An env derived from this installation (not passed in) is checked against the sources'
        # snapshot at import on every miss (`cache_store.kernel_sources_changed`).
        self._env_from_install = build_env is None
        self._prebuilt = prebuilt
        self._jit_unavailable = jit_unavailable
        self._lock = threading.RLock()
        self._memory: dict[LayoutClass, Callable] = {}
        self._info = CacheInfo()
        _INSTANCES.add(self)

    # ---- configuration ---------------------------------------------------------------------------

    @property
    def build_env(self) -> BuildEnv:
        """The `BuildEnv` entries are keyed by (the kernel sources are hashed on first use)."""
        if self._build_env is None:
            self._build_env = current_build_env()
        return self._build_env

    def cache_dir(self) -> Path | None:
        """The cache directory, or None when the disk cache is off. Raises ValueError for a bad
        `RAGGED_ATTN_DISK_CACHE` value. Creates nothing."""
        enabled = self._disk
        if enabled is None:
            raw = os.environ.get(DISK_CACHE_ENV, "").strip().lower()
            if raw not in _TRUE + _FALSE:
                raise ValueError(
                    f"{DISK_CACHE_ENV}={os.environ[DISK_CACHE_ENV]!r}: expected one of "
                    f"{_FALSE} (off) or {_TRUE[:-1]} (on)"
                )
            enabled = raw in _TRUE
        if not enabled:
            return None
        if self._directory is not None:
            return self._directory.expanduser()
        env_dir = os.environ.get(CACHE_DIR_ENV)
        if env_dir:
            return Path(env_dir).expanduser()  # `~/x` is the home's x, never a directory named ~
        import platformdirs

        return Path(platformdirs.user_cache_dir("ragged_attn"))

    def entry_paths(self, layout_class: LayoutClass, directory: Path | None = None) -> EntryPaths:
        """Where `layout_class`'s entry lives under `directory` (default `cache_dir()`), in this
        user's private subdirectory; creates nothing. Raises ValueError when the disk cache is off
        and no directory is given."""
        root = directory if directory is not None else self.cache_dir()
        if root is None:
            raise ValueError("the disk cache is off (RAGGED_ATTN_DISK_CACHE); no entry paths")
        entry_dir = root / cache_store.private_dir_name() / self.build_env.dir_name
        stem = layout_class.name
        fn_name = "ragged_attn_" + "".join(c if c.isalnum() else "_" for c in stem)
        return EntryPaths(
            directory=entry_dir,
            object_path=entry_dir / f"{stem}.o",
            meta_path=entry_dir / f"{stem}.json",
            lock_path=entry_dir / f"{stem}.lock",
            function_name=fn_name,
        )

    # ---- public API ------------------------------------------------------------------------------

    def get_kernel(
        self,
        layout_class: LayoutClass,
        compile_fn: Callable[[LayoutClass], Any],
        *,
        progress_label: str | None = None,
    ) -> Callable:
        """The compiled kernel of `layout_class`: from memory, else a prebuilt directory (when this
        cache has a `prebuilt` lookup), else a valid disk entry, else `compile_fn`.

        `compile_fn(layout_class)` must return the `cute.compile(..., options="--enable-tvm-ffi")`
        result for `layout_class.arch`; on a miss it is called once, exported to the entry's `.o`
        (atomic write under the entry's file lock) and the written entry is loaded back, so the
        returned callable is a `tvm_ffi.Function` whether it came from disk or from a compile
        (with the disk cache off, or when writing fails, it is `compile_fn`'s result itself).
        `progress_label`, if given, prints "compiling <label> ..." and the seconds to stderr.

        Raises TypeError if `layout_class` is not a LayoutClass, ValueError for a bad
        `RAGGED_ATTN_DISK_CACHE` value, NotImplementedError (naming the class and both remedies)
        when no prebuilt directory serves the class and `jit_unavailable()` gives a reason, and
        whatever `compile_fn` raises; nothing found on disk raises. Warns `CompileCacheWarning` when an entry is corrupt, foreign, insecure,
        unreadable or cannot be written (it recompiles and replaces the entry), when the entry
        lock cannot be taken (a valid entry is still loaded; else it compiles in memory only),
        or when the directory is unusable (memory only).
        """
        fn = self._memory.get(layout_class)
        if fn is not None:
            with self._lock:
                self._info = dataclasses.replace(self._info, memory_hits=self._info.memory_hits + 1)
            return fn
        if not isinstance(layout_class, LayoutClass):
            raise TypeError(f"layout_class: expected a LayoutClass, got {type(layout_class).__name__}")
        with self._lock:
            fn = self._memory.get(layout_class)
            if fn is not None:
                self._info = dataclasses.replace(self._info, memory_hits=self._info.memory_hits + 1)
                return fn
            fn = self._get_uncached(layout_class, compile_fn, progress_label)
            self._memory[layout_class] = fn
            self._info = dataclasses.replace(self._info, classes=self._info.classes + (layout_class,))
            return fn

    def cache_info(self) -> CacheInfo:
        """A snapshot of this process's counters (see `CacheInfo`)."""
        return self._info

    def clear_memory(self) -> None:
        """Forget every in-memory kernel and reset the counters, as a new process would start.
        Disk entries stay."""
        with self._lock:
            self._memory.clear()
            self._info = CacheInfo()

    # ---- the miss path ---------------------------------------------------------------------------

    def _get_uncached(self, lc: LayoutClass, compile_fn: Callable, label: str | None) -> Callable:
        if self._prebuilt is not None:
            fn = self._prebuilt(lc)
            if fn is not None:
                self._info = dataclasses.replace(self._info, prebuilt_hits=self._info.prebuilt_hits + 1)
                return fn
        if self._jit_unavailable is not None:
            reason = self._jit_unavailable()
            if reason is not None:
                from .prebuilt import missing_kernel_message

                raise NotImplementedError(missing_kernel_message(lc, reason))
        root = self.cache_dir()
        if root is None:
            return self._compile(lc, compile_fn, label)
        if self._env_from_install:
            changed = cache_store.kernel_sources_changed()
            if changed is not None:  # this process may run other code than the sources' digest names
                self._warn(
                    f"the kernel sources under {cache_store.KERNELS_ROOT} ({changed}); the disk cache "
                    f"is off for this process (restart it to use the cache): compiling {lc.name} in memory only"
                )
                return self._compile(lc, compile_fn, label)
        try:
            entry = self.entry_paths(lc, root)
            cache_store.prepare_root(root)
            dir_reason = cache_store.prepare_env_dir(entry.directory, self.build_env)
        except (OSError, cache_store.DiskUnusable) as e:
            self._warn(f"cache directory {root} is not usable ({e}); compiling {lc.name} in memory only")
            return self._compile(lc, compile_fn, label)

        reason = dir_reason
        if reason is None:
            # A valid entry is read without the lock (writers replace files atomically, metadata
            # last): a process holding the lock for long, or a read-only cache, delays no hit.
            stamp = cache_store.entry_stamp(entry)
            fn, reason = cache_store.read_entry(lc, entry, self.build_env, self._loader)
            if fn is not None:
                self._remove_stale_temps_if_unlocked(entry)
                self._info = dataclasses.replace(self._info, disk_hits=self._info.disk_hits + 1)
                return fn
        lock = self._lock_entry(entry)
        if lock is None:
            return self._get_without_lock(lc, entry, compile_fn, label)
        try:
            # Read again only when the files changed while we waited (another process wrote the entry).
            if dir_reason is None and cache_store.entry_stamp(entry) != stamp:
                fn, reason = cache_store.read_entry(lc, entry, self.build_env, self._loader)
                if fn is not None:
                    cache_store.remove_stale_temps(entry)
                    self._info = dataclasses.replace(self._info, disk_hits=self._info.disk_hits + 1)
                    return fn
            if reason is not None:
                self._warn(f"cache entry {entry.object_path}: {reason}; recompiling and replacing it")
            compiled = self._compile(lc, compile_fn, label)
            return self._store(lc, entry, compiled)
        finally:
            try:
                lock.release()
            except OSError:  # the lock file vanished or its file system went away: nothing to keep
                pass

    def _lock_entry(self, entry: EntryPaths):
        """The entry's file lock, acquired; None (with a warning) when it cannot be taken. A
        directory or symlink where the lock file belongs is removed and the lock retried once."""
        import filelock

        lock = filelock.FileLock(str(entry.lock_path), timeout=LOCK_TIMEOUT_S, mode=0o600)
        for attempt in range(2):
            try:
                if LOCK_NOTICE_S < LOCK_TIMEOUT_S:
                    try:
                        lock.acquire(timeout=LOCK_NOTICE_S)
                        return lock
                    except filelock.Timeout:  # another process compiles this class: say so, then wait on
                        print(
                            f"ragged_attn: waiting for {entry.lock_path} (another process is compiling or "
                            f"writing {entry.object_path.stem}); up to {LOCK_TIMEOUT_S - LOCK_NOTICE_S:g} s more",
                            file=sys.stderr,
                            flush=True,
                        )
                        lock.acquire(timeout=LOCK_TIMEOUT_S - LOCK_NOTICE_S)
                        return lock
                lock.acquire()
                return lock
            except filelock.Timeout:
                self._warn(
                    f"cache entry {entry.object_path}: lock {entry.lock_path} still held after "
                    f"{LOCK_TIMEOUT_S:g} s; reading the entry without it"
                )
                return None
            except OSError as e:
                if attempt == 0 and cache_store.clear_slot(entry.lock_path):
                    continue
                self._warn(
                    f"cache entry {entry.object_path}: lock {entry.lock_path} cannot be taken "
                    f"({type(e).__name__}: {e}); reading the entry without it"
                )
                return None
        return None

    @staticmethod
    def _remove_stale_temps_if_unlocked(entry: EntryPaths) -> None:
        """Remove temp files of dead writers when the entry lock is free right now (no writer is
        alive); otherwise, or when the lock cannot be taken at all (read-only), leave them. Never
        waits, never warns."""
        import filelock

        lock = filelock.FileLock(str(entry.lock_path), mode=0o600)
        try:
            lock.acquire(blocking=False)
        except (filelock.Timeout, OSError):
            return
        try:
            cache_store.remove_stale_temps(entry)
        finally:
            try:
                lock.release()
            except OSError:
                pass

    def _get_without_lock(self, lc: LayoutClass, entry: EntryPaths, compile_fn: Callable, label: str | None):
        """A valid entry is read as it is (writers replace files atomically, metadata last);
        anything else compiles in memory only: without the lock nothing is written."""
        fn, reason = cache_store.read_entry(lc, entry, self.build_env, self._loader)
        if fn is not None:
            self._info = dataclasses.replace(self._info, disk_hits=self._info.disk_hits + 1)
            return fn
        self._warn(
            f"cache entry {entry.object_path}: {reason or 'no entry'} and no lock to write one; "
            f"compiling {lc.name} in memory only"
        )
        return self._compile(lc, compile_fn, label)

    def _compile(self, lc: LayoutClass, compile_fn: Callable, label: str | None) -> Any:
        if label is not None:
            print(f"ragged_attn: compiling {label} [{lc.name}] ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        with cache_store.DSL_LOCK:  # the DSL compiles one thing at a time per process
            compiled = compile_fn(lc)
        seconds = time.perf_counter() - t0
        self._info = dataclasses.replace(
            self._info, compiles=self._info.compiles + 1, compile_seconds=self._info.compile_seconds + seconds
        )
        if label is not None:
            print(f"ragged_attn: compiled {label} in {seconds:.2f} s", file=sys.stderr, flush=True)
        return compiled

    def _store(self, lc: LayoutClass, entry: EntryPaths, compiled: Any) -> Callable:
        """Write `compiled` as `lc`'s entry and load it back. Returns the loaded function, or
        `compiled` itself (with a warning) if writing or loading fails."""
        try:
            cache_store.write_entry(lc, entry, self.build_env, compiled)
        except Exception as e:  # noqa: BLE001 -- a cache that cannot write still serves the kernel
            self._warn(
                f"cache entry {entry.object_path}: could not be written "
                f"({type(e).__name__}: {e}); keeping {lc.name} in memory only"
            )
            return compiled
        try:
            return self._loader(entry.object_path, entry.function_name)
        except Exception as e:  # noqa: BLE001
            self._warn(
                f"cache entry {entry.object_path}: written but failed to load back "
                f"({type(e).__name__}: {str(e).strip()[:300]}); using the in-memory kernel"
            )
            return compiled

    @staticmethod
    def _warn(message: str) -> None:
        warnings.warn(f"ragged_attn compile cache: {message}", CompileCacheWarning, stacklevel=5)


# Every CompileCache, so that a forked child gets fresh locks: a fork while another thread compiles
# (holding the cache's lock and DSL_LOCK) would otherwise leave them held forever in the child, whose
# first miss then hangs. The child keeps the kernels in memory; the compile in flight is not among them.
_INSTANCES: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    cache_store.DSL_LOCK = threading.RLock()
    for cache in list(_INSTANCES):
        cache._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# ---- the process-wide default cache ------------------------------------------------------------------

def _prebuilt_lookup(layout_class: LayoutClass) -> Callable | None:
    from .prebuilt import get_prebuilt

    return get_prebuilt(layout_class)


def _jit_unavailable() -> str | None:
    from .backends import cute_import_error

    return cute_import_error()


_DEFAULT = CompileCache(prebuilt=_prebuilt_lookup, jit_unavailable=_jit_unavailable)


def get_kernel(
    layout_class: LayoutClass, compile_fn: Callable[[LayoutClass], Any], *, progress_label: str | None = None
) -> Callable:
    """`CompileCache.get_kernel` on the process-wide cache (directory from the environment)."""
    return _DEFAULT.get_kernel(layout_class, compile_fn, progress_label=progress_label)


def cache_info() -> CacheInfo:
    """This process's counters of the process-wide cache (see `CacheInfo`)."""
    return _DEFAULT.cache_info()


def clear_memory() -> None:
    """Empty the process-wide in-memory cache and reset its counters; disk entries stay (and
    prebuilt manifests are not read again: `prebuilt.reset()` does that)."""
    _DEFAULT.clear_memory()


def cache_dir() -> Path | None:
    """The process-wide cache's directory (`RAGGED_ATTN_CACHE_DIR` or the platformdirs user cache
    dir), or None when `RAGGED_ATTN_DISK_CACHE` turns it off. Creates nothing."""
    return _DEFAULT.cache_dir()
