"""RAGGED_ATTN_TEST_TILE_CONFIG: run GPU tests and tools on tile-config variants before they become
a class's own (e.g. "page_tma=16,paged_fence_gathered_only=True": every class's tile_config with
those fields replaced where the config accepts them; the disk cache is turned off so no variant
object is stored under a class's name). Used by tests/gpu/conftest.py and tools/sanitize_sm90.py.
Kernels from RAGGED_ATTN_SM90_PREBUILT are used as they are: leave it unset, or point it at objects
built with the same fields (tools/prebuild_sm90.py --config)."""

from __future__ import annotations

import dataclasses
import os

TILE_CONFIG_ENV = "RAGGED_ATTN_TEST_TILE_CONFIG"


def parse_tile_overrides(spec: str) -> dict:
    """ "a=1,b=True" -> {"a": 1, "b": True} (ints, and True/False)."""
    fields = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, value = item.partition("=")
        if value in ("True", "False"):
            fields[name] = value == "True"
        else:
            fields[name] = int(value)
    return fields


def install_tile_overrides() -> str:
    """Replace `tile_config` by one with $RAGGED_ATTN_TEST_TILE_CONFIG's fields (unknown fields: a
    ValueError naming them) and turn the disk cache off; returns the spec ("" = nothing done)."""
    spec = os.environ.get(TILE_CONFIG_ENV, "")
    if not spec:
        return ""
    overrides = parse_tile_overrides(spec)
    from ragged_attn.kernels.sm90 import tile_config as tiles

    known = {f.name for f in dataclasses.fields(tiles.TileConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"{TILE_CONFIG_ENV}: expected TileConfig fields ({', '.join(sorted(known))}), got {unknown}"
        )
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
    return spec
