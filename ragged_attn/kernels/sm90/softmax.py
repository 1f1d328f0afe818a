"""Online softmax in fp32 over WGMMA accumulators (log2 domain), plus accumulator layout views.

Per row the state is the running max m (unscaled scores) and a per-thread partial sum l; the
four threads of a quad share a row (SM90 C layout), so the max is quad-reduced every block and
the sum only once, in `finalize`. With s = softmax_scale * log2(e):
    P = exp2(S * s - m * s),   row_scale = exp2((m_old - m_new) * s),   l = l * row_scale + sum(P).
A row whose max is still -inf (everything masked so far) uses 0 in place of m in the exponent, so
no NaN is ever formed; `finalize` gives O scale 1/l (or 0 for an empty row) and the log2-domain
LSE m * s + log2(l) (or -inf for an empty row).

exp2 on the FMA pipe (`exp2_poly`, TileConfig.exp2_emulate): MUFU.EX2 takes 16 lanes per clock per
SM on sm_90, so a 64-row warpgroup's 64 x 128 block of P costs 512 clocks of its SMSPs' MUFU, as
much as both of its GEMMs at d64 (64 x 128 x 64 x 2 x 2 flops at 4,096 per clock). Computing some
columns' exp2 by a polynomial on the FMA pipe (FlashAttention 4's answer on Blackwell) moves that
load off MUFU at ~9 issue slots per element.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

# exp2 on [-0.5, 0.5] as c0 + c1 f + c2 f^2 + c3 f^3, the relative-error minimax fit (Remez,
# float64, coefficients rounded to float32): max relative error 7.5e-5 evaluated in float32, below
# the relative half-ulp of the P the P V GEMM reads (bf16 2^-9 .. 2^-8, fp16 2^-12 .. 2^-11).
EXP2_POLY = (0.9999280571937561, 0.6932609677314758, 0.2426111251115799, 0.0551716685295105)
EXP2_POLY_MAX_REL_ERR = 7.5e-5
# TileConfig.rescale_skip: a row's reference max moves (and O is rescaled) only when the block's max
# exceeds it by more than this many log2 units, so P stays <= 2^8 (FlashAttention 4's threshold).
RESCALE_SKIP_LOG2 = 8.0
EXP2_POLY_FLOOR = -127.0  # exponents at or below it give 0 (2^-127: below fp32's normals)
_ROUND_MAGIC = 12582912.0  # 1.5 * 2^23: x + it rounds x to an integer kept in the low mantissa bits


def _ptx_f32(v: float) -> str:
    import struct

    return "0f%08X" % struct.unpack("<I", struct.pack("<f", v))[0]


# $0 = exp2($1): x clamped below at -127 (max.NaN keeps a NaN), j = round(x) by the magic add,
# f = x - j in [-0.5, 0.5], p(f) by Horner, and 2^j built as the float bits (j + 127) << 23, which
# for j = -127 is +0.0: -inf (a masked score) gives exactly 0 and NaN stays NaN (p is NaN).
_EXP2_POLY_PTX = (
    "{\n.reg .f32 t, j, f, p, s;\n.reg .b32 b;\n"
    f"max.NaN.f32 $0, $1, {_ptx_f32(EXP2_POLY_FLOOR)};\n"
    f"add.rn.f32 t, $0, {_ptx_f32(_ROUND_MAGIC)};\n"
    f"sub.rn.f32 j, t, {_ptx_f32(_ROUND_MAGIC)};\n"
    "sub.rn.f32 f, $0, j;\n"
    f"fma.rn.f32 p, f, {_ptx_f32(EXP2_POLY[3])}, {_ptx_f32(EXP2_POLY[2])};\n"
    f"fma.rn.f32 p, p, f, {_ptx_f32(EXP2_POLY[1])};\n"
    f"fma.rn.f32 p, p, f, {_ptx_f32(EXP2_POLY[0])};\n"
    "mov.b32 b, t;\nshl.b32 b, b, 23;\nadd.s32 b, b, 1065353216;\nmov.b32 s, b;\n"
    "mul.rn.f32 $0, p, s;\n}"
)


@dsl_user_op
def exp2_poly(x: Float32, *, loc=None, ip=None) -> Float32:
    """2^x for a softmax exponent x = S * s - m * s (<= 0 up to the FFMA's rounding) on the FMA pipe,
    no MUFU: relative error <= EXP2_POLY_MAX_REL_ERR where 2^x is a normal float (x >= -126); 0
    below -126.5 (-inf included); NaN for NaN. Domain x < 127.5: above it 2^j's exponent bits wrap
    (128: +inf, 129 and up: finite garbage, some negative), which needs m * s >= 2^32 (raw scores
    ~1e10) to reach, where the MUFU path is inf / NaN too.
    `exp2_poly_ref` is its torch mirror."""
    return Float32(
        llvm.inline_asm(
            T.f32(),
            [Float32(x).ir_value(loc=loc, ip=ip)],
            _EXP2_POLY_PTX,
            "=f,f",
            has_side_effects=False,
            is_align_stack=False,
            asm_dialect=llvm.AsmDialect.AD_ATT,
        )
    )


def emulated_column(c: int, exp2_emulate: int) -> bool:
    """Whether column c of a thread's row fragment takes `exp2_poly` (TileConfig.exp2_emulate: the
    last exp2_emulate of each 8 consecutive columns)."""
    return c % 8 >= 8 - exp2_emulate


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


class OnlineSoftmax:
    def __init__(self, scale_log2: Float32, num_rows: int, exp2_emulate: int = 0, rescale_skip: bool = False):
        self.scale_log2 = scale_log2
        self.num_rows = num_rows
        self.exp2_emulate = exp2_emulate  # P columns per 8 by `exp2_poly` (TileConfig.exp2_emulate)
        self.rescale_skip = rescale_skip  # `step` keeps the reference max within 2^8 (TileConfig.rescale_skip)
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
        obj.exp2_emulate = self.exp2_emulate
        obj.rescale_skip = self.rescale_skip
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
    def step(self, acc_S: cute.Tensor):
        """Turn scores into unnormalised probabilities in place; return the per-row O rescale.
        With rescale_skip: return (row scale, rescale): the rows keep their reference max unless
        one of the warp's rows saw a block max more than RESCALE_SKIP_LOG2 above its own (a
        warp-uniform vote), so then every row of the warp moves to its max and O must be rescaled;
        otherwise rescale is False, the row scales are 1 (0 for a row that saw no key yet, whose
        O is 0) and P <= 2^RESCALE_SKIP_LOG2."""
        acc_mn = acc_rows_view(acc_S)
        ncols = cute.size(acc_mn, mode=[1])
        row_scale = cute.make_rmem_tensor(self.num_rows, Float32)
        rescale = None
        if const_expr(self.rescale_skip):
            # Every row's block max first, for the warp's vote; (-inf - -inf) is NaN, so a row
            # that still saw no key never asks for a move.
            block_max = cute.make_rmem_tensor(self.num_rows, Float32)
            jump = cutlass.Boolean(False)
            for r in cutlass.range_constexpr(self.num_rows):
                block_max[r] = self.block_row_max(acc_mn, r, ncols)
                jump = jump | ((block_max[r] - self.row_max[r]) * self.scale_log2 > Float32(RESCALE_SKIP_LOG2))
            rescale = cute.arch.vote_any_sync(jump)
        for r in cutlass.range_constexpr(self.num_rows):
            m_prev = self.row_max[r]
            if const_expr(self.rescale_skip):
                m = block_max[r] if rescale else m_prev
            else:
                m = self.block_row_max(acc_mn, r, ncols)
            self.row_max[r] = m
            m_safe = Float32(0.0) if m == -Float32.inf else m
            m_scaled = m_safe * self.scale_log2
            scale = cute.math.exp2((m_prev - m_safe) * self.scale_log2, fastmath=True)
            if const_expr(self.exp2_emulate):
                # column by column, the sum as it goes (each P feeds it once computed)
                total = self.row_sum[r] * scale
                for c in cutlass.range_constexpr(ncols):
                    x = acc_mn[r, c] * self.scale_log2 - m_scaled
                    if const_expr(emulated_column(c, self.exp2_emulate)):
                        pc = exp2_poly(x)
                    else:
                        pc = cute.math.exp2(x, fastmath=True)
                    acc_mn[r, c] = pc
                    total = total + pc
                self.row_sum[r] = total
            else:
                p = cute.math.exp2(acc_mn[r, None].load() * self.scale_log2 - m_scaled, fastmath=True)
                acc_mn[r, None].store(p)
                self.row_sum[r] = p.reduce(cute.ReductionOp.ADD, self.row_sum[r] * scale, 0)
            row_scale[r] = scale
        if const_expr(self.rescale_skip):
            return row_scale, rescale
        return row_scale

    @cute.jit
    def block_row_max(self, acc_mn: cute.Tensor, r: int, ncols: int) -> Float32:
        """Row r's max over the reference max and this block's scores, quad-reduced."""
        m = self.row_max[r]
        for c in cutlass.range_constexpr(ncols):
            m = cute.arch.fmax(m, acc_mn[r, c])
        return cute.arch.warp_reduction_max(m, threads_in_group=4)

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
def rescale_o(acc_O: cute.Tensor, step_out):
    """O *= `OnlineSoftmax.step`'s row scales: step_out is its return, the row scales, or with
    rescale_skip (row scales, rescale), where O is left alone unless rescale (a warp-uniform branch)."""
    if const_expr(isinstance(step_out, tuple)):
        row_scale, rescale = step_out
        if rescale:
            rescale_rows(acc_O, row_scale)
    else:
        rescale_rows(acc_O, step_out)


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


def exp2_poly_ref(x):
    """torch mirror of `exp2_poly` on a float32 tensor, step by step in float32 and int32 (the
    magic add, the polynomial, the exponent bits), for the CPU tests of its constants."""
    import torch

    x = x.to(torch.float32)
    x = torch.where(torch.isnan(x), x, torch.clamp(x, min=EXP2_POLY_FLOOR))
    magic = torch.tensor(_ROUND_MAGIC, dtype=torch.float32)
    t = x + magic
    f = x - (t - magic)
    c0, c1, c2, c3 = (torch.tensor(c, dtype=torch.float32).double() for c in EXP2_POLY)

    def fma(a, b, c):  # fma.rn.f32: the float32 product is exact in float64, then one rounding
        return (a.double() * b.double() + c).to(torch.float32)

    p = fma(fma(fma(f, c3, c2), f, c1), f, c0)
    bits = (t.view(torch.int32).to(torch.int64) << 23) + 1065353216
    bits = ((bits + 2**31) % 2**32 - 2**31).to(torch.int32)  # int32 wrap-around, as shl / add.s32
    return p * bits.view(torch.float32)


def online_softmax_ref(blocks, scale_log2, rescale_skip=False, rows_per_warp=None):
    """float64 mirror of `OnlineSoftmax.step` over key blocks, then `finalize` (no sink), for the
    CPU tests of rescale_skip: blocks is a list of (scores (rows, n), values (n, d_v)) torch
    tensors, -inf for masked scores; the warp's vote covers rows_per_warp consecutive rows (all of
    them when None). Returns (O (rows, d_v), log2-domain LSE (rows,), the largest P, the blocks
    that rescaled O)."""
    import torch

    rows = blocks[0][0].shape[0]
    group = rows_per_warp or rows
    m = torch.full((rows,), -torch.inf, dtype=torch.float64)
    l = torch.zeros(rows, dtype=torch.float64)
    o = torch.zeros(rows, blocks[0][1].shape[1], dtype=torch.float64)
    p_max, rescaled = 0.0, 0
    for scores, values in blocks:
        s = scores.double()
        block_max = torch.maximum(m, s.max(dim=1).values)
        if rescale_skip:
            with torch.no_grad():
                jump = (block_max - m) * scale_log2 > RESCALE_SKIP_LOG2  # NaN (-inf - -inf): False
            vote = jump.view(-1, group).any(dim=1).repeat_interleave(group)
            m_new = torch.where(vote, block_max, m)
            rescaled += int(vote.any())
        else:
            m_new = block_max
            rescaled += 1  # every block moves the max and rescales O
        m_safe = torch.where(m_new == -torch.inf, torch.zeros_like(m_new), m_new)
        scale = torch.exp2((m - m_safe) * scale_log2)
        p = torch.exp2(s * scale_log2 - (m_safe * scale_log2)[:, None])
        p_max = max(p_max, float(p.max()))
        l = l * scale + p.sum(dim=1)
        o = o * scale[:, None] + p @ values.double()
        m = m_new
    empty = l == 0
    o_scale = torch.where(empty, torch.zeros_like(l), 1.0 / l)
    lse = torch.where(empty, torch.full_like(l, -torch.inf), m * scale_log2 + torch.log2(l))
    return o * o_scale[:, None], lse, p_max, rescaled


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
