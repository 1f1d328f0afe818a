"""Tests of ragged_attn.compile_cache: memory/disk hits, atomic entries, corruption, permissions, locking.

Most tests drive the cache with a fake compile_fn (its "object" is a small byte string) and a fake
loader, so the cache logic is covered without the DSL. The tests marked `cute` use a real
TVM-FFI CuTe-DSL kernel compiled for sm_90a on the CPU and the real `export_to_c`/`load_module`.
Every test uses its own temporary cache directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import platform
import stat
import subprocess
import sys
import textwrap
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ragged_attn import cache_store
from ragged_attn import compile_cache as cc
from ragged_attn.compile_cache import BuildEnv, CompileCache, CompileCacheWarning
from ragged_attn.layout_class import LayoutClass

REPO_ROOT = Path(__file__).resolve().parents[1]
LC = LayoutClass(
    arch="sm_90a", d_qk=128, d_v=128, dtype="bf16", out_dtype="bf16", mask="causal", lse=True, kv="ragged"
)
LC2 = LayoutClass(
    arch="sm_90a", d_qk=64, d_v=64, dtype="fp16", out_dtype="fp16", mask="none", lse=False, kv="paged"
)
ENV = BuildEnv(kernel_source_digest="0" * 64, dsl_version="4.8.1", tvm_ffi_version="0.1.15.post2")
FAKE_MAGIC = b"FAKEOBJ\n"


# ---- fakes ---------------------------------------------------------------------------------------


class FakeCompiled:
    """Stands in for a TVM-FFI compiled function: `export_to_c` writes a recognisable object."""

    def __init__(self, lc: LayoutClass):
        self.lc = lc

    def export_to_c(self, object_file_path: str, function_name: str) -> None:
        Path(object_file_path).write_bytes(FAKE_MAGIC + f"{function_name}\n{self.lc.name}\n".encode() * 50)


class CountingCompile:
    def __init__(self, seconds: float = 0.0):
        self.calls: list[LayoutClass] = []
        self.seconds = seconds

    def __call__(self, lc: LayoutClass) -> FakeCompiled:
        self.calls.append(lc)
        time.sleep(self.seconds)
        return FakeCompiled(lc)


def must_not_compile(lc: LayoutClass):
    raise AssertionError(f"compile_fn called for {lc.name}; expected a cache hit")


def fake_loader(path: Path, function_name: str):
    data = Path(path).read_bytes()
    if not data.startswith(FAKE_MAGIC) or function_name.encode() not in data:
        raise RuntimeError(f"{path} is not a fake object exporting {function_name}")
    return lambda: ("loaded", function_name, data)


def make_cache(tmp_path: Path, **kw) -> CompileCache:
    kw.setdefault("loader", fake_loader)
    kw.setdefault("build_env", ENV)
    return CompileCache(tmp_path / "cache", disk=True, **kw)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def warm_entry(tmp_path: Path):
    """A cache whose entry for LC is on disk, and that entry's paths."""
    cache = make_cache(tmp_path)
    cache.get_kernel(LC, CountingCompile())
    return cache, cache.entry_paths(LC)


def assert_rebuilt(tmp_path: Path, reason_part: str) -> None:
    """A new "process" warns naming the entry and `reason_part`, recompiles once, rewrites a valid
    entry; the process after that gets a disk hit."""
    cache = make_cache(tmp_path)
    entry = cache.entry_paths(LC)
    compile_fn = CountingCompile()
    with pytest.warns(CompileCacheWarning) as record:
        fn = cache.get_kernel(LC, compile_fn)
    messages = [str(w.message) for w in record]
    assert any(str(entry.object_path) in m and reason_part in m for m in messages), messages
    assert compile_fn.calls == [LC]
    assert fn()[0] == "loaded"
    info = cache.cache_info()
    assert (info.compiles, info.disk_hits) == (1, 0)
    meta = json.loads(entry.meta_path.read_bytes())
    assert meta["object_sha256"] == hashlib.sha256(entry.object_path.read_bytes()).hexdigest()
    assert mode_of(entry.object_path) == 0o600 and mode_of(entry.meta_path) == 0o600
    assert mode_of(entry.directory) == 0o700
    again = make_cache(tmp_path)
    again.get_kernel(LC, must_not_compile)
    assert again.cache_info().disk_hits == 1


# ---- hits and counters ---------------------------------------------------------------------------


def test_miss_then_memory_hit(tmp_path):
    cache = make_cache(tmp_path)
    compile_fn = CountingCompile(seconds=0.02)
    fn1 = cache.get_kernel(LC, compile_fn)
    fn2 = cache.get_kernel(LC, compile_fn)
    assert fn1 is fn2
    assert compile_fn.calls == [LC]
    info = cache.cache_info()
    assert (info.compiles, info.memory_hits, info.disk_hits, info.classes) == (1, 1, 0, (LC,))
    assert info.compile_seconds >= 0.02


def test_new_process_gets_disk_hit_without_compiling(tmp_path):
    cache = make_cache(tmp_path)
    cache.get_kernel(LC, CountingCompile())
    cache.clear_memory()
    assert cache.cache_info() == cc.CacheInfo()
    fn = cache.get_kernel(LC, must_not_compile)
    assert fn()[1] == cache.entry_paths(LC).function_name
    other_process = make_cache(tmp_path)
    other_process.get_kernel(LC, must_not_compile)
    other_process.get_kernel(LC, must_not_compile)
    info = other_process.cache_info()
    assert (info.compiles, info.memory_hits, info.disk_hits, info.compile_seconds) == (0, 1, 1, 0.0)
    assert info.classes == (LC,)


def test_counters_over_two_classes(tmp_path):
    cache = make_cache(tmp_path)
    compile_fn = CountingCompile()
    for lc in (LC, LC2, LC, LC2, LC):
        cache.get_kernel(lc, compile_fn)
    info = cache.cache_info()
    assert (info.compiles, info.memory_hits, info.disk_hits, info.classes) == (2, 3, 0, (LC, LC2))
    fresh = make_cache(tmp_path)
    fresh.get_kernel(LC2, must_not_compile)
    fresh.get_kernel(LC, must_not_compile)
    assert fresh.cache_info().classes == (LC2, LC) and fresh.cache_info().disk_hits == 2


def test_compile_error_propagates_and_caches_nothing(tmp_path):
    cache = make_cache(tmp_path)

    def broken(lc):
        raise RuntimeError("kernel does not trace")

    with pytest.raises(RuntimeError, match="does not trace"):
        cache.get_kernel(LC, broken)
    entry = cache.entry_paths(LC)
    assert not entry.meta_path.exists() and not entry.object_path.exists()
    compile_fn = CountingCompile()
    cache.get_kernel(LC, compile_fn)  # the file lock was released
    assert compile_fn.calls == [LC] and cache.cache_info().compiles == 1


def test_rejects_non_layout_class(tmp_path):
    with pytest.raises(TypeError, match="LayoutClass"):
        make_cache(tmp_path).get_kernel(("sm_90a", 128), CountingCompile())


def test_progress_label_reports_compiles_only(tmp_path, capsys):
    cache = make_cache(tmp_path)
    cache.get_kernel(LC, CountingCompile(), progress_label="causal d128")
    err = capsys.readouterr().err
    assert "compiling causal d128" in err and LC.name in err and "compiled causal d128 in" in err
    make_cache(tmp_path).get_kernel(LC, must_not_compile, progress_label="causal d128")
    assert capsys.readouterr().err == ""


# ---- layout on disk ------------------------------------------------------------------------------


def test_entry_layout_and_metadata(tmp_path):
    _, entry = warm_entry(tmp_path)
    assert entry.directory == tmp_path / "cache" / cache_store.private_dir_name() / ENV.dir_name
    assert ENV.dir_name.startswith("dsl4.8.1-")
    assert entry.object_path.name == f"{LC.name}.o" and entry.meta_path.name == f"{LC.name}.json"
    assert entry.function_name.isidentifier()
    data = entry.object_path.read_bytes()
    meta = json.loads(entry.meta_path.read_bytes())
    assert meta["object_sha256"] == hashlib.sha256(data).hexdigest() and meta["object_size"] == len(data)
    assert meta["layout_class"] == LC.as_dict() and meta["arch"] == "sm_90a"
    assert (meta["dsl_version"], meta["kernel_source_digest"]) == (ENV.dsl_version, ENV.kernel_source_digest)
    assert meta["function_name"] == entry.function_name
    assert json.loads((entry.directory / "env.json").read_bytes())["dsl_version"] == "4.8.1"
    leftovers = sorted(p.name for p in entry.directory.iterdir())
    assert leftovers == sorted(["env.json", f"{LC.name}.o", f"{LC.name}.json", f"{LC.name}.lock"])


def test_directories_created_private_even_with_permissive_umask(tmp_path):
    old = os.umask(0)
    try:
        _, entry = warm_entry(tmp_path)
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "cache") == 0o700
    assert mode_of(entry.directory.parent) == 0o700, "the private subdirectory"
    assert mode_of(entry.directory) == 0o700
    assert mode_of(entry.object_path) == 0o600 and mode_of(entry.meta_path) == 0o600


@pytest.mark.parametrize("mode", [0o775, 0o1777, 0o2770])
def test_shared_root_keeps_its_mode_and_gets_a_private_subdirectory(tmp_path, mode):
    """A caller's shared directory (group-writable, sticky /tmp-like, setgid group) is never
    chmodded; the entries go into a 0700 subdirectory the cache makes, and are trusted there."""
    root = tmp_path / "cache"
    root.mkdir()
    os.chmod(root, mode)
    cache = make_cache(tmp_path)
    cache.get_kernel(LC, CountingCompile())
    assert mode_of(root) == mode
    private = root / cache_store.private_dir_name()
    assert cache.entry_paths(LC).directory.parent == private and mode_of(private) == 0o700
    again = make_cache(tmp_path)
    again.get_kernel(LC, must_not_compile)
    assert again.cache_info().disk_hits == 1 and mode_of(root) == mode


# ---- the key ---------------------------------------------------------------------------------------


def test_kernel_source_digest_tracks_every_py_file(tmp_path):
    root = tmp_path / "kernels"
    (root / "sm90").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sm90" / "fwd.py").write_text("TILE = 128\n")
    d0 = cc.kernel_source_digest(root)
    assert cc.kernel_source_digest(root) == d0
    (root / "sm90" / "notes.txt").write_text("not python")
    (root / "sm90" / "__pycache__").mkdir()
    (root / "sm90" / "__pycache__" / "fwd.cpython-312.pyc").write_bytes(b"\0")
    assert cc.kernel_source_digest(root) == d0, "only .py files enter the digest"
    (root / "sm90" / "fwd.py").write_text("TILE = 64\n")
    d1 = cc.kernel_source_digest(root)
    (root / "sm90" / "mask.py").write_text("")
    d2 = cc.kernel_source_digest(root)
    (root / "sm90" / "mask.py").rename(root / "sm90" / "mask2.py")
    d3 = cc.kernel_source_digest(root)
    assert len({d0, d1, d2, d3}) == 4


def test_default_digest_is_the_package_kernels():
    assert cc.kernel_source_digest() == cc.kernel_source_digest(REPO_ROOT / "ragged_attn" / "kernels")
    env = cc.current_build_env()
    assert env.kernel_source_digest == cc.kernel_source_digest()


@pytest.mark.parametrize(
    "field,value",
    [
        ("kernel_source_digest", "1" * 64),
        ("dsl_version", "4.9.0"),
        ("tvm_ffi_version", "0.2.0"),
        ("format_version", 2),
        ("machine", "aarch64" if platform.machine() != "aarch64" else "x86_64"),
        ("dsl_settings", "CUTE_DSL_LINEINFO=True"),
    ],
)
def test_build_env_change_is_a_different_entry(tmp_path, field, value):
    other = dataclasses.replace(ENV, **{field: value})
    assert other.digest() != ENV.digest() and other.dir_name != ENV.dir_name
    make_cache(tmp_path).get_kernel(LC, CountingCompile())
    compile_fn = CountingCompile()
    cache = make_cache(tmp_path, build_env=other)
    cache.get_kernel(LC, compile_fn)
    assert compile_fn.calls == [LC], "an entry of another build env must not be loaded"
    assert cache.entry_paths(LC).object_path.exists() and warm_entry(tmp_path)[1].object_path.exists()


@pytest.fixture
def no_dsl_settings(monkeypatch):
    """An environment with no CUTE_DSL_* variable set."""
    for name in [n for n in os.environ if n.startswith("CUTE_DSL_")]:
        monkeypatch.delenv(name)
    return monkeypatch


def test_current_build_env_records_this_cpu_and_no_settings_by_default(no_dsl_settings):
    env = cc.current_build_env()
    assert env.machine == platform.machine()
    assert env.dsl_settings == ""


@pytest.mark.parametrize(
    "variables,recorded",
    [
        ({"CUTE_DSL_DEBUG": "1"}, "CUTE_DSL_DEBUG=True;CUTE_DSL_LINEINFO=True"),
        ({"CUTE_DSL_DEBUG": " TRUE "}, "CUTE_DSL_DEBUG=True;CUTE_DSL_LINEINFO=True"),
        ({"CUTE_DSL_DEBUG": "1", "CUTE_DSL_LINEINFO": "0"}, "CUTE_DSL_DEBUG=True"),
        ({"CUTE_DSL_LINEINFO": "yes"}, "CUTE_DSL_LINEINFO=True"),
        ({"CUTE_DSL_ENABLE_ASSERTIONS": "on"}, "CUTE_DSL_ENABLE_ASSERTIONS=True"),
        ({"CUTE_DSL_COMPILER_OPT": "remarks{ptx}"}, "CUTE_DSL_COMPILER_OPT='remarks{ptx}'"),
        ({"CUTE_DSL_COMPILER_BACKEND": "other"}, "CUTE_DSL_COMPILER_BACKEND='other'"),
        ({"CUTE_DSL_LOC_TRACEBACKS": " 3"}, "CUTE_DSL_LOC_TRACEBACKS=3"),
        ({"CUTE_DSL_TOLERATE_M2M": "off"}, "CUTE_DSL_TOLERATE_M2M=False"),
        ({"CUTE_DSL_DEBUG": "maybe"}, "CUTE_DSL_DEBUG='maybe'"),
    ],
    ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else None,
)
def test_dsl_settings_enter_the_build_env(tmp_path, no_dsl_settings, variables, recorded):
    default = cc.current_build_env()
    for name, value in variables.items():
        no_dsl_settings.setenv(name, value)
    env = cc.current_build_env()
    assert env.dsl_settings == recorded
    assert env.dir_name != default.dir_name, f"{variables} must not share the default's entries"


@pytest.mark.parametrize(
    "variables",
    [
        {"CUTE_DSL_DEBUG": "0", "CUTE_DSL_LINEINFO": "", "CUTE_DSL_COMPILER_OPT": ""},
        {"CUTE_DSL_ARCH": "sm_100a", "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_LOG_LEVEL": "10"},
    ],
    ids=["defaults-spelled-out", "settings-outside-the-key"],
)
def test_dsl_settings_at_their_defaults_or_outside_the_key_keep_the_default_entries(
    no_dsl_settings, variables
):
    default = cc.current_build_env()
    for name, value in variables.items():
        no_dsl_settings.setenv(name, value)
    assert cc.current_build_env() == default


def test_dsl_settings_select_their_own_entries(tmp_path, no_dsl_settings):
    """A LINEINFO build and a default build each compile once and then hit their own entry."""
    plain = dataclasses.replace(ENV, dsl_settings=cache_store.dsl_compile_settings())
    no_dsl_settings.setenv("CUTE_DSL_LINEINFO", "1")
    lineinfo = dataclasses.replace(ENV, dsl_settings=cache_store.dsl_compile_settings())
    for env in (plain, lineinfo):
        compile_fn = CountingCompile()
        make_cache(tmp_path, build_env=env).get_kernel(LC, compile_fn)
        assert compile_fn.calls == [LC], f"{env.dsl_settings!r} loaded another setting's entry"
    for env in (plain, lineinfo):
        again = make_cache(tmp_path, build_env=env)
        again.get_kernel(LC, must_not_compile)
        meta = json.loads(again.entry_paths(LC).meta_path.read_bytes())
        assert meta["dsl_settings"] == env.dsl_settings and meta["machine"] == platform.machine()


DSL_SETTINGS_PROBE = textwrap.dedent(
    """
    import json, sys
    from cutlass.cutlass_dsl.cutlass import CuTeDSLEnvironmentManager
    from ragged_attn import cache_store

    manager = CuTeDSLEnvironmentManager()
    keyed = {e.key_name: e for e in manager._ENV_VAR_SPEC if e.affects_compile}
    names = {}
    for key, e in keyed.items():
        names[key] = e.source if isinstance(e.source, str) else "LIBS"
    values = {names[key]: getattr(manager, key) for key in keyed if key != "shared_libs"}
    print(json.dumps({"names": sorted(names.values()), "values": values,
                      "ours": cache_store.dsl_compile_settings()}))
    """
)


@pytest.mark.cute
@pytest.mark.parametrize(
    "variables",
    [
        {},
        {"CUTE_DSL_DEBUG": "1"},
        {"CUTE_DSL_DEBUG": "yes", "CUTE_DSL_LINEINFO": "false"},
        {
            "CUTE_DSL_ENABLE_ASSERTIONS": "1",
            "CUTE_DSL_COMPILER_OPT": "warnings",
            "CUTE_DSL_LOC_TRACEBACKS": "2",
        },
        {
            "CUTE_DSL_TOLERATE_M2M": "0",
            "CUTE_DSL_COMPILER_BACKEND": "legacy",
            "CUTE_DSL_USE_EXTENSION_COMPILER": "on",
        },
    ],
    ids=["none", "debug", "debug-no-lineinfo", "assertions-opt-tracebacks", "m2m-backend-extension"],
)
def test_dsl_compile_settings_are_the_installed_dsls(variables):
    """The table in cache_store names every setting the installed DSL keys its own JIT cache by
    (`affects_compile=True`), less the documented exclusions, and reads each value as the DSL's
    CuTeDSLEnvironmentManager does (a fresh process: the DSL reads the environment once)."""
    pytest.importorskip("cutlass.cute")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUTE_DSL_") or k == "CUTE_DSL_ARCH"}
    env.update(variables, PYTHONPATH=str(REPO_ROOT))
    r = subprocess.run(
        [sys.executable, "-c", DSL_SETTINGS_PROBE],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    probe = json.loads(r.stdout.strip().splitlines()[-1])
    ours = {name for name, _, _ in cache_store.DSL_COMPILE_SETTINGS}
    assert sorted(ours | set(cache_store.DSL_SETTINGS_NOT_KEYED)) == probe["names"]
    # Recorded: what differs from the value with nothing set (LINEINFO's is False; the DSL's
    # LINEINFO default follows DEBUG, so DEBUG=1 records both).
    expected = ";".join(
        f"CUTE_DSL_{name}={probe['values'][name]!r}"
        for name, _, default in cache_store.DSL_COMPILE_SETTINGS
        if name in probe["values"] and probe["values"][name] != (False if name == "LINEINFO" else default)
    )
    assert probe["ours"] == expected, (variables, probe["values"])


# ---- corrupt, foreign and insecure entries ----------------------------------------------------


@pytest.mark.parametrize(
    "damage,reason",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:40]), "sha256/size mismatch"),
        (lambda p: p.write_bytes(b"\x7fELF" + os.urandom(300)), "sha256/size mismatch"),
        (lambda p: p.unlink(), "object file is missing"),
    ],
    ids=["truncated", "garbled", "deleted"],
)
def test_corrupt_object_is_rebuilt(tmp_path, damage, reason):
    _, entry = warm_entry(tmp_path)
    damage(entry.object_path)
    assert_rebuilt(tmp_path, reason)


def _edit_meta(entry, edit):
    meta = json.loads(entry.meta_path.read_bytes())
    edit(meta)
    entry.meta_path.write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "damage,reason",
    [
        (lambda e: e.meta_path.write_bytes(b'{"format_version": 1, "layout'), "not JSON"),
        (lambda e: e.meta_path.write_text("[1, 2]"), "not a JSON object"),
        (lambda e: _edit_meta(e, lambda m: m.pop("object_sha256")), "'object_sha256' is missing"),
        (lambda e: _edit_meta(e, lambda m: m.update(object_sha256="ab" * 32)), "sha256/size mismatch"),
        (lambda e: _edit_meta(e, lambda m: m.update(layout_class={**LC2.as_dict()})), "records layout class"),
        (lambda e: e.meta_path.unlink(), "no metadata"),
    ],
    ids=["truncated-json", "not-object", "missing-field", "hash-mismatch", "other-class", "deleted"],
)
def test_bad_metadata_is_rebuilt(tmp_path, damage, reason):
    _, entry = warm_entry(tmp_path)
    damage(entry)
    assert_rebuilt(tmp_path, reason)


@pytest.mark.parametrize(
    "field,value",
    [
        ("dsl_version", "4.7.0"),
        ("kernel_source_digest", "f" * 64),
        ("tvm_ffi_version", "0.1.0"),
        ("format_version", 0),
        ("arch", "sm_100a"),
        ("machine", "aarch64" if platform.machine() != "aarch64" else "x86_64"),
        ("dsl_settings", "CUTE_DSL_DEBUG=True;CUTE_DSL_LINEINFO=True"),
    ],
)
def test_foreign_entry_is_rebuilt(tmp_path, field, value):
    _, entry = warm_entry(tmp_path)
    _edit_meta(entry, lambda m: m.update({field: value}))
    assert_rebuilt(tmp_path, f"foreign entry: built with {field}={value!r}")
    assert json.loads(entry.meta_path.read_bytes())[field] != value


def test_load_failure_is_rebuilt(tmp_path):
    warm_entry(tmp_path)
    calls = []

    def flaky_loader(path, name):
        calls.append(path)
        if len(calls) == 1:
            raise RuntimeError("BinaryExecutionEngine: Failed to add object file")
        return fake_loader(path, name)

    cache = make_cache(tmp_path, loader=flaky_loader)
    compile_fn = CountingCompile()
    with pytest.warns(CompileCacheWarning, match="failed to load .*Failed to add object file"):
        fn = cache.get_kernel(LC, compile_fn)
    assert compile_fn.calls == [LC] and len(calls) == 2 and fn()[0] == "loaded"


@pytest.mark.parametrize("which", ["object", "meta"])
@pytest.mark.parametrize("mode", [0o620, 0o602])
def test_group_or_other_writable_file_is_rebuilt(tmp_path, which, mode):
    _, entry = warm_entry(tmp_path)
    os.chmod(entry.object_path if which == "object" else entry.meta_path, mode)
    assert_rebuilt(tmp_path, "writable by group/other")


@pytest.mark.parametrize("mode", [0o770, 0o707])
def test_group_or_other_writable_entry_dir_is_rebuilt(tmp_path, mode):
    _, entry = warm_entry(tmp_path)
    os.chmod(entry.directory, mode)
    assert_rebuilt(tmp_path, "its directory")


def test_symlinked_object_is_rebuilt(tmp_path):
    _, entry = warm_entry(tmp_path)
    elsewhere = tmp_path / "elsewhere.o"
    entry.object_path.rename(elsewhere)
    entry.object_path.symlink_to(elsewhere)
    assert_rebuilt(tmp_path, "symbolic link")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another uid needs root")
def test_object_owned_by_another_uid_is_rebuilt(tmp_path):
    _, entry = warm_entry(tmp_path)
    os.chown(entry.object_path, 12345, -1)
    assert_rebuilt(tmp_path, "owned by uid 12345")


def test_private_subdirectory_owned_by_another_uid_is_not_used(tmp_path, monkeypatch):
    """The caller's directory may be another uid's (a shared /tmp); the private subdirectory may
    not: one this uid does not own is refused, never used or repaired."""
    monkeypatch.setattr(cache_store, "current_uid", lambda: os.getuid() + 1)
    private = tmp_path / "cache" / cache_store.private_dir_name()
    private.mkdir(parents=True, mode=0o700)  # owned by the real uid, not the one the cache sees
    cache = make_cache(tmp_path)
    compile_fn = CountingCompile()
    with pytest.warns(CompileCacheWarning, match="not usable .*private subdirectory .*owned by uid"):
        fn = cache.get_kernel(LC, compile_fn)
    assert isinstance(fn, FakeCompiled) and compile_fn.calls == [LC]
    assert list(private.iterdir()) == [], "nothing is written into a foreign directory"


def test_root_owned_by_another_uid_is_used_through_the_private_subdirectory(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_store, "current_uid", lambda: os.getuid() + 1)
    (tmp_path / "cache").mkdir()  # the real uid's, not the one the cache sees
    cache = make_cache(tmp_path)
    cache.get_kernel(LC, CountingCompile())
    # The private subdirectory is made by this process, so it is owned by the real uid: the fake
    # uid refuses it on the next use, which shows the check runs on every use.
    with pytest.warns(CompileCacheWarning, match="private subdirectory"):
        make_cache(tmp_path).get_kernel(LC, CountingCompile())


def test_unusable_cache_dir_falls_back_to_memory(tmp_path):
    (tmp_path / "cache").write_text("a file, not a directory")
    cache = make_cache(tmp_path)
    with pytest.warns(CompileCacheWarning, match="not usable"):
        fn = cache.get_kernel(LC, CountingCompile())
    assert isinstance(fn, FakeCompiled)
    assert cache.get_kernel(LC, must_not_compile) is fn


def test_export_failure_keeps_the_compiled_kernel(tmp_path):
    class NoExport:
        def export_to_c(self, path, name):
            Path(path).write_bytes(b"partial")
            raise RuntimeError("export failed")

    cache = make_cache(tmp_path)
    compiled = NoExport()
    with pytest.warns(CompileCacheWarning, match="could not be written .*export failed"):
        fn = cache.get_kernel(LC, lambda lc: compiled)
    assert fn is compiled
    entry = cache.entry_paths(LC)
    assert sorted(p.name for p in entry.directory.iterdir()) == sorted(["env.json", f"{LC.name}.lock"])


def test_stale_temp_files_of_a_dead_writer_are_removed(tmp_path):
    cache = make_cache(tmp_path)
    entry = cache.entry_paths(LC)
    entry.directory.mkdir(parents=True)
    stale = [
        entry.directory / f".{LC.name}.99999.deadbeef.tmp.o",
        entry.directory / f".{LC.name}.json.99999.x.tmp",
    ]
    other = entry.directory / f".{LC2.name}.99999.deadbeef.tmp.o"  # another entry's writer may be alive
    for p in (*stale, other):
        p.write_bytes(b"partial")
    cache.get_kernel(LC, CountingCompile())
    assert not any(p.exists() for p in stale) and other.exists()


def test_a_valid_entry_is_read_without_waiting_for_the_lock(tmp_path, monkeypatch):
    import filelock

    _, entry = warm_entry(tmp_path)
    monkeypatch.setattr(cc, "LOCK_NOTICE_S", 1.0)
    monkeypatch.setattr(cc, "LOCK_TIMEOUT_S", 2.0)
    cache = make_cache(tmp_path)
    # Another process, frozen, holds the entry's lock.
    with filelock.FileLock(str(entry.lock_path)), warnings.catch_warnings():
        warnings.simplefilter("error")
        t0 = time.perf_counter()
        fn = cache.get_kernel(LC, must_not_compile)
        seconds = time.perf_counter() - t0
    assert fn()[0] == "loaded" and cache.cache_info().disk_hits == 1
    assert seconds < 0.5, f"a valid entry waited {seconds:.2f} s for a lock it does not need"


def test_a_damaged_entry_waits_for_the_lock_then_reads_what_the_holder_wrote(tmp_path, monkeypatch):
    """The lock-free read found a bad entry; the writer holding the lock replaces it meanwhile: the
    waiter reads the new entry under the lock (no warning, no compile)."""
    import filelock

    _, entry = warm_entry(tmp_path)
    good = entry.object_path.read_bytes()
    entry.object_path.write_bytes(good[:40])
    monkeypatch.setattr(cc, "LOCK_TIMEOUT_S", 20.0)  # a bound, should the holder never release
    cache = make_cache(tmp_path)
    holder = filelock.FileLock(str(entry.lock_path), thread_local=False)  # released by the thread below
    holder.acquire()

    def repair_then_release():
        time.sleep(0.3)
        tmp = entry.object_path.with_name("repaired.tmp")
        tmp.write_bytes(good)
        os.chmod(tmp, 0o600)
        os.replace(tmp, entry.object_path)
        holder.release()

    with ThreadPoolExecutor(1) as pool, warnings.catch_warnings():
        warnings.simplefilter("error")
        pool.submit(repair_then_release)
        fn = cache.get_kernel(LC, must_not_compile)
    assert fn()[0] == "loaded" and cache.cache_info().disk_hits == 1


def test_lock_held_too_long_without_an_entry_compiles_in_memory(tmp_path, monkeypatch):
    import filelock

    monkeypatch.setattr(cc, "LOCK_TIMEOUT_S", 0.2)
    cache = make_cache(tmp_path)
    entry = cache.entry_paths(LC)
    entry.directory.mkdir(parents=True, mode=0o700)
    compile_fn = CountingCompile()
    with (
        filelock.FileLock(str(entry.lock_path)),
        pytest.warns(CompileCacheWarning, match="still held"),
        pytest.warns(CompileCacheWarning, match="in memory only"),
    ):
        fn = cache.get_kernel(LC, compile_fn)
    assert isinstance(fn, FakeCompiled) and compile_fn.calls == [LC]
    assert not entry.object_path.exists() and not entry.meta_path.exists(), "nothing written without the lock"


def test_threads_compile_one_class_once(tmp_path):
    cache = make_cache(tmp_path)
    compile_fn = CountingCompile(seconds=0.2)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: cache.get_kernel(LC, compile_fn), range(8)))
    assert compile_fn.calls == [LC]
    assert all(r is results[0] for r in results)
    info = cache.cache_info()
    assert (info.compiles, info.memory_hits, info.disk_hits) == (1, 7, 0)


# ---- switches and the process-wide cache -----------------------------------------------------


def test_disk_cache_off_by_env(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGGED_ATTN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RAGGED_ATTN_DISK_CACHE", "0")
    cache = CompileCache(loader=fake_loader, build_env=ENV)
    assert cache.cache_dir() is None
    fn = cache.get_kernel(LC, CountingCompile())
    assert isinstance(fn, FakeCompiled) and not (tmp_path / "cache").exists()
    compile_fn = CountingCompile()
    CompileCache(loader=fake_loader, build_env=ENV).get_kernel(LC, compile_fn)
    assert compile_fn.calls == [LC]
    monkeypatch.setenv("RAGGED_ATTN_DISK_CACHE", "sometimes")
    with pytest.raises(ValueError, match="RAGGED_ATTN_DISK_CACHE"):
        cache.cache_dir()


def test_cache_dir_resolution(tmp_path, monkeypatch):
    import platformdirs

    monkeypatch.delenv("RAGGED_ATTN_DISK_CACHE", raising=False)
    monkeypatch.delenv("RAGGED_ATTN_CACHE_DIR", raising=False)
    assert cc.cache_dir() == Path(platformdirs.user_cache_dir("ragged_attn"))
    monkeypatch.setenv("RAGGED_ATTN_CACHE_DIR", str(tmp_path / "x"))
    assert cc.cache_dir() == tmp_path / "x"
    monkeypatch.setenv("RAGGED_ATTN_DISK_CACHE", "off")
    assert cc.cache_dir() is None


def test_cache_dir_expands_the_home(tmp_path, monkeypatch):
    """`RAGGED_ATTN_CACHE_DIR='~/x'` (quoted, so the shell did not expand it) is the home's x,
    not a directory named `~` in the working directory."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("RAGGED_ATTN_DISK_CACHE", raising=False)
    monkeypatch.setenv("RAGGED_ATTN_CACHE_DIR", "~/x")
    cache = CompileCache(loader=fake_loader, build_env=ENV)
    assert cache.cache_dir() == home / "x"
    cache.get_kernel(LC, CountingCompile())
    entry = cache.entry_paths(LC)
    assert entry.object_path.is_file() and entry.directory.is_relative_to(home)
    assert list(cwd.iterdir()) == [], "nothing is made in the working directory"


def test_process_wide_api(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGGED_ATTN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RAGGED_ATTN_DISK_CACHE", raising=False)
    monkeypatch.setattr(cc._DEFAULT, "_loader", fake_loader)
    cc.clear_memory()
    try:
        compile_fn = CountingCompile()
        cc.get_kernel(LC, compile_fn)
        cc.get_kernel(LC, compile_fn)
        info = cc.cache_info()
        assert (info.compiles, info.memory_hits, info.disk_hits, info.classes) == (1, 1, 0, (LC,))
        assert cc._DEFAULT.entry_paths(LC).object_path.is_relative_to(tmp_path / "cache")
        cc.clear_memory()
        cc.get_kernel(LC, must_not_compile)
        assert cc.cache_info().disk_hits == 1
    finally:
        cc.clear_memory()


# ---- two processes ---------------------------------------------------------------------------------

FAKE_WORKER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[3])
    from test_compile_cache import LC, ENV, FakeCompiled, fake_loader
    from ragged_attn.compile_cache import CompileCache

    role, sync = sys.argv[1], Path(sys.argv[2])

    def wait_for(name):
        deadline = time.time() + 60
        while not (sync / name).exists():
            assert time.time() < deadline, f"timed out waiting for {name}"
            time.sleep(0.01)

    def compile_fn(lc):
        (sync / "compiling").touch()
        wait_for("second_waiting")
        time.sleep(0.5)  # the second process is now blocked on the entry's lock
        return FakeCompiled(lc)

    cache = CompileCache(sync / "cache", disk=True, loader=fake_loader, build_env=ENV)
    if role == "second":
        wait_for("compiling")
        (sync / "second_waiting").touch()
    t0 = time.time()
    fn = cache.get_kernel(LC, compile_fn)
    info = cache.cache_info()
    print(json.dumps({"compiles": info.compiles, "disk_hits": info.disk_hits,
                      "seconds": time.time() - t0, "result": fn()[1]}))
    """
)


def _run_workers(argvs, env=None, timeout=240):
    """Start every worker at once; return each one's last stdout line as JSON."""
    procs = [
        subprocess.Popen(
            [sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for argv in argvs
    ]
    try:
        outputs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, f"worker failed:\n{err}"
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


def _worker_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def test_two_processes_compile_one_class_once(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(FAKE_WORKER)
    tests_dir = str(Path(__file__).resolve().parent)
    first, second = _run_workers(
        [[str(script), "first", str(tmp_path), tests_dir], [str(script), "second", str(tmp_path), tests_dir]],
        env=_worker_env(),
    )
    assert (first["compiles"], first["disk_hits"]) == (1, 0)
    assert (second["compiles"], second["disk_hits"]) == (0, 1), "the second process must wait, then load"
    assert second["seconds"] >= 0.3, "the second process did not wait on the lock"
    assert first["result"] == second["result"]
    entry = CompileCache(tmp_path / "cache", disk=True, loader=fake_loader, build_env=ENV).entry_paths(LC)
    meta = json.loads(entry.meta_path.read_bytes())
    assert meta["object_sha256"] == hashlib.sha256(entry.object_path.read_bytes()).hexdigest()
    assert not [p for p in entry.directory.iterdir() if ".tmp" in p.name]


# ---- the real DSL --------------------------------------------------------------------------------

TINY_KERNEL = textwrap.dedent(
    '''
    """A trivial TVM-FFI kernel: y[i] = x[i] + 1 over a symbolic length, env stream last."""
    import cutlass
    import cutlass.cute as cute


    @cute.kernel
    def _add_one_kernel(gX: cute.Tensor, gY: cute.Tensor, n: cutlass.Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * 128 + tidx
        if i < n:
            gY[i] = gX[i] + 1.0


    @cute.jit
    def add_one(mX: cute.Tensor, mY: cute.Tensor, n: cutlass.Int32, stream):
        _add_one_kernel(mX, mY, n).launch(grid=[(n + 127) // 128, 1, 1], block=[128, 1, 1], stream=stream)


    def compile_add_one(layout_class):
        n = cute.sym_int()
        x = cute.runtime.make_fake_compact_tensor(cutlass.Float32, (n,), assumed_align=16)
        y = cute.runtime.make_fake_compact_tensor(cutlass.Float32, (n,), assumed_align=16)
        stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
        return cute.compile(add_one, x, y, cutlass.Int32(0), stream,
                            options=f"--enable-tvm-ffi --gpu-arch {layout_class.arch}")
    '''
)

REAL_WORKER = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from tiny_kernel import compile_add_one
    from ragged_attn import compile_cache as cc
    from ragged_attn.layout_class import LayoutClass

    lc = LayoutClass(**json.loads(sys.argv[2]))
    fn = cc.get_kernel(lc, compile_add_one)
    info = cc.cache_info()
    print(json.dumps({"compiles": info.compiles, "disk_hits": info.disk_hits, "type": type(fn).__name__}))
    """
)


@pytest.fixture
def tiny_kernel(tmp_path, monkeypatch):
    """The tiny kernel module, written to a file (the DSL needs importable source)."""
    pytest.importorskip("cutlass")
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    (src_dir / "tiny_kernel.py").write_text(TINY_KERNEL)
    spec = importlib.util.spec_from_file_location("tiny_kernel", src_dir / "tiny_kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Computed once, so that a kernel source edited while the tests run cannot split one test's entries.
REAL_ENV = cc.current_build_env()


class CountingRealCompile:
    def __init__(self, module):
        self.module, self.calls = module, 0

    def __call__(self, lc):
        self.calls += 1
        return self.module.compile_add_one(lc)


@pytest.mark.cute
def test_real_export_load_round_trip(tmp_path, tiny_kernel):
    """export_to_c -> .o (ELF) -> load_module works on this CPU-only machine; a new process loads
    it from disk without compiling, and the loaded function is the real entry (it checks its args)."""
    tvm_ffi = pytest.importorskip("tvm_ffi")
    torch = pytest.importorskip("torch")
    cache = CompileCache(tmp_path / "cache", disk=True, build_env=REAL_ENV)
    compile_fn = CountingRealCompile(tiny_kernel)
    fn = cache.get_kernel(LC, compile_fn)
    assert isinstance(fn, tvm_ffi.Function) and compile_fn.calls == 1
    entry = cache.entry_paths(LC)
    assert entry.object_path.read_bytes()[:4] == b"\x7fELF"
    assert entry.directory.name.startswith("dsl4.8.1-") or cache.build_env.dsl_version != "4.8.1"

    fresh = CompileCache(tmp_path / "cache", disk=True, build_env=REAL_ENV)
    loaded = fresh.get_kernel(LC, must_not_compile)
    assert isinstance(loaded, tvm_ffi.Function)
    assert fresh.cache_info().disk_hits == 1 and fresh.cache_info().compiles == 0
    x = torch.zeros(8)
    with pytest.raises(ValueError, match="expected device_type=cuda"):
        loaded(x, x, 8)  # the real entry validates its arguments before any CUDA call
    with pytest.raises(TypeError, match="Expects 3 parameters"):
        loaded(x, x)


@pytest.mark.cute
def test_real_garbled_object_with_matching_hash_is_rebuilt(tmp_path, tiny_kernel):
    """A garbled .o whose metadata hash was updated to match reaches the real loader, which raises
    (RuntimeError: not a valid object file) instead of crashing; the entry is rebuilt."""
    CompileCache(tmp_path / "cache", disk=True, build_env=REAL_ENV).get_kernel(
        LC, CountingRealCompile(tiny_kernel)
    )
    cache = CompileCache(tmp_path / "cache", disk=True, build_env=REAL_ENV)
    entry = cache.entry_paths(LC)
    garbage = b"\x7fELF" + b"\0" * 200
    entry.object_path.write_bytes(garbage)
    _edit_meta(
        entry, lambda m: m.update(object_sha256=hashlib.sha256(garbage).hexdigest(), object_size=len(garbage))
    )
    compile_fn = CountingRealCompile(tiny_kernel)
    with pytest.warns(CompileCacheWarning, match="failed to load"):
        cache.get_kernel(LC, compile_fn)
    assert compile_fn.calls == 1 and entry.object_path.stat().st_size > 1000
    CompileCache(tmp_path / "cache", disk=True, build_env=REAL_ENV).get_kernel(LC, must_not_compile)


@pytest.mark.cute
def test_real_two_processes_compile_once(tmp_path, tiny_kernel):
    """Two processes asking for one class at once through the process-wide API: one compiles,
    the other waits on the lock and loads; one valid entry remains."""
    script = tmp_path / "real_worker.py"
    script.write_text(REAL_WORKER)
    env = _worker_env(RAGGED_ATTN_CACHE_DIR=str(tmp_path / "cache"), CUTE_DSL_ARCH="sm_90a")
    env.pop("RAGGED_ATTN_DISK_CACHE", None)
    argv = [str(script), str(tmp_path / "src"), json.dumps(LC.as_dict())]
    results = _run_workers([argv, argv], env=env)
    assert sorted((r["compiles"], r["disk_hits"]) for r in results) == [(0, 1), (1, 0)], results
    assert {r["type"] for r in results} == {"Function"}
    cache = CompileCache(tmp_path / "cache", disk=True, build_env=REAL_ENV)
    fn = cache.get_kernel(LC, must_not_compile)
    assert fn is not None and cache.cache_info().disk_hits == 1
