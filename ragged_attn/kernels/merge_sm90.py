"""Fused single-pass LSE merge for sm_90a (CuTe DSL, plain SIMT): `merge_state` / `merge_states`.

One thread owns one 16-byte column chunk of one (token, head) row (8 fp16/bf16 or 4 fp32
values: `vec`), reads the row's LSEs, then each part's chunk with one 128-bit load (only for parts
whose LSE is not -inf), accumulates in float32 and writes the chunk with one 128-bit store; the
thread of chunk 0 writes the row's LSE. A CTA (`THREADS` threads) covers `THREADS // span` tokens
of one block of `span` (head, chunk) items, and walks tokens with a grid stride, so a thread's
head and chunk are decoded once (two run-time divisions) and the grid stays a few waves.

Contracts (checked on the host by ragged_attn/merge.py `_kernel_fits`, tests/test_merge_kernel.py):
  * v / out: unit last stride, every other stride and head_dim a multiple of `vec`, 16-byte
    aligned base (the 128-bit accesses rely on it: the stride SymInts promise divisibility, and
    TVM-FFI does not check that promise).
  * LSEs: float32, any strides (scalar loads).
  * Compiled once per `MergeKey` (form, dtype, lse_base); T, S, H, D and every stride are
    run-time values.

Numerics (the rules of ragged_attn/merge.py's docstring): m = max of the row's LSEs; a row with a
NaN or +inf LSE gives O = NaN, LSE = NaN; a row whose parts are all -inf gives O = 0, LSE = -inf;
otherwise w_i = 2^((s_i - m) c) (c = 1 for base 2, log2(e) for ln), O = (sum_i w_i v_i) / sum_i w_i,
LSE = m + log2(sum_i w_i) / c. -inf parts are skipped (their v is never loaded); a NaN in v of a
finite part propagates, also through a weight that underflows to 0.
"""

from __future__ import annotations

import dataclasses
import math

import cutlass
from cutlass import Float32, Int32, const_expr, cute

THREADS = 128  # threads per CTA
GROUP = 4  # merge_states: parts whose 128-bit loads are issued together
LOG2E = math.log2(math.e)
LN2 = math.log(2.0)

_DTYPES = {"fp16": cutlass.Float16, "bf16": cutlass.BFloat16, "fp32": cutlass.Float32}
FORMS = ("pair", "stack")  # merge_state's two (T, H, D) tensors / merge_states' (T, S, H, D) one
LSE_BASES = ("log2", "ln")


@dataclasses.dataclass(frozen=True)
class MergeKey:
    """What a compiled merge kernel is specialised on (everything else is a run-time value).

    form: "pair" (merge_state: v_a, s_a, v_b, s_b) or "stack" (merge_states: v, s with S states).
    dtype: "fp16" / "bf16" / "fp32" (v and out). lse_base: "log2" / "ln". arch: "sm_90a".
    """

    form: str
    dtype: str
    lse_base: str
    arch: str = "sm_90a"

    def __post_init__(self):
        if self.form not in FORMS:
            raise ValueError(f"form: expected one of {FORMS}, got {self.form!r}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype: expected one of {tuple(_DTYPES)}, got {self.dtype!r}")
        if self.lse_base not in LSE_BASES:
            raise ValueError(f"lse_base: expected one of {LSE_BASES}, got {self.lse_base!r}")
        if self.arch != "sm_90a":
            raise ValueError(f"arch: the merge kernel is compiled for 'sm_90a', got {self.arch!r}")

    @property
    def vec(self) -> int:
        """Elements per 16-byte chunk (one 128-bit load or store)."""
        return 16 // (_DTYPES[self.dtype].width // 8)


def grid_shape(tokens: int, heads: int, head_dim: int, vec: int, sm_count: int, waves: int = 4):
    """(grid_x, grid_y, span, tokens_per_cta) for a launch: pure host arithmetic (unit-tested).

    A token has heads * head_dim / vec items (one thread each). span = min(items, THREADS):
    grid_y = ceil(items / span) CTAs cover a token's items, each CTA then takes
    tokens_per_cta = THREADS // span tokens per step; grid_x CTAs stride over the tokens: `waves`
    times the CTAs an SM could hold by threads (2048 // THREADS = 16; the kernel's 55-68 registers
    allow 7-9, so more waves still), never more than the tokens need. Not tuned on a GPU yet.
    """
    items = heads * (head_dim // vec)
    span = min(items, THREADS)
    grid_y = -(-items // span)
    tpc = THREADS // span
    steps = -(-tokens // tpc)  # token steps in all
    want_x = max(1, (sm_count * (2048 // THREADS) * waves) // grid_y)
    return min(steps, want_x), grid_y, span, tpc


class MergeSm90:
    """The merge kernel of one `MergeKey`: `__call__` (form "stack") or `call_pair` (form "pair")."""

    def __init__(self, key: MergeKey):
        self.key = key
        self.dtype = _DTYPES[key.dtype]
        self.vec = key.vec
        self.pair = key.form == "pair"
        # Parts loaded together (their loads in flight at once): merge_state's two; merge_states'
        # run-time S in groups of 4 (a group past S reads nothing).
        self.group = 2 if self.pair else GROUP
        # exp2 argument scale and the LSE result's scale back to the input base.
        self.to_log2 = 1.0 if key.lse_base == "log2" else LOG2E
        self.from_log2 = 1.0 if key.lse_base == "log2" else LN2

    # ---- host entries ---------------------------------------------------------------------------

    @cute.jit
    def __call__(
        self,
        mV: cute.Tensor,  # (T, S, H, D) dtype, unit last stride
        mS: cute.Tensor,  # (T, S, H) float32, any strides
        mO: cute.Tensor,  # (T, H, D) dtype, unit last stride
        mL: cute.Tensor,  # (T, H) float32
        span: Int32,
        tokens_per_cta: Int32,
        grid_x: Int32,
        grid_y: Int32,
        stream,
    ):
        self.kernel(mV, mS, None, None, mO, mL, span, tokens_per_cta).launch(
            grid=[grid_x, grid_y, 1], block=[THREADS, 1, 1], stream=stream
        )

    @cute.jit
    def call_pair(
        self,
        mVa: cute.Tensor,  # (T, H, D) dtype, unit last stride
        mSa: cute.Tensor,  # (T, H) float32
        mVb: cute.Tensor,  # (T, H, D) dtype, unit last stride
        mSb: cute.Tensor,  # (T, H) float32
        mO: cute.Tensor,  # (T, H, D) dtype, unit last stride
        mL: cute.Tensor,  # (T, H) float32
        span: Int32,
        tokens_per_cta: Int32,
        grid_x: Int32,
        grid_y: Int32,
        stream,
    ):
        self.kernel(mVa, mSa, mVb, mSb, mO, mL, span, tokens_per_cta).launch(
            grid=[grid_x, grid_y, 1], block=[THREADS, 1, 1], stream=stream
        )

    # ---- device ---------------------------------------------------------------------------------

    @cute.kernel
    def kernel(
        self,
        mV: cute.Tensor,  # stack: (T, S, H, D); pair: v_a (T, H, D)
        mS: cute.Tensor,  # stack: (T, S, H); pair: s_a (T, H)
        mV2,  # pair: v_b (T, H, D); stack: None
        mS2,  # pair: s_b (T, H); stack: None
        mO: cute.Tensor,  # (T, H, D)
        mL: cute.Tensor,  # (T, H)
        span: Int32,  # (head, chunk) items per CTA row of threads
        tokens_per_cta: Int32,  # THREADS // span
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, _ = cute.arch.block_idx()
        gdimx, _, _ = cute.arch.grid_dim()
        num_tokens = mO.shape[0]
        num_heads = mO.shape[1]
        chunks = mO.shape[2] // self.vec
        tok_off = tidx // span
        item = bidy * span + tidx % span
        head = item // chunks
        chunk = item - head * chunks
        if tok_off < tokens_per_cta and head < num_heads:
            step = gdimx * tokens_per_cta
            for t in cutlass.range(bidx * tokens_per_cta + tok_off, num_tokens, step, unroll=1):
                self.merge_row(mV, mS, mV2, mS2, mO, mL, t, head, chunk)

    @cute.jit
    def merge_row(self, mV, mS, mV2, mS2, mO, mL, t: Int32, head: Int32, chunk: Int32):
        """Merge one 16-byte chunk of row (t, head) and, from chunk 0, write the row's LSE."""
        vec, group = self.vec, self.group
        num_states = 2 if const_expr(self.pair) else mS.shape[1]
        acc = cute.make_rmem_tensor((vec,), Float32)
        acc.fill(0.0)
        frags = [cute.make_rmem_tensor((vec,), self.dtype) for _ in range(group)]
        m, bad, total = Float32(-math.inf), cutlass.Boolean(False), Float32(0.0)
        if const_expr(self.pair):
            m, bad, total = self.merge_one_group(mS, mS2, mV, mV2, t, head, chunk, num_states, acc, frags)
        else:
            if num_states <= group and const_expr(self.dtype.width == 16):
                # One group (S <= 4): its LSEs are loaded once and kept for pass 2, so a row costs
                # two dependent memory trips (LSEs, then v), not three. 16-bit v only: with fp32 v
                # the second copy of the group's code takes 73 registers (7 CTAs per SM need <= 72).
                m, bad, total = self.merge_one_group(mS, mS2, mV, mV2, t, head, chunk, num_states, acc, frags)
            else:
                # Pass 1 over the LSEs: the maximum and whether any is NaN or +inf.
                for i0 in cutlass.range(0, num_states, group, unroll=1):
                    m, bad = self.max_of_group(self.lses_of_group(mS, mS2, t, i0, head, num_states), m, bad)
                # Pass 2, `group` parts at a time: every load of a group is issued before the first use.
                if not bad:
                    for i0 in cutlass.range(0, num_states, group, unroll=1):
                        s = self.lses_of_group(mS, mS2, t, i0, head, num_states)
                        total = self.add_group(mV, mV2, s, t, i0, head, chunk, m, acc, frags, total)
        # total >= 1 when some part is finite (the maximum's weight is 1), 0 when none is.
        inv = Float32(0.0)
        if total > Float32(0.0):
            inv = Float32(1.0) / total
        out = acc.load() * inv
        if bad:
            out = acc.load() * Float32(math.nan)
        res = cute.make_rmem_tensor((vec,), self.dtype)
        res.store(out.to(self.dtype))
        cute.autovec_copy(res, cute.local_tile(mO[t, head, None], (vec,), (chunk,)))
        if chunk == 0:
            lse = m + cute.math.log2(total) * self.from_log2
            if bad:
                lse = Float32(math.nan)
            mL[t, head] = lse

    @cute.jit
    def merge_one_group(self, mS, mS2, mV, mV2, t: Int32, head: Int32, chunk: Int32, num_states, acc, frags):
        """Both passes over parts 0 .. group - 1 with their LSEs loaded once: (max, bad, total)
        as `max_of_group` and `add_group` give them (acc accumulates; nothing added when bad)."""
        s = self.lses_of_group(mS, mS2, t, 0, head, num_states)
        m, bad = self.max_of_group(s, Float32(-math.inf), cutlass.Boolean(False))
        total = Float32(0.0)
        if not bad:
            total = self.add_group(mV, mV2, s, t, 0, head, chunk, m, acc, frags, total)
        return m, bad, total

    @cute.jit
    def lses_of_group(self, mS, mS2, t: Int32, i0, head: Int32, num_states):
        """The LSEs of parts i0 .. i0 + group - 1 of row (t, head), -inf past the last part."""
        return [self.lse_of(mS, mS2, t, i0 + k, head, num_states) for k in range(self.group)]

    @cute.jit
    def max_of_group(self, s, m: Float32, bad):
        """(max(m, the group's LSEs s), bad or any of them NaN / +inf)."""
        for k in cutlass.range_constexpr(self.group):
            bad = bad | (s[k] != s[k]) | (s[k] == Float32(math.inf))  # noqa: PLR0124 (NaN test)
            m = cute.arch.fmax(m, s[k])
        return m, bad

    @cute.jit
    def add_group(self, mV, mV2, s, t: Int32, i0, head: Int32, chunk: Int32, m: Float32,
                  acc, frags, total: Float32) -> Float32:
        """acc += sum_k 2^((s_k - m) c) v_k[chunk] over parts i0 + k whose LSE s_k is not -inf (the
        others' v is never read); returns total + the weights. All loads first, then the arithmetic."""
        group, vec = self.group, self.vec
        for k in cutlass.range_constexpr(group):
            if s[k] != Float32(-math.inf):
                src = self.v_row(mV, mV2, t, i0 + k, head)
                cute.autovec_copy(cute.local_tile(src, (vec,), (chunk,)), frags[k])
        for k in cutlass.range_constexpr(group):
            if s[k] != Float32(-math.inf):
                w = cute.math.exp2((s[k] - m) * self.to_log2)
                acc.store(frags[k].load().to(Float32) * w + acc.load())
                total = total + w
        return total

    @cute.jit
    def lse_of(self, mS, mS2, t: Int32, i: Int32, head: Int32, num_states) -> Float32:
        """LSE of part i of row (t, head); -inf past the last part."""
        if const_expr(self.pair):
            return mS[t, head] if const_expr(i == 0) else mS2[t, head]
        s_i = Float32(-math.inf)
        if i < num_states:
            s_i = mS[t, i, head]
        return s_i

    @cute.jit
    def v_row(self, mV, mV2, t: Int32, i: Int32, head: Int32):
        """Part i's (D,) row of (t, head)."""
        if const_expr(self.pair):
            return mV[t, head, None] if const_expr(i == 0) else mV2[t, head, None]
        return mV[t, i, head, None]


def compile_merge(key: MergeKey, extra_options: str = ""):
    """Compile the merge kernel of `key` for sm_90a (no GPU needed); returns the TVM-FFI function.

    Call it with torch tensors, no stream (torch's current stream):
      stack: fn(v (T, S, H, D), s (T, S, H), out (T, H, D), lse (T, H), span, tokens_per_cta, grid_x, grid_y)
      pair:  fn(v_a, s_a, v_b, s_b, out, lse, span, tokens_per_cta, grid_x, grid_y)
    with (grid_x, grid_y, span, tokens_per_cta) from `grid_shape`. The TVM-FFI entry checks ranks,
    dtypes, devices, unit last strides and shared extents; the caller checks the rest (the module
    docstring's contracts). `extra_options` is appended (e.g. "remarks{ptx}" prints ptxas usage).
    """
    kernel = MergeSm90(key)
    dt, vec = kernel.dtype, key.vec
    fake = cute.runtime.make_fake_tensor
    tokens, heads = cute.sym_int(), cute.sym_int()
    head_dim = cute.sym_int(divisibility=vec)

    def vstride():
        return cute.sym_int64(divisibility=vec)

    out = fake(dt, (tokens, heads, head_dim), (vstride(), vstride(), 1), assumed_align=16)
    lse = fake(Float32, (tokens, heads), (cute.sym_int64(), cute.sym_int64()), assumed_align=4)
    ints = (Int32(1), Int32(1), Int32(1), Int32(1))
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    options = (f"--enable-tvm-ffi --gpu-arch {key.arch} " + extra_options).strip()
    if kernel.pair:
        v_a = fake(dt, (tokens, heads, head_dim), (vstride(), vstride(), 1), assumed_align=16)
        v_b = fake(dt, (tokens, heads, head_dim), (vstride(), vstride(), 1), assumed_align=16)
        s_a = fake(Float32, (tokens, heads), (cute.sym_int64(), cute.sym_int64()), assumed_align=4)
        s_b = fake(Float32, (tokens, heads), (cute.sym_int64(), cute.sym_int64()), assumed_align=4)
        return cute.compile(kernel.call_pair, v_a, s_a, v_b, s_b, out, lse, *ints, stream, options=options)
    states = cute.sym_int()
    v = fake(dt, (tokens, states, heads, head_dim), (vstride(), vstride(), vstride(), 1), assumed_align=16)
    s = fake(Float32, (tokens, states, heads), (cute.sym_int64(), cute.sym_int64(), cute.sym_int64()), assumed_align=4)
    return cute.compile(kernel, v, s, out, lse, *ints, stream, options=options)
