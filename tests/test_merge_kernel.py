"""The fused merge kernel (ragged_attn/kernels/merge_sm90.py) without a GPU: which calls
merge_state / merge_states send to it (CPU tensors stand in for CUDA ones through merge._on_cuda),
its launch geometry, and its sm_90a compile (CUTE_DSL_ARCH=sm_90a, ptxas: no spills).
On the GPU: tests/gpu/test_merge_gpu.py."""

from __future__ import annotations

import math
import os
import re

import pytest
import torch

import ragged_attn
from ragged_attn import merge

INF = math.inf


@pytest.fixture
def as_cuda(monkeypatch):
    """CPU tensors pass for CUDA tensors of an sm_90 GPU with the CuTe DSL installed; the kernel
    launch is replaced by a spy that records the form and answers with the torch path."""
    calls = []

    def fake_kernel(form, args, v0, lse_base, out=None, lse=None):
        calls.append(form)
        if form == "pair":
            v_a, s_a, v_b, s_b = args
            return merge._combine([v_a, v_b], torch.stack([s_a, s_b], 1), lse_base, v0.dtype)
        v, s = args
        return merge._combine(list(v.unbind(1)), s, lse_base, v0.dtype)

    monkeypatch.setattr(merge, "_on_cuda", lambda x: True)
    monkeypatch.setattr(merge, "_is_sm90", lambda device: True)
    monkeypatch.setattr(merge, "_kernel_unavailable", lambda: None)
    monkeypatch.setattr(merge, "_merge_kernel", fake_kernel)
    monkeypatch.delenv(merge.KERNEL_ENV, raising=False)
    return calls


def _pair(t=5, h=3, d=16, dtype=torch.bfloat16):
    v = torch.randn(t, 2, h, d).to(dtype)
    s = torch.randn(t, 2, h)
    return v, s


def test_cpu_tensors_never_reach_the_kernel(monkeypatch):
    def no_kernel(*a, **k):
        raise AssertionError("the kernel was chosen for CPU tensors")

    monkeypatch.setattr(merge, "_merge_kernel", no_kernel)
    v, s = _pair()
    ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1])
    ragged_attn.merge_states(v, s)


def test_cuda_inputs_the_kernel_handles_go_to_it(as_cuda):
    v, s = _pair()
    got = ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1])
    assert as_cuda == ["pair"]
    got_n = ragged_attn.merge_states(v, s)
    assert as_cuda == ["pair", "stack"]
    assert torch.equal(got[0], got_n[0]) and torch.equal(got[1], got_n[1])
    # Strided inputs within the contract: a head-major LSE view, states outermost, a padded D.
    ragged_attn.merge_state(v[:, 0], s[:, 0].t().contiguous().t(), v[:, 1], s[:, 1])
    ragged_attn.merge_states(v.transpose(0, 1).contiguous().transpose(0, 1), s)
    wide = torch.randn(5, 2, 3, 24).bfloat16()
    ragged_attn.merge_states(wide[..., :16], s)
    assert as_cuda == ["pair", "stack", "pair", "stack", "stack"]


@pytest.mark.parametrize("dtype, d", [(torch.float32, 12), (torch.float16, 8), (torch.bfloat16, 136)], ids=str)
def test_every_kernel_dtype_and_head_dim_multiple_of_16_bytes(as_cuda, dtype, d):
    v, s = _pair(d=d, dtype=dtype)
    ragged_attn.merge_states(v, s)
    assert as_cuda == ["stack"]


def _misaligned(v):  # the same shape starting one element later: base not 16-byte aligned
    flat = torch.empty(v.numel() + 8, dtype=v.dtype)
    out = flat[1 : 1 + v.numel()].view(v.shape)
    out.copy_(v)
    return out


FALLBACKS = [  # (why, builds merge_states' (v, s) from a good bf16 pair)
    ("D not a multiple of 8 (bf16)", lambda v, s: (v[..., :12], s)),
    ("non-unit last stride", lambda v, s: (v.transpose(-1, -2).contiguous().transpose(-1, -2), s)),
    ("head stride not a multiple of 8", lambda v, s: (torch.randn(5, 2, 3, 20).bfloat16()[..., :16], s)),
    ("token stride not a multiple of 8", lambda v, s: (torch.randn(5, 100).bfloat16()[:, :96].view(5, 2, 3, 16), s)),
    ("state stride not a multiple of 8", lambda v, s: (torch.randn(5, 2, 52).bfloat16()[..., :48].view(5, 2, 3, 16), s)),
    ("base not 16-byte aligned", lambda v, s: (_misaligned(v), s)),
    ("no tokens", lambda v, s: (v[:0], s[:0])),
    ("no heads", lambda v, s: (v[:, :, :0], s[:, :, :0])),
]


@pytest.mark.parametrize("why, make", FALLBACKS, ids=[f[0] for f in FALLBACKS])
def test_layouts_outside_the_contract_take_the_torch_path(as_cuda, why, make):
    v, s = make(*_pair())
    got = ragged_attn.merge_states(v, s)
    assert as_cuda == [], why
    want = ragged_attn.merge_states(v.contiguous(), s.contiguous()) if v.numel() else got
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_the_env_switch_grad_and_other_gpus_take_the_torch_path(as_cuda, monkeypatch):
    v, s = _pair()
    monkeypatch.setenv(merge.KERNEL_ENV, "0")
    ragged_attn.merge_states(v, s)
    monkeypatch.setenv(merge.KERNEL_ENV, "1")
    ragged_attn.merge_states(v, s)
    assert as_cuda == ["stack"]
    s_grad = s.clone().requires_grad_()
    out, _ = ragged_attn.merge_states(v, s_grad)
    assert out.requires_grad and as_cuda == ["stack"]  # autograd records the torch path
    with torch.no_grad():
        ragged_attn.merge_states(v, s_grad)
    assert as_cuda == ["stack", "stack"]
    monkeypatch.setattr(merge, "_is_sm90", lambda device: False)
    ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1])
    monkeypatch.setattr(merge, "_is_sm90", lambda device: True)
    monkeypatch.setattr(merge, "_kernel_unavailable", lambda: "no CuTe DSL")
    ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1])
    assert as_cuda == ["stack", "stack"]


def test_merge_state_needs_both_parts_in_the_contract(as_cuda):
    v, s = _pair()
    ragged_attn.merge_state(v[:, 0], s[:, 0], _misaligned(v[:, 1].contiguous()), s[:, 1])
    assert as_cuda == []


def test_errors_come_before_the_dispatch(as_cuda):
    v, s = _pair()
    with pytest.raises(ValueError, match="^lse_base: "):
        ragged_attn.merge_states(v, s, lse_base="e")
    with pytest.raises(TypeError, match="^s: "):
        ragged_attn.merge_states(v, s.half())
    assert as_cuda == []


# --- the kernel's arithmetic, mirrored in torch float32 (the order merge_sm90.merge_row uses) ----


def _kernel_math(v, s, lse_base):
    """O = (sum_i w_i v_i) * (1 / sum_i w_i), w_i = 2^((s_i - m) c), skipping -inf parts."""
    c, back = (1.0, 1.0) if lse_base == "log2" else (1 / math.log(2), math.log(2))
    t, n, h, d = v.shape
    m = torch.full((t, h), -INF)
    bad = torch.zeros((t, h), dtype=torch.bool)
    for i in range(n):
        bad |= torch.isnan(s[:, i]) | (s[:, i] == INF)
        m = torch.fmax(m, s[:, i])
    acc = torch.zeros((t, h, d))
    total = torch.zeros((t, h))
    for i in range(n):
        seen = (s[:, i] != -INF) & ~bad
        w = torch.where(seen, torch.exp2((s[:, i] - m) * c), 0.0)
        acc = torch.where(seen[..., None], acc + w[..., None] * v[:, i].float(), acc)
        total = total + w
    inv = torch.where(total > 0, 1.0 / total, 0.0)
    out = torch.where(bad[..., None], math.nan, acc * inv[..., None])
    lse = torch.where(bad, math.nan, m + torch.log2(total) * back)
    return out.to(v.dtype), lse


@pytest.mark.parametrize("lse_base", ["log2", "ln"])
def test_the_kernels_arithmetic_keeps_the_non_finite_rules(lse_base):
    gen = torch.Generator().manual_seed(3)
    v = torch.randn(16, 3, 2, 8, generator=gen)
    s = torch.randn(16, 3, 2, generator=gen) * 4
    s[0] = -INF  # no key
    s[1, 0] = -INF
    v[1, 0] = math.nan  # not read
    s[2, 1, 0] = math.nan
    s[3, 2, 1] = INF
    v[4, 1, 0, 3] = math.nan  # a seen part: propagates ...
    s[5, 0, 0] = s[5, 1, 0] - 400.0
    v[5, 0, 0, 2] = math.nan  # ... also through a weight that underflows to 0
    o, l = _kernel_math(v, s, lse_base)
    o_ref, l_ref = merge.merge_states_reference(v, s, lse_base=lse_base)
    torch.testing.assert_close(o.double(), o_ref, rtol=1e-6, atol=4e-6, equal_nan=True)
    torch.testing.assert_close(l.double(), l_ref, rtol=2e-6, atol=2e-6, equal_nan=True)
    assert (o[0] == 0).all() and (l[0] == -INF).all()


# --- launch geometry and the sm_90a compile (CuTe DSL on the CPU) ---------------------------------


def _kernel_module():
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # the compile also passes --gpu-arch sm_90a
    pytest.importorskip("cutlass.cute")
    from ragged_attn.kernels import merge_sm90

    return merge_sm90


@pytest.mark.parametrize("t, h, d, vec", [(32768, 32, 128, 8), (7, 1, 8, 8), (3, 5, 136, 8), (1000, 3, 12, 4), (2, 200, 256, 8)])
def test_grid_covers_every_item_once(t, h, d, vec):
    m = _kernel_module()
    gx, gy, span, tpc = m.grid_shape(t, h, d, vec, sm_count=132)
    items = h * d // vec
    assert 1 <= span <= m.THREADS and tpc == m.THREADS // span and gy * span >= items > (gy - 1) * span
    assert 1 <= gx <= -(-t // tpc) and gy <= 65535
    # The kernel's decode (tidx -> token offset, item) over every thread of every CTA.
    seen = torch.zeros(t, items, dtype=torch.int32)
    for by in range(gy):
        for tidx in range(m.THREADS):
            tok_off, item = tidx // span, by * span + tidx % span
            if tok_off < tpc and item < items:
                for bx in range(gx):
                    seen[bx * tpc + tok_off :: gx * tpc, item] += 1
    assert (seen == 1).all()


def test_merge_key_is_checked():
    m = _kernel_module()
    assert m.MergeKey("pair", "bf16", "log2").vec == 8 and m.MergeKey("stack", "fp32", "ln").vec == 4
    for bad in (("pairs", "bf16", "log2"), ("pair", "fp8", "log2"), ("pair", "bf16", "e"), ("pair", "bf16", "log2", "sm_80")):
        with pytest.raises(ValueError):
            m.MergeKey(*bad)


@pytest.mark.cute
@pytest.mark.parametrize("lse_base", ["log2", "ln"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("form", ["pair", "stack"])
def test_compiles_for_sm90a_without_spills(form, dtype, lse_base, tmp_path, capfd):
    m = _kernel_module()
    fn = m.compile_merge(m.MergeKey(form, dtype, lse_base), "remarks{ptx}")
    out, err = capfd.readouterr()
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out + err)
    regs = re.findall(r"Used (\d+) registers", out + err)
    assert spills and regs, "ptxas printed no usage report"
    assert all(a == "0" and b == "0" for a, b in spills), f"register spills: {spills}"
    assert all(int(r) <= 72 for r in regs), f"registers: {regs} (72 keeps 7 CTAs of 128 threads per SM)"
    obj = tmp_path / "merge.o"
    fn.export_to_c(str(obj), "merge")
    from cutlass import cute

    assert callable(cute.runtime.load_module(str(obj), enable_tvm_ffi=True).merge)
