"""The persistent kernel's tile schedule (tile_scheduler.py) through its pure-Python twins: every
(sequence, query head, 64-row block) of a batch is computed by exactly one warpgroup of exactly one
tile, every warpgroup of a tile reads the same K/V head, and every padded LSE row is written."""

import random

import pytest

pytest.importorskip("cutlass")

from ragged_attn.kernels.sm90.tile_scheduler import (  # noqa: E402
    ROW_BLOCK,
    decode_tile_ref,
    item_shift_ref,
    launch_schedule_ref,
    tile_item_ref,
    tile_items_ref,
)


def _orders(batch_order):
    """A test's batch_order parameter: 0, 256 (sorted) or "mix" (sorted, TileConfig.stream_mix)."""
    return (256, True) if batch_order == "mix" else (batch_order, False)


def _cover(
    lens_q, lens_k, hq, hkv, tile_m, pack, lse_s_max=0, token_bytes=512, kv_head_groups=False, batch_order=0, group_max=0,
    group_always=False,
):
    batch_order, stream_mix = _orders(batch_order)
    num_wg = tile_m // ROW_BLOCK
    _, _, _, packed, num_tiles = launch_schedule_ref(lens_q, lens_k, hq, hkv, tile_m, pack, lse_s_max, token_bytes)
    computed, lse_filled = {}, {}
    ratio = hq // hkv
    for t in range(num_tiles):
        unit, tile, b, has_rows, pack_r, _ = decode_tile_ref(
            t, lens_q, lens_k, hq, hkv, tile_m, pack, lse_s_max, token_bytes, kv_head_groups, batch_order=batch_order,
            stream_mix=stream_mix, group_max=group_max, group_always=group_always,
        )  # fmt: skip
        kv_heads = set()
        # The items as the producer hands them over: a packed sequence's partial tile first.
        shift = item_shift_ref(pack_r, packed, lens_q[b], num_wg)
        past_end = -(-lens_q[b] // ROW_BLOCK)
        if shift:
            assert lse_s_max == 0  # the shift never meets padded LSE rows (fill_padded_lse: none)
        for w in range(num_wg):
            rb, h = tile_item_ref(unit, tile, w, pack_r, num_wg, shift, past_end)
            assert 0 <= h < hq
            kv_heads.add(h // ratio)
            if has_rows and rb * ROW_BLOCK < lens_q[b]:
                key = (b, h, rb)
                assert key not in computed, f"item {key} computed twice (tiles {computed.get(key)} and {t})"
                computed[key] = t
            elif rb * ROW_BLOCK < lse_s_max:  # padded LSE rows of this item: written once
                key = (b, h, rb)
                assert key not in lse_filled, f"padded LSE rows {key} written twice"
                lse_filled[key] = t
        assert len(kv_heads) == 1, f"tile {t} mixes K/V heads {kv_heads}"
    want = {(b, h, rb) for b, n in enumerate(lens_q) for h in range(hq) for rb in range(-(-n // ROW_BLOCK))}
    assert set(computed) == want
    if lse_s_max:
        pads = {(b, h, rb) for b, n in enumerate(lens_q) for h in range(hq)
                for rb in range(-(-n // ROW_BLOCK), -(-lse_s_max // ROW_BLOCK))}  # fmt: skip
        assert pads <= set(lse_filled)


@pytest.mark.parametrize("batch_order", [0, 256, "mix"])
@pytest.mark.parametrize("tile_m", [128, 192])
@pytest.mark.parametrize("pack", [False, "always", True])
@pytest.mark.parametrize("seed", range(12))
def test_every_row_block_of_every_head_is_computed_exactly_once(seed, pack, tile_m, batch_order):
    rng = random.Random(seed)
    hkv = rng.choice([1, 2, 3, 8])
    ratio = rng.choice([1, 2, 3, 4, 5, 7, 8, 16])
    batch = rng.choice([1, 2, 5, 17, 40])
    lens_q = [rng.choice([0, 1, 63, 64, 65, 128, 191, 192, 193, 256, rng.randrange(0, 2000)]) for _ in range(batch)]
    lens_k = [n + rng.randrange(0, 300) for n in lens_q]
    lse_s_max = 0 if seed % 3 else max(lens_q) + rng.randrange(0, 130)
    _cover(lens_q, lens_k, hkv * ratio, hkv, tile_m, pack, lse_s_max, batch_order=batch_order)


@pytest.mark.parametrize("kv_head_groups", [False, True])
@pytest.mark.parametrize("pack", [False, "always"])
def test_l2_groups_keep_the_cover(pack, kv_head_groups):
    # Long keys: token_bytes large enough that the L2 re-deal of (unit, slot) pairs is taken.
    _cover([1000, 300, 70], [1000, 5000, 70], 12, 3, 192, pack, token_bytes=1 << 14, kv_head_groups=kv_head_groups)
    _cover([700], [700], 16, 2, 128, pack, token_bytes=1 << 15, kv_head_groups=kv_head_groups)
    _cover([16384], [16384], 32, 8, 128, pack, kv_head_groups=kv_head_groups)


@pytest.mark.parametrize("group_max", [1, 5, 16, 32])
@pytest.mark.parametrize("pack", [False, "always"])
def test_capped_l2_groups_keep_the_cover(pack, group_max):
    # TileConfig.l2_group_max caps the heads of a group (`fit`, before the rounding to whole GQA
    # groups); the re-deal stays a bijection. The uncapped fits: 102 (4 x 512, 128 heads of 640-byte
    # tokens), 21 and 46 (48/8 heads of 1 KiB tokens: the ratio 6 rounds the capped fit down to
    # whole groups, at least one), and 5 K/V heads (4 KiB tokens) with kv_head_groups and under row
    # packing.
    _cover([512] * 4, [512] * 4, 128, 128, 128, pack, token_bytes=640, group_max=group_max)
    _cover([700, 1500], [700, 1500], 48, 8, 128, pack, token_bytes=1024, group_max=group_max, batch_order=256)
    _cover([700, 1500], [700, 1500], 48, 8, 192, pack, token_bytes=4096, kv_head_groups=True, group_max=group_max)
    _cover_rows([700, 1500, 3], [700, 1500, 900], 48, 8, 128, token_bytes=4096, group_max=group_max)


@pytest.mark.parametrize("batch_order", [0, 256])
@pytest.mark.parametrize("pack", [False, "always"])
def test_groups_for_every_sequence_keep_the_cover(pack, batch_order):
    # TileConfig.l2_group_always: every sequence with keys is re-dealt in (capped) L2 groups, empty
    # key ranges (len_k 0) and rows without keys included.
    _cover([256] * 5 + [0, 70], [256] * 5 + [0, 0], 24, 4, 128, pack, token_bytes=640, group_max=8, group_always=True,
           batch_order=batch_order)  # fmt: skip
    _cover([1000, 300, 70, 1], [1000, 5000, 70, 9], 12, 3, 192, pack, group_max=3, group_always=True,
           batch_order=batch_order)  # fmt: skip
    _cover_rows([700, 3, 40], [700, 900, 0], 16, 2, 128, group_max=2, group_always=True, batch_order=batch_order)


def test_the_cap_changes_the_order_it_should():
    """The cap moves tiles where the uncapped group is larger than it, and nowhere else (a group
    of 3 heads under a cap of 8: 1 x 16384 at d 192/128, 128 heads)."""

    def order(lens, hq, hkv, token_bytes, cap, **kw):
        _, _, _, _, n = launch_schedule_ref(lens, lens, hq, hkv, 128, False, token_bytes=token_bytes)
        return [decode_tile_ref(t, lens, lens, hq, hkv, 128, False, token_bytes=token_bytes, group_max=cap, **kw)[:3]
                for t in range(n)]  # fmt: skip

    assert order([16384], 128, 128, 640, 8) == order([16384], 128, 128, 640, 0)
    assert order([512] * 4, 128, 128, 640, 8) != order([512] * 4, 128, 128, 640, 0)
    assert order([700, 1500], 48, 8, 4096, 2, kv_head_groups=True) != order([700, 1500], 48, 8, 4096, 0, kv_head_groups=True)


def test_capped_l2_groups_bring_a_heads_row_tiles_together():
    """DeepSeek 4 x 512 (128/128 heads, d 192/128: 640 bytes of K and V per token and head): the
    uncapped group holds 102 heads, so a head's 4 row tiles lie 102 linear indices apart; capped at
    16, 16 apart (the first 64 indices: the 4 row tiles of heads 0..15)."""
    args = ([512] * 4, [512] * 4, 128, 128, 128, False)
    first = {cap: {decode_tile_ref(t, *args, token_bytes=640, group_max=cap)[:2] for t in range(64)} for cap in (0, 16)}
    assert first[0] == {(u, 3) for u in range(64)}
    assert first[16] == {(u, tile) for u in range(16) for tile in range(4)}


def test_l2_groups_count_query_or_kv_heads():
    """1 x 16384 at 32/8 heads, d128 bf16 (512 bytes of K and V per token and head: 8 MiB per head):
    query-head groups hold 4 query heads (32 MiB / 8 MiB, rounded to one GQA group); K/V-head groups
    hold 4 K/V heads, 16 query heads (FA3's count)."""
    from ragged_attn.kernels.sm90.tile_scheduler import L2_KV_BYTES

    fit = L2_KV_BYTES // (16384 * 512)
    units = {}
    for kv in (False, True):
        # The first 16 * 8 linear indices (slot 0..7 of every query head, units fastest) land on
        # the heads of the first group(s) only.
        heads = {decode_tile_ref(t, [16384], [16384], 32, 8, 128, False, kv_head_groups=kv)[0] for t in range(4 * 16)}
        units[kv] = len(heads)
    assert fit == 4 and units == {False: 4, True: 16}


def test_packing_fills_the_idle_warpgroups_of_short_sequences():
    # 64 sequences of 128 queries, 32/8 heads, 192-row tiles: 4 tiles per K/V head and sequence
    # (one per query head, a third of each idle) unpacked; 3 packed (8 row blocks / 3 per tile).
    *_, unpacked = launch_schedule_ref([128] * 64, [128] * 64, 32, 8, 192, False)
    _, pack_r, _, _, packed = launch_schedule_ref([128] * 64, [128] * 64, 32, 8, 192, True)
    assert (unpacked, packed, pack_r) == (64 * 32, 64 * 8 * 3, 4)


@pytest.mark.parametrize(
    "lens, tile_m, packs",
    [
        ([256] * 16, 192, True),  # 16 tiles per group -> 6 (from 8)
        ([512] * 4, 192, False),  # 11 tiles per group against 12: not worth it (measured)
        ([128] * 64, 128, False),  # d128 tiles: 2 row blocks per head fill a tile already
        ([64] * 64, 128, True),  # a 64-row sequence leaves a 128-row tile half idle (where a class packs)
        ([8192] * 2, 192, False),
    ],
)
def test_packing_is_chosen_where_it_saves_a_tenth_of_the_tiles(lens, tile_m, packs):
    _, pack_r, *_ = launch_schedule_ref(lens, lens, 32, 8, tile_m, True)
    assert (pack_r == 4) == packs


@pytest.mark.parametrize("num_wg", [2, 3])
@pytest.mark.parametrize("pack_r", [1, 2, 3, 4, 5, 8, 16])
def test_handed_over_items_match_the_item_formula(num_wg, pack_r):
    """The producer hands each warpgroup its item with one division (tile_items, stepping the
    query head); the MMA warpgroups used tile_item's division per warpgroup: the same items (with
    every shift item_shift may give), and the row span of the real ones."""
    for shift in range(num_wg):
        for unit in range(3):
            for tile in range(40):
                words = tile_items_ref(unit, tile, pack_r, num_wg, shift, past_end=99)
                real = []
                for w in range(num_wg):
                    assert words[2 * w : 2 * w + 2] == tile_item_ref(unit, tile, w, pack_r, num_wg, shift, 99)
                    if tile * num_wg + w - shift >= 0:
                        real.append(tile * num_wg + w - shift)
                assert words[-2:] == ((real[0] // pack_r) * ROW_BLOCK, (real[-1] // pack_r + 1) * ROW_BLOCK)


def test_shifted_packed_tiles_span_other_rows_than_tile_rows():
    """Why every reader of a packed tile takes the row span the producer's warp 0 decoded
    (forward.take_over; the paged producer warps 1-3 too, since session 16): with item_shift the
    items' span (tile_items) is not tile_rows' (the unshifted formula), so a reader that computed
    tile_rows would walk another key-block range than warp 0 loads (the first paged build hung on
    longtail14). Over GQA ratios and lengths the spans differ on many tiles, the shifted one lower
    (its items start up to W - 1 earlier), never higher."""
    num_wg, lower, higher = 3, 0, 0
    for pack_r in (2, 3, 4, 8):
        for len_q in range(1, 700, 7):
            shift = item_shift_ref(pack_r, True, len_q, num_wg)
            n_items = pack_r * -(-len_q // ROW_BLOCK)
            for tile in range((n_items + shift) // num_wg):
                lo, hi = tile_items_ref(0, tile, pack_r, num_wg, shift)[-2:]
                items = range(max(tile * num_wg - shift, 0), tile * num_wg - shift + num_wg)
                assert (lo, hi) == (items[0] // pack_r * ROW_BLOCK, (items[-1] // pack_r + 1) * ROW_BLOCK)
                first = tile * num_wg  # tile_rows' formula: no shift
                unshifted = ((first // pack_r) * ROW_BLOCK, ((first + num_wg - 1) // pack_r + 1) * ROW_BLOCK)
                lower += (lo, hi) < unshifted
                higher += (lo, hi) > unshifted
    assert lower > 0 and higher == 0


@pytest.mark.parametrize("pack_r, len_q, steps", [(4, 256, (10, 9)), (4, 128, (3, 3)), (4, 512, (29, 28))])
def test_a_packed_sequences_partial_tile_is_its_first(pack_r, len_q, steps):
    """Causal 128-key blocks, 192-row tiles: a tile costs the key blocks of its highest row block;
    shifting the items so the partial tile holds the lowest rows never costs more, and saves a
    block where the partial tile held the top rows (16 x 256, 32/8 heads: 10 -> 9 per unit)."""
    num_wg, n = 3, -(-len_q // ROW_BLOCK)
    tiles = -(-pack_r * n // num_wg)
    shift = item_shift_ref(pack_r, True, len_q, num_wg)
    assert 0 <= shift < num_wg and (pack_r * n + shift) % num_wg == 0

    def cost(s):
        return sum(
            max((rb * ROW_BLOCK + ROW_BLOCK - 1) // 128 + 1 for rb, _ in
                [tile_item_ref(0, t, w, pack_r, num_wg, s, n) for w in range(num_wg)] if rb < n)
            for t in range(tiles)
        )  # fmt: skip

    assert (cost(0), cost(shift)) == steps


def _cover_rows(
    lens_q, lens_k, hq, hkv, tile_m, num_splits=1, token_bytes=512, batch_order=0, group_max=0, group_always=False
):
    """Row packing: every (sequence, query head, token) lies in exactly one tile's packed rows (per
    split), every tile holds rows of one K/V head, and a tile's packed rows start inside its
    sequence's packed row space."""
    from ragged_attn.kernels.sm90.tile_scheduler import row_mult_ref

    batch_order, stream_mix = _orders(batch_order)
    g = row_mult_ref(hq, hkv, True)
    assert g == hq // hkv > 1
    num_units, pack_r, _, _, num_tiles = launch_schedule_ref(
        lens_q, lens_k, hq, hkv, tile_m, False, token_bytes=token_bytes, num_splits=num_splits, pack_rows=True
    )  # fmt: skip
    assert (num_units, pack_r) == (hkv, 1)
    computed = {}
    for t in range(num_tiles):
        unit, tile, b, has_rows, _, split = decode_tile_ref(
            t, lens_q, lens_k, hq, hkv, tile_m, False, token_bytes=token_bytes, num_splits=num_splits,
            pack_rows=True, batch_order=batch_order, stream_mix=stream_mix, group_max=group_max,
            group_always=group_always,
        )  # fmt: skip
        if not stream_mix:
            assert split == t % num_splits
        assert 0 <= unit < hkv
        if not has_rows:
            continue
        first = tile * tile_m
        assert first < lens_q[b] * g
        for m in range(first, min(first + tile_m, lens_q[b] * g)):
            key = (b, unit * g + m % g, m // g, split)
            assert key not in computed, f"row {key} computed twice"
            computed[key] = t
    want = {(b, h, i, s) for b, n in enumerate(lens_q) for h in range(hq) for i in range(n) for s in range(num_splits)}
    assert set(computed) == want


@pytest.mark.parametrize("batch_order", [0, 256, "mix"])
@pytest.mark.parametrize("tile_m", [128, 192])
@pytest.mark.parametrize("seed", range(10))
def test_row_packing_computes_every_token_of_every_head_once(seed, tile_m, batch_order):
    rng = random.Random(100 + seed)
    hkv = rng.choice([1, 2, 3, 8])
    g = rng.choice([2, 3, 4, 5, 6, 7, 8, 16, 64])
    batch = rng.choice([1, 2, 5, 17, 40])
    lens_q = [rng.choice([0, 1, 2, 5, 16, 17, 63, 64, 65, rng.randrange(0, 300)]) for _ in range(batch)]
    lens_k = [n + rng.randrange(0, 3000) for n in lens_q]
    _cover_rows(lens_q, lens_k, hkv * g, hkv, tile_m, num_splits=rng.choice([1, 1, 2, 4]), batch_order=batch_order)


def test_row_packing_keeps_the_cover_under_l2_groups():
    _cover_rows([1, 1, 300, 5], [20000, 70000, 70000, 300], 32, 8, 128, token_bytes=1 << 14)
    _cover_rows([17], [200000], 64, 8, 128, num_splits=2, token_bytes=1 << 12)


def test_row_packing_puts_a_decode_groups_rows_in_one_tile():
    # 64 decode rows, 32/8 heads, d128: 64 * 32 tiles unpacked; packed, one tile per (row, K/V head).
    *_, unpacked = launch_schedule_ref([1] * 64, [4096] * 64, 32, 8, 128, False)
    units, pack_r, _, _, packed = launch_schedule_ref([1] * 64, [4096] * 64, 32, 8, 128, False, pack_rows=True)
    assert (unpacked, packed, units, pack_r) == (64 * 32, 64 * 8, 8, 1)
    # No row packing without GQA or with a padded LSE.
    assert launch_schedule_ref([1] * 4, [9] * 4, 8, 8, 128, False, pack_rows=True)[0] == 8
    assert launch_schedule_ref([1] * 4, [9] * 4, 8, 2, 128, False, lse_s_max=4, pack_rows=True)[1:3] == (1, 1)


@pytest.mark.parametrize("pack_rows", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_batch_order_deals_the_longest_keys_first(seed, pack_rows):
    # TileConfig.batch_order: the tiles' sequences come in key-length order, longest first, ties in
    # the caller's order; a batch past the cap (or of one sequence) keeps the caller's order.
    from ragged_attn.kernels.sm90.tile_scheduler import batch_order_ref

    rng = random.Random(300 + seed)
    batch = rng.choice([2, 5, 17, 64])
    lens_q = [rng.choice([1, 1, 4, 100, rng.randrange(1, 2000)]) for _ in range(batch)]
    lens_k = [n + rng.choice([0, 0, rng.randrange(0, 30000)]) for n in lens_q]
    hq, hkv = 32, 8
    *_, num_tiles = launch_schedule_ref(lens_q, lens_k, hq, hkv, 128, False, pack_rows=pack_rows)
    seen = []
    for cap, want in ((256, batch_order_ref(lens_k, 256)), (batch - 1, list(range(batch)))):
        seen = []
        for t in range(num_tiles):
            _, _, b, has_rows, _, _ = decode_tile_ref(t, lens_q, lens_k, hq, hkv, 128, False, pack_rows=pack_rows, batch_order=cap)
            if has_rows and b not in seen:
                seen.append(b)
        assert seen == want
    assert batch_order_ref(lens_k, 256) == sorted(range(batch), key=lambda b: (-lens_k[b], b))
    assert batch_order_ref([5], 256) is None and batch_order_ref(lens_k, 0) is None


@pytest.mark.parametrize("pack_rows", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_stream_mix_deals_streaming_tiles_evenly_through_the_others(seed, pack_rows):
    # TileConfig.stream_mix: decode-like sequences (one 64-row block of rows at most) rank first;
    # dealing position t then takes a streaming tile exactly where floor((t + 1) A / N) passes
    # floor(t A / N), so every prefix of the dealing order holds its share of them, and each kind
    # keeps its own order (streaming by keys, longest first, then the others by keys).
    from ragged_attn.kernels.sm90.tile_scheduler import (
        batch_order_ref,
        is_streaming_ref,
        mix_bound_ref,
        mixed_tile_ref,
        row_mult_ref,
    )

    rng = random.Random(700 + seed)
    hq, hkv = 32, 8
    row_mult = row_mult_ref(hq, hkv, pack_rows)
    lens_q = [rng.choice([1, 1, 1, 3, rng.randrange(100, 1500)]) for _ in range(rng.choice([5, 17, 68]))]
    lens_k = [n + rng.randrange(0, 30000) for n in lens_q]
    streaming = [is_streaming_ref(n, row_mult) for n in lens_q]
    if all(streaming) or not any(streaming):
        lens_q[0], lens_q[1] = 1, 900
        streaming = [is_streaming_ref(n, row_mult) for n in lens_q]
    order = batch_order_ref(lens_k, 256, lens_q, row_mult, True)
    n_stream = sum(streaming)
    assert all(streaming[b] for b in order[:n_stream]) and not any(streaming[b] for b in order[n_stream:])
    for part in (order[:n_stream], order[n_stream:]):
        assert [lens_k[b] for b in part] == sorted((lens_k[b] for b in part), reverse=True)
    *_, num_tiles = launch_schedule_ref(lens_q, lens_k, hq, hkv, 128, False, pack_rows=pack_rows)
    sorted_tiles = [decode_tile_ref(t, lens_q, lens_k, hq, hkv, 128, False, pack_rows=pack_rows, batch_order=256,
                                    stream_mix="sort") for t in range(num_tiles)]  # fmt: skip
    dealt = [decode_tile_ref(t, lens_q, lens_k, hq, hkv, 128, False, pack_rows=pack_rows, batch_order=256,
                             stream_mix=True) for t in range(num_tiles)]  # fmt: skip
    # The sorted order's tiles, mixed: the streaming tiles are its linear prefix [0, A).
    units, pack_r, tiles_max, packed, _ = launch_schedule_ref(lens_q, lens_k, hq, hkv, 128, False, pack_rows=pack_rows)
    cu = [0]
    for b in order:
        cu.append(cu[-1] + lens_q[b])
    bound = mix_bound_ref(lens_q, order, cu, row_mult, units, pack_r, tiles_max, packed, num_tiles, 128, 1)
    assert 0 < bound < num_tiles
    for t, tile in enumerate(sorted_tiles):
        if tile[3]:
            assert (t < bound) == bool(streaming[tile[2]])
    perm = [mixed_tile_ref(t, bound, num_tiles) for t in range(num_tiles)]
    assert sorted(perm) == list(range(num_tiles))
    assert dealt == [sorted_tiles[p] for p in perm]
    taken = 0
    for t, p in enumerate(perm):
        taken += p < bound
        assert taken == (t + 1) * bound // num_tiles
    stream_seen = [tile[2] for tile in dealt if tile[3] and streaming[tile[2]]]
    other_seen = [tile[2] for tile in dealt if tile[3] and not streaming[tile[2]]]
    assert list(dict.fromkeys(stream_seen)) == order[:n_stream]
    assert list(dict.fromkeys(other_seen)) == order[n_stream:]
    # No streaming sequence, or nothing else: the batch order's own dealing.
    for lq in ([700] * len(lens_q), [1] * len(lens_q)):
        plain = [decode_tile_ref(t, lq, lens_k, hq, hkv, 128, False, pack_rows=pack_rows, batch_order=256)
                 for t in range(launch_schedule_ref(lq, lens_k, hq, hkv, 128, False, pack_rows=pack_rows)[4])]  # fmt: skip
        mixed = [decode_tile_ref(t, lq, lens_k, hq, hkv, 128, False, pack_rows=pack_rows, batch_order=256,
                                 stream_mix=True) for t in range(len(plain))]  # fmt: skip
        assert mixed == plain
