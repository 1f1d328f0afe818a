"""Tile configuration of the sm_90a forward kernel, one per layout class (a pure function, no GPU).

Rules of this module (tests/test_kernel_compile_sm90.py checks them on the CPU):
1. `tile_config(layout_class)` depends only on fields of the class (d_qk, d_v, mask, kv): the config
   is part of the compile key through the class and nothing else.
2. Every config fits the 227 KiB of shared memory of an sm_90 CTA (`smem_bytes`); when Q, K, V
   and O do not fit side by side, O's staging buffer aliases Q's (`o_aliases_q`), which costs one
   named barrier before the epilogue writes it.
3. tile_m = 64 per MMA warpgroup (128: 2 warpgroups, 192: 3), tile_n a multiple of 16 (one k16
   step of the P V GEMM takes two n8 chunks of the S accumulator).
4. Each choice is the fastest candidate measured on the device with 0 register spills; the
   numbers that decided it sit in `tile_config`'s docstring.

Candidates are compiled by tools/prebuild_sm90.py (VARIANTS) and timed by tools/bench_sm90.py, or
built with other fields into RAGGED_ATTN_SM90_PREBUILT/<variant>/ and timed side by side with the
peers by tools/bench_issue10.py (RAGGED_ATTN_VARIANTS).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

SMEM_CAPACITY = 232448  # bytes of dynamic smem per CTA on sm_90 (227 KiB)
_TILE_STAGES = 2  # forward.TILE_STAGES; the decoded tiles' slots of `tile_words` int32 words each
_ALIGN = 1024  # every smem operand buffer starts on a 1024-byte boundary (128-byte swizzle)
# Batches of up to this many sequences are dealt longest first (TileConfig.batch_order; its 1540
# bytes of smem fit in what the d128 / d192 / d256 classes leave, 2048).
BATCH_ORDER = 256


@dataclass(frozen=True)
class TileConfig:
    """tile_m query rows x tile_n keys per step; K/V pipeline depth; warpgroup scheduling."""

    tile_m: int = 128
    tile_n: int = 128
    num_stages: int = 2
    pingpong: bool = True  # named-barrier turns between the two MMA warpgroups
    overlap: bool = True  # softmax of block n under the P V GEMM of block n + 1
    # Ping-pong turns also around each tile's first S GEMM, so one-block tiles stagger too.
    turn_first_gemm: bool = True
    # Each MMA warpgroup stores its own 64 rows of O behind its own named barrier (needs O's own
    # buffer); off: both warpgroups meet at a CTA-wide barrier in every epilogue.
    wg_epilogue: bool = True
    # Each MMA warpgroup skips the tile's key blocks none of its own rows sees (causal diagonal
    # tiles, rows past len_q), releasing their stages and passing its turns.
    wg_skip: bool = True
    # With wg_epilogue: a warpgroup whose 64 rows are all < len_q stores them with one TMA store
    # from sO (partial row blocks keep the predicated 128-bit stores).
    tma_o_store: bool = True
    # Each MMA warpgroup releases Q once its last S GEMM of the tile is done (needs wg_skip, O in its
    # own buffer), so the next tile's Q loads under this tile's last softmax, P V and epilogue.
    early_q_release: bool = True
    # Q buffers: 2 lets the next tile's Q load during this whole tile (O in its own buffer only).
    q_stages: int = 1
    # GQA packing (tile_scheduler.py): a tile's warpgroups take consecutive (row block, query head)
    # items of one K/V head, so a sequence whose row blocks do not fill its last tile lends the
    # idle warpgroups to the group's next query head (needs wg_epilogue and wg_skip). On for the
    # 192-row tiles only (`_tiles`): 128-row classes ran 1-2% slower unpacked with the code in.
    pack_gqa: bool = False
    # O's staging buffer holds one warpgroup's 64 rows, and the MMA warpgroups take it in turns in
    # each tile's epilogue (warpgroup 0 first): O keeps a buffer of its own (so wg_epilogue, the TMA
    # store and early_q_release stay on) where a whole tile's O beside Q and the K/V stages does
    # not fit (d192: Q 48 + K 2 x 48 + V 2 x 32 + O 16 KiB).
    o_turns: bool = False
    # With o_turns: every thread of a warpgroup passes its turn at sO (the storing warp after its TMA
    # store has read sO), not the storing warp alone under its branch, which made ptxas keep the MMA
    # warpgroups' K/V pipeline state in per-thread registers: d192 causal's interior loop built its
    # WGMMA descriptors with 44 IMAD and 40 R2UR, 567 instructions; with every thread, 514 and
    # uniform descriptors, as d192 without o_turns (510; static SASS, 2026-12-04). On for d192
    # (`_tiles`; H200, session 16: DeepSeek 1 x 16384 693.9 -> 717.7 TFLOP/s).
    o_turn_every_thread: bool = False
    # L2 groups of long sequences (tile_scheduler.l2_group) counted in K/V heads, FA3's count; off:
    # in query heads, as if each read K/V of its own (fewer heads per group under GQA). Measured
    # (session 7): within noise; kept off for measurement only.
    l2_kv_head_groups: bool = False
    # A cap on the heads of an L2 group (0: as many as L2_KV_BYTES holds): `fit`, the heads whose K/V
    # the budget holds, counted as the group counts them (query heads; K/V heads with
    # l2_kv_head_groups or row packing), is capped before its rounding to whole GQA groups (at least
    # one group: a GQA ratio above the cap keeps one whole group). The units-fastest
    # order inside a group puts a head's next row tile `group` tiles after its last, so a group of
    # many short heads (DeepSeek 4 x 512: 102 heads of 320 KiB) re-reads K/V that the group's other
    # heads and the tiles' Q / O pushed out of L2 (ncu, H100, session 24: 288.7 MB of DRAM reads
    # against the tensors' 268.4 MB, cuDNN 268.5).
    l2_group_max: int = 0
    # Every sequence with keys re-deals its tiles in L2 groups (of l2_group_max heads), not only those
    # whose K/V over all heads pass L2_KV_BYTES: a short sequence's row tiles of one head then run
    # side by side (DeepSeek 16 x 256: a head's two row tiles lie 128 tiles, a wave, apart, so a wave
    # reads Q, K and V from DRAM and the next mostly Q). On for d192 (`_tiles`).
    l2_group_always: bool = False
    # The producer issues a tile's Q load before its first K block (ragged and paged); off: after
    # it, so the K stage the MMA warpgroups wait for first is not queued behind Q. On for d128 (two
    # K/V stages: off, a tile's Q waits behind its first K stage's acquire); within noise at d64,
    # mixed at d192 (measured in sessions 7 and 8, the docstring below).
    q_first: bool = False
    # Paged classes: keys per TMA box (0: off). Key blocks wholly inside len_k arrive as TMA boxes
    # of this many keys (one page each) where the page size is a multiple of it (paged_kv.py); off,
    # or other page sizes: the cp.async gather of the whole producer warpgroup.
    page_tma: int = 0
    # Paged classes with page_tma: a second, smaller box for page sizes that are a multiple of it but
    # not of page_tma (e.g. 64 beside 128: page 64 as two 64-key boxes per stage); 0: none.
    page_tma_small: int = 0
    # Paged classes with page_tma: producer warps that issue a key block's boxes (1: warp 0 issues
    # them all; 2 or 4: warp w issues its share, from page-table reads of its own lanes).
    page_box_warps: int = 1
    # Paged classes with page_tma_small: the key block crossing len_k takes its whole page_tma_small-key
    # runs inside len_k by TMA boxes too, and gathers only the rest (its last partial run); off: the
    # whole crossing block is gathered. A measurement variant (H100, session 19: 1-4% slower; the
    # docstring of `tile_config`).
    page_box_crossing: bool = False
    # Paged classes with page_tma, pools whose page size is a multiple of it (box_kind 1): the key
    # block crossing len_k takes its K as the block's page_tma box too (rows past len_k come from the
    # same page, whatever they hold: apply_mask replaces their scores by -inf, a select, so NaN does
    # not pass), and gathers only its V (zero-filled past len_k, as P V needs: 0 * NaN is NaN); off:
    # the whole crossing block is gathered. The crossing block is a causal tile's first, on its
    # critical path. A measurement variant (H100, session 19: 0.4-1.6% slower).
    page_crossing_k_box: bool = False
    # Paged classes with page_tma, d a multiple of 64: K / V stages column-first (each 8-row group's
    # 64-column bands side by side) and one TMA instruction per box over the pool's rows view (64
    # columns, 8 rows, d / 64 bands, row groups, H_kv), for pools whose pages are contiguous runs of
    # rows (NHD as vLLM allocates them; others gather); off: a box is d / 64 instructions (one per
    # band). A measurement variant (unmeasured).
    page_tma_rows: bool = False
    # Paged classes with page_tma: each key block's K and V boxes are prefetched into L2 (TMA
    # prefetch, paged_kv.prefetch_boxes), and a gathered block's rows (prefetch.global.L2,
    # paged_kv.prefetch_rows), before the producer waits for K's free stage, so their page walks
    # and DRAM reads overlap the wait. Session 16 (H200): 64 x 128 at page 16 ran 0.864
    # of ragged with the pool's pages in random order and 0.975 with them in order (the same
    # kernel, page count and boxes): shuffled pages cost time (per-box latency, presumably; not
    # measured directly). A measurement variant.
    page_prefetch: bool = False
    # Paged classes: the MMA warps release each K / V stage from one lane per warp (the stage's
    # empty barrier counts warps, as the ragged class's PipelineTmaAsync does), not from all 32
    # lanes (PipelineCpAsync's consumer release: 256 arrives per stage, two stages a block; SASS: an
    # unpredicated SYNCS.ARRIVE in the paged MMA loops, predicated to one lane in the ragged ones).
    # A measurement variant, off: H100, session 22, interleaved paged / ragged at page 16 | 64 | 128:
    # 1 x 8192 0.949 0.956 0.975 against main's 0.936 0.941 0.971, longtail14 0.875 0.929 0.942
    # against 0.881 0.920 0.947, 64 x 128 0.888 0.987 0.981 against 0.905 0.983 0.977 (GPU tests pass).
    # Re-measured (H100, session 26, 12 rounds): 1 x 8192 0.950 0.958 0.972 against main's 0.950
    # 0.958 0.972, longtail14 0.883 0.932 0.946 against 0.881 0.928 0.948, 64 x 128 0.910 0.990 1.010
    # against 0.915 1.009 1.006: no change, stays off.
    paged_warp_release: bool = False
    # Registers of the producer warpgroup (setmaxnreg) where not 0: the MMA warpgroups get what is
    # left. 0: the class's own split (24; paged 40; paged with TMA boxes 56). A measurement variant.
    producer_regs: int = 0
    # Row packing (tile_scheduler.py: FlashAttention 3's PackGQA at row granularity): where the launch
    # asks for it (run-time `pack_rows`, launch.py) a unit is one K/V head of a sequence and its
    # g = H_q / H_kv query heads' rows are packed token-major into the tile's rows (decode rows: g
    # rows of one block share every K/V load). Q then arrives by a cp.async row gather, O by
    # per-row stores. Trace time only so that classes without it keep their code; the run-time
    # switch picks it per launch (a launch packs blocks, pack_gqa, or rows, never both). Needs
    # wg_epilogue and wg_skip; never with sinks (a sink is per query head). On for the d128 causal
    # classes (ragged and paged) only (`_tiles`, `_rows`); measured on the H200 in session 11:
    # unpacked launches at the class's speed without it, vLLM's mixed batch 3268 -> ~1700 us.
    pack_rows: bool = False
    # Paged classes: the MMA warpgroups fence the cp.async-written K/V stages into the async proxy
    # (fence.proxy.async) after each wait, before WGMMA reads them (mainloop.kv_wait). Off: no fence,
    # as FA3's (hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp) and FA4's sm90 paged paths and CUTLASS's
    # PipelineCpAsync consumers run; a measurement variant (its cost per block), not shipped off.
    paged_consumer_fence: bool = True
    # Paged classes with paged_consumer_fence: fence only the stages the cp.async gather wrote (the
    # block crossing len_k; every block of a launch whose pool takes no boxes), not those TMA boxes
    # wrote (async proxy writes completing on the stage barrier, as the ragged class's stages: no
    # fence there), and none in an idle warpgroup's waits (it issues no GEMM). The interior loop runs
    # without a fence where the launch's pool takes boxes (its blocks are inside len_k), with one
    # where it does not. Off: every paged stage wait fences. On for the d128 paged classes
    # (`_tiles`; H200, session 16: vLLM's mixed batch at page 16 1675 -> 1652 us); d64 paged ran
    # 1-4% slower with it (64 x 128 page 16 0.757 -> 0.724 of ragged), so off there.
    paged_fence_gathered_only: bool = False
    # Batch order (tile_scheduler.py "Batch order"): a launch of 2 to batch_order sequences deals them
    # longest first, sorted by key length in each CTA's prologue (the producer warpgroup ranks the
    # key lengths in smem: 4 (batch_order + 1) + 2 batch_order bytes), FA3's LPT order of varlen
    # batches without its prepare kernel; larger batches, and 0, keep the caller's order.
    batch_order: int = 0
    # Streaming rows dealt among the others (tile_scheduler.py "Stream mix"; with batch_order): the
    # batch order ranks the sequences of at most one 64-row block of query rows (row-packed rows
    # counted: decode and spec-decode rows, whose tiles stream K/V from HBM) before the others, and
    # the launch deals their tiles evenly through the others' (a run-time permutation of the linear
    # order), so HBM-bound and tensor-bound tiles run side by side on different SMs instead of one
    # kind after the other (vLLM's mixed batch: decode rows, then prefill chunks). 8 bytes of smem.
    stream_mix: bool = False
    # L2 eviction priorities on the TMA loads. 1 (FA3's hopper mainloop: Q evict-first, K/V
    # evict-last): Q, read once per tile, EVICT_FIRST; K/V EVICT_LAST, except where one tile alone
    # reads it (at most one 64-row block of query rows, row-packed rows counted, the unit a whole GQA
    # group: packed decode rows) EVICT_FIRST, so the HBM stream of decode rows does not push the
    # prefill tiles' K/V (re-read by every row tile of a chunk) out of L2 (vLLM's mixed batch;
    # tools/mix_sim.py: the mix loses ~200 us to something beside its dealing). 2: every TMA load
    # EVICT_NORMAL, CUTLASS's default encoding, where the DSL (4.8.1) passes policy 0 to the
    # .L2::cache_hint it always emits (is 0 the normal policy?). 0: the DSL's. The cp.async gathers
    # keep the default policy. A measurement variant (H100, session 19: paged / ragged within +-1% of
    # the DSL's policy; vLLM's mixed batch not yet measured with it).
    l2_hints: int = 0
    # Ragged classes: the producer warp takes its next tile's ticket this many key blocks before the
    # end of the current tile's loads (1: before acquiring the last block's K stage), its atomic
    # then in flight during the stage waits; 0: after the tile's loads, as a CTA claims its next
    # tile only once it has room for it. 2 with q_ahead in the d128 no-mask nolse class (_q_ahead);
    # 0 elsewhere (session 27's trace: on 4 x 512 d128 the MMA warpgroups wait 1.2-1.9 us for each
    # tile's Q after the first).
    ticket_early: int = 0
    # Ragged classes with ticket_early and two Q buffers: in a tile of at least ticket_early + 2 key
    # blocks, after the K load of the block where it took its ticket, the producer also decodes the
    # next tile and issues its Q into the other Q buffer, before the current tile's last V stage
    # waits (its own Q then is not issued again; the next tile is decoded again for its
    # hand-over). On in the d128 no-mask nolse class (_q_ahead: 4 x 512 +10% on the H200); off
    # elsewhere (session 27's trace: Q, read once from DRAM, arrived 0.6-1.9 us after the MMA
    # warpgroups wanted it).
    q_ahead: bool = False
    # Ragged classes without row or GQA packing: the launch's last tiles (run-time `tail_tiles`, chosen
    # by the host for equal tiles: kernels/sm90/tail_split.py) are each taken `tail_pieces` times, one
    # share of the tile's key blocks per piece, as split-KV splits them; each piece's MMA warpgroups
    # write their normalised O and LSE (fp32) to a workspace, and the warpgroup that finishes a row
    # block's last piece merges every piece's slot in piece order and stores the rows (tail_merge.py).
    # Aimed at the last wave of a uniform no-mask launch (1 x 16384 at 32 heads: 4,096 tiles on 132
    # CTAs leave 4 tiles to run alone for one tile time, 3.1% of the launch; session 28's model). A
    # class with it is entered through `call_tail` (four more arguments). Off everywhere: on an H100
    # (session 29) it was correct but not faster (tail_split.py's docstring).
    tail_split: bool = False
    # Diagnostic builds only (trace.py): stamp the global timer at each CTA's entry, tile hand-overs,
    # Q waits, loops and stores into the LSE buffer instead of the LSE (tools/trace_timeline.py).
    trace_timeline: bool = False

    def __post_init__(self) -> None:
        if self.tile_m not in (128, 192):
            raise ValueError(f"TileConfig.tile_m: expected 128 or 192 (2 or 3 MMA warpgroups), got {self.tile_m}")
        if self.tile_n % 16 or not 16 <= self.tile_n <= 256:
            raise ValueError(f"TileConfig.tile_n: expected a multiple of 16 in [16, 256], got {self.tile_n}")
        if self.num_stages < 1:
            raise ValueError(f"TileConfig.num_stages: expected >= 1, got {self.num_stages}")
        if self.page_tma and (self.page_tma not in (16, 32, 64, 128) or self.tile_n % self.page_tma):
            raise ValueError(
                f"TileConfig.page_tma: expected 0 or 16, 32, 64 or 128 keys dividing tile_n {self.tile_n}, got {self.page_tma}"
            )
        if self.page_tma_small and (
            not self.page_tma or self.page_tma_small not in (16, 32, 64) or self.page_tma % self.page_tma_small
        ):
            raise ValueError(
                f"TileConfig.page_tma_small: expected 0 or 16, 32 or 64 keys dividing page_tma {self.page_tma}, "
                f"got {self.page_tma_small}"
            )
        if self.page_box_warps not in (1, 2, 4):
            raise ValueError(f"TileConfig.page_box_warps: expected 1, 2 or 4, got {self.page_box_warps}")
        if self.page_box_crossing and not self.page_tma_small:
            raise ValueError("TileConfig.page_box_crossing: needs page_tma_small (the crossing block's boxes)")
        if self.page_crossing_k_box and not self.page_tma:
            raise ValueError("TileConfig.page_crossing_k_box: needs page_tma (the crossing block's K box)")
        if self.page_crossing_k_box and self.page_box_crossing:
            raise ValueError("TileConfig.page_crossing_k_box: not with page_box_crossing (one crossing-block path)")
        if self.page_tma_rows and not self.page_tma:
            raise ValueError("TileConfig.page_tma_rows: needs page_tma (the boxes it issues)")
        if self.page_prefetch and not self.page_tma:
            raise ValueError("TileConfig.page_prefetch: needs page_tma (the boxes it prefetches)")
        if self.producer_regs and (self.producer_regs % 8 or not 24 <= self.producer_regs <= 256):
            raise ValueError(f"TileConfig.producer_regs: expected 0 or a multiple of 8 in [24, 256], got {self.producer_regs}")
        if self.batch_order and not 2 <= self.batch_order <= 1024:
            raise ValueError(f"TileConfig.batch_order: expected 0 or a sequence count in [2, 1024], got {self.batch_order}")
        if self.l2_group_max < 0:
            raise ValueError(f"TileConfig.l2_group_max: expected 0 (no cap) or a head count >= 1, got {self.l2_group_max}")
        if self.l2_group_always and not self.l2_group_max:
            raise ValueError("TileConfig.l2_group_always: needs l2_group_max (the groups' size)")
        if self.l2_hints not in (0, 1, 2):
            raise ValueError(f"TileConfig.l2_hints: expected 0, 1 or 2, got {self.l2_hints}")
        if self.ticket_early < 0:
            raise ValueError(f"TileConfig.ticket_early: expected 0 (off) or key blocks >= 1, got {self.ticket_early}")
        if self.q_ahead and (not self.ticket_early or self.q_stages != 2):
            raise ValueError("TileConfig.q_ahead: needs ticket_early >= 1 and q_stages == 2 (the next tile's Q buffer)")
        if self.tail_split and (self.pack_gqa or self.pack_rows or not self.wg_epilogue or self.stream_mix):
            raise ValueError(
                "TileConfig.tail_split: needs wg_epilogue, and neither pack_gqa nor pack_rows (one row block per "
                "warpgroup) nor stream_mix (its dealing would put whole tiles among the pieces)"
            )
        if self.q_stages not in (1, 2):
            raise ValueError(f"TileConfig.q_stages: expected 1 or 2, got {self.q_stages}")


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def tile_words(cfg: TileConfig) -> int:
    """Int32 words of one handed-over tile (forward.py hand_over): 8 (forward.TILE_WORDS), and with
    GQA packing each MMA warpgroup's item (2 words) and the items' row span (2 words)."""
    return 8 + (2 * (cfg.tile_m // 64) + 2 if cfg.pack_gqa else 0)


def smem_bytes(cfg: TileConfig, d_qk: int, d_v: int, o_separate: bool, elem_bytes: int = 2) -> int:
    """Shared memory the kernel allocates: barriers (full and empty per stage of the Q, K, V and tile
    pipelines) and the decoded tiles' slots, then Q stages, K stages, V stages (and O) buffers, then
    the batch order's arrays (TileConfig.batch_order)."""
    total = 8 * 2 * (cfg.q_stages + 2 * cfg.num_stages + _TILE_STAGES) + 4 * tile_words(cfg) * _TILE_STAGES
    if cfg.tail_split:  # one int32 per MMA warpgroup: whether it finished its row block's last piece
        total += 4 * (cfg.tile_m // 64)
    bufs = [cfg.q_stages * cfg.tile_m * d_qk, cfg.num_stages * cfg.tile_n * d_qk, cfg.num_stages * cfg.tile_n * d_v]
    if o_separate:
        bufs.append((64 if cfg.o_turns else cfg.tile_m) * d_v)
    for elems in bufs:
        total = _round_up(total, _ALIGN) + elems * elem_bytes
    if cfg.batch_order:  # the sorted q-row prefix (int32, B + 1) and the order (int16, B)
        # (the struct's size rounds up to its 1024-byte alignment)
        mix = 8 if cfg.stream_mix else 0  # stream_mix: the streaming tiles' linear bound (int64)
        total = _round_up(_round_up(total, 8 if mix else 4) + mix + 4 * (cfg.batch_order + 1) + 2 * cfg.batch_order, _ALIGN)
    return total


def o_aliases_q(cfg: TileConfig, d_qk: int, d_v: int) -> bool:
    """True when O must reuse Q's buffer to fit (d_v <= d_qk holds for every class)."""
    return smem_bytes(cfg, d_qk, d_v, o_separate=True) > SMEM_CAPACITY


def tile_config(layout_class) -> TileConfig:
    """The tile configuration of a class.

    Measured on an H200, 2026-11-30: 2 x 8192 tokens, causal, 32/8 heads, bf16, LSE on; useful
    TFLOP/s, GPU-only median (do_bench median in parentheses); FA4 4.0.0b36 in the same run.
    0 spill bytes for every class and candidate below (ptxas remarks, 2026-11-30).
    - (32, 32): 128 x 192 267 (268); 128 x 128 243 (244); 128 x 256 262 (263); d32 through the
      d64 class 216 (218); FA4 320.
    - (64, 64): 128 x 128 421 (423); 128 x 192 427 (423), a tie, kept 128; FA4 500 (503).
    - (96, 96): 128 x 128 498 (490); 128 x 144 493 (488); FA4 577 (586).
    - (128, 128): 128 x 128 578 (568); FA4 621 (616). Earlier (64/8 heads): no overlap / no
      ping-pong 551, + ping-pong 567, + intra-warpgroup overlap 561-588.
    - (192, 128): 128 x 128 without ping-pong 637 (632); with ping-pong 625 (626); 128 x 112 608
      (600); 128 x 96 541 (505); FA4 674 (667). Q 48 KiB + 2 x (K 48 + V 32) KiB leaves no room
      for a separate O: O aliases Q.
    - (256, 256): 128 x 80 without ping-pong 641 (619); with ping-pong 631 (608); 128 x 64 569
      (595) / with ping-pong 608 (599); FA4 702 (686). 128 x 128 spills (144 B), 128 x 96 does
      not fit in smem; Q 64 + 2 x (K 40 + V 40) KiB = 224 KiB, O aliases Q. (These 128 x 80 numbers
      predate softmax.store_p: P's bf16 conversion was unpacked at tile_n 80 until session 25.)
    Measured on an H100, 2026-12-07 (session 25; docs/benchmarks/2026-12-07-h100-issue10-session25):
    - softmax.store_p (P converted one k16 chunk at a time where tile_n / 16 is not a power of two;
      d256's interior loop 543 -> 492 instructions, F2FP 40 -> 20, PRMT 20 -> 0, WARPGROUP 8 -> 4;
      interleaved, 15 rounds, 32/8 heads, GPU-only TFLOP/s, FA4 4.0.0b36 in brackets; two runs):
      d256 2 x 8192 causal 659.2 -> 716.7 [748.4] | 671.5 -> 724.8 [763.7], no mask 642.1 -> 743.4
      [772.7] | 659.7 -> 757.5 [788.4], mixed14 550.3 -> 572.8 [575.6] | 549.0 -> 572.2 [581.2], 16
      x 256 195.6 -> 198.7 [188.2; cuDNN SDPA enable_gqa 223.0] | 195.9 -> 198.4. With ping-pong on
      top ("pp", run 1): 716.5, 739.3, 574.2, 200.4 (not taken: within noise). d128 without a mask
      at 128 x 176 (q_stages 1, O in Q's buffer; the loop now 580 instructions for 176 keys against
      463 for 128): 2 x 8192 (64/8) 694.1 -> 713.0 [644.2], but mixed14 649.0 -> 616.9 [581.9] and
      16 x 256 389.6 -> 236.9: not taken.
    Measured on an H100, 2026-12-07 (session 26; docs/benchmarks/2026-12-07-h100-issue10-session26):
    - q_stages 1 for d128 causal (Q's stage a trace-time 0: the interior loop 501 -> 487
      instructions, 87 -> 73 uniform, the S GEMM's descriptor steps fewer): 1 x 16384 724.5 ->
      718.9, 2 x 8192 (64/8) 687.1 -> 687.9, mixed14 548.9 -> 548.5, 64 x 128 123.4 -> 121.5. The
      descriptor steps are not what the d128 causal rows lack: not taken.
    Measured on an H200, 2026-12-02, persistent kernel, bf16 causal LSE on, 32/8 heads, GPU-only
    TFLOP/s, one process beside FA4 4.0.0b36 (tools/bench_issue10.py):
    - turn_first_gemm + wg_epilogue (d128 128 x 128) against neither: 64 x 128 118 -> 129, 16 x 256
      178 -> 194, 4 x 512 234 -> 255, mixed14 467 -> 487, mixed14 d64 311 -> 321; 2 x 8192 (64/8)
      causal 610 -> 594 (-2.7%, one run; 618 in the next), no mask 622 -> 625.
    - 3 MMA warpgroups (192 x 128, ragged) against 128-row tiles, d32 | d64 (FA4 in brackets):
      mixed14 167 -> 203 [199] | 322 -> 351 [343]; 2 x 8192 251 -> 320 [319] | 448 -> 548 [538];
      16 x 256 49.6 -> 53.7 [49] | 118 -> 97 [87]; 64 x 128 35.5 -> 41.2 [29] | 79 -> 73 [52];
      4 x 512 d64 158 -> 142 [137]. Kept at both: short d64 batches lose 8-18% (a 256-row
      sequence is a 192-row tile and a 64-row one), long and mixed ones gain 9-22%, as FA3's and
      FA4's choice of 192 rows at d64. 192 x 192 at d64 spills (464 B); 128 x 192 at d64 293 vs
      321. d96: 192 x 128 spills (96 B), 192 x 112 403 vs 128 x 128 408 on mixed14 (kept 128).
      Paged d64 at 192 rows spills (32 B at 40/152 registers), and so does the d64 window family
      (116 B, its left bound's registers): both keep 128-row tiles.
    - wg_skip (each warpgroup skips the key blocks its rows do not see) at 192 x 128, against
      without: d64 mixed14 352 -> 369 (FA3 353), 16 x 256 98 -> 108, 4 x 512 143 -> 148,
      2 x 8192 545 -> 551; d32 mixed14 204 -> 210, 16 x 256 54 -> 61; d128 (128 x 128) 2 x 8192
      613 -> 609 (noise). d64 at 128 x 128 for comparison: 16 x 256 118, 64 x 128 78, 4 x 512 157. The window family uses the same tiles (FA4 shrinks tile_n for local masks
    at d > 128: unmeasured here).
    Measured on an H200, 2026-12-02 (session 2), same method, one process (FA4 / cuDNN SDPA with
    enable_gqa in brackets); ncu had shown the MMA warps waiting for Q at 26% of all warp samples
    on 64 x 128 d128 (docs/benchmarks/2026-12-02-h200-issue10-session2):
    - early_q_release (Q released after each warpgroup's last S GEMM) against release after the
      mainloop, one Q buffer, d128: 64 x 128 121 -> 153 [76 / 156], 16 x 256 187 -> 223 [142 /
      213], 4 x 512 245 -> 271 [216 / 244], mixed14 501 -> 523 [468]; d64: 64 x 128 71 -> 86,
      16 x 256 105 -> 123, mixed14 374 -> 385; d96 mixed14 419 -> 434; 2 x 8192 unchanged.
    - q_stages=2 (where O keeps its own buffer: d <= 128) on top: 64 x 128 d128 153 -> 159,
      mixed14 d128 523 -> 525, the rest within noise (+-1%); kept.
    - Decoded tiles handed to the MMA warpgroups (no cu_seqlens search between their tiles) and
      the TMA store of full 64-row O blocks, before the two above: within noise on every row
      (64 x 128 d128 125.6 -> 124.4 -> 121.7, mixed14 489 -> 498 -> 501); kept as the simpler
      hand-off and fewer MMA instructions per tile.
    - 128-row tiles for d64 (against 192, before early_q_release): 16 x 256 106 -> 118, 64 x 128
      71 -> 78, 4 x 512 145 -> 155, but mixed14 372 -> 320 and 2 x 8192 543 -> 432: 192 kept.
    Measured on an H200, 2026-12-02 (session 3), same method, one process, FA4 / cuDNN SDPA
    enable_gqa in brackets (docs/benchmarks/2026-12-02-h200-issue10-session3):
    - The mainloop's interior key blocks in a loop without mask code (mainloop.py; before, one
      loop tested every block for a mask and ptxas put the P V wait ahead of the softmax): d128
      2 x 8192 (64/8) causal 621 -> 651 [671], no mask 606 -> 675 [630], mixed14 523 -> 532;
      d32 / d64 / d96 within +-1%. 128 x 176 for d128 without a mask (q_stages 1, O in Q's
      buffer) on top: 581, not taken.
    - Three K/V stages ("s3") and no ping-pong ("nopp") for d <= 96, against two stages with
      ping-pong (ours) - s3 - s3 + nopp - nopp: d64 mixed14 382 - 395 - 390 - 371 [345], 2 x 8192
      551 - 561 - 557 - 536 [539], 16 x 256 123 - 125 - 125 - 122 [140], 64 x 128 84 - 84 - 90 - 90
      [101], 4 x 512 151 - 167 - 166 - 154 [162]; d32 mixed14 219 - 230 - 235 - 218 [201], 16 x 256
      67 - 67 - 71 - 69 [71], 64 x 128 47 - 47 - 52 - 51 [51], 2 x 8192 328 - 333 - 331 - 316
      [319]; d96 mixed14 436 - 459 - 460 - 430 [429]. Taken: s3 + nopp for every d <= 96 class
      (the window and paged ones unmeasured; the third stage fits in smem there too). ncu on
      64 x 128 d64 had shown the idle third warpgroup's ping-pong arrivals as the top stall
      (15% of warp samples) with cuDNN's 64 x 128 x 64 kernel at 39 us against ours at 49 us.
    - Paged d128 (longtail14, 32/8, causal; tools/bench_paged_sm90.py, ragged 389-392): page-table
      entries read one block ahead (paged_kv.py `fetch_pages`) 317 -> 322 at page 16/64/128; then
      the dynamic tile schedule (it was a static stride walk) 324 -> 346 [FA4 308-330].
    Measured on an H200, 2026-12-02 (session 4), same method, one process, "base" = the previous
    commit's kernel beside this one (docs/benchmarks/2026-12-02-h200-issue10-session4):
    - pack_gqa (tile_scheduler.py) packed on every launch: d64 64 x 128 90.1 -> 98.5 [cuDNN
      100.6], 16 x 256 125.4 -> 129.6 [139.8]; d32 64 x 128 51.4 -> 55.0, 16 x 256 70.5 -> 73.4;
      but 4 x 512 d64 166.5 -> 158.6 (11 tiles per K/V head against 12) and every d128 row 2-5%
      slower (64 x 128 158.6 -> 151.3, 4 x 512 274.4 -> 262.8, where packing saves no tile).
      Taken as a run-time choice: pack where it cuts the tiles by a tenth (PACK_MIN_SAVING), and
      unpacked tiles keep one Q TMA and no division (the first build's per-warpgroup Q loads and
      divisions cost the unpacked rows 2-5%). Rounds 2 and 3 (the rule; round 3 with the unpacked fast path too; base in brackets): d64 64 x 128
      99.5 / 94.4 [91.8 / 90.9], 16 x 256 129.7 / 126.5 [126.1 / 125.6]; d32 64 x 128 55.5 / 53.0
      [51.9 / 51.8], 16 x 256 74.4 / 72.6 [71.5 / 71.0]; the unpacked rows within -2.3..+1%.
    - Then pack_gqa only for the 192-row tiles: the 128-row classes ran 1-3% below base with it
      compiled in (mixed14 d128 513.7 vs 524.1); off, with pack_r a trace-time 1, they match
      base (mixed14 d128 533.4 vs 524.4, 4 x 512 278.4 vs 275.0, 64 x 128 159.4 vs 160.8).
    - Paged full key blocks by TMA (page sizes a multiple of 16, 16 rows per load inside a page;
      the block crossing len_k gathered; built in a4d85dd, removed after): longtail14 d128 page
      16/64/128 314 (one issuing warp), 317 (four) [gather 338-347], not taken.
    Measured on an H200, 2026-12-02 (session 5), same method, base = 7c27fae in the same process
    (docs/benchmarks/2026-12-02-h200-issue10-session5; ncu beside cuDNN's 64 x 128 x 64 kernel):
    - pack_gqa classes hand each warpgroup its item with the tile (`tile_words` 16; one division
      in the producer), shift-divided block ranges, constant-offset mask compares, one LSE index
      per thread: 64 x 128 d64 93.9 -> 104.9 [cuDNN 100.0], 16 x 256 d64 125.9 -> 135.8 [139.6],
      d32 64 x 128 53.2 -> 59.6, 16 x 256 72.5 -> 78.1; d128 rows +1-2%; long rows within noise.
    Measured on an H200, 2026-12-03 (session 6), same method, variants beside this tree's kernel in
    one process (docs/benchmarks/2026-12-03-h200-issue10-session6; FA3 / cuDNN SDPA in brackets):
    - o_turns for d192 (O staged 64 rows at a time, so O leaves Q's buffer: wg_epilogue, TMA O
      stores and early_q_release apply), DeepSeek shapes (128/128 heads, d 192/128): 64 x 128
      121.0 -> 136.7 [125.0 / 135.2], 16 x 256 199.2 -> 232.0 [218.7 / 219.4], 4 x 512 290.7 ->
      330.7 [308.9 / 310.6], mixed14 486.5 -> 508.0 [504.4]. 128 x 112 (O in its own whole buffer)
      instead: 120.1, 202.0, 300.4, 461.4 (ptxas injects warpgroup waits at n = 112).
    - tile_scheduler.item_shift (a packed sequence's partial tile first; 16 x 256 at 32/8: 10 ->
      9 key-block steps per K/V head): d64 16 x 256 137.1 -> 138.2 [cuDNN 140.8], 64 x 128 106.5
      -> 106.8, 4 x 512 168.4 -> 167.4, mixed14 391.3 -> 393.0; d32 within +-0.5%. Taken (never
      more block steps); the short rows are bound elsewhere.
    - L2 groups of 64 MiB (tile_scheduler.L2_KV_BYTES) against 32: 1 x 16384 d128 676.7 -> 686.1
      [686.4], d192 mixed14 486.5 -> 471.8: not taken.
    Measured on an H200, 2026-12-03 (session 7), implementations interleaved round by round in one
    process (timing.gpu_ms_interleaved), this tree's kernel against variants, FA3 in brackets
    (docs/benchmarks/2026-12-03-h200-issue10-session7):
    - Softmax row max and row sum as balanced trees (depth 5 instead of 32 dependent FMNMX /
      FADD), and O rescaled only when a row of the warp changed its max (a warp vote around the
      64 FMULs): 1 x 16384 d128 694.6 -> 682.7 (trees) -> 644.6 (both) [697.7], 28/4 heads 707.2
      -> 694.1 -> 653.9 [706.1], DeepSeek 1 x 16384 699.8 -> 683.9 -> 662.8; short rows within
      +-1%. Not taken: ptxas schedules the chains' latency under other work already (ncu had shown
      FMNMX and MUFU "wait" stalls), and the branch costs more than the FMULs it skips: its SASS
      (tools/sass_static.py) keeps the instruction count (506 vs 502 per block) but runs the 32
      F2FP after the branch and its FMULs, where without it ptxas interleaves them with the exp2s.
    - q_first, two interleaved runs (the second's base built before the softmax variants), d128:
      2 x 8192 (64/8) 670.5 -> 677.0 | 669.7 -> 677.3, mixed14 543.7 -> 555.2 | 538.2 -> 549.1,
      16 x 256 222.7 -> 223.3 | 222.9 -> 224.1, 4 x 512 274.7 -> 279.7 | 277.0 -> 280.6, 64 x 128
      158.4 -> 159.1 | 159.5 -> 158.3, 1 x 16384 694.6 -> 699.3 | 684.3 -> 687.5, 28/4 heads 707.2
      -> 707.7: taken for d128 (its two K/V stages: without it a tile's Q waits behind the acquire
      of its first K stage). d64 within +-1.3%; d192 16 x 256 231.6 -> 225.2, mixed14 503.6 ->
      519.4, 1 x 16384 699.8 -> 674.3: not taken there.
    - d192 with ping-pong turns (pingpong=True) | with q_first too: 64 x 128 136.2 -> 136.3 |
      136.4, 16 x 256 231.6 -> 233.0 | 227.8, 4 x 512 329.6 -> 335.6 | 337.0, mixed14 503.6 ->
      518.2 | 525.4 [502.0], but 1 x 16384 699.8 -> 670.5 | 650.6 [665.1; FA4 683.5]. Not taken:
      the long row loses more than the mixed one gains.
    - l2_kv_head_groups (earlier the same day, sequential timing): within noise on d128 / d64
      (GQA 4) rows; identical behaviour at d192 (128/128 heads). Not taken.
    - d64 16 x 256 (one run, 20 rounds): 128 x 4 stages 135.8 -> 138.2; tile_n 64 with 6 stages
      145.0 [cuDNN SDPA 138.8], 0 spills. Not taken yet: the other d64 rows and its GPU tests are
      not run (the next lead for the short d64 rows).
    Measured on an H200, 2026-12-03 (session 8), same method (docs/benchmarks/2026-12-03-h200-issue10-session8):
    - tile_n 64 with 6 stages at d64 ("n64") | 4 stages at d128, against 128-key blocks: 16 x 256
      d64 134.1 -> 144.2 [cuDNN SDPA 135.6], 64 x 128 105.0 -> 112.3, 4 x 512 165.8 -> 167.2, but
      mixed14 392.4 -> 371.8 and 2 x 8192 556.0 -> 487.9; d128 16 x 256 220.5 -> 230.0, 4 x 512
      278.6 -> 283.9, 64 x 128 160.1 -> 159.9, mixed14 537.6 -> 502.8, 2 x 8192 (64/8) 682.7 ->
      595.7, 1 x 16384 698.4 -> 602.6. Not taken (one kernel per class; the long rows lose 5-14%).
      Four stages at d64 / d32 ("s4"): within +-2%.
    - Three K/V stages at d128 (q_stages 1, O in Q's buffer), ragged: 1 x 16384 700.4 -> 667.0,
      28/4 heads 705.3 -> 672.3; paged (longtail14, page 16/64/128): 361-363 -> 329-330. Not taken.
    - L2 groups of 64 | 16 MiB (tile_scheduler.L2_KV_BYTES) against 32: 1 x 16384 d128 700.4 ->
      699.9 | 699.9, DeepSeek 1 x 16384 689.8 -> 692.5 | 677.1 [FA4 696.0]. Not taken.
    - Paged d128 (longtail14, 32/8, page 16/64/128; ragged 406): q_first and the predicate-free
      whole-block gather (paged_kv.py) 356-357 -> 361-363 [FA4 308-331]; the gather alone 352-354
      (its ~35% fewer producer instructions change nothing: ncu put paged's loss elsewhere).
    Session 9 (docs/benchmarks/2026-12-03-h200-issue10-session9):
    - page_tma (paged d128, TMA boxes of 16 keys for blocks inside len_k): its first builds hung on
      the H200 (one box issued per block; then a register split the launch's pool could not
      hold); both fixed on the CPU, not yet timed. Off until measured.
    Sessions 10-11 (docs/benchmarks/2026-12-03-h200-issue10-session10, -session11), paged d128,
    longtail14 (ragged 402-408): page_tma 360-364 (no change; off); no proxy fence after the K/V
    waits (paged_consumer_fence off) 363-368 (+1%; kept on: the PTX memory model asks for it); MMA
    releases by one lane per warp, one fence per step before both GEMMs, producer order K(i + 1)
    before V(i), producer registers 24: no change (not kept). A paged tile's Q TMA first, before the page divisor and the first
    page-table reads (load_paged_tile): 356-359 -> 361-365 (+1.4%, two runs; taken).
    Session 12 (docs/benchmarks/2026-12-03-h200-issue10-session12), paged d128, implementations
    interleaved, paged time / ragged time of the same batch (1 x 8192 | longtail14 | 64 x 128):
    main's gather 0.885 | 0.973 | 0.812 at page 128; TMA boxes of 16 keys 0.885 | 0.965 | 0.871 (no
    fence 0.897 | 0.973 | 0.862); K by boxes and V gathered 0.895 | 0.982 | 0.758, the reverse 0.856 |
    0.971 | 0.868; one 128-key box per stage 0.984 | 1.006 | 0.971 (no fence; warp 0 alone 0.978 |
    0.984 | 0.982). Warp 0 alone with 16-key boxes (warps 1-3 exit, barriers of 32): no better; its
    32-thread gather 0.59-0.69. Taken: page_tma 128 (`_tiles`), with the fence: 0.972 | 1.004 | 0.960,
    8 x 2048 0.963 (gather 0.886 | 0.972 | 0.798 | 0.887); page 16 and 64 unchanged (0.77-0.98).
    Session 13 (docs/benchmarks/2026-12-04-h200-issue10-session13), same method, page 16 | 64 | 128
    on 1 x 8192, longtail14, 64 x 128 (page_tma 128 alone: 0.872 0.878 0.971 | 0.861 0.894 0.954 |
    0.771 0.812 0.967): a second box size (page_tma_small) issued by warp 0 alone: 64-key boxes
    0.866 0.955 0.959 | 0.861 0.936 0.945 | 0.765 0.955 0.958, 16-key 0.877 0.882 0.964 | 0.859
    0.893 0.942 | 0.799 0.850 0.942; 16-key boxes issued by the four producer warps, two each
    (page_box_warps 4): 0.945 0.951 0.967 | 0.883 0.928 0.942 | 0.850 0.945 0.953. So a block's
    sixteen box instructions lost their time in one warp's serial issue, not in the TMA unit.
    Taken: page_tma_small 16 with page_box_warps 4 (`_tiles`); four warps with 64-key boxes 0.956 |
    0.934 | 0.962 at page 64 (no better).
    Measured on an H100 (80 GB HBM3), 2026-12-05 (session 19; docs/benchmarks/2026-12-05-h100-issue10-session19),
    interleaved in one process:
    - Paged d128 variants (paged / ragged at page 16 | 64 | 128; 1 x 8192, longtail14, 64 x 128):
      main 0.953 0.960 0.974 | 0.891 0.933 0.957 | 0.919 1.016 1.009; page_crossing_k_box 0.945
      0.952 0.964 | 0.877 0.929 0.941 | 0.915 1.013 1.000; page_box_crossing 0.952 0.956 0.963 |
      0.855 0.909 0.930 | 0.902 1.022 1.009; l2_hints 1 0.954 0.960 0.963 | 0.891 0.931 0.951 |
      0.910 0.995 1.019; l2_hints 2 0.950 0.957 0.972 | 0.886 0.930 0.944 | 0.910 1.008 1.001. None
      taken. The first paged pool of each round ran slow whatever its page size (page 64 first:
      0.910 on 64 x 128, page 16 then 1.002): a paged launch after another kernel binary costs
      ~5-7 us more than after itself, a ragged one ~1-2.5 us (tools/probe_kernel_switch.py).
    - A share of P's exp2 on the FMA pipe (a degree-3 polynomial, FlashAttention 4's trick; 1, 2
      or 4 of each 8 columns) and O rescaled only when a row max jumps by 2^8 (a warp vote;
      FlashAttention 4's threshold): 2 x 8192 d64 550.7 -> 498.2 / 480.2 / 425.6 (exp2 1 / 2 / 4)
      and 538.1 (threshold); 2 x 8192 d32 334.4 -> 319.9 / 290.1 / 259.9; 1 x 16384 d128 709.5 ->
      666.1 / 622.0 and 687.5; DeepSeek 1 x 16384 725.5 -> 698.0 (threshold); short rows -1 to
      -10%. Neither kept (commits 4d751a3 and 43290c7 hold them): MUFU is not what bounds the
      d32 / d64 classes (each polynomial element costs 9 issue slots), and the vote and the
      branch cost more than the FMULs skipped (as the always-vote version in session 7).
    Measured on an H100 (80 GB HBM3), 2026-12-05 (session 20; docs/benchmarks/2026-12-05-h100-issue10-session20):
    - The paged class's cost after another kernel shows as instruction-fetch stalls: ncu (application replay),
      d128 64 x 128 page 16, warps stalled on "no instruction" per issue-active cycle 1.34 after
      a GEMM against 0.32 after itself (ragged 0.58 / 0.14; long-scoreboard stalls unchanged).
      Paged after a GEMM, after itself (GPU us): 77.5 / 69.9, ragged 70.7 / 68.5; after the ragged
      kernel as after the GEMM (77.2). One walk for the four producer warps (warp 0 leads in its
      own branch, then takes each tile over like warps 1-3 and all four run one traced copy of
      load_paged_tile; GPU tests passed), in its own rounds against main's: 64 x 128 77.5 / 71.2
      against 76.8 / 69.9, longtail14 124.5 / 119.0 against 125.1 / 118.8, d64 51.9 / 51.1
      against 51.6 / 48.8 (56 bytes of spills in its 32 producer
      registers); interleaved paged / ragged equal or 1-3% worse. Not taken (commit 8777bd8 holds
      it): the second copy of the load code is not what the cold instruction cache costs.
    Measured on an H100 (80 GB HBM3), 2026-12-07 (session 24; docs/benchmarks/2026-12-07-h100-issue10-session24):
    - l2_group_max (the `_tiles` comments: d192 8, d128 16).
    - Paged d128 under ncu (launches serialized: no switch cost), paged page 128 against ragged,
      the same one box a stage: 1 x 8192 782 against 761 us, longtail14 118 against 106 us; DRAM
      bytes and L2 misses equal; the MMA loop's stall reasons alike (its share of "barrier", the
      ping-pong turn, 8.9% against 6.6%); 17.5M more warp instructions on 1 x 8192 (page 16: 47M,
      ~700 a key block, the four warps' boxes). Three variants, interleaved, paged / ragged at page
      16 | 64 | 128, two runs (8 and 12 rounds): page_box_lead (page_tma blocks producer warp 0's
      alone, warps 1-3 skip them and warp 0 arrives for them) 1 x 8192 0.946 0.950 0.970 | 0.952
      0.959 0.973 against main 0.951 0.957 0.967 | 0.950 0.959 0.975, longtail14 0.889 0.935 0.957 |
      0.882 0.933 0.953 against 0.890 0.934 0.951 | 0.884 0.932 0.948; page_tma_rows (one TMA
      instruction a box) 0.949 0.962 0.974 | 0.956 0.960 0.976 and 0.892 0.941 0.951 | 0.890 0.940
      0.950; page_box_warps 2 0.937 0.946 0.961 and 0.871 0.915 0.944 (one run). None taken
      (page_box_lead's code removed again: commit 87e5ffe holds it): the warps 1-3 that wake on
      every stage are not the page-128 gap, and halving the boxes' TMA instructions moves page 16
      by under 1%. producer_regs 40 (0 spills now; the MMA warpgroups 232 registers) | 32 (64
      bytes of producer spills; MMA 240) against the class's 56 (MMA 224), 12 rounds: 1 x 8192
      0.947 0.953 0.972 | 0.927 0.932 0.947 against 0.951 0.958 0.973, longtail14 0.868 0.914 0.939
      | 0.851 0.891 0.906 against 0.876 0.925 0.944: the MMA warpgroups' register budget is not it.
    """
    cfg = _tiles(layout_class)
    d_qk, d_v = layout_class.d_qk, layout_class.d_v
    two_q = dataclasses.replace(cfg, q_stages=2)
    if smem_bytes(two_q, d_qk, d_v, o_separate=True) <= SMEM_CAPACITY:
        cfg = two_q
    # The batch order where its arrays fit beside the rest as they are (O keeps its buffer or not).
    ordered = dataclasses.replace(cfg, batch_order=BATCH_ORDER)
    alias = o_aliases_q(cfg, d_qk, d_v)
    if o_aliases_q(ordered, d_qk, d_v) == alias and smem_bytes(ordered, d_qk, d_v, not alias) <= SMEM_CAPACITY:
        cfg = ordered
    if _q_ahead(layout_class) and cfg.q_stages == 2:
        cfg = dataclasses.replace(cfg, ticket_early=2, q_ahead=True)
    return cfg


def _q_ahead(layout_class) -> bool:
    """Whether a class issues its next tile's Q ahead (TileConfig.q_ahead with ticket_early 2): the
    d128 ragged class without a mask, LSE, softcap or sinks.

    H200, session 28 (2026-12-07; interleaved, one process, two runs, TFLOP/s, GPU time with the L2
    flushed; docs/benchmarks/2026-12-07-h200-issue10-session28): 32/8 heads, no mask, 4 x 512 435.6
    -> 480.2 and 436.8 -> 481.7 (+10%; the trace build: the MMA warpgroups' wait for each later
    tile's Q 1.6 -> 0.1 us), 33 x 512 549.0 -> 564.2 and 565.7 -> 580.3, mixed14 647.9 -> 653.6
    and 648.6 -> 654.7, 16 x 256 439.7 -> 438.8 and 436.3 -> 433.7, 1 x 16384 674.0 -> 672.1 and
    674.1 -> 672.9, 8 x 256 351.6 -> 344.4 (one run). ticket_early 1 with q_ahead: 4 x 512 +5%,
    33 x 512 +3.6%. The causal class keeps its producer: q_ahead there lost 2-3% (1 x 16384 691.3
    -> 674.1, 4 x 512 271.4 -> 263.0; its decode spills 13 registers in the producer) and
    ticket_early alone moved its rows -2.5 .. +1.3%. The LSE class (early Q release off) is not
    yet measured with it."""
    return (
        layout_class.d_qk == 128 and layout_class.d_v == 128 and layout_class.mask == "none"
        and not layout_class.lse and layout_class.kv == "ragged" and _plain(layout_class)
    )  # fmt: skip


def _plain(layout_class) -> bool:
    """A class without softcap and sinks (issue 14's options), which some tile choices are
    measured for only."""
    return not getattr(layout_class, "softcap", False) and not getattr(layout_class, "sinks", False)


def _rows(layout_class) -> bool:
    """Whether a class of a head dim that packs rows (`_tiles`) may: causal classes without sinks
    (a sink is per query head). The others keep their kernel: with row packing traced in, their
    unpacked interior loop changed (static SASS, tools/sass_static.py, 2026-12-03: d128 window the
    P V wait from instruction 233 to 292 of 505; d64 window 458 lines of opcode diff; d128 no mask
    464 -> 476 instructions, 12 more uniform ones), which the causal classes' did not."""
    return layout_class.mask == "causal" and not getattr(layout_class, "sinks", False)


def _tiles(layout_class) -> TileConfig:
    d_qk = layout_class.d_qk
    # d <= 96: three K/V stages fit beside two Q buffers and O, and the warpgroups issue GEMMs
    # without ping-pong turns (measured 2026-12-02, session 3, in the docstring above).
    if layout_class.kv == "ragged" and (d_qk <= 32 or (d_qk <= 64 and layout_class.mask != "window")):
        # No pack_rows: traced in, the d64 causal class's unpacked launches ran 3-5% slower on the
        # H200 (2026-12-03, session 11: 16 x 256 134.3 -> 127.1, 4 x 512 164.5 -> 159.0 TFLOP/s),
        # and pack_gqa already packs these classes' short GQA rows.
        return TileConfig(192, 128, 3, pingpong=False, overlap=True, pack_gqa=True)
    if d_qk <= 32:
        return TileConfig(128, 192, 3, pingpong=False, overlap=True)
    # Paged classes of d64 .. d192: key blocks by TMA boxes where the page size allows (128-key boxes
    # at multiples of 128, 16-key boxes issued by the four producer warps at the other multiples of
    # 16), as the d128 classes. H200, session 13 (paged / ragged, page 16 | 64 | 128, 1 x 8192 and
    # longtail14): d96 0.857 0.861 0.861 -> 0.920 0.921 0.946 and 0.844 0.866 0.867 -> 0.834 0.862
    # 0.896; d192 0.821 0.825 0.825 -> 0.876 0.875 0.919 and 0.865 0.895 0.899 -> 0.861 0.887 0.899.
    boxes = dict(page_tma=128, page_tma_small=16, page_box_warps=4) if layout_class.kv == "paged" else {}
    if d_qk <= 64 and layout_class.kv == "paged" and layout_class.mask != "window":
        # Three MMA warpgroups as the ragged class. H200, session 13, d64 paged / ragged (ragged:
        # 192 rows), page 16 | 64 | 128:
        # 1 x 8192 0.714 0.719 0.721 -> 0.821 0.825 0.830 (192 rows with the gather: 0.779 0.784,
        # 128-key boxes 0.831); longtail14 0.737 0.775 0.783 -> 0.766 0.801 0.806.
        # producer_regs 32 (the MMA warpgroups 160): 0 spills, where the class's 56 / 152 spilled (36
        # spill instructions). H200, session 14, page 16 | 64 | 128: 1 x 8192 0.821 0.824 0.831 ->
        # 0.913 0.915 0.924; longtail14 0.755 0.791 0.796 -> 0.804 0.838 0.851; 64 x 128 0.705 0.762
        # 0.770 -> 0.752 0.800 0.803.
        # pack_gqa (as the ragged class: a GQA group's query heads packed into the 192-row tiles)
        # with q_first (pack_gqa alone spilled 80 bytes in the 32 producer registers; q_first ends
        # the items' lives before the block loop). H200, session 16, page 16 | 64 | 128: 64 x 128
        # 0.774 0.821 0.837 -> 0.840 0.922 0.941; longtail14 0.800 0.839 0.849 -> 0.861 0.898
        # 0.921; 1 x 8192 0.908 0.910 0.915 -> 0.944 0.949 0.972 (q_first alone: within +-2%).
        # GPU tests ran on the classes without softcap and sinks; those two keep their kernel until
        # theirs run with it.
        packs = _plain(layout_class)
        return TileConfig(
            192, 128, 3, pingpong=False, overlap=True, producer_regs=32, pack_gqa=packs, q_first=packs, **boxes
        )  # fmt: skip
    if d_qk <= 96:
        # No pack_rows: built into the d64 paged class it compiled without spills, but its unpacked
        # interior loop moved one uniform UMOV (440 instructions, the same waits; 2026-12-03), so the
        # class keeps its kernel until measured.
        return TileConfig(128, 128, 3, pingpong=False, overlap=True, **boxes)
    if d_qk <= 128:
        # q_first: measured twice (session 7), +0.3..+2.1% on every d128 row but 64 x 128 (+-0.8%);
        # paged (session 8) +1.5% with the whole-block gather. pack_rows (run-time row packing for
        # decode rows and short chunks, vLLM's mixed batches): d128 rows within +-1% of the class
        # without it, vLLM's mixed batch 3268 -> 1698-1706 us (H200, session 11).
        # page_tma 128 (paged): a key block of a pool whose page size is a multiple of 128 arrives as
        # one 128-key TMA box per K / V stage, as the ragged class's; other page sizes keep the
        # gather. H200, session 12 (interleaved, paged / ragged at page 128): 1 x 8192 0.885 ->
        # 0.984, longtail14 0.973 -> 1.006, 64 x 128 0.812 -> 0.971 (16-row boxes: 0.885, 0.965, 0.871).
        # page_tma_small 16 with page_box_warps 4 (paged): the other page sizes that are a multiple of
        # 16 take 16-key boxes, two per producer warp: page 16 0.872 -> 0.945 (1 x 8192), 0.771 ->
        # 0.850 (64 x 128); page 64 0.878 -> 0.951 (H200, session 13; the docstring above).
        # paged_fence_gathered_only (paged): only the gathered stages fenced. H200, session 16
        # (interleaved): vLLM's mixed batch at page 16 1675.5 -> 1652.3 us (FA3 on a ragged copy
        # 1629.9), its prefill chunks 650.5 -> 644.8; paged / ragged, page 16 | 64 | 128: 1 x 8192
        # 0.947 0.952 0.967 -> 0.953 0.957 0.971, longtail14 0.876 0.926 0.948 -> 0.885 0.929 0.945,
        # 64 x 128 0.867 0.972 0.992 -> 0.858 0.976 0.972.
        # stream_mix (the classes with row packing, which serve decode rows): H200, session 17
        # (interleaved, one process; tools/bench_vllm_mixed.py): vLLM's mixed batch at page 16
        # 1625.4 -> 1532.8 us paged (FA3 on a ragged copy 1600.3, FA4 paged 1857.4), 1593.5 ->
        # 1485.6 ragged; page 64 1620.6 -> 1526.2; its decode rows alone and prefill chunks alone
        # (nothing to mix) within +-0.4%. GPU tests ran with it on the d128 classes (163 passed, and
        # tests/gpu/test_batch_order_gpu.py 15); the softcap class keeps its kernel until a sorted
        # softcap batch runs with it (test_softcap_sinks_gpu.py passed with it, but sorts none).
        # l2_group_max 16: H100, session 24 (interleaved, two runs): llama3-70b's mixed batch (the
        # 14 sequences at 64/8 heads, where sequences of 1,025 to 2,047 keys form L2 groups of 32 to
        # 56 heads) 0.8166 -> 0.7983 and 0.8073 -> 0.7933 ms; at 32/8 heads (no group) unchanged. A
        # cap of 8 ran 0.6% faster than 16 in one run (0.7908 against 0.7953 ms: noise); 16 kept,
        # FA3's widest L2 section.
        # early_q_release off for the ragged no-mask LSE class (no softcap, no sinks): its interior
        # loop then waits for the P V GEMM after the softmax's FFMAs as the nolse class's does
        # (static SASS: instruction 185 -> 243 of ~460, session 26). H100, session 27 (interleaved,
        # two runs, TFLOP/s; docs/benchmarks/2026-12-07-h100-issue10-session27): 1 x 16384 (32/8)
        # 682.1 -> 705.6 and 689.4 -> 713.7, 2 x 8192 (64/8) 687.2 -> 710.2, mixed14 648.4 ->
        # 658.4, 4 x 512 414.4 -> 417.1 and 414.7 -> 415.5, 16 x 256 391.2 -> 387.1. The nolse
        # class keeps it (its loop has that shape already; off: 1 x 16384 708.0 -> 685.6, 4 x 512
        # 418.4 -> 412.0).
        plain = _plain(layout_class)
        eqr = not (layout_class.mask == "none" and layout_class.lse and layout_class.kv == "ragged" and plain)
        paged = layout_class.kv == "paged"
        rows = _rows(layout_class)
        return TileConfig(
            128, 128, 2, pingpong=True, overlap=True, q_first=True, pack_rows=rows, early_q_release=eqr,
            page_tma=128 if paged else 0, page_tma_small=16 if paged else 0, page_box_warps=4 if paged else 1,
            paged_fence_gathered_only=paged, stream_mix=rows and not getattr(layout_class, "softcap", False),
            l2_group_max=16,
        )  # fmt: skip
    if d_qk <= 192:
        # o_turn_every_thread: H200, session 16 (interleaved; DeepSeek shapes, 128/128 heads, d
        # 192/128, causal): 1 x 16384 693.9 -> 717.7 TFLOP/s [FA4 705.9, FA3 676.3], mixed14 511.4
        # -> 513.7 [FA3 504.5], 4 x 512 312.6 -> 320.2 [cuDNN 310.3], 16 x 256 224.9 -> 228.5
        # [218.7], 64 x 128 133.8 -> 133.8 [cuDNN 134.3].
        # l2_group_max 8: H100, session 24 (interleaved, two runs, ms; DeepSeek shapes): 4 x 512
        # 0.1558 -> 0.1367 and 0.1564 -> 0.1388 [cuDNN padded SDPA 0.1445] (ncu: the uncapped group of
        # 102 heads read 288.7 MB from DRAM, cuDNN 268.5, the tensors 268.4), mixed14 2.1972 -> 2.1001
        # and 2.1961 -> 2.1015; 64 x 128, 16 x 256 and 1 x 16384 (3 heads a group) within +-0.5%.
        # Caps of 16 | 32: 4 x 512 0.1367 | 0.1391, mixed14 2.1366 | 2.1950, and 1 x 16384 1.2-3.4%
        # slower with the same schedule (a binary's code placement? 8 and main agree).
        # l2_group_always (every sequence in groups of 8 heads): H100, session 24 (interleaved, two
        # runs, 20 rounds, ms): 16 x 256 0.2419 -> 0.2361 and 0.2401 -> 0.2342 [cuDNN padded SDPA
        # 0.2304]; 64 x 128, 4 x 512, mixed14, 1 x 16384 within +-0.8% (outputs as main's, against
        # FA4's). GPU tests and the 3,000-problem sweep passed with it (H100, session 25).
        return TileConfig(
            128, 128, 2, pingpong=False, overlap=True, o_turns=True, o_turn_every_thread=True, l2_group_max=8,
            l2_group_always=True, **boxes,
        )  # fmt: skip
    return TileConfig(128, 80, 2, pingpong=False, overlap=True)
