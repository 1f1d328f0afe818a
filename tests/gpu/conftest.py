"""GPU test session summary: how many kernels the suite compiled (the compile-economy record), and
RAGGED_ATTN_TEST_TILE_CONFIG: run the suite on tile-config variants before they become a class's
own (e.g. "page_tma=16,half_diag_pv=1": every class's tile_config with those fields replaced where
the config accepts them; the disk cache is turned off so no variant object is stored under a
class's name). Kernels from RAGGED_ATTN_SM90_PREBUILT are used as they are: leave it unset, or
point it at objects built with the same fields (tools/prebuild_sm90.py --config)."""

from __future__ import annotations

import dataclasses
import os

TILE_CONFIG_ENV = "RAGGED_ATTN_TEST_TILE_CONFIG"


def parse_tile_overrides(spec: str) -> dict:
    """"a=1,b=True" -> {"a": 1, "b": True} (ints, and True/False)."""
    fields = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, value = item.partition("=")
        if value in ("True", "False"):
            fields[name] = value == "True"
        else:
            fields[name] = int(value)
    return fields


def pytest_configure(config):
    spec = os.environ.get(TILE_CONFIG_ENV, "")
    if not spec:
        return
    overrides = parse_tile_overrides(spec)
    from ragged_attn.kernels.sm90 import tile_config as tiles

    known = {f.name for f in dataclasses.fields(tiles.TileConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"{TILE_CONFIG_ENV}: expected TileConfig fields ({', '.join(sorted(known))}), got {unknown}")
    os.environ["RAGGED_ATTN_DISK_CACHE"] = "0"

    own = tiles.tile_config

    def with_overrides(layout_class):
        cfg = own(layout_class)
        for name, value in overrides.items():  # one at a time: a field a class refuses is skipped
            try:
                cfg = dataclasses.replace(cfg, **{name: value})
            except ValueError:
                pass
        return cfg

    tiles.tile_config = with_overrides


def pytest_terminal_summary(terminalreporter):
    import sys

    import torch

    if not torch.cuda.is_available():  # CPU runs deselect or skip every GPU test: nothing to count
        return
    lines = []
    kernel_tests = sys.modules.get("tests.gpu.test_kernel_sm90") or sys.modules.get("test_kernel_sm90")
    if kernel_tests is not None and hasattr(kernel_tests, "COMPILES"):
        counts = kernel_tests.COMPILES
        lines.append(f"kernel tests: {sum(counts.values())} compiles over {len(counts)} classes "
                     f"(max per class {max(counts.values(), default=0)})")
    if "ragged_attn" in sys.modules:
        import ragged_attn

        info = ragged_attn.cache_info()
        lines.append(f"compile cache (API tests): compiles={info.compiles} memory_hits={info.memory_hits} "
                     f"disk_hits={info.disk_hits} compile_seconds={info.compile_seconds:.1f} classes={len(info.classes)}")
    if os.environ.get(TILE_CONFIG_ENV):
        lines.append(f"tile-config variant: {os.environ[TILE_CONFIG_ENV]}")
    for line in lines:
        terminalreporter.write_line(line)
