"""Online softmax in fp32 over WGMMA accumulators (log2 domain), plus accumulator layout views.

Per row the state is the running max m (unscaled scores) and a per-thread partial sum l; the
four threads of a quad share a row (SM90 C layout), so the max is quad-reduced every block and
the sum only once, in `finalize`. With s = softmax_scale * log2(e):
    P = exp2(S * s - m * s),   row_scale = exp2((m_old - m_new) * s),   l = l * row_scale + sum(P).
A row whose max is still -inf (everything masked so far) uses 0 in place of m in the exponent, so
no NaN is ever formed; `finalize` gives O scale 1/l (or 0 for an empty row) and the log2-domain
LSE m * s + log2(l) (or -inf for an empty row).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, const_expr


def acc_rows_view(acc: cute.Tensor) -> cute.Tensor:
    """View an SM90 accumulator ((2, 2, V), MMA_M, MMA_N) as (rows, cols) = ((2, MMA_M), (2, V, MMA_N))."""
    lay = cute.make_layout(acc.layout.shape)  # compact, to pick modes by position
    shape = ((lay.shape[0][1], lay.shape[1]), (lay.shape[0][0], lay.shape[0][2], lay.shape[2]))
    stride = ((lay.stride[0][1], lay.stride[1]), (lay.stride[0][0], lay.stride[0][2], lay.stride[2]))
    return cute.make_tensor(acc.iterator, cute.composition(acc.layout, cute.make_layout(shape, stride=stride)))


def acc_as_operand_a(acc: cute.Tensor) -> cute.Tensor:
    """View an SM90 fp32 accumulator ((2, 2, N/8), MMA_M, MMA_N) as a 16-bit RS A fragment
    ((2, 2, 2), MMA_M, (N/16, MMA_N)): two adjacent n8 chunks of C are one k16 chunk of A."""
    lay = acc.layout
    assert lay.shape[0][2] % 2 == 0
    d = cute.logical_divide(lay, ((None, None, 2), None, None))
    frag = cute.make_layout(
        ((d.shape[0][0], d.shape[0][1], d.shape[0][2][0]), d.shape[1], (d.shape[0][2][1], d.shape[2])),
        stride=(
            (d.stride[0][0], d.stride[0][1], d.stride[0][2][0]),
            d.stride[1],
            (d.stride[0][2][1], d.stride[2]),
        ),
    )
    return cute.make_tensor(acc.iterator, frag)


@cute.jit
def convert_k16(dst: cute.Tensor, src: cute.Tensor, dtype: cutlass.Constexpr):
    """dst = src converted to `dtype`, both in the RS A-fragment view ((2, 2, 2), MMA_M, K chunks)
    (`acc_as_operand_a`, or tOrP itself). Where the k16 chunks are a power of two in number
    (N 32, 64, 128, 256) the whole fragment converts at once; else one k16 chunk (8 values a
    thread) at a time: whole, such bf16 fragments (N 80, 96, 112, 176, 192) lowered to one unpacked
    cvt per value and a PRMT per pair, and (P) ptxas fenced the P V GEMM with extra warpgroup waits
    (static SASS, tools/sass_static.py: d256's interior loop 543 -> 492 instructions, F2FP 40 -> 20,
    PRMT 20 -> 0, WARPGROUP 8 -> 4). Chunked at N 128, the d128 no-mask loop grew 463 -> 476: kept
    whole there. (fp16 P built the same objects either way; the fp16 d96 O conversion did not.)"""
    n_k = cute.size(src.shape[2])
    if const_expr(n_k & (n_k - 1) == 0):
        dst.store(src.load().to(dtype))
    else:
        for k in cutlass.range_constexpr(n_k):
            dst[None, None, k].store(src[None, None, k].load().to(dtype))


@cute.jit
def store_p(tOrP: cute.Tensor, acc_S: cute.Tensor, dtype: cutlass.Constexpr):
    """P = acc_S (the fp32 S accumulator after the softmax) converted to `dtype` into tOrP, the
    P V GEMM's register A fragment ((2, 2, 2), MMA_M, N/16), through acc_S's view as one
    (`acc_as_operand_a`: ((2, 2, 2), MMA_M, (N/16, MMA_N))), by `convert_k16` (chunked at tile_n
    80, 112, 176, 192)."""
    convert_k16(tOrP, acc_as_operand_a(acc_S), dtype)


class OnlineSoftmax:
    def __init__(self, scale_log2: Float32, num_rows: int):
        self.scale_log2 = scale_log2
        self.num_rows = num_rows
        self.row_max = cute.make_rmem_tensor(num_rows, Float32)
        self.row_sum = cute.make_rmem_tensor(num_rows, Float32)

    # Device values travel through runtime loops as a flat list of IR values.
    def __extract_mlir_values__(self):
        vals = []
        for x in (self.scale_log2, self.row_max, self.row_sum):
            vals += cutlass.extract_mlir_values(x)
        return vals

    def __new_from_mlir_values__(self, values):
        obj = object.__new__(OnlineSoftmax)
        obj.num_rows = self.num_rows
        n0 = len(cutlass.extract_mlir_values(self.scale_log2))
        n1 = n0 + len(cutlass.extract_mlir_values(self.row_max))
        obj.scale_log2 = cutlass.new_from_mlir_values(self.scale_log2, values[:n0])
        obj.row_max = cutlass.new_from_mlir_values(self.row_max, values[n0:n1])
        obj.row_sum = cutlass.new_from_mlir_values(self.row_sum, values[n1:])
        return obj

    def reset(self):
        self.row_max.fill(-Float32.inf)
        self.row_sum.fill(0.0)

    @cute.jit
    def step(self, acc_S: cute.Tensor) -> cute.Tensor:
        """Turn scores into unnormalised probabilities in place; return the per-row O rescale."""
        acc_mn = acc_rows_view(acc_S)
        ncols = cute.size(acc_mn, mode=[1])
        row_scale = cute.make_rmem_tensor(self.num_rows, Float32)
        for r in cutlass.range_constexpr(self.num_rows):
            m_prev = self.row_max[r]
            m = m_prev
            for c in cutlass.range_constexpr(ncols):
                m = cute.arch.fmax(m, acc_mn[r, c])
            m = cute.arch.warp_reduction_max(m, threads_in_group=4)
            self.row_max[r] = m
            m_safe = Float32(0.0) if m == -Float32.inf else m
            m_scaled = m_safe * self.scale_log2
            scale = cute.math.exp2((m_prev - m_safe) * self.scale_log2, fastmath=True)
            p = cute.math.exp2(acc_mn[r, None].load() * self.scale_log2 - m_scaled, fastmath=True)
            acc_mn[r, None].store(p)
            self.row_sum[r] = p.reduce(cute.ReductionOp.ADD, self.row_sum[r] * scale, 0)
            row_scale[r] = scale
        return row_scale

    @cute.jit
    def finalize(self, sink_log2=None) -> cute.Tensor:
        """Quad-reduce the sums; return the O scale per row and leave log2-domain LSE in row_sum.
        sink_log2 (issue 14): the head's sink logit times log2(e), one more softmax column with
        no value (see `finalize_sink`)."""
        if const_expr(sink_log2 is not None):
            return self.finalize_sink(sink_log2)
        row_scale = cute.make_rmem_tensor(self.num_rows, Float32)
        for r in cutlass.range_constexpr(self.num_rows):
            s = self.row_sum[r]
            s = s + cute.arch.shuffle_sync_bfly(s, offset=2)
            s = s + cute.arch.shuffle_sync_bfly(s, offset=1)
            empty = s == Float32(0.0)  # no key seen; a NaN sum (a seen key held NaN) stays NaN
            row_scale[r] = Float32(0.0) if empty else cute.arch.rcp_approx(s)
            lse = self.row_max[r] * self.scale_log2 + cute.math.log2(s, fastmath=True)
            self.row_sum[r] = -Float32.inf if empty else lse
        return row_scale


    @cute.jit
    def finalize_sink(self, sink_log2: Float32) -> cute.Tensor:
        """`finalize` with a sink: with m2 = m * s (-inf for a row that saw no key) and the sum l
        relative to exp2(m2), the denominator is l * exp2(m2) + exp2(sink_log2). Relative to
        M = max(m2, sink_log2): t = l * a + b, a = exp2(m2 - M), b = exp2(sink_log2 - M) (the
        larger of the two terms is exactly 1, so nothing overflows; equal ones, -inf included, are both 1); O scale a / t, LSE M + log2(t).
        A row that saw no key gets O = 0 (its O is 0) and LSE = sink_log2; a sink of -inf is no
        sink; +inf gives O = 0, LSE = +inf; a NaN sum or sink stays NaN."""
        row_scale = cute.make_rmem_tensor(self.num_rows, Float32)
        for r in cutlass.range_constexpr(self.num_rows):
            s = self.row_sum[r]
            s = s + cute.arch.shuffle_sync_bfly(s, offset=2)
            s = s + cute.arch.shuffle_sync_bfly(s, offset=1)
            m = self.row_max[r]
            m2 = -Float32.inf if m == -Float32.inf else m * self.scale_log2
            a = Float32(1.0)
            b = Float32(1.0)
            big = m2
            if m2 > sink_log2:
                b = cute.math.exp2(sink_log2 - m2, fastmath=True)
            elif m2 < sink_log2:
                a = cute.math.exp2(m2 - sink_log2, fastmath=True)
                big = sink_log2
            elif sink_log2 != sink_log2:  # noqa: PLR0124 (a NaN sink; a NaN m2 makes s NaN already)
                b = sink_log2
            t = s * a + b
            row_scale[r] = a * cute.arch.rcp_approx(t)
            self.row_sum[r] = big + cute.math.log2(t, fastmath=True)
        return row_scale


@cute.jit
def rescale_rows(acc_O: cute.Tensor, row_scale: cute.Tensor):
    acc_mn = acc_rows_view(acc_O)
    for r in cutlass.range_constexpr(cute.size(row_scale)):
        acc_mn[r, None].store(acc_mn[r, None].load() * row_scale[r])


def softmax_ref(scores, scale):
    """float64 reference of the math above for a (rows, cols) list-of-lists; returns (P/l, lse2)."""
    import math

    out, lse = [], []
    for row in scores:
        m = max(row)
        if m == -math.inf:
            out.append([0.0] * len(row))
            lse.append(-math.inf)
            continue
        p = [2.0 ** ((x - m) * scale * math.log2(math.e)) for x in row]
        s = sum(p)
        out.append([x / s for x in p])
        lse.append(m * scale * math.log2(math.e) + math.log2(s))
    return out, lse


def finalize_sink_ref(m, l, sink, scale_log2):
    """Python mirror of `OnlineSoftmax.finalize_sink` for one row, float64: m the row max (unscaled,
    -inf when no key was seen), l the row sum relative to exp2(m * scale_log2), sink the natural-log
    sink logit. Returns (O scale, log2-domain LSE)."""
    import math

    s2 = sink * math.log2(math.e)
    m2 = -math.inf if m == -math.inf else m * scale_log2
    a, b, big = 1.0, 1.0, m2
    if m2 > s2:
        b = 2.0 ** (s2 - m2)
    elif m2 < s2:
        a = 2.0 ** (m2 - s2)
        big = s2
    elif s2 != s2:  # noqa: PLR0124 (NaN)
        b = s2
    t = l * a + b
    return a / t, big + math.log2(t)
