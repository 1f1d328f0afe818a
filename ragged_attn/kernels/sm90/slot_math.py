"""The tile schedule's constants and slot arithmetic that the host's launch rules share with the
kernel (tile_scheduler.py), in a module that imports no DSL: split_kv's rules (choose_pack_rows,
choose_num_splits, choose_batch_order) run on the launch path of installs served by prebuilt
objects alone, where the CuTe DSL may not be installed."""

from __future__ import annotations

ROW_BLOCK = 64  # query rows of one MMA warpgroup: the unit of an item
# GQA packing is taken at launch where it cuts the tiles to at most (1 - 1/10) of the unpacked
# count: measured on an H200 (2026-12-02, tile_config.py), packing always lost 3-5% where it saved
# few or no tiles (d64 4 x 512: 11 tiles per K/V head and sequence against 12; every d128 row).
PACK_MIN_SAVING = (1, 10)


def slot_slack(pack_r, num_wg: int):
    """k of the packed order: first(b + 1) - first(b) >= tiles of sequence b. With len_q = 64 a + r,
    tiles = ceil(pack_r * ceil(len_q / 64) / W) <= ceil(pack_r * a / W + pack_r / W), and
    floor(pack_r * cu[b + 1] / tile_m) - floor(pack_r * cu[b] / tile_m) >= floor(pack_r * a / W);
    the fraction pack_r * a / W drops is at most (W - 1) / W, so k = ceil((pack_r + W - 1) / W)
    covers the rest (k = 1 for pack_r = 1). Works on Python ints and device Int32 alike."""
    return (pack_r + 2 * num_wg - 2) // num_wg
