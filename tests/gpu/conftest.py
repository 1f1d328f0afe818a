"""GPU test session summary: how many kernels the suite compiled (the compile-economy record), and
RAGGED_ATTN_TEST_TILE_CONFIG (tests/gpu/tile_overrides.py): run the suite on tile-config variants
before they become a class's own."""

from __future__ import annotations

import os

from tests.gpu.tile_overrides import TILE_CONFIG_ENV, install_tile_overrides


def pytest_configure(config):
    install_tile_overrides()


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
