"""`aot build` on the CPU, and the result loaded back through the prebuilt path with the DSL import
blocked (issue 13 item 5). Two classes (one ragged, one paged) keep this near 15 s on a 2-core box.

Loading needs no GPU driver (the CUDA runtime linked into each library starts only at the first
call), so the blocked process loads both libraries and calls them with CPU tensors: the TVM-FFI
entry's own argument check refuses them (expected device_type=cuda), which only the real compiled
entry can say. Running them is tests/gpu/test_aot_gpu.py's job.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.cute

pytest.importorskip("cutlass.cute")

from ragged_attn import aot, prebuilt  # noqa: E402
from ragged_attn.layout_class import LayoutClass  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLASSES = [
    LayoutClass("sm_90a", 64, 64, "bf16", "bf16", "none", False, "ragged"),
    LayoutClass("sm_90a", 128, 128, "fp16", "fp16", "causal", True, "paged"),
]

# Run in a fresh interpreter: any attempt to import cutlass is recorded and refused, the DSL is
# reported missing (as on a runtime install), and the classes come from RAGGED_ATTN_AOT_DIR.
BLOCKED_LOAD = textwrap.dedent(
    """
    import json, sys

    ATTEMPTS = []

    class BlockCutlass:
        def find_spec(self, name, path=None, target=None):
            if name == "cutlass" or name.startswith("cutlass."):
                ATTEMPTS.append(name)
                raise ImportError(f"cutlass import blocked by the test: {name}")
            return None

    sys.meta_path.insert(0, BlockCutlass())
    import torch
    import ragged_attn
    from ragged_attn import backends, compile_cache
    from ragged_attn.aot import parse_class_name

    backends.cute_import_error = lambda: "the CuTe DSL is not installed (blocked by the test)"

    def no_compile(lc):
        raise AssertionError(f"compiled {lc.name}")

    names = json.loads(sys.argv[1])
    result = {"functions": {}, "calls": {}}
    for name in names:
        lc = parse_class_name(name)
        fn = compile_cache.get_kernel(lc, no_compile)
        result["functions"][name] = type(fn).__module__ + "." + type(fn).__qualname__
        q = torch.zeros(16, 2, lc.d_qk, dtype=getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[lc.dtype]))
        i32 = lambda *shape: torch.zeros(shape, dtype=torch.int32)
        kv = q.view(2, 8, 2, lc.d_qk) if lc.kv == "paged" else q
        try:
            fn(q, kv, kv, q, torch.zeros(32) if lc.lse else None, i32(2), i32(2), i32(1), i32(1),
               0, 0, 1, 16, 0, 1.0, -1, -1, 1, 0, 0, 0, 0, 0.69, 1, i32(1),
               i32(1, 2) if lc.kv == "paged" else None, 1, 0, 0)
            result["calls"][name] = "returned"
        except Exception as e:
            result["calls"][name] = f"{type(e).__name__}: {e}"
    result["warmup"] = [c.name for c in ragged_attn.warmup([parse_class_name(n) for n in names], progress=False)]
    missing = parse_class_name("sm_90a-d96x96-bf16-bf16-window-lse-ragged")
    try:
        compile_cache.get_kernel(missing, no_compile)
        result["missing"] = "served"
    except NotImplementedError as e:
        result["missing"] = str(e)
    info = compile_cache.cache_info()
    result["info"] = [info.prebuilt_hits, info.compiles, info.disk_hits]
    result["attempts"] = ATTEMPTS
    result["cutlass_modules"] = sorted(m for m in sys.modules if m == "cutlass" or m.startswith("cutlass."))
    print(json.dumps(result))
    """
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    # A comma and a space in --out: gcc splits -Wl, arguments at commas, so the version script's
    # path goes to the linker through -Xlinker (aot.link_library).
    out = tmp_path_factory.mktemp("aot, out dir")
    manifest = aot.build(CLASSES, out, jobs=1)
    return out, manifest


def test_an_out_path_with_a_comma_and_a_space_links(built):
    out, manifest = built
    assert ", " in out.name
    for lc in CLASSES:
        assert (out / f"{lc.name}.so").is_file(), f"{lc.name}.so was not linked into {out}"
    assert [e["name"] for e in manifest["classes"]] == [lc.name for lc in CLASSES]


def test_manifest_records_classes_digest_versions_and_files(built):
    out, manifest = built
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk == manifest
    for key, want in prebuilt.expected_env().items():
        assert manifest[key] == want, key
    assert manifest["arch"] == "sm_90a" and manifest["cudart"] == "static"
    assert [e["name"] for e in manifest["classes"]] == [lc.name for lc in CLASSES]
    for entry, lc in zip(manifest["classes"], CLASSES):
        data = (out / entry["library"]).read_bytes()
        assert entry["layout_class"] == lc.as_dict()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["size"], entry["sha256"])
        assert entry["function_name"] == aot.function_name(lc)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["manifest.json", aot.MANIFEST_LOCK_NAME] + [f"{lc.name}.so" for lc in CLASSES]
    )  # the lock file stays: removing it would race with a build waiting on it


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf (binutils) not installed")
def test_libraries_need_only_tvm_ffi_and_export_only_the_entry(built):
    out, manifest = built
    for entry in manifest["classes"]:
        lib = str(out / entry["library"])
        dynamic = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout
        needed = sorted(line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line)
        assert "libtvm_ffi.so" in needed
        assert not [n for n in needed if "cute" in n or "cudart" in n or "cuda" in n], needed
        symbols = subprocess.run(
            ["readelf", "-W", "--dyn-syms", lib], capture_output=True, text=True, check=True
        )
        exported = {
            f[7] for f in (line.split() for line in symbols.stdout.splitlines())
            if len(f) >= 8 and f[6] != "UND" and f[4] == "GLOBAL"
        }  # fmt: skip
        assert exported == {"__tvm_ffi_" + entry["function_name"]}, exported


def test_prebuilt_path_loads_with_the_dsl_import_blocked(built, tmp_path):
    out, _ = built
    env = {**os.environ, "RAGGED_ATTN_AOT_DIR": str(out), "RAGGED_ATTN_CACHE_DIR": str(tmp_path / "cache")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    names = [lc.name for lc in CLASSES]
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKED_LOAD, json.dumps(names)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["attempts"] == [], f"cutlass import attempted: {result['attempts']}"
    assert result["cutlass_modules"] == []
    for name in names:
        assert result["functions"][name] == "tvm_ffi.core.Function"
        assert (
            result["calls"][name].startswith("ValueError")
            and "expected device_type=cuda" in result["calls"][name]
        )
    assert result["warmup"] == names
    assert result["info"] == [len(names), 0, 0]
    assert "sm_90a-d96x96-bf16-bf16-window-lse-ragged" in result["missing"]
    assert "aot build" in result["missing"] and "ragged-attn[cute]" in result["missing"]
    assert not (tmp_path / "cache").exists()


def test_a_second_build_keeps_entries_of_the_same_env(built, tmp_path):
    out, manifest = built
    copy = tmp_path / "aot"
    shutil.copytree(out, copy)
    kept = aot.builder._kept_entries(
        copy, {k: manifest[k] for k in manifest if k not in ("classes", "created_unix")}, set()
    )
    assert [e["name"] for e in kept] == [lc.name for lc in CLASSES]
    assert aot.builder._kept_entries(copy, {**manifest, "kernel_source_digest": "0" * 64}, set()) == []
    (copy / f"{CLASSES[0].name}.so").unlink()
    header = {k: manifest[k] for k in manifest if k not in ("classes", "created_unix")}
    assert [e["name"] for e in aot.builder._kept_entries(copy, header, set())] == [CLASSES[1].name]
