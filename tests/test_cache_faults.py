"""Fault injection for the compile cache: the damage catalogue of issue 11, kept true.

Promise under test (ragged_attn/compile_cache.py, docs/SUPPORT_MATRIX.md "Compile cache under
faults"): nothing found on disk raises from `get_kernel` (so neither from `warmup`, `attention`
nor `plan`); damage is refused with a `CompileCacheWarning` and either rebuilt once (entry files),
read without the lock (lock problems: a valid entry is still a disk hit) or served in memory only
(a directory that cannot be made safe); a directory the cache did not create keeps its mode.

Groups: lock, object, metadata, directory shapes, modes, read-only mount, concurrent writers,
kill mid-write. Running as root defeats permission bits, so the permission faults are injected
(the failing call raises the errno the kernel would) and, where the bits bite, also made real.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from ragged_attn import cache_store
from ragged_attn import compile_cache as cc
from ragged_attn.compile_cache import CompileCache, CompileCacheWarning
from tests.test_compile_cache import (
    ENV,
    LC,
    CountingCompile,
    FakeCompiled,
    _worker_env,
    assert_rebuilt,
    fake_loader,
    make_cache,
    mode_of,
    must_not_compile,
    warm_entry,
)

TESTS_DIR = str(Path(__file__).resolve().parent)


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def permission_bites(path: Path) -> bool:
    """True when this process is refused reading `path` (False as root, whose reads ignore modes)."""
    try:
        with open(path, "rb"):
            return False
    except PermissionError:
        return True


def no_warnings():
    """A context in which any warning is an error (the repaired cases must be silent)."""
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("error")
    return ctx


def failing_acquire(monkeypatch, exc: OSError) -> None:
    """Every entry lock raises `exc` on acquire, as the kernel would for that fault."""
    import filelock

    def acquire(self, *args, **kwargs):
        raise exc

    monkeypatch.setattr(filelock.FileLock, "acquire", acquire)


# ---- the lock -------------------------------------------------------------------------------------

LOCK_ERRORS = {
    "read-only-mount": OSError(errno.EROFS, "Read-only file system"),
    "dir-not-writable-lock-missing": PermissionError(errno.EACCES, "Permission denied"),
    "lock-mode-0400": PermissionError(errno.EACCES, "Permission denied"),
    "lock-mode-000": PermissionError(errno.EACCES, "Permission denied"),
    "too-many-symlinks": OSError(errno.ELOOP, "Too many levels of symbolic links"),
    "is-a-directory": IsADirectoryError(errno.EISDIR, "Is a directory"),
}


@pytest.mark.parametrize("fault", sorted(LOCK_ERRORS))
def test_lock_error_with_a_valid_entry_is_a_silent_disk_hit(tmp_path, monkeypatch, fault):
    """A valid entry is read before any lock is asked for: no warning, no compile."""
    warm_entry(tmp_path)
    failing_acquire(monkeypatch, LOCK_ERRORS[fault])
    cache = make_cache(tmp_path)
    ctx = no_warnings()
    try:
        fn = cache.get_kernel(LC, must_not_compile)
    finally:
        ctx.__exit__(None, None, None)
    assert fn()[0] == "loaded"
    info = cache.cache_info()
    assert (info.compiles, info.disk_hits) == (0, 1)


@pytest.mark.parametrize("fault", sorted(LOCK_ERRORS))
def test_lock_error_with_a_damaged_entry_warns_and_compiles_in_memory(tmp_path, monkeypatch, fault):
    _, entry = warm_entry(tmp_path)
    entry.object_path.write_bytes(entry.object_path.read_bytes()[:40])
    failing_acquire(monkeypatch, LOCK_ERRORS[fault])
    cache = make_cache(tmp_path)
    compile_fn = CountingCompile()
    with (
        pytest.warns(CompileCacheWarning, match="cannot be taken .*reading the entry without it"),
        pytest.warns(CompileCacheWarning, match="sha256/size mismatch .* and no lock to write one"),
    ):
        fn = cache.get_kernel(LC, compile_fn)
    assert isinstance(fn, FakeCompiled) and compile_fn.calls == [LC]


@pytest.mark.parametrize("fault", sorted(LOCK_ERRORS))
def test_lock_error_without_an_entry_compiles_in_memory_and_writes_nothing(tmp_path, monkeypatch, fault):
    failing_acquire(monkeypatch, LOCK_ERRORS[fault])
    cache = make_cache(tmp_path)
    compile_fn = CountingCompile()
    with (
        pytest.warns(CompileCacheWarning, match="cannot be taken"),
        pytest.warns(CompileCacheWarning, match="no lock to write one; compiling .* in memory only"),
    ):
        fn = cache.get_kernel(LC, compile_fn)
    assert isinstance(fn, FakeCompiled) and compile_fn.calls == [LC]
    entry = cache.entry_paths(LC)
    assert not os.path.lexists(entry.object_path) and not os.path.lexists(entry.meta_path)
    assert cache.get_kernel(LC, must_not_compile) is fn, "the in-memory kernel serves the process"


def test_lock_error_through_the_public_warmup(tmp_path, monkeypatch):
    """`warmup` (and so `attention` and `plan`, which share `get_kernel`) does not raise."""
    import ragged_attn

    pytest.importorskip("cutlass")
    from ragged_attn.kernels import sm90

    monkeypatch.setenv("RAGGED_ATTN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RAGGED_ATTN_DISK_CACHE", raising=False)
    monkeypatch.setattr(cc._DEFAULT, "_loader", fake_loader)
    monkeypatch.setattr(cc._DEFAULT, "_build_env", ENV)
    compile_fn = CountingCompile()
    monkeypatch.setattr(sm90, "compile_forward", compile_fn)
    failing_acquire(monkeypatch, LOCK_ERRORS["read-only-mount"])
    cc.clear_memory()
    try:
        with pytest.warns(CompileCacheWarning, match="cannot be taken"), pytest.warns(
            CompileCacheWarning, match="in memory only"
        ):
            assert ragged_attn.warmup([LC], progress=False) == [LC]
        assert compile_fn.calls == [LC]
    finally:
        cc.clear_memory()


@pytest.mark.parametrize("mode", [0o400, 0o000])
def test_lock_file_without_write_permission(tmp_path, mode):
    """Real mode bits: refused with a warning where they bite, taken where they do not (root)."""
    _, entry = warm_entry(tmp_path)
    os.chmod(entry.lock_path, mode)
    cache = make_cache(tmp_path)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fn = cache.get_kernel(LC, must_not_compile)
    assert fn()[0] == "loaded" and cache.cache_info().disk_hits == 1
    if not is_root():
        assert any("cannot be taken" in str(w.message) for w in record), [str(w.message) for w in record]


@pytest.mark.parametrize(
    "shape",
    ["directory", "directory-with-files", "symlink-to-file", "dangling-symlink", "symlink-loop"],
)
@pytest.mark.parametrize("warm", [True, False], ids=["entry", "no-entry"])
def test_lock_slot_of_the_wrong_shape_is_repaired(tmp_path, shape, warm):
    """A directory or symlink where the lock belongs is removed and the lock taken: no warning;
    a valid entry is a disk hit, a missing one is compiled and stored once."""
    cache = make_cache(tmp_path)
    entry = cache.entry_paths(LC)
    if warm:
        warm_entry(tmp_path)
    else:
        entry.directory.mkdir(parents=True, mode=0o700)
    entry.lock_path.unlink(missing_ok=True)
    target = tmp_path / "elsewhere"
    target.write_text("not the cache's")
    if shape == "directory":
        entry.lock_path.mkdir()
    elif shape == "directory-with-files":
        (entry.lock_path / "sub").mkdir(parents=True)
        (entry.lock_path / "sub" / "f").write_text("x")
    elif shape == "symlink-to-file":
        entry.lock_path.symlink_to(target)
    elif shape == "dangling-symlink":
        entry.lock_path.symlink_to(tmp_path / "nowhere")
    else:
        entry.lock_path.symlink_to(entry.lock_path)
    compile_fn = CountingCompile()
    ctx = no_warnings()
    try:
        fn = cache.get_kernel(LC, compile_fn)
    finally:
        ctx.__exit__(None, None, None)
    assert fn()[0] == "loaded"
    assert compile_fn.calls == ([] if warm else [LC])
    if not warm:  # a valid entry is read without the lock, so its slot is left as found
        assert stat.S_ISREG(os.lstat(entry.lock_path).st_mode)
    assert target.read_text() == "not the cache's", "a symlink's target is never touched"
    make_cache(tmp_path).get_kernel(LC, must_not_compile)


def test_lock_slot_that_cannot_be_repaired_compiles_in_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_store, "clear_slot", lambda path: False)
    failing_acquire(monkeypatch, LOCK_ERRORS["is-a-directory"])
    cache = make_cache(tmp_path)
    compile_fn = CountingCompile()
    with (
        pytest.warns(CompileCacheWarning, match="IsADirectoryError"),
        pytest.warns(CompileCacheWarning, match="no entry and no lock to write one"),
    ):
        fn = cache.get_kernel(LC, compile_fn)
    assert isinstance(fn, FakeCompiled) and compile_fn.calls == [LC]


# ---- the object file --------------------------------------------------------------------------------


def fail_reading(monkeypatch, path: Path, exc: OSError) -> None:
    real = cache_store.read_file

    def read_file(p):
        if Path(p) == path:
            raise exc
        return real(p)

    monkeypatch.setattr(cache_store, "read_file", read_file)


def test_object_the_process_cannot_read_is_rebuilt(tmp_path, monkeypatch):
    _, entry = warm_entry(tmp_path)
    fail_reading(monkeypatch, entry.object_path, PermissionError(errno.EACCES, "Permission denied"))
    cache = make_cache(tmp_path)
    compile_fn = CountingCompile()
    with pytest.warns(CompileCacheWarning, match="object file .* is unreadable .*PermissionError"):
        cache.get_kernel(LC, compile_fn)
    assert compile_fn.calls == [LC]


def test_object_of_mode_000_is_rebuilt_or_read(tmp_path):
    """Real mode bits: where they bite the entry is rebuilt (replaced, so readable again);
    as root the object reads and is a disk hit."""
    _, entry = warm_entry(tmp_path)
    os.chmod(entry.object_path, 0)
    if permission_bites(entry.object_path):
        assert_rebuilt(tmp_path, "is unreadable")
    else:
        make_cache(tmp_path).get_kernel(LC, must_not_compile)


@pytest.mark.parametrize("which", ["object", "meta"])
@pytest.mark.parametrize("shape", ["empty-dir", "dir-with-files", "fifo", "symlink-loop"])
def test_wrong_shape_where_an_entry_file_belongs_is_repaired(tmp_path, which, shape):
    """Rebuilt once with a warning, and repaired: the next process gets a disk hit."""
    _, entry = warm_entry(tmp_path)
    path = entry.object_path if which == "object" else entry.meta_path
    path.unlink()
    if shape == "empty-dir":
        path.mkdir()
    elif shape == "dir-with-files":
        (path / "a" / "b").mkdir(parents=True)
        (path / "a" / "f").write_bytes(b"x")
    elif shape == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(path)
    assert_rebuilt(tmp_path, "symbolic link" if shape == "symlink-loop" else "not a regular file")
    assert stat.S_ISREG(os.lstat(path).st_mode)


# ---- the metadata -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content,reason",
    [
        (b"[" * 200_000 + b"]" * 200_000, "RecursionError"),
        (b'{"a": ' * 200_000 + b"1" + b"}" * 200_000, "larger than"),
        (b" " * (cache_store.MAX_META_BYTES + 1), "larger than"),
        (b"\xff\xfe not utf-8", "not JSON"),
        (b"", "not JSON"),
        (b'{"format_version": NaN}', "format_version"),
        (b"null", "not a JSON object"),
    ],
    ids=["nested-200k", "nested-object-200k", "oversized", "not-utf8", "empty", "nan", "null"],
)
def test_metadata_that_cannot_be_parsed_is_rebuilt(tmp_path, content, reason):
    _, entry = warm_entry(tmp_path)
    entry.meta_path.write_bytes(content)
    assert_rebuilt(tmp_path, reason)


def test_metadata_nested_deep_but_small_is_rebuilt(tmp_path):
    """Deep nesting within the size bound reaches the parser, whose RecursionError is a reason."""
    _, entry = warm_entry(tmp_path)
    depth = cache_store.MAX_META_BYTES // 2 - 1
    entry.meta_path.write_bytes(b"[" * depth + b"]" * depth)
    assert_rebuilt(tmp_path, "RecursionError")


def test_metadata_the_process_cannot_read_is_rebuilt(tmp_path, monkeypatch):
    _, entry = warm_entry(tmp_path)
    fail_reading(monkeypatch, entry.meta_path, PermissionError(errno.EACCES, "Permission denied"))
    cache = make_cache(tmp_path)
    compile_fn = CountingCompile()
    with pytest.warns(CompileCacheWarning, match="metadata .* is unreadable .*PermissionError"):
        cache.get_kernel(LC, compile_fn)
    assert compile_fn.calls == [LC]


@pytest.mark.parametrize("field,value", [("object_size", "12"), ("layout_class", []), ("function_name", 7)])
def test_metadata_fields_of_the_wrong_type_are_rebuilt(tmp_path, field, value):
    _, entry = warm_entry(tmp_path)
    meta = json.loads(entry.meta_path.read_bytes())
    meta[field] = value
    entry.meta_path.write_text(json.dumps(meta))
    assert_rebuilt(tmp_path, f"{field!r} is missing or not a")


# ---- directory shapes ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["file", "symlink-to-dir", "dangling-symlink"])
def test_env_dir_of_the_wrong_shape_is_remade(tmp_path, shape):
    cache = make_cache(tmp_path)
    entry = cache.entry_paths(LC)
    entry.directory.parent.mkdir(parents=True, mode=0o700)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine")
    if shape == "file":
        entry.directory.write_text("not a directory")
    elif shape == "symlink-to-dir":
        entry.directory.symlink_to(outside, target_is_directory=True)
    else:
        entry.directory.symlink_to(tmp_path / "nowhere")
    compile_fn = CountingCompile()
    cache.get_kernel(LC, compile_fn)
    assert compile_fn.calls == [LC]
    assert stat.S_ISDIR(os.lstat(entry.directory).st_mode) and mode_of(entry.directory) == 0o700
    assert sorted(p.name for p in outside.iterdir()) == ["keep"], "a symlink's target is never written"
    make_cache(tmp_path).get_kernel(LC, must_not_compile)


@pytest.mark.parametrize("shape", ["file", "symlink-to-dir", "group-writable", "other-writable"])
def test_private_subdirectory_that_cannot_be_trusted_is_refused(tmp_path, shape):
    """Memory only, with a warning; the private subdirectory (or its target) is left as it was."""
    root = tmp_path / "cache"
    root.mkdir()
    private = root / cache_store.private_dir_name()
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    if shape == "file":
        private.write_text("x")
    elif shape == "symlink-to-dir":
        private.symlink_to(outside, target_is_directory=True)
    else:
        private.mkdir()
        os.chmod(private, 0o770 if shape == "group-writable" else 0o707)
    before = os.lstat(private).st_mode
    cache = make_cache(tmp_path)
    compile_fn = CountingCompile()
    with pytest.warns(CompileCacheWarning, match="private subdirectory .*in memory only"):
        fn = cache.get_kernel(LC, compile_fn)
    assert isinstance(fn, FakeCompiled) and compile_fn.calls == [LC]
    assert os.lstat(private).st_mode == before and list(outside.iterdir()) == []


def test_root_behind_a_symlink_is_used(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.chmod(real, 0o755)
    (tmp_path / "cache").symlink_to(real, target_is_directory=True)
    make_cache(tmp_path).get_kernel(LC, CountingCompile())
    make_cache(tmp_path).get_kernel(LC, must_not_compile)
    assert mode_of(real) == 0o755 and (real / cache_store.private_dir_name()).is_dir()


def test_missing_root_and_parents_are_created(tmp_path):
    cache = CompileCache(tmp_path / "a" / "b" / "cache", disk=True, loader=fake_loader, build_env=ENV)
    cache.get_kernel(LC, CountingCompile())
    assert mode_of(tmp_path / "a" / "b" / "cache") == 0o700
    assert cache.entry_paths(LC).object_path.is_file()


def test_root_that_cannot_be_created_is_memory_only(tmp_path, monkeypatch):
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if self == tmp_path / "cache":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.warns(CompileCacheWarning, match="not usable .*Permission denied.*in memory only"):
        fn = make_cache(tmp_path).get_kernel(LC, CountingCompile())
    assert isinstance(fn, FakeCompiled)


# ---- modes of the caller's directory --------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o1777, 0o2775, 0o2770, 0o777, 0o755, 0o500])
def test_the_callers_directory_keeps_its_mode(tmp_path, mode):
    """As root with RAGGED_ATTN_CACHE_DIR=/tmp the old cache set /tmp to 0700; never again."""
    root = tmp_path / "cache"
    root.mkdir()
    os.chmod(root, mode)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CompileCacheWarning)  # 0o500 refuses writes where it bites
            make_cache(tmp_path).get_kernel(LC, CountingCompile())
        assert mode_of(root) == mode
    finally:
        os.chmod(root, 0o700)


def test_the_process_wide_cache_on_a_sticky_shared_directory(tmp_path, monkeypatch):
    shared = tmp_path / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    monkeypatch.setenv("RAGGED_ATTN_CACHE_DIR", str(shared))
    monkeypatch.delenv("RAGGED_ATTN_DISK_CACHE", raising=False)
    monkeypatch.setattr(cc._DEFAULT, "_loader", fake_loader)
    monkeypatch.setattr(cc._DEFAULT, "_build_env", ENV)
    cc.clear_memory()
    try:
        cc.get_kernel(LC, CountingCompile())
    finally:
        cc.clear_memory()
    assert mode_of(shared) == 0o1777
    assert [p.name for p in shared.iterdir()] == [cache_store.private_dir_name()]


# ---- a read-only mount ------------------------------------------------------------------------------

RO_WORKER = textwrap.dedent(
    """
    import json, sys, warnings
    sys.path.insert(0, sys.argv[3])
    from test_compile_cache import LC, LC2, ENV, CountingCompile, fake_loader
    from ragged_attn.compile_cache import CompileCache

    role, root = sys.argv[1], sys.argv[2]
    cache = CompileCache(root, disk=True, loader=fake_loader, build_env=ENV)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for lc in ([LC] if role == "warm" else [LC, LC2]):
            cache.get_kernel(lc, CountingCompile())
    info = cache.cache_info()
    print(json.dumps({"compiles": info.compiles, "disk_hits": info.disk_hits,
                      "warnings": [str(w.message) for w in record]}))
    """
)


def _can_mount_read_only(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.mkdir()
    cmd = f'mount --bind "{probe}" "{probe}" && mount -o remount,ro,bind "{probe}" && ! touch "{probe}/x"'
    try:
        r = subprocess.run(
            ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", cmd], capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def test_read_only_mount_holding_valid_entries(tmp_path):
    """A real read-only bind mount (in a user + mount namespace, where the machine allows): the
    valid entry is a disk hit without a warning, another class compiles in memory only, nothing raises."""
    if shutil.which("unshare") is None or not _can_mount_read_only(tmp_path):
        pytest.skip("no unprivileged read-only bind mount on this machine (unshare --user --mount)")
    script = tmp_path / "ro_worker.py"
    script.write_text(RO_WORKER)
    root = tmp_path / "mnt"
    root.mkdir()
    py = f'"{sys.executable}" "{script}"'
    cmd = (
        f'{py} warm "{root}" "{TESTS_DIR}" > "{tmp_path}/warm.json" && '
        f'mount --bind "{root}" "{root}" && mount -o remount,ro,bind "{root}" && '
        f'{py} read "{root}" "{TESTS_DIR}"'
    )
    r = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", cmd],
        capture_output=True, text=True, timeout=240, env=_worker_env(), check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    warm = json.loads((tmp_path / "warm.json").read_text().strip().splitlines()[-1])
    read = json.loads(r.stdout.strip().splitlines()[-1])
    assert (warm["compiles"], warm["disk_hits"]) == (1, 0)
    assert (read["compiles"], read["disk_hits"]) == (1, 1), read
    assert any("cannot be taken" in m and "Read-only" in m for m in read["warnings"]), read["warnings"]
    assert any("in memory only" in m for m in read["warnings"]), read["warnings"]
    assert not any(f"{LC.name}." in m for m in read["warnings"]), "the valid entry is a silent disk hit"


# ---- concurrent writers -----------------------------------------------------------------------------

CONCURRENT_WORKER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from test_compile_cache import LC, LC2, ENV, FakeCompiled, fake_loader
    from ragged_attn.compile_cache import CompileCache

    sync = Path(sys.argv[1])
    compiled = []

    def compile_fn(lc):
        compiled.append(lc.name)
        time.sleep(0.3)
        return FakeCompiled(lc)

    (sync / f"ready.{sys.argv[3]}").touch()
    deadline = time.time() + 120
    while not (sync / "go").exists():
        assert time.time() < deadline
        time.sleep(0.005)
    cache = CompileCache(sync / "cache", disk=True, loader=fake_loader, build_env=ENV)
    for lc in (LC, LC2) if int(sys.argv[3]) % 2 else (LC2, LC):
        assert cache.get_kernel(lc, compile_fn)()[0] == "loaded"
    print(json.dumps({"compiled": compiled, "disk_hits": cache.cache_info().disk_hits}))
    """
)


def test_concurrent_writers_compile_each_class_once(tmp_path):
    """8 processes released at once ask for two classes in opposite orders: each class compiles
    exactly once on the machine, every other request is a disk hit, no temp file remains."""
    n = 8
    script = tmp_path / "worker.py"
    script.write_text(CONCURRENT_WORKER)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path), TESTS_DIR, str(i)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_worker_env(),
        )
        for i in range(n)
    ]
    try:
        deadline = time.time() + 180
        while len(list(tmp_path.glob("ready.*"))) < n:
            assert time.time() < deadline, "workers did not start"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
            time.sleep(0.05)
        (tmp_path / "go").touch()
        outputs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    compiled = sorted(name for r in results for name in r["compiled"])
    assert compiled == sorted([LC.name, "sm_90a-d64x64-fp16-fp16-none-nolse-paged"]), compiled
    assert sum(r["disk_hits"] for r in results) == 2 * n - 2
    entry_dir = make_cache(tmp_path).entry_paths(LC).directory
    assert not [p.name for p in entry_dir.iterdir() if ".tmp" in p.name]


# ---- kill mid-write -------------------------------------------------------------------------------

KILL_WORKER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[3])
    from test_compile_cache import LC, ENV, FakeCompiled, fake_loader
    from ragged_attn import cache_store
    from ragged_attn.compile_cache import CompileCache

    point, root = sys.argv[1], Path(sys.argv[2])

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    class DyingExport(FakeCompiled):
        def export_to_c(self, path, name):
            Path(path).write_bytes(b"partial object")
            die()

    real_atomic = cache_store.atomic_write_bytes

    def atomic_write_bytes(path, data):
        if path.name == point:  # write the temp file as the real one would, then die
            tmp = path.with_name(f".{path.name}.{os.getpid()}.deadbeef.tmp")
            tmp.write_bytes(data[: len(data) // 2])
            die()
        return real_atomic(path, data)

    cache_store.atomic_write_bytes = atomic_write_bytes
    cache = CompileCache(root, disk=True, loader=fake_loader, build_env=ENV)
    cache.get_kernel(LC, (lambda lc: DyingExport(lc)) if point == "export" else FakeCompiled)
    print("survived")
    """
)


@pytest.mark.parametrize(
    "point,reason",
    [
        ("export", None),
        (f"{LC.name}.json", "object file but no metadata"),
        ("env.json", None),
    ],
    ids=["during-export", "between-object-and-metadata", "between-env-dir-and-env-json"],
)
def test_a_writer_killed_mid_write_leaves_nothing_forever(tmp_path, point, reason):
    """SIGKILL at each write point; the next process warns where there is damage, compiles once,
    and leaves a valid entry and no temp file (env.json's temp once it is old enough to be dead)."""
    script = tmp_path / "kill_worker.py"
    script.write_text(KILL_WORKER)
    root = tmp_path / "cache"
    r = subprocess.run(
        [sys.executable, str(script), point, str(root), TESTS_DIR],
        capture_output=True, text=True, timeout=240, env=_worker_env(), check=False,
    )  # fmt: skip
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stdout, r.stderr)
    cache = make_cache(tmp_path)
    entry = cache.entry_paths(LC)
    temps = [p for p in entry.directory.iterdir() if ".tmp" in p.name]
    assert temps, "the kill left a temp file (else this test injects nothing)"
    if point == "env.json":
        assert not (entry.directory / "env.json").exists()
        old = time.time() - 2 * cache_store.STALE_TEMP_SECONDS
        for p in temps:
            os.utime(p, (old, old))
    compile_fn = CountingCompile()
    if reason is None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cache.get_kernel(LC, compile_fn)
    else:
        with pytest.warns(CompileCacheWarning, match=reason):
            cache.get_kernel(LC, compile_fn)
    assert compile_fn.calls == [LC]
    names = sorted(p.name for p in entry.directory.iterdir())
    assert names == sorted(["env.json", f"{LC.name}.o", f"{LC.name}.json", f"{LC.name}.lock"]), names
    make_cache(tmp_path).get_kernel(LC, must_not_compile)


def test_stale_temps_of_a_dead_rewriter_are_removed_on_a_disk_hit(tmp_path):
    _, entry = warm_entry(tmp_path)
    stale = entry.directory / f".{LC.name}.99999.deadbeef.tmp.o"
    stale.write_bytes(b"partial")
    make_cache(tmp_path).get_kernel(LC, must_not_compile)
    assert not stale.exists()


def test_a_young_env_json_temp_is_left_to_its_writer(tmp_path):
    _, entry = warm_entry(tmp_path)
    young = entry.directory / ".env.json.99999.deadbeef.tmp"
    young.write_bytes(b"{")
    make_cache(tmp_path).get_kernel(LC, must_not_compile)
    assert young.exists(), "a writer may still be replacing it"
