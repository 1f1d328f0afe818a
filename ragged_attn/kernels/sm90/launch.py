"""Compile one kernel per `LayoutClass` (fake tensors, symbolic extents) and launch it.

`compile_forward` needs no GPU (set CUTE_DSL_ARCH=sm_90a on a CPU box); it returns the TVM-FFI
compiled function, which supports `export_to_c(obj_path, function_name)` and reloads through
`cute.runtime.load_module(path, enable_tvm_ffi=True)`. `launch_forward` reorders arguments and
builds a 1-D view of the LSE buffer; its only checks are a forced num_splits it cannot merge
(ValueError naming num_splits); no device-to-host reads; it allocates a split-KV launch's workspace
(num_splits > 1: split_kv.py) and, for calls without queries or with an empty page pool, fills
out / LSE with torch ops. The kernel runs on torch's current stream (TVM-FFI environment stream).
"""

from __future__ import annotations

import concurrent.futures
import functools
import math
import threading

from ragged_attn.layout_class import LayoutClass

# Argument order of the compiled function (the stream is implicit, taken from torch).
COMPILED_ARGS = (
    "q", "k", "v", "out", "lse_flat", "cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k",
    "use_seqused_q", "use_seqused_k", "batch", "max_seqlen_q", "lse_s_max", "softmax_scale",
    "window_left", "window_right", "bottom_right", "lse_s_b", "lse_s_tok", "lse_s_row", "lse_s_h",
    "lse_scale", "num_ctas", "tile_counter", "page_table", "num_splits", "pack_rows", "batch_order",
)
# num_splits: split-KV's run-time split count (1: none; kernels/sm90/split_kv.py).
# pack_rows: != 0 lets a class with TileConfig.pack_rows pack GQA rows (tile_scheduler.py) in this
# launch (it does where H_q > H_kv and the LSE is not padded); split_kv.choose_pack_rows decides.
# batch_order: != 0 lets a class with TileConfig.batch_order deal the batch's sequences longest
# first (tile_scheduler.py "Batch order"; it does for 2 to batch_order sequences);
# split_kv.choose_batch_order decides.
# A class with softcap or sinks (issue 14) takes two more, after batch_order: sinks ((H_q,) float32,
# None for a class without sinks) and softcap (a float, ignored by a class without softcap). The
# other classes' functions (and compiled objects) are unchanged.
COMPILED_ARGS_EXT = COMPILED_ARGS + ("sinks", "softcap")
# A class whose tile config has tail_split (tile_scheduler.py "Tail split"; none ships with it) takes
# four more, after batch_order: the tail tiles, their pieces, the fp32 workspace and the int32
# counters (tail_split.tail_arguments).
COMPILED_ARGS_TAIL = COMPILED_ARGS + ("tail_tiles", "tail_pieces", "tail_work", "tail_count")


def compiled_args(layout_class: LayoutClass, config=None) -> tuple:
    """The argument order of `layout_class`'s compiled function (built with `config`, a TileConfig,
    where given, else with the class's own)."""
    if extended(layout_class):
        return COMPILED_ARGS_EXT
    from .tile_config import tile_config

    return COMPILED_ARGS_TAIL if (config or tile_config(layout_class)).tail_split else COMPILED_ARGS


def extended(layout_class: LayoutClass) -> bool:
    """Whether the class's compiled function takes the sinks and softcap arguments."""
    return layout_class.softcap or layout_class.sinks

LN2 = math.log(2.0)


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device) -> int:
    """Streaming multiprocessors of a CUDA device (the persistent kernel's CTA count), cached."""
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    return _sm_count(index)


_COUNTERS: dict = {}  # (device index, raw stream) -> int32 (1,) tile counter
# Per device: a bank of zeroed counters allocated outside any capture, and the next free slot.
# Each launch captured into a CUDA graph takes a slot of its own for good, so graphs replayed side
# by side never share a counter and no counter lives in a graph's memory pool (torch.compile's
# CUDA-graph trees refuse pool allocations that outlive the recording).
# A spent bank is replaced at the next launch outside a capture; spent banks stay referenced
# (_SPENT_BANKS) since the graphs that captured their slots may still replay.
_CAPTURE_BANK_SLOTS = 65536  # 256 KiB per device: e.g. 64 layers x 1024 captured batch shapes
_CAPTURE_BANKS: dict = {}  # device index -> [int32 (_CAPTURE_BANK_SLOTS,) tensor, next slot]
_SPENT_BANKS: list = []
_BANKS_WANTED: set = set()  # devices whose bank a capture found missing or spent
_BANK_LOCK = threading.Lock()  # two threads capturing at once never take one slot
_ALLOC_STREAMS: dict = {}  # device index -> the stream _lasting_zeros allocates on
_ALLOC_WORKER = None  # the thread _lasting_zeros allocates on (made at its first CUDA call)
_ALLOC_LOCK = threading.Lock()


def tile_counter(q):
    """The persistent kernel's tile counter for a launch on torch's current stream: an int32 (1,)
    tensor that is 0 before the launch, and that the launch leaves 0 again (each launch takes
    exactly as many tickets as it has tiles, and the last taker resets it; forward.py next_tile).
    Launches on one stream run one after another, so each (device, stream) keeps one counter;
    launches on other streams use their own. While the stream is being captured into a CUDA graph,
    a slot of the device's capture bank (allocated, zeroed, at the first launch outside a capture,
    and replaced at the first one after a capture took its last slot) that no other launch uses;
    with the bank spent or not yet made, a fresh zeroed tensor from the graph's memory pool (its
    memset is captured too)."""
    import torch

    if not q.is_cuda:  # a stand-in entry (tests/test_fast_launch.py) on a machine without CUDA
        return torch.zeros((1,), dtype=torch.int32)
    dev = q.get_device()
    if torch.cuda.is_current_stream_capturing():
        with _BANK_LOCK:
            bank = _CAPTURE_BANKS.get(dev)
            if bank is None or bank[1] >= _CAPTURE_BANK_SLOTS:
                _BANKS_WANTED.add(dev)  # made by the next launch outside a capture
                return torch.zeros((1,), dtype=torch.int32, device=q.device)
            slot = bank[1]
            bank[1] += 1
            if bank[1] == _CAPTURE_BANK_SLOTS:
                _BANKS_WANTED.add(dev)
        return bank[0][slot : slot + 1]
    key = (dev, torch._C._cuda_getCurrentRawStream(dev))
    counter = _COUNTERS.get(key)
    if counter is None:
        counter = _COUNTERS[key] = _lasting_zeros(1, q.device)
        if dev not in _CAPTURE_BANKS:
            _new_capture_bank(dev, q.device)
    if _BANKS_WANTED and dev in _BANKS_WANTED:  # the hot path pays one set test
        _new_capture_bank(dev, q.device)
    return counter


def _new_capture_bank(dev: int, device) -> None:
    """A fresh zeroed capture bank for device `dev` (outside any capture); a spent one is kept."""
    with _BANK_LOCK:
        _BANKS_WANTED.discard(dev)
        bank = _CAPTURE_BANKS.get(dev)
        if bank is not None and bank[1] < _CAPTURE_BANK_SLOTS:
            return
        if bank is not None:
            _SPENT_BANKS.append(bank[0])
        _CAPTURE_BANKS[dev] = [_lasting_zeros(_CAPTURE_BANK_SLOTS, device), 0]


def _lasting_zeros(n: int, device):
    """A zeroed int32 (n,) tensor kept for the process's lifetime, made outside any capture and
    outside any graph memory pool: on a CUDA device it is allocated and zeroed by a worker thread
    of this module's own, on a stream of its own (one per device), and the current stream waits
    for that. torch.compile's CUDA-graph trees route every allocation of the calling thread (their
    eager warm-up run included, torch 2.11-2.13 `_cuda_beginAllocateCurrentThreadToPool`) to the
    graph's memory pool, and a pool tensor that outlives the recording stops it ("tensor(s) in the
    cudagraph pool not tracked as outputs"); another thread's allocations are not routed. On the
    CPU (a stand-in, tests/test_tile_counter_bank.py): a plain torch.zeros."""
    import torch

    if device.type != "cuda":
        return torch.zeros((n,), dtype=torch.int32, device=device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    with _ALLOC_LOCK:
        global _ALLOC_WORKER
        if _ALLOC_WORKER is None:
            _ALLOC_WORKER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ragged_attn-alloc")
        side = _ALLOC_STREAMS.get(index)
        if side is None:
            side = _ALLOC_STREAMS[index] = torch.cuda.Stream(index)

    def allocate():
        with torch.cuda.device(index), torch.cuda.stream(side):
            return torch.zeros((n,), dtype=torch.int32, device=index)

    zeros = _ALLOC_WORKER.submit(allocate).result()
    torch.cuda.current_stream(index).wait_stream(side)
    return zeros


def _cutlass_dtype(name: str):
    import cutlass

    return {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16}[name]


def kernel_for(layout_class: LayoutClass, config=None):
    """The kernel object for a class; `config` (a TileConfig) overrides the class's own tiles
    (tools only: tools/bench_sm90.py compares candidates, the library never passes one)."""
    from .forward import RaggedForwardSm90
    from .tile_config import tile_config

    return RaggedForwardSm90(
        dtype=_cutlass_dtype(layout_class.dtype),
        out_dtype=_cutlass_dtype(layout_class.out_dtype),
        d_qk=layout_class.d_qk,
        d_v=layout_class.d_v,
        mask=layout_class.mask,
        has_lse=layout_class.lse,
        config=config if config is not None else tile_config(layout_class),
        paged=layout_class.kv == "paged",
        softcap=layout_class.softcap,
        sinks=layout_class.sinks,
    )


def compile_forward(layout_class: LayoutClass, extra_options: str = "", config=None):
    """Compile the forward kernel of `layout_class` for sm_90a; returns the TVM-FFI function.

    The head dims of q/k (d_qk) and v/out (d_v) are run-time extents up to the class's
    (multiples of 8, checked by the caller): one compiled class serves every problem it envelopes.

    kv="paged" classes take k/v as page pools (num_pages, page_size, H_kv, D) with any strides (an
    HND pool is passed as its permuted view) and a (B, max_pages) int32 page table; page size,
    page count and table width are run-time extents. Ragged classes take page_table=None.

    The TVM-FFI entry checks, before any launch, and raises ValueError/TypeError otherwise: tensor
    ranks, dtypes, device type and one device for all tensors, unit last strides, the other strides
    multiples of 8 elements, 16-byte (4-byte for int32/float32) base addresses, head dims multiples
    of 8, and equal extents where tensors share them (q/out tokens and heads, k/v tokens and heads,
    q/k d_qk, v/out d_v, cu_seqlens_q/k lengths), int32 ranges of the scalars. It does not check
    what relates extents otherwise (H_q % H_kv, the class's head-dim envelope, empty tensors,
    overlap): fast_launch and problem.py do.

    Raises ValueError for another arch.
    `extra_options` is appended to the DSL options (e.g. "remarks{ptx}" prints ptxas usage).
    """
    if layout_class.arch != "sm_90a":
        raise ValueError(f"compile_forward: sm90 kernels serve arch 'sm_90a', got {layout_class.arch!r}")
    import cutlass
    import cutlass.cute as cute
    from cutlass import Float32, Int32, Int64

    kernel = kernel_for(layout_class, config)
    dt = _cutlass_dtype(layout_class.dtype)
    odt = _cutlass_dtype(layout_class.out_dtype)

    def stride64():
        return cute.sym_int64(divisibility=8)

    total_q, total_k = cute.sym_int(), cute.sym_int()
    h_q, h_kv = cute.sym_int(), cute.sym_int()
    # Real head dims: run time (the class's dims size the smem tiles only).
    d_qk, d_v = cute.sym_int(divisibility=8), cute.sym_int(divisibility=8)
    fake = cute.runtime.make_fake_tensor
    q = fake(dt, (total_q, h_q, d_qk), (stride64(), stride64(), 1), assumed_align=16)
    if layout_class.kv == "paged":
        # (num_pages, page_size, H_kv, D): NHD in this order, HND as a permuted view.
        num_pages, page_size = cute.sym_int(), cute.sym_int()
        k = fake(dt, (num_pages, page_size, h_kv, d_qk), (stride64(), stride64(), stride64(), 1), assumed_align=16)
        v = fake(dt, (num_pages, page_size, h_kv, d_v), (stride64(), stride64(), stride64(), 1), assumed_align=16)
        page_table = fake(Int32, (cute.sym_int(), cute.sym_int()), (cute.sym_int64(), 1), assumed_align=4)
    else:
        k = fake(dt, (total_k, h_kv, d_qk), (stride64(), stride64(), 1), assumed_align=16)
        v = fake(dt, (total_k, h_kv, d_v), (stride64(), stride64(), 1), assumed_align=16)
        page_table = None
    out = fake(odt, (total_q, h_q, d_v), (stride64(), stride64(), 1), assumed_align=16)
    lse = fake(Float32, (cute.sym_int(),), (1,), assumed_align=4) if layout_class.lse else None
    # One extent for both: TVM-FFI then checks that they have the same length (B + 1).
    num_cu = cute.sym_int()
    cu_q = fake(Int32, (num_cu,), (1,), assumed_align=4)
    cu_k = fake(Int32, (num_cu,), (1,), assumed_align=4)
    su_q = fake(Int32, (cute.sym_int(),), (1,), assumed_align=4)
    su_k = fake(Int32, (cute.sym_int(),), (1,), assumed_align=4)
    counter = fake(Int32, (1,), (1,), assumed_align=4)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    # The arch comes from the class, never from CUTE_DSL_ARCH or the GPU in the machine (the DSL
    # reads that once at import), so a class compiles the same code everywhere.
    options = (f"--enable-tvm-ffi --gpu-arch {layout_class.arch} " + extra_options).strip()
    args = (
        q, k, v, out, lse, cu_q, cu_k, su_q, su_k,
        Int32(0), Int32(0), Int32(1), Int32(1), Int32(0), Float32(1.0),
        Int32(-1), Int32(-1), Int32(1),
        Int64(0), Int64(0), Int64(0), Int64(0), Float32(LN2), Int32(1), counter, page_table, Int32(1), Int32(0),
        Int32(0),
    )  # fmt: skip
    if extended(layout_class):
        # (H_q,) float32 sinks: the same extent as q's heads (TVM-FFI checks it).
        sinks = fake(Float32, (h_q,), (1,), assumed_align=4) if layout_class.sinks else None
        return cute.compile(kernel.call_ext, *args, sinks, Float32(1.0), stream, options=options)
    if kernel.tail_split:
        work = fake(Float32, (cute.sym_int(),), (1,), assumed_align=4)
        counts = fake(Int32, (cute.sym_int(),), (1,), assumed_align=4)
        return cute.compile(kernel.call_tail, *args, Int32(0), Int32(2), work, counts, stream, options=options)
    return cute.compile(kernel, *args, stream, options=options)


def _starts_and_lengths(cu_seqlens_q, seqused_q, batch: int):
    """(starts, lengths) of the B sequences' query rows, int64 tensors on cu_seqlens_q's device:
    sequence b holds rows [cu_seqlens_q[b], cu_seqlens_q[b] + len_b), len_b = seqused_q[b] or
    cu_seqlens_q[b + 1] - cu_seqlens_q[b]."""
    starts = cu_seqlens_q[:batch].long()
    lens = seqused_q[:batch].long() if seqused_q is not None else cu_seqlens_q[1 : batch + 1].long() - starts
    return starts, lens


def rows_inside(cu_seqlens_q, seqused_q, batch: int, total_q: int):
    """A bool (total_q,) tensor on cu_seqlens_q's device, True at the token rows of the sequences
    (`_starts_and_lengths`). Torch ops only (no device-to-host read): +1 where a sequence starts, -1
    where it ends, and a positive prefix sum is inside one."""
    import torch

    dev = cu_seqlens_q.device
    starts, lens = _starts_and_lengths(cu_seqlens_q, seqused_q, batch)
    marks = torch.zeros(total_q + 1, dtype=torch.long, device=dev)
    ones = torch.ones_like(starts)
    marks.scatter_add_(0, starts.clamp(0, total_q), ones)
    marks.scatter_add_(0, (starts + lens.clamp(min=0)).clamp(0, total_q), -ones)
    return marks[:total_q].cumsum(0) > 0


def fill_without_keys(
    lse, sinks, cu_seqlens_q, seqused_q, batch: int, total_q: int, h_q: int, lse_s_max: int, lse_strides,
    lse_base_is_log2: bool, inside=None,
) -> None:
    """The LSE of a launch in which no row sees a key, written with torch ops on the current
    stream (no device-to-host read), where the kernel would write it: the rows of the sequences get
    -inf, or with sinks ((H_q,) float32) sinks[h] (times log2(e) in base 2), as the kernel's
    `finalize_sink` gives a row that saw no key; padded rows past a length get -inf; rows outside
    every sequence (gaps, before cu_seqlens_q[0], after the last one) are not written (a caller's
    buffer keeps them). lse, lse_strides, lse_s_max as in `launch_forward` (s_b != 0: a padded
    (B, s_max, H_q) buffer; else token rows t at t * s_tok). Sequences as in `rows_inside`, whose
    result the caller may pass as `inside` (token rows) when it has it already."""
    import torch

    if batch == 0 or lse.numel() == 0:
        return
    dev = lse.device
    if sinks is None:
        value = torch.full((h_q,), float("-inf"), device=dev)
    else:
        value = (sinks * (1.0 / LN2) if lse_base_is_log2 else sinks).to(dev)  # (H_q,) in the LSE's base
    s_b, s_tok, s_row, s_h = lse_strides
    span = 1 + sum((n - 1) * s for n, s in zip(lse.shape, lse.stride()) if n > 0)
    flat = lse.as_strided((span,), (1,))
    if s_b:  # padded: row i of sequence b at b * s_b + i * s_row; every row is written
        _, lens = _starts_and_lengths(cu_seqlens_q, seqused_q, batch)
        rows = torch.arange(lse_s_max, device=dev)[None, :] < lens[:, None]  # (B, s_max)
        view = flat.as_strided((batch, lse_s_max, h_q), (s_b, s_row, s_h))
        view.copy_(torch.where(rows[..., None], value, float("-inf")))
    else:  # token rows: only the sequences' rows
        if inside is None:
            inside = rows_inside(cu_seqlens_q, seqused_q, batch, total_q)
        view = flat.as_strided((total_q, h_q), (s_tok, s_h))
        view.copy_(torch.where(inside[:, None], value, view))


def _check_split(num_splits, q, lse, lse_s_max: int, lse_strides, sinks, split_compiled) -> None:
    """ValueError unless launch_forward may run num_splits splits (its docstring says when)."""
    from .split_kv import max_splits_for_rows

    s_b, s_tok, s_row, _ = lse_strides
    why = None
    if type(num_splits) is not int or num_splits < 1:
        why = "expected an int >= 1"
    elif lse is None and split_compiled is None:
        why = "a class without an LSE splits only through its LSE sibling's kernel (pass split_compiled)"
    elif lse is not None and (lse_s_max != 0 or s_b != 0 or s_tok != s_row):
        why = "splits need a token- or head-major LSE (the merge reads each split's)"
    elif sinks is not None:
        why = "a sinks class runs unsplit (each split would count the sink)"
    elif num_splits > max_splits_for_rows(q.shape[0]):
        why = f"num_splits * total_q must stay below 2**31 (total_q = {q.shape[0]})"
    if why is not None:
        raise ValueError(f"num_splits: {why}, got {num_splits!r}")


def launch_forward(
    compiled,
    *,
    q,
    k,
    v,
    out,
    lse,
    cu_seqlens_q,
    cu_seqlens_k,
    seqused_q,
    seqused_k,
    batch: int,
    max_seqlen_q: int,
    lse_s_max: int,
    softmax_scale: float,
    window_left: int,
    window_right: int,
    bottom_right: bool,
    lse_strides=(0, 0, 0, 0),
    lse_base_is_log2: bool = False,
    page_table=None,
    kv_layout: str = "NHD",
    extended: bool = False,
    sinks=None,
    softcap: float = 0.0,
    num_splits: int = 1,
    fresh_outputs: bool = False,
    split_compiled=None,
    pack_rows=None,
    max_seqlen_k=None,
    batch_order=None,
    tail=None,
):
    """Launch `compiled` on torch's current stream. The caller has checked everything.

    q (total_q, H_q, d_qk), k (total_k, H_kv, d_qk), v (total_k, H_kv, d_v), out (total_q, H_q,
    d_v): torch tensors with a unit last stride, 16-byte aligned, other strides multiples of 8
    elements; d_qk, d_v multiples of 8 no larger than the class's (an envelope: out columns past
    d_v are never written). lse: float32 tensor
    of any shape (or None for a no-LSE class); element (row i of sequence b, head h) sits at
    lse.flatten-index b*s_b + cu_seqlens_q[b]*s_tok + i*s_row + h*s_h relative to lse's first
    element, with lse_strides = (s_b, s_tok, s_row, s_h) in elements. lse_s_max: rows per
    sequence of a padded LSE (rows [len_q, lse_s_max) get -inf), 0 for token/head-major layouts.
    seqused_q/seqused_k: (B,) int32 or None. window_left/right: -1 = unbounded (window class
    only; the causal class ignores them). bottom_right: causal/window alignment.
    max_seqlen_q: an upper bound of the query lengths (sizes the grid).
    page_table: (B, max_pages) int32 for a paged class (None for ragged); then k/v are page pools,
    "NHD" (num_pages, page_size, H_kv, D) or "HND" (num_pages, H_kv, page_size, D) per kv_layout,
    and key lengths come from seqused_k, else from cu_seqlens_k differences (cu_seqlens_k may be
    None when seqused_k is given).
    extended: True for a class with softcap or sinks (issue 14; `compiled_args`): then sinks (a
    float32 (H_q,) stride-1 tensor for a sinks class, None otherwise) and softcap (the cap, > 0,
    for a softcap class) are passed too.
    No queries (total_q == 0) or an empty page pool are served with torch fills on the current
    stream (the sequences' rows of out and LSE, and padded LSE rows), since TMA descriptors cannot describe an empty extent; no
    keys (ragged total_k == 0) runs the kernel with q and out standing in for k and v. The fills
    follow the kernel's rules (`fill_without_keys`, `rows_inside`): O = 0 and LSE -inf, or with sinks
    the head's sink, on the rows of the sequences (they see no key); -inf for padded rows past a
    length; rows outside every sequence are not written (a caller's out and LSE keep them).
    num_splits: split-KV's split count (kernels/sm90/split_kv.py; the caller chooses it,
    `choose_num_splits`, or a test forces it). 1: the kernel writes out and lse directly. > 1: the
    kernel writes a workspace of num_splits partial results and `run_splits` merges them into out
    and lse; needs an LSE that is a (total_q, H_q) view (token- or head-major: lse_s_max 0, s_b 0,
    s_tok == s_row) or, for a class without an LSE (lse None), `split_compiled`; no sinks; and
    num_splits * total_q < 2**31 (ValueError otherwise, before anything is launched). Ragged K/V
    and page pools alike. A launch without keys (total_k 0) runs unsplit.
    split_compiled: for a class without an LSE, the compiled function of its LSE sibling
    (split_kv.lse_sibling: the same class with lse=True, with the same arguments), which runs the
    split launches (its workspace LSE is merged and dropped; only out is written); None otherwise.
    Not used when num_splits is 1.
    pack_rows: row packing of GQA groups (tile_scheduler.py) for a class that has it
    (TileConfig.pack_rows): None lets `split_kv.choose_pack_rows` decide from host integers (with
    max_seqlen_k, keys, where given: its long-key rule needs it); True /
    False force it on / off (tests, benchmarks; on means "where it applies": H_q > H_kv, no padded
    LSE; a class without it ignores the flag).
    batch_order: the batch order (tile_scheduler.py "Batch order") for a class that has it
    (TileConfig.batch_order): None lets `split_kv.choose_batch_order` decide from host integers
    (max_seqlen_k, keys, where given; without it the caller's order); True / False force it on / off
    (tests, benchmarks; a class without it, or a batch past its cap, keeps the caller's order).
    fresh_outputs: out and lse were made for this call, so the merge may write their rows outside
    every sequence too (O = 0, LSE = -inf there); False: only the sequences' rows are written, as
    without splits.
    tail: None for a class without TileConfig.tail_split; for one with it (its compiled function
    takes COMPILED_ARGS_TAIL), its tail_split.TailClass (`tail_split.tail_class`): the launch's last
    tiles then run in pieces where `tail_split.choose_tail_split` says so (max_seqlen_k needed), or
    as TailClass.force says; never with num_splits > 1 (ValueError naming num_splits).
    """
    if num_splits != 1 and tail is not None:
        raise ValueError(f"num_splits: a tail_split class's launch runs unsplit (1), got {num_splits!r}")
    if num_splits != 1:
        _check_split(num_splits, q, lse, lse_s_max, lse_strides, sinks, split_compiled)
    if batch == 0 or q.shape[1] == 0 or max(max_seqlen_q, lse_s_max) == 0:
        return
    if q.shape[0] > 0 and k.shape[0] == 0 and page_table is None and out.dtype == q.dtype:
        # No keys: every row sees nothing (O = 0, LSE = -inf). TMA descriptors need non-empty
        # extents, so q stands in for k and out for v (same dtype, heads and head dims); with every
        # key length 0 the kernel loads no key block and writes exactly the valid rows, leaving
        # the caller's rows outside every sequence as they were.
        k, v = q, out
        seqused_k = None
        num_splits = 1  # no key block to share
    elif q.shape[0] == 0 or k.shape[0] == 0:
        # TMA descriptors need non-empty extents. No queries: only padded LSE rows remain (all
        # past len_q = 0). An empty page pool (or out of another dtype than q, which cannot stand
        # in for v): every row sees nothing, O = 0 and LSE = -inf (the sink with sinks).
        # Rows outside every sequence are written neither in out nor in a token-row LSE.
        inside = rows_inside(cu_seqlens_q, seqused_q, batch, q.shape[0]) if q.shape[0] > 0 else None
        if lse is not None and (lse_s_max > 0 or q.shape[0] > 0):
            fill_without_keys(
                lse, sinks if q.shape[0] > 0 else None, cu_seqlens_q, seqused_q, batch, q.shape[0], q.shape[1],
                lse_s_max, lse_strides, lse_base_is_log2, inside,
            )  # fmt: skip
        if inside is not None:  # O = 0 on the sequences' rows
            import torch

            out.copy_(torch.where(inside[:, None, None], 0.0, out))
        return
    if page_table is not None:
        if kv_layout == "HND":
            k, v = k.transpose(1, 2), v.transpose(1, 2)
        if page_table.stride(1) != 1:  # one column: its stride is never used, the kernel's is 1
            page_table = page_table.as_strided(page_table.shape, (page_table.stride(0), 1))
        if cu_seqlens_k is None:  # lengths come from seqused_k; any (B + 1,) int32 fills the slot
            cu_seqlens_k = cu_seqlens_q
    h_kv = k.shape[2] if page_table is not None else k.shape[1]
    if pack_rows is None:  # the library's choice (a class without row packing ignores it)
        from .split_kv import choose_pack_rows

        pack_rows = choose_pack_rows(batch, q.shape[0], max_seqlen_q, q.shape[1], h_kv, 128, lse_s_max, max_seqlen_k)
    num_ctas = sm_count(q.device)
    if batch_order is None:  # the library's choice (a class without the batch order ignores it)
        from .split_kv import choose_batch_order

        batch_order = choose_batch_order(
            batch, q.shape[0], max_seqlen_q, max_seqlen_k, q.shape[1], h_kv, num_ctas, 1 if pack_rows else 0, num_splits
        )  # fmt: skip
    lse_flat = None
    if lse is not None:
        span = 1 + sum((n - 1) * s for n, s in zip(lse.shape, lse.stride()) if n > 0)
        lse_flat = lse.as_strided((span,), (1,))
    s_b, s_tok, s_row, s_h = lse_strides
    args = (
        q, k, v, out, lse_flat, cu_seqlens_q, cu_seqlens_k,
        seqused_q if seqused_q is not None else cu_seqlens_q,
        seqused_k if seqused_k is not None else cu_seqlens_k,
        1 if seqused_q is not None else 0,
        1 if seqused_k is not None else 0,
        batch, max_seqlen_q, lse_s_max, float(softmax_scale),
        int(window_left), int(window_right), 1 if bottom_right else 0,
        s_b, s_tok, s_row, s_h,
        1.0 if lse_base_is_log2 else LN2,
        num_ctas,
        tile_counter(q),
        page_table,
        1,
        1 if pack_rows else 0,
        1 if batch_order else 0,
        *((sinks, float(softcap)) if extended else ()),
    )  # fmt: skip
    if tail is not None:
        from .tail_split import tail_arguments

        args = args + tail_arguments(
            tail, q, batch=batch, max_seqlen_q=max_seqlen_q, total_k=k.shape[0], max_seqlen_k=max_seqlen_k,
            seqused_k=seqused_k, num_ctas=num_ctas, lse_s_max=lse_s_max,
        )  # fmt: skip
    if num_splits == 1:
        compiled(*args)
        return
    from .split_kv import run_splits

    inside = None if fresh_outputs else rows_inside(cu_seqlens_q, seqused_q, batch, q.shape[0])
    if lse is None:  # no caller's LSE: the sibling writes the workspace LSE, which is dropped
        run_splits(split_compiled, args, num_splits, out, None, lse_base_is_log2, inside)
        return
    # The LSE's (total_q, H_q) view: token rows t at t * s_tok (checked above: no padded LSE).
    lse_rows = lse.as_strided((q.shape[0], q.shape[1]), (s_tok, s_h))
    run_splits(compiled, args, num_splits, out, lse_rows, lse_base_is_log2, inside)
