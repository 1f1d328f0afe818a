"""Compile cache, prebuilt kernels and CLI under concurrency and a changing tree (found by breaking them).

- The CuTe DSL compiles one thing at a time per process: two threads compiling at once (the forward
  kernel through the compile cache, the merge kernel through merge.py) failed with "Please start a
  session before accessing session data", a missing MLIR Location or a TypeError, or aborted the
  process. Every DSL compile, export and load holds `cache_store.DSL_LOCK`.
- Kernel sources edited while a process runs (a `git pull` under an editable install): the process
  runs the code it imported, but the digest it keys entries by is computed at its first miss, so it
  stored its old kernels under the new sources' digest, and every later process loaded them. The
  cache now goes memory-only in such a process.
- A manifest item naming another class's function was served for its class (a kernel of another
  argument list or mask). Refused now.
- A fork while another thread compiled left the cache's lock held in the child forever.
- A process waiting on another's entry lock said nothing for up to LOCK_TIMEOUT_S (900 s).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import warnings
from pathlib import Path

import pytest

from ragged_attn import cache_store, merge, prebuilt
from ragged_attn import compile_cache as cc
from ragged_attn.compile_cache import CompileCache, CompileCacheWarning
from ragged_attn.layout_class import LayoutClass
from ragged_attn.prebuilt import PrebuiltWarning

from .test_compile_cache import ENV, FAKE_MAGIC, CountingCompile, FakeCompiled, fake_loader
from .test_prebuilt import index_over, write_dir

LC = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "causal", True, "ragged")
LC2 = LayoutClass("sm_90a", 64, 64, "fp16", "fp16", "none", False, "paged")


# ---- one DSL compile at a time ---------------------------------------------------------------------


def test_cache_compiles_and_exports_hold_the_process_wide_dsl_lock(tmp_path):
    seen = []

    class Compiled(FakeCompiled):
        def export_to_c(self, path, name):
            seen.append(("export", cache_store.DSL_LOCK._is_owned()))
            super().export_to_c(path, name)

    def compile_fn(lc):
        seen.append(("compile", cache_store.DSL_LOCK._is_owned()))
        return Compiled(lc)

    CompileCache(tmp_path / "cache", disk=True, loader=fake_loader, build_env=ENV).get_kernel(LC, compile_fn)
    assert seen == [("compile", True), ("export", True)]


def test_merge_kernel_compile_holds_the_dsl_lock(monkeypatch):
    import ragged_attn.kernels.merge_sm90 as msm

    seen = []
    monkeypatch.setattr(msm, "compile_merge", lambda key: seen.append(cache_store.DSL_LOCK._is_owned()) or key)
    monkeypatch.setattr(merge, "_KERNELS", {})
    merge._compiled("some key")
    assert seen == [True]


def test_compile_cache_waits_for_a_merge_compile_on_another_thread(tmp_path, monkeypatch):
    """The two compile paths exclude each other: no overlap of their compile calls."""
    import ragged_attn.kernels.merge_sm90 as msm

    active, overlaps = [0], []

    def busy(result):
        active[0] += 1
        overlaps.append(active[0] > 1)
        time.sleep(0.3)
        active[0] -= 1
        return result

    monkeypatch.setattr(msm, "compile_merge", lambda key: busy(key))
    monkeypatch.setattr(merge, "_KERNELS", {})
    cache = CompileCache(tmp_path / "cache", disk=False, build_env=ENV)
    threads = [
        threading.Thread(target=lambda: cache.get_kernel(LC, lambda lc: busy(FakeCompiled(lc)))),
        threading.Thread(target=lambda: merge._compiled("key")),
    ]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert overlaps == [False, False]


@pytest.mark.cute
def test_real_forward_and_merge_compiles_on_two_threads(monkeypatch):
    """Before DSL_LOCK: the forward compile failed (TypeError, 'Please start a session ...') or the
    process aborted, in every one of 6 runs."""
    pytest.importorskip("cutlass")
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    from ragged_attn.kernels.merge_sm90 import MergeKey
    from ragged_attn.kernels.sm90 import compile_forward

    monkeypatch.setattr(merge, "_KERNELS", {})
    lc = LayoutClass("sm_90a", 32, 32, "fp16", "fp16", "none", False, "ragged")
    cache = CompileCache(disk=False)
    errors = {}

    def run(name, f):
        try:
            f()
        except BaseException as e:
            errors[name] = repr(e)[:300]

    threads = [
        threading.Thread(target=run, args=("forward", lambda: cache.get_kernel(lc, compile_forward))),
        threading.Thread(target=run, args=("merge", lambda: merge._compiled(MergeKey("pair", "bf16", "log2")))),
    ]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert errors == {}


# ---- kernel sources edited while the process runs ----------------------------------------------------


@pytest.fixture
def kernel_tree(tmp_path, monkeypatch):
    """A stand-in kernels/ tree, fingerprinted as if `import ragged_attn` had just happened."""
    root = tmp_path / "kernels"
    (root / "sm90").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sm90" / "tile_config.py").write_text("TILE_N = 128\n")
    monkeypatch.setattr(cache_store, "KERNELS_ROOT", root)
    monkeypatch.setattr(cache_store, "KERNEL_SOURCES_AT_IMPORT", cache_store.kernel_source_stats(root))
    return root


def edit(path: Path, text: str) -> None:
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a later mtime whatever the clock's grain


def test_sources_unchanged_since_import_use_the_disk_cache(tmp_path, kernel_tree):
    assert cache_store.kernel_sources_changed() is None
    cache = CompileCache(tmp_path / "cache", disk=True, loader=fake_loader)
    cache.get_kernel(LC, CountingCompile())
    assert cache.entry_paths(LC).meta_path.exists()
    fresh = CompileCache(tmp_path / "cache", disk=True, loader=fake_loader)
    fresh.get_kernel(LC, CountingCompile())
    assert fresh.cache_info().disk_hits == 1


def test_sources_edited_after_import_neither_store_nor_load(tmp_path, kernel_tree):
    # Another process, started after the edit, stores a valid entry of the new sources.
    edit(kernel_tree / "sm90" / "tile_config.py", "TILE_N = 64\n")
    new_env = cache_store.current_build_env(kernel_tree)
    CompileCache(tmp_path / "cache", disk=True, loader=fake_loader, build_env=new_env).get_kernel(LC, CountingCompile())
    # This process imported the old sources: it must neither load that entry nor store its own kernels
    # under the new digest (before: it stored LC2 compiled from the old code under the new digest).
    cache = CompileCache(tmp_path / "cache", disk=True, loader=fake_loader)
    compile_fn = CountingCompile()
    with pytest.warns(CompileCacheWarning, match=r"sm90/tile_config\.py changed since this process imported"):
        fn = cache.get_kernel(LC, compile_fn)
    with pytest.warns(CompileCacheWarning, match="in memory only"):
        cache.get_kernel(LC2, compile_fn)
    assert isinstance(fn, FakeCompiled) and compile_fn.calls == [LC, LC2]
    assert cache.cache_info().disk_hits == 0
    assert not cache.entry_paths(LC2).meta_path.exists() and not cache.entry_paths(LC2).object_path.exists()


def test_an_injected_build_env_is_not_checked_against_the_sources(tmp_path, kernel_tree):
    edit(kernel_tree / "sm90" / "tile_config.py", "TILE_N = 64\n")
    cache = CompileCache(tmp_path / "cache", disk=True, loader=fake_loader, build_env=ENV)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache.get_kernel(LC, CountingCompile())
    assert cache.entry_paths(LC).object_path.read_bytes().startswith(FAKE_MAGIC)


def test_added_and_removed_kernel_files_count_as_changes(kernel_tree):
    (kernel_tree / "sm90" / "new.py").write_text("x = 1\n")
    assert "sm90/new.py" in cache_store.kernel_sources_changed()
    (kernel_tree / "sm90" / "new.py").unlink()
    (kernel_tree / "__init__.py").unlink()
    assert "__init__.py" in cache_store.kernel_sources_changed()


def test_import_ragged_attn_fingerprints_the_real_kernels_before_importing_them():
    import ragged_attn

    stats = cache_store.KERNEL_SOURCES_AT_IMPORT
    assert any(path == "sm90/launch.py" for path, _, _ in stats)
    first_line = next(
        line for line in Path(ragged_attn.__file__).read_text().splitlines() if line.startswith(("from ", "import "))
    )
    assert "cache_store" in first_line


# ---- prebuilt manifests ------------------------------------------------------------------------------


def test_a_manifest_item_naming_another_class_function_is_refused(tmp_path):
    """A hand-merged manifest whose item for LC names LC2's library and function: before, LC was
    served by LC2's kernel, silently."""
    d = write_dir(tmp_path / "aot", [LC, LC2])
    manifest = json.loads((d / "manifest.json").read_text())
    item, other = manifest["classes"]
    for field in ("library", "function_name", "sha256", "size"):
        item[field] = other[field]
    (d / "manifest.json").write_text(json.dumps(manifest))
    index = index_over(d)
    with pytest.warns(PrebuiltWarning, match=r"classes\[0\].*is not sm_90a-d128x128"):
        assert index.load(LC) is None
    assert index.load(LC2)[2] == prebuilt.function_name(LC2)


def test_aot_and_prebuilt_agree_on_function_names():
    from ragged_attn import aot

    for lc in aot.all_classes():
        assert aot.function_name(lc) == prebuilt.function_name(lc) == cc.CompileCache(
            "/nonexistent", disk=True, build_env=ENV
        ).entry_paths(lc).function_name


# ---- fork during a compile ---------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_during_a_compile_does_not_hang(tmp_path):
    cache = CompileCache(tmp_path / "cache", disk=False, build_env=ENV)
    started = threading.Event()

    def slow(lc):
        started.set()
        time.sleep(2.0)
        return FakeCompiled(lc)

    t = threading.Thread(target=cache.get_kernel, args=(LC, slow))
    t.start()
    started.wait(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12: fork of a threaded process
        pid = os.fork()
    if pid == 0:  # the child: before the fix, this blocked forever on the lock the compiling thread held
        signal.alarm(15)
        try:
            fn = cache.get_kernel(LC2, lambda lc: FakeCompiled(lc))
            os._exit(0 if isinstance(fn, FakeCompiled) else 3)
        except BaseException:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    t.join()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status:#x} (SIGALRM: hung)"


# ---- a long wait on another process's lock says so ---------------------------------------------------


def test_waiting_on_an_entry_lock_prints_a_notice(tmp_path, monkeypatch, capsys):
    import fcntl

    monkeypatch.setattr(cc, "LOCK_NOTICE_S", 0.2)
    monkeypatch.setattr(cc, "LOCK_TIMEOUT_S", 0.6)
    cache = CompileCache(tmp_path / "cache", disk=True, loader=fake_loader, build_env=ENV)
    entry = cache.entry_paths(LC)
    entry.directory.mkdir(parents=True, mode=0o700)
    fd = os.open(entry.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as another process holding it would
    try:
        with pytest.warns(CompileCacheWarning, match="still held"):
            cache.get_kernel(LC, CountingCompile())
    finally:
        os.close(fd)
    err = capsys.readouterr().err
    assert f"waiting for {entry.lock_path}" in err and "another process is compiling" in err


# ---- CLI ---------------------------------------------------------------------------------------------


def test_info_reports_a_bad_disk_cache_setting(monkeypatch, capsys):
    from ragged_attn.__main__ import main

    monkeypatch.setenv("RAGGED_ATTN_DISK_CACHE", "maybe")
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "cache directory: invalid setting: RAGGED_ATTN_DISK_CACHE='maybe'" in out


def test_aot_build_names_an_out_that_cannot_be_made_and_an_empty_class_file(tmp_path, capsys):
    from ragged_attn import aot

    (tmp_path / "a_file").write_text("")
    (tmp_path / "one.txt").write_text("sm_90a-d32x32-fp16-fp16-none-nolse-ragged\n")
    assert aot.main(["build", "--out", str(tmp_path / "a_file"), "--classes", str(tmp_path / "one.txt")]) == 2
    assert "--out" in capsys.readouterr().err
    (tmp_path / "empty.txt").write_text("# nothing\n")
    assert aot.main(["build", "--out", str(tmp_path / "o"), "--classes", str(tmp_path / "empty.txt")]) == 2
    assert "lists no layout class" in capsys.readouterr().err


def test_bench_refuses_an_unknown_ours_backend(capsys):
    from ragged_attn import bench

    with pytest.raises(SystemExit) as e:
        bench.main(["--ours-backend", "foo", "--suite", "smoke"])
    assert e.value.code == 2 and "invalid choice: 'foo'" in capsys.readouterr().err
