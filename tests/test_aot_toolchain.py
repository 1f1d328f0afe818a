"""`aot.toolchain()` finds the DSL's libcuda_dialect_runtime_static.a and the matching CUDA runtime
in both layouts it meets (no DSL, no GPU, no compile needed: fake trees under tmp_path):

- pip-installed: the files are in the distributions' RECORDs (nvidia-cutlass-dsl-libs-cu12/-cu13,
  nvidia-cuda-runtime-cu12 / nvidia-cuda-runtime 13.x);
- unpacked with `pip install --target DIR` and put on PYTHONPATH (the GPU machine's bootstrap:
  DIR/nvidia_cutlass_dsl/dsl_packages:DIR), where the .pth is not run and the distribution
  metadata may be missing: found relative to the importable `cutlass` package, the way the DSL
  finds its own runtime (`nvidia_cutlass_dsl/cu{N}/lib`).

The CUDA runtime linked in must be of the DSL flavor's major (cu13: nvidia/cu13/lib of
nvidia-cuda-runtime 13.x, or a CUDA 13 toolkit).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import types
from pathlib import Path

import pytest

from ragged_attn import aot
from ragged_attn.aot import link  # where toolchain() looks up the helpers these tests replace

DIALECT = "libcuda_dialect_runtime_static.a"


def _touch(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _site(root: Path, flavors=(13,), cudart_majors=(13,)) -> Path:
    """A `pip install --target` tree of the DSL (flavors cu{N}) and the CUDA runtime wheels, as
    the bootstrap lays it out, without any *.dist-info."""
    dsl = root / "nvidia_cutlass_dsl"
    _touch(dsl / "dsl_packages" / "cutlass" / "__init__.py")
    for n in flavors:
        _touch(
            dsl
            / "dsl_packages"
            / "cutlass"
            / "_mlir"
            / "_mlir_libs"
            / f"_cutlass_ir.cu{n}.cpython-312-x86_64-linux-gnu.so"
        )
        _touch(dsl / f"cu{n}" / "lib" / DIALECT, f"dialect cu{n}")
        _touch(dsl / f"cu{n}" / "lib" / "libcute_dsl_runtime.so")
    for n in cudart_majors:
        lib = root / "nvidia" / (f"cu{n}" if n >= 13 else "cuda_runtime") / "lib"
        _touch(lib / "libcudart_static.a", f"cudart {n}")
        _touch(lib / f"libcudart.so.{n}")
        _touch(lib.parent / "include" / "cuda_runtime_api.h", f"#define CUDART_VERSION {n}000\n")
    return root


@pytest.fixture
def isolated(monkeypatch):
    """No distribution metadata, no driver, no CUTE_DSL_LIBS / CUDA_HOME / CUDA_PATH, the DSL's
    modules forgotten (so `find_spec` looks at sys.path), a stub tvm_ffi.libinfo."""

    def no_dist(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", no_dist)
    monkeypatch.setattr(importlib.metadata, "version", no_dist)
    monkeypatch.setattr(link, "_driver_cuda_major", lambda: None)
    for var in ("CUTE_DSL_LIBS", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    for name in list(sys.modules):
        if name.split(".")[0] in ("cutlass", "nvidia_cutlass_dsl", "nvidia"):
            monkeypatch.delitem(sys.modules, name)
    libinfo = types.ModuleType("tvm_ffi.libinfo")
    libinfo.find_libtvm_ffi = lambda: "/stub/libtvm_ffi.so"
    tvm_ffi = types.ModuleType("tvm_ffi")
    tvm_ffi.libinfo = libinfo
    monkeypatch.setitem(sys.modules, "tvm_ffi", tvm_ffi)
    monkeypatch.setitem(sys.modules, "tvm_ffi.libinfo", libinfo)
    return monkeypatch


def _on_path(monkeypatch, site: Path) -> None:
    # env.sh: PYTHONPATH=/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site (ahead of site-packages)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(site / "nvidia_cutlass_dsl" / "dsl_packages"))
    importlib.invalidate_caches()


def test_pythonpath_layout_without_metadata_finds_cu13_dialect_and_cudart(isolated, tmp_path):
    site = _site(tmp_path / "site")
    _on_path(isolated, site)
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution("nvidia-cutlass-dsl-libs-cu13")  # the lookup really fails
    assert aot.dsl_cuda_major() == 13
    tools = aot.toolchain()
    assert (
        Path(tools["dialect_runtime"]) == (site / "nvidia_cutlass_dsl" / "cu13" / "lib" / DIALECT).resolve()
    )
    assert Path(tools["cudart_file"]) == (site / "nvidia" / "cu13" / "lib" / "libcudart_static.a").resolve()
    assert tools["cuda_major"] == 13 and tools["cudart_version"] == "13.0"
    shared = aot.toolchain("shared")
    assert Path(shared["cudart_file"]).name == "libcudart.so.13"
    assert aot.installed_dsl_version() == "unknown"


def test_the_flavor_follows_the_driver_as_the_dsl_picks_it(isolated, tmp_path):
    site = _site(tmp_path / "site", flavors=(12, 13), cudart_majors=(12, 13))
    _on_path(isolated, site)
    assert aot.toolchain()["cuda_major"] == 13  # no driver: the newest, as the DSL does
    isolated.setattr(link, "_driver_cuda_major", lambda: 12)
    tools = aot.toolchain()
    assert tools["cuda_major"] == 12
    assert Path(tools["dialect_runtime"]).parts[-3] == "cu12"
    assert Path(tools["cudart_file"]).parent.parent.name == "cuda_runtime"
    assert tools["cudart_version"] == "12.0"


def test_a_cuda_toolkit_serves_when_no_runtime_wheel_is_there(isolated, tmp_path):
    site = _site(tmp_path / "site", cudart_majors=())
    _on_path(isolated, site)
    real = link._spec_locations
    isolated.setattr(link, "_spec_locations", lambda m: [] if m == "nvidia" else real(m))
    isolated.setattr(link, "_toolkit_roots", lambda: [tmp_path / "cuda-12.9", tmp_path / "cuda-13.0"])
    for kit, major, version in (("cuda-12.9", 12, 12090), ("cuda-13.0", 13, 13000)):
        _touch(tmp_path / kit / "lib64" / "libcudart_static.a")
        _touch(tmp_path / kit / "lib64" / f"libcudart.so.{major}")
        _touch(tmp_path / kit / "include" / "cuda_runtime_api.h", f"#define CUDART_VERSION {version}\n")
    tools = aot.toolchain()
    assert Path(tools["cudart_file"]) == tmp_path / "cuda-13.0" / "lib64" / "libcudart_static.a"
    assert tools["cudart_version"] == "13.0"


def test_cute_dsl_libs_points_at_the_dialect_runtime(isolated, tmp_path):
    lib = _touch(tmp_path / "elsewhere" / "cu13" / "lib" / DIALECT).parent
    _touch(lib / "libcute_dsl_runtime.so")
    site = _site(tmp_path / "site", flavors=(), cudart_majors=(13,))
    _on_path(isolated, site)
    isolated.setenv("CUTE_DSL_LIBS", str(lib / "libcute_dsl_runtime.so"))
    tools = aot.toolchain()
    assert Path(tools["dialect_runtime"]) == lib / DIALECT and tools["cuda_major"] == 13


def test_metadata_is_used_where_the_files_are_recorded(tmp_path, monkeypatch):
    """The pip layout through RECORDs: the cu13 libs package (the name the old lookup missed)."""
    site = _site(tmp_path / "site")
    files = {
        "nvidia-cutlass-dsl-libs-cu13": ("4.8.1", [f"nvidia_cutlass_dsl/cu13/lib/{DIALECT}"]),
        "nvidia-cuda-runtime": (
            "13.0.96",
            ["nvidia/cu13/lib/libcudart_static.a", "nvidia/cu13/lib/libcudart.so.13"],
        ),
    }

    class Dist:
        def __init__(self, name):
            self.version, paths = files[name]
            self.files = [importlib.metadata.PackagePath(p) for p in paths]

        def locate_file(self, path):
            return site / path

    def distribution(name):
        if name not in files:
            raise importlib.metadata.PackageNotFoundError(name)
        return Dist(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: distribution(name).version)
    monkeypatch.setattr(link, "_dsl_roots", list)
    monkeypatch.setattr(link, "dsl_cuda_major", lambda: 13)
    monkeypatch.setattr(link, "_spec_locations", lambda m: [])  # the RECORDs only
    monkeypatch.setattr(link, "_toolkit_roots", list)
    path, major = aot.find_dialect_runtime()
    assert (path, major) == (site / "nvidia_cutlass_dsl" / "cu13" / "lib" / DIALECT, 13)
    assert aot.find_cudart(13) == (site / "nvidia" / "cu13" / "lib" / "libcudart_static.a", "13.0.96")
    assert aot.find_cudart(12) is None  # 13.0.96 is not a CUDA 12 runtime


def test_no_dsl_tree_keeps_the_clear_error(isolated):
    isolated.setattr(link, "_spec_locations", lambda m: [])
    with pytest.raises(
        aot.AotBuildError, match=r"libcuda_dialect_runtime_static\.a not found.*install the cute extra"
    ):
        aot.toolchain()


def test_no_cuda_runtime_of_the_flavor_is_named(isolated, tmp_path):
    _on_path(isolated, _site(tmp_path / "site", cudart_majors=(12,)))  # a CUDA 12 runtime only
    isolated.setattr(link, "_toolkit_roots", list)
    real = link._spec_locations
    isolated.setattr(
        link, "_spec_locations", lambda m: [tmp_path / "site" / "nvidia"] if m == "nvidia" else real(m)
    )
    with pytest.raises(aot.AotBuildError, match=r"CUDA 13 runtime.*nvidia-cuda-runtime==13\.\*.*CUDA_HOME"):
        aot.toolchain()


def test_no_c_compiler_is_named(isolated, tmp_path):
    isolated.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(aot.AotBuildError, match="no C compiler"):
        aot.toolchain()
    isolated.delenv("CC")
    isolated.setattr(link.shutil, "which", lambda name: None)
    with pytest.raises(aot.AotBuildError, match="none of cc, gcc, clang"):
        aot.toolchain()
