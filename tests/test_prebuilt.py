"""Prebuilt kernels (issue 13): class sets, manifests, the lookup order and what is refused.

The libraries here are stand-ins (bytes with a recorded sha256) loaded by a fake loader: these
tests need neither the DSL nor a compiler. tests/test_aot_build.py builds real libraries and loads
them with the DSL import blocked; tests/gpu/test_aot_gpu.py runs them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import sys
import warnings
from pathlib import Path

import pytest

from ragged_attn import aot, compile_cache, prebuilt
from ragged_attn.layout_class import LayoutClass
from ragged_attn.prebuilt import PrebuiltIndex, PrebuiltWarning

LC_A = LayoutClass("sm_90a", 64, 64, "bf16", "bf16", "none", False, "ragged")
LC_B = LayoutClass("sm_90a", 128, 128, "fp16", "fp16", "causal", True, "paged")
ENV = {
    "kernel_source_digest": "d" * 64,
    "dsl_version": "4.8.1",
    "tvm_ffi_version": "0.1.15.post2",
    "machine": "x86_64",
    "dsl_settings": "",
}


def write_dir(directory: Path, layout_classes, env=ENV, **overrides) -> Path:
    """A prebuilt directory with a stand-in library per class and a manifest for `env`."""
    directory.mkdir(parents=True, exist_ok=True)
    items = []
    for lc in layout_classes:
        data = f"library of {lc.name} in {directory}".encode()
        (directory / f"{lc.name}.so").write_bytes(data)
        os.chmod(directory / f"{lc.name}.so", 0o644)
        items.append({
            "layout_class": lc.as_dict(), "name": lc.name, "library": f"{lc.name}.so",
            "function_name": aot.function_name(lc), "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(), "cudart": "static",
        })  # fmt: skip
    manifest = {"format": "ragged_attn-aot", "format_version": 1, **env, "arch": "sm_90a", "classes": items}
    manifest.update(overrides)
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def fake_loader(entry):
    """Stands in for tvm_ffi.load_module: returns what it loaded, so a test sees which file served."""
    return ("loaded", entry.library, entry.function_name)


def index_over(*dirs, loader=fake_loader) -> PrebuiltIndex:
    return PrebuiltIndex(dirs=lambda: list(dirs), loader=loader, env=ENV)


# ---- class sets and names ---------------------------------------------------------------------------


def test_serving_set_is_the_documented_product():
    classes = aot.serving_classes()
    assert len(classes) == len(set(classes)) == 96
    assert {lc.dtype for lc in classes} == {"fp16", "bf16"}
    assert all(lc.out_dtype == lc.dtype for lc in classes)
    assert {lc.mask for lc in classes} == {"none", "causal"}
    assert {lc.lse for lc in classes} == {False, True}
    assert {lc.kv for lc in classes} == {"ragged", "paged"}
    assert {(lc.d_qk, lc.d_v) for lc in classes} == {
        (32, 32),
        (64, 64),
        (96, 96),
        (128, 128),
        (192, 128),
        (256, 256),
    }
    plain = aot.plain_classes()
    assert len(plain) == len(set(plain)) == 144 and set(classes) <= set(plain)
    assert {lc.mask for lc in plain} - {lc.mask for lc in classes} == {"window"}
    assert not any(lc.softcap or lc.sinks for lc in plain)


def test_score_classes_are_the_softcap_and_sinks_classes_of_every_plain_class():
    """Issue 14's classes: softcap, sinks and both over every plain class (every dtype, head-dim
    class, mask, LSE choice and KV kind: ragged and paged, both served by the dispatch);
    `all` = plain + these."""
    scores = aot.score_classes()
    assert len(scores) == len(set(scores)) == 3 * len(aot.plain_classes()) == 432
    assert {(lc.softcap, lc.sinks) for lc in scores} == {(True, False), (False, True), (True, True)}
    assert {lc.kv for lc in scores} == {"ragged", "paged"}
    assert {lc.mask for lc in scores} == {"none", "causal", "window"}
    for flags in aot.SCORE_FLAGS:
        on = (flags.get("softcap", False), flags.get("sinks", False))
        of_flags = [lc for lc in scores if (lc.softcap, lc.sinks) == on]
        assert [dataclasses.replace(lc, softcap=False, sinks=False) for lc in of_flags] == aot.plain_classes()
    assert aot.all_classes() == aot.plain_classes() + scores
    assert aot.resolve_classes("scores") == scores


def test_class_names_round_trip():
    for lc in aot.all_classes():
        assert aot.parse_class_name(lc.name) == lc


@pytest.mark.parametrize(
    "name, part",
    [
        ("sm_90a-d64x64-bf16-bf16-none-nolse", "7 '-'-separated parts"),
        ("sm_90a-64x64-bf16-bf16-none-nolse-ragged", "head dims"),
        ("sm_90a-d64xsix-bf16-bf16-none-nolse-ragged", "head dims"),
        ("sm_90a-d64x64-bf16-bf16-none-yes-ragged", "'lse' nor 'nolse'"),
        ("sm_90a-d64x64-fp32-fp32-none-nolse-ragged", "LayoutClass.dtype"),
        ("sm_80-d64x64-bf16-bf16-none-nolse-ragged", "LayoutClass.arch"),
    ],
)
def test_bad_class_names_say_which_part(name, part):
    with pytest.raises(ValueError, match=part):
        aot.parse_class_name(name)


def test_class_files_lines_and_json(tmp_path):
    lines = tmp_path / "classes.txt"
    lines.write_text(f"# serving subset\n{LC_A.name}\n\n{LC_B.name}  # paged\n{LC_A.name}\n")
    assert aot.resolve_classes(str(lines)) == [LC_A, LC_B]
    js = tmp_path / "classes.json"
    js.write_text(json.dumps([LC_B.name, LC_A.as_dict()]))
    assert aot.resolve_classes(str(js)) == [LC_B, LC_A]
    bad = tmp_path / "bad.txt"
    bad.write_text(f"{LC_A.name}\nsm_90a-d64x64\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: "):
        aot.resolve_classes(str(bad))
    assert aot.resolve_classes("serving") == aot.serving_classes()


def test_cli_lists_classes_and_names_a_bad_file(capsys, tmp_path):
    from ragged_attn.__main__ import main

    assert main(["aot", "build", "--out", str(tmp_path / "o"), "--classes", "all", "--list"]) == 0
    assert capsys.readouterr().out.split() == [lc.name for lc in aot.all_classes()]
    assert (
        main(["aot", "build", "--out", str(tmp_path / "o"), "--classes", str(tmp_path / "missing.txt")]) == 2
    )
    assert "missing.txt" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_cli_list_needs_no_out_and_a_build_names_a_missing_out(capsys):
    from ragged_attn.__main__ import main

    assert main(["aot", "build", "--classes", "serving", "--list"]) == 0
    assert capsys.readouterr().out.split() == [lc.name for lc in aot.serving_classes()]
    assert main(["aot", "build", "--classes", "serving"]) == 2
    assert "--out DIR is required" in capsys.readouterr().err


# ---- manifests ----------------------------------------------------------------------------------------


def test_a_valid_manifest_serves_its_classes(tmp_path):
    d = write_dir(tmp_path / "aot", [LC_A, LC_B])
    index = index_over(d)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert index.load(LC_A) == ("loaded", d / f"{LC_A.name}.so", aot.function_name(LC_A))
        assert index.load(LC_B)[1] == d / f"{LC_B.name}.so"
    other = LayoutClass("sm_90a", 64, 64, "fp16", "fp16", "none", False, "ragged")
    assert index.load(other) is None


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("kernel_source_digest", "e" * 64, "stale: built with kernel_source_digest"),
        ("dsl_version", "4.9.0", "foreign: built with dsl_version='4.9.0'"),
        ("tvm_ffi_version", "0.2.0", "foreign: built with tvm_ffi_version='0.2.0'"),
        ("machine", "aarch64", "foreign: built with machine='aarch64'"),
        (
            "dsl_settings",
            "CUTE_DSL_LINEINFO=True",
            "foreign: built with dsl_settings='CUTE_DSL_LINEINFO=True'",
        ),
        ("format_version", 2, "manifest format"),
        ("format", "something-else", "manifest format"),
        ("classes", {"not": "a list"}, "'classes' is missing or not a list"),
    ],
)
def test_stale_or_foreign_manifests_are_refused_with_a_warning(tmp_path, field, value, words):
    d = write_dir(tmp_path / "aot", [LC_A], **{field: value})
    index = index_over(d)
    with pytest.warns(PrebuiltWarning, match=words):
        assert index.load(LC_A) is None
    with warnings.catch_warnings():  # read once per process: no second warning
        warnings.simplefilter("error")
        assert index.load(LC_A) is None


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b"\xff\xfe"])
def test_unreadable_manifests_are_refused(tmp_path, content):
    d = write_dir(tmp_path / "aot", [LC_A])
    (d / "manifest.json").write_bytes(content)
    with pytest.warns(PrebuiltWarning, match="manifest"):
        assert index_over(d).load(LC_A) is None


def test_a_directory_without_manifest_is_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.warns(PrebuiltWarning, match=r"no manifest.json in .*empty"):
        assert index_over(tmp_path / "empty").load(LC_A) is None


def test_malformed_items_are_skipped_and_named(tmp_path):
    d = write_dir(tmp_path / "aot", [LC_A, LC_B])
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["classes"][1]["library"] = "../elsewhere.so"
    manifest["classes"].append({"layout_class": {"arch": "sm_100a"}})
    (d / "manifest.json").write_text(json.dumps(manifest))
    index = index_over(d)
    with pytest.warns(PrebuiltWarning, match=r"skipped malformed classes\[1\].*classes\[2\]"):
        assert index.load(LC_A) is not None
    assert index.load(LC_B) is None


# ---- libraries ----------------------------------------------------------------------------------------


def test_a_replaced_library_is_refused_and_the_next_directory_serves(tmp_path):
    first = write_dir(tmp_path / "first", [LC_A])
    second = write_dir(tmp_path / "second", [LC_A])
    (first / f"{LC_A.name}.so").write_bytes(b"something else")
    index = index_over(first, second)
    with pytest.warns(PrebuiltWarning, match="differ from the manifest"):
        assert index.load(LC_A)[1] == second / f"{LC_A.name}.so"


def test_first_directory_wins(tmp_path):
    first = write_dir(tmp_path / "first", [LC_A])
    second = write_dir(tmp_path / "second", [LC_A, LC_B])
    index = index_over(first, second)
    assert index.load(LC_A)[1] == first / f"{LC_A.name}.so"
    assert index.load(LC_B)[1] == second / f"{LC_B.name}.so"


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX modes")
def test_group_or_other_writable_libraries_are_refused(tmp_path):
    d = write_dir(tmp_path / "aot", [LC_A])
    os.chmod(d / f"{LC_A.name}.so", 0o666)
    with pytest.warns(PrebuiltWarning, match="writable by group/other"):
        assert index_over(d).load(LC_A) is None


def test_missing_library_and_failed_load_are_refused(tmp_path):
    d = write_dir(tmp_path / "aot", [LC_A, LC_B])
    (d / f"{LC_A.name}.so").unlink()

    def failing(entry):
        raise RuntimeError("undefined symbol: cuda_dialect_init_library_once")

    index = index_over(d, loader=failing)
    with pytest.warns(PrebuiltWarning, match="unreadable"):
        assert index.load(LC_A) is None
    with pytest.warns(PrebuiltWarning, match="failed to load .*undefined symbol"):
        assert index.load(LC_B) is None
    with warnings.catch_warnings():  # refused once per process
        warnings.simplefilter("error")
        assert index.load(LC_B) is None


# ---- where prebuilt directories come from -------------------------------------------------------


def test_search_dirs_env_then_kernels_package_never_imported(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "ragged_attn_kernels"
    (pkg / "prebuilt").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('the kernels package must not be imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("RAGGED_ATTN_AOT_DIR", os.pathsep.join([str(tmp_path / "a"), "", str(tmp_path / "b")]))
    assert prebuilt.search_dirs() == [tmp_path / "a", tmp_path / "b", pkg / "prebuilt"]
    assert "ragged_attn_kernels" not in sys.modules
    monkeypatch.delenv("RAGGED_ATTN_AOT_DIR")
    assert prebuilt.search_dirs() == [pkg / "prebuilt"]


def test_expected_env_is_this_installation():
    from ragged_attn.backends import REQUIRED_DSL_VERSION
    from ragged_attn.cache_store import current_build_env

    env = prebuilt.expected_env()
    build_env = current_build_env()
    assert env["kernel_source_digest"] == build_env.kernel_source_digest
    assert env["dsl_version"] == REQUIRED_DSL_VERSION
    assert env["tvm_ffi_version"] == build_env.tvm_ffi_version
    assert env["machine"] == platform.machine()
    assert env["dsl_settings"] == build_env.dsl_settings


@pytest.fixture
def fresh_expected_env():
    """`prebuilt.expected_env` is read once per process: forget it before and after the test."""
    prebuilt.expected_env.cache_clear()
    yield
    prebuilt.expected_env.cache_clear()


def test_a_manifest_built_with_other_dsl_settings_is_refused(tmp_path, monkeypatch, fresh_expected_env):
    for name in [n for n in os.environ if n.startswith("CUTE_DSL_")]:
        monkeypatch.delenv(name)
    plain = write_dir(tmp_path / "plain", [LC_A], env=prebuilt.expected_env())
    monkeypatch.setenv("CUTE_DSL_LINEINFO", "1")
    prebuilt.expected_env.cache_clear()
    lineinfo = write_dir(tmp_path / "lineinfo", [LC_A], env=prebuilt.expected_env())
    index = PrebuiltIndex(dirs=lambda: [plain, lineinfo], loader=fake_loader)
    refused = r"plain.*foreign: built with dsl_settings=''.*'CUTE_DSL_LINEINFO=True'"
    with pytest.warns(PrebuiltWarning, match=refused):
        assert index.load(LC_A) == ("loaded", lineinfo / f"{LC_A.name}.so", aot.function_name(LC_A))


# ---- the compile cache asks prebuilt directories first ------------------------------------------------


def never_compile(lc):
    raise AssertionError(f"compiled {lc.name}")


def test_cache_serves_prebuilt_first_and_counts_it(tmp_path):
    d = write_dir(tmp_path / "aot", [LC_A])
    index = index_over(d)
    cache = compile_cache.CompileCache(tmp_path / "cache", prebuilt=index.load, jit_unavailable=lambda: None)
    assert cache.get_kernel(LC_A, never_compile)[1] == d / f"{LC_A.name}.so"
    assert cache.get_kernel(LC_A, never_compile)[1] == d / f"{LC_A.name}.so"
    info = cache.cache_info()
    assert (info.prebuilt_hits, info.memory_hits, info.compiles, info.disk_hits) == (1, 1, 0, 0)
    assert info.classes == (LC_A,)
    assert not (tmp_path / "cache").exists(), "a prebuilt hit touches no disk cache"


def test_cache_falls_back_to_jit_for_classes_not_prebuilt(tmp_path):
    d = write_dir(tmp_path / "aot", [LC_A], kernel_source_digest="0" * 64)  # stale
    index = index_over(d)
    compiled = []
    cache = compile_cache.CompileCache(disk=False, prebuilt=index.load, jit_unavailable=lambda: None)
    with pytest.warns(PrebuiltWarning, match="stale"):
        fn = cache.get_kernel(LC_A, lambda lc: compiled.append(lc) or "jit kernel")
    assert fn == "jit kernel" and compiled == [LC_A]
    assert cache.get_kernel(LC_B, lambda lc: "jit B") == "jit B"
    assert (cache.cache_info().compiles, cache.cache_info().prebuilt_hits) == (2, 0)


def test_neither_prebuilt_nor_dsl_names_the_class_and_both_remedies(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGGED_ATTN_AOT_DIR", str(write_dir(tmp_path / "aot", [LC_A])))
    cache = compile_cache.CompileCache(
        disk=False,
        prebuilt=index_over(tmp_path / "aot").load,
        jit_unavailable=lambda: "the CuTe DSL is not installed",
    )
    with pytest.raises(NotImplementedError) as err:
        cache.get_kernel(LC_B, never_compile)
    text = str(err.value)
    for words in (LC_B.name, str(tmp_path / "aot"), "the CuTe DSL is not installed", "python -m ragged_attn aot build",
                  "RAGGED_ATTN_AOT_DIR=DIR", "pip install 'ragged-attn[cute]'"):  # fmt: skip
        assert words in text, f"{words!r} not in: {text}"
    assert cache.get_kernel(LC_A, never_compile)[0] == "loaded"


def test_missing_message_without_directories(monkeypatch):
    monkeypatch.delenv("RAGGED_ATTN_AOT_DIR", raising=False)
    text = prebuilt.missing_kernel_message(LC_A, "nvidia-cutlass-dsl 4.9.0 is installed")
    assert "RAGGED_ATTN_AOT_DIR is unset" in text and LC_A.name in text


def test_warmup_without_dsl_serves_prebuilt_classes_and_names_the_missing_one(tmp_path, monkeypatch):
    import ragged_attn
    from ragged_attn import backends

    d = write_dir(tmp_path / "aot", [LC_A], **prebuilt.expected_env())
    monkeypatch.setenv("RAGGED_ATTN_AOT_DIR", str(d))
    monkeypatch.setattr(backends, "cute_import_error", lambda: "the CuTe DSL is not installed")
    monkeypatch.setattr(prebuilt, "_DEFAULT", PrebuiltIndex(loader=fake_loader))
    monkeypatch.setattr(compile_cache, "_DEFAULT", compile_cache.CompileCache(
        disk=False, prebuilt=prebuilt.get_prebuilt, jit_unavailable=lambda: backends.cute_import_error()))  # fmt: skip
    assert ragged_attn.warmup([LC_A], progress=False) == [LC_A]
    assert compile_cache.cache_info().prebuilt_hits == 1
    with pytest.raises(NotImplementedError, match=f"no kernel for layout class {LC_B.name}.*aot build"):
        ragged_attn.warmup([LC_A, LC_B], progress=False)


def test_aot_dir_entries_expand_the_home(monkeypatch, tmp_path):
    """`~/kernels` is the home's kernels, as a shell would read it, never a directory named ~."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(prebuilt.AOT_DIR_ENV, os.pathsep.join(["~/kernels", str(tmp_path / "other")]))
    assert prebuilt.search_dirs()[:2] == [tmp_path / "kernels", tmp_path / "other"]
