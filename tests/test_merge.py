"""ragged_attn.merge_state / merge_states (FlashInfer's cascade merge) against the float64 oracle.

Every case draws fresh random inputs (a seed per case, so a failure reproduces); the oracle
(ragged_attn.merge.merge_states_reference) is itself checked against a scalar Python loop.
Split attention: ragged_attn.attention over two key parts, merged, against the unsplit call.
"""

from __future__ import annotations

import math

import pytest
import torch

import ragged_attn
from ragged_attn.compat import flashinfer as fi
from ragged_attn.merge import merge_states_reference

INF = math.inf
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _rand_state(gen, t, n, h, d, dtype, spread=4.0, center=0.0):
    v = torch.randn(t, n, h, d, generator=gen).to(dtype)
    s = (torch.randn(t, n, h, generator=gen) * spread + center).float()
    return v, s


def _tolerance(dtype):
    # The result is float32 math rounded once to dtype: half an ulp of dtype plus float32 noise.
    eps = {torch.float32: 2**-22, torch.bfloat16: 2**-8, torch.float16: 2**-11}[dtype]
    return {"rtol": eps, "atol": 4e-6 if dtype == torch.float32 else eps}


def _check(v_ours, s_ours, v_ref, s_ref, dtype):
    assert s_ours.dtype == torch.float32
    assert v_ours.dtype == dtype
    torch.testing.assert_close(v_ours.double(), v_ref, equal_nan=True, **_tolerance(dtype))
    torch.testing.assert_close(s_ours.double(), s_ref, rtol=2e-6, atol=2e-6, equal_nan=True)


def test_reference_matches_a_scalar_loop():
    gen = torch.Generator().manual_seed(7)
    for lse_base in ("log2", "ln"):
        v, s = _rand_state(gen, 3, 4, 2, 5, torch.float64)
        s[0, :, 0] = -INF  # a row with no key
        s[1, 2, 1] = -INF  # one empty part
        o_ref, l_ref = merge_states_reference(v, s, lse_base=lse_base)
        exp = (lambda x: 2.0**x) if lse_base == "log2" else math.exp
        log = math.log2 if lse_base == "log2" else math.log
        for t in range(3):
            for h in range(2):
                parts = [i for i in range(4) if s[t, i, h] != -INF]
                if not parts:
                    assert l_ref[t, h] == -INF and (o_ref[t, h] == 0).all()
                    continue
                total = math.fsum(exp(float(s[t, i, h])) for i in parts)
                assert abs(float(l_ref[t, h]) - log(total)) < 1e-12
                for j in range(5):
                    want = math.fsum(exp(float(s[t, i, h])) / total * float(v[t, i, h, j]) for i in parts)
                    assert abs(float(o_ref[t, h, j]) - want) < 1e-12


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("lse_base", ["log2", "ln"])
@pytest.mark.parametrize("seed", [1, 2])
def test_merge_state_matches_reference(dtype, lse_base, seed):
    gen = torch.Generator().manual_seed(seed)
    t, h, d = 37, 5, 24 + 8 * seed
    v, s = _rand_state(gen, t, 2, h, d, dtype)
    v_a, v_b, s_a, s_b = v[:, 0].clone(), v[:, 1].clone(), s[:, 0].clone(), s[:, 1].clone()
    inputs = [x.clone() for x in (v_a, s_a, v_b, s_b)]
    v_m, s_m = ragged_attn.merge_state(v_a, s_a, v_b, s_b, lse_base=lse_base)
    assert v_m.shape == (t, h, d) and s_m.shape == (t, h)
    _check(v_m, s_m, *merge_states_reference(v, s, lse_base=lse_base), dtype)
    for x, before in zip((v_a, s_a, v_b, s_b), inputs):
        assert torch.equal(x, before), "inputs are only read"


def test_default_base_is_log2_as_in_flashinfer():
    gen = torch.Generator().manual_seed(3)
    v, s = _rand_state(gen, 9, 2, 3, 16, torch.float32)
    v2, s2 = ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1])
    v_ref, s_ref = merge_states_reference(v, s, lse_base="log2")
    _check(v2, s2, v_ref, s_ref, torch.float32)
    # The same state read as natural-log LSEs merges differently (unless the parts are equal).
    v_ln, _ = ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1], lse_base="ln")
    assert not torch.allclose(v_ln, v2, atol=1e-3)
    # ln and log2 agree once the LSE is converted: s_ln = s_log2 * ln 2.
    v_c, s_c = ragged_attn.merge_state(v[:, 0], s[:, 0] * math.log(2), v[:, 1], s[:, 1] * math.log(2), lse_base="ln")
    torch.testing.assert_close(v_c, v2, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s_c / math.log(2), s2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lse_base", ["log2", "ln"])
def test_merge_is_stable_for_large_lse(lse_base):
    """LSEs of +-1e4 (exp would overflow / underflow in float32 without the max subtraction)."""
    gen = torch.Generator().manual_seed(11)
    v, s = _rand_state(gen, 64, 3, 4, 32, torch.float32, spread=3.0, center=1e4)
    s[:, 1] -= 2e4  # part 1 around -1e4: its weight is 0 in float32, exactly as in float64
    v_m, s_m = ragged_attn.merge_states(v, s, lse_base=lse_base)
    assert torch.isfinite(v_m).all() and torch.isfinite(s_m).all()
    v_ref, s_ref = merge_states_reference(v, s, lse_base=lse_base)
    torch.testing.assert_close(v_m.double(), v_ref, rtol=2**-22, atol=4e-6)
    torch.testing.assert_close(s_m.double(), s_ref, rtol=2e-7, atol=0.0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("states", [0, 1, 2, 3, 17])
@pytest.mark.parametrize("lse_base", ["log2", "ln"])
def test_merge_states_matches_reference(dtype, states, lse_base):
    gen = torch.Generator().manual_seed(100 + states)
    t, h, d = 21, 3, 40
    v, s = _rand_state(gen, t, states, h, d, dtype)
    if states:
        s[torch.rand(s.shape, generator=gen) < 0.2] = -INF  # empty parts here and there
        s[0] = -INF  # token 0: no key in any part
    v_m, s_m = ragged_attn.merge_states(v, s, lse_base=lse_base)
    assert v_m.shape == (t, h, d) and s_m.shape == (t, h)
    _check(v_m, s_m, *merge_states_reference(v, s, lse_base=lse_base), dtype)
    assert (v_m[0] == 0).all() and (s_m[0] == -INF).all()
    if states == 0:
        assert (v_m == 0).all() and (s_m == -INF).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_merge_states_of_two_equals_merge_state_and_merging_is_associative(dtype):
    gen = torch.Generator().manual_seed(5)
    v, s = _rand_state(gen, 30, 3, 4, 16, torch.float32)
    v = v.to(dtype)
    two_v, two_s = ragged_attn.merge_states(v[:, :2], s[:, :2])
    one_v, one_s = ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1])
    assert torch.equal(two_v, one_v) and torch.equal(two_s, one_s)
    # ((a, b), c) == (a, b, c) up to rounding (the intermediate is rounded to dtype).
    if dtype == torch.float32:
        abc_v, abc_s = ragged_attn.merge_state(one_v, one_s, v[:, 2], s[:, 2])
        all_v, all_s = ragged_attn.merge_states(v, s)
        torch.testing.assert_close(abc_v, all_v, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(abc_s, all_s, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_minus_inf_parts(dtype):
    """-inf parts are skipped (v not read, NaN there stays out); all -inf: O = 0, LSE = -inf."""
    gen = torch.Generator().manual_seed(21)
    v, s = _rand_state(gen, 12, 2, 3, 8, dtype)
    s[0:4, 0] = -INF  # only b
    s[4:8, 1] = -INF  # only a
    s[8:12] = -INF  # neither
    v[0:4, 0] = math.nan  # garbage where no key was seen
    v[4:8, 1] = math.inf
    v[8:12] = math.nan
    v_m, s_m = ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1])
    assert torch.equal(v_m[0:4], v[0:4, 1]) and torch.equal(s_m[0:4], s[0:4, 1])  # weight exactly 1
    assert torch.equal(v_m[4:8], v[4:8, 0]) and torch.equal(s_m[4:8], s[4:8, 0])
    assert (v_m[8:12] == 0).all() and (s_m[8:12] == -INF).all()
    # merge_states, with one and with three states: the same rules.
    for n in (1, 3):
        vv = torch.full((5, n, 3, 8), math.nan, dtype=dtype)
        ss = torch.full((5, n, 3), -INF)
        vm, sm = ragged_attn.merge_states(vv, ss)
        assert (vm == 0).all() and (sm == -INF).all()


@pytest.mark.parametrize("bad", [math.nan, INF])
def test_nan_or_plus_inf_lse_makes_that_row_nan(bad):
    gen = torch.Generator().manual_seed(31)
    v, s = _rand_state(gen, 6, 3, 2, 8, torch.bfloat16)
    s[2, 1, 0] = bad
    s[4, :, 1] = -INF
    s[4, 0, 1] = bad  # the other parts -inf: still NaN
    v_m, s_m = ragged_attn.merge_states(v, s)
    nan_rows = torch.zeros(6, 2, dtype=torch.bool)
    nan_rows[2, 0] = nan_rows[4, 1] = True
    assert torch.isnan(s_m[nan_rows]).all() and torch.isnan(v_m[nan_rows].float()).all()
    assert torch.isfinite(s_m[~nan_rows]).all() and torch.isfinite(v_m[~nan_rows].float()).all()
    _check(v_m, s_m, *merge_states_reference(v, s), torch.bfloat16)
    v2, s2 = ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1])  # the two-part form too
    row = torch.isnan(s[:, 0]) | torch.isnan(s[:, 1]) | (s[:, 0] == INF) | (s[:, 1] == INF)
    assert torch.isnan(s2[row]).all() and torch.isfinite(s2[~row]).all()
    assert torch.isnan(v2[row].float()).all() and torch.isfinite(v2[~row].float()).all()


def test_nan_in_v_of_a_seen_part_propagates_to_its_column_only():
    gen = torch.Generator().manual_seed(41)
    v, s = _rand_state(gen, 4, 2, 2, 8, torch.float32)
    v[1, 0, 1, 3] = math.nan
    s[3, 0, 0] = s[3, 1, 0] - 400.0  # part 0 of token 3 underflows to weight 0 ...
    v[3, 0, 0, 5] = math.nan  # ... and its NaN still propagates (0 * NaN)
    v_m, s_m = ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1])
    nan = torch.isnan(v_m)
    assert nan[1, 1, 3] and nan[3, 0, 5] and nan.sum() == 2
    assert torch.isfinite(s_m).all()
    _check(v_m, s_m, *merge_states_reference(v, s), torch.float32)


def test_strided_inputs_and_head_major_lse():
    gen = torch.Generator().manual_seed(51)
    v, s = _rand_state(gen, 10, 2, 4, 16, torch.bfloat16)
    want = ragged_attn.merge_state(v[:, 0].contiguous(), s[:, 0].contiguous(), v[:, 1].contiguous(), s[:, 1].contiguous())
    s_a_head_major = s[:, 0].t().contiguous()  # (H, T) as FlashAttention returns it
    got = ragged_attn.merge_state(v[:, 0], s_a_head_major.t(), v[:, 1], s[:, 1])
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    vt = v.transpose(0, 1).contiguous().transpose(0, 1)  # (T, S, H, D) view with states outermost
    got = ragged_attn.merge_states(vt, s)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_empty_extents_and_meta_tensors():
    for t, h, d in ((0, 3, 8), (4, 0, 8), (4, 3, 0)):
        v, s = torch.randn(t, 2, h, d), torch.randn(t, 2, h)
        vm, sm = ragged_attn.merge_states(v, s)
        assert vm.shape == (t, h, d) and sm.shape == (t, h)
        vm, sm = ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1])
        assert vm.shape == (t, h, d) and sm.shape == (t, h)
    v = torch.empty(7, 3, 2, 16, dtype=torch.bfloat16, device="meta")
    s = torch.empty(7, 3, 2, dtype=torch.float32, device="meta")
    vm, sm = ragged_attn.merge_states(v, s)
    assert vm.shape == (7, 2, 16) and vm.dtype == torch.bfloat16 and vm.device.type == "meta"
    assert sm.shape == (7, 2) and sm.dtype == torch.float32


def test_flashinfer_import_path_reexports():
    assert fi.merge_state is ragged_attn.merge_state and fi.merge_states is ragged_attn.merge_states
    from ragged_attn.compat.flashinfer import merge_state, merge_states  # FlashInfer's names

    assert callable(merge_state) and callable(merge_states)


# --- bad inputs: a named TypeError / ValueError, inputs untouched --------------------------------


def _good_pair():
    return (torch.randn(4, 2, 8, dtype=torch.bfloat16), torch.randn(4, 2),
            torch.randn(4, 2, 8, dtype=torch.bfloat16), torch.randn(4, 2))  # fmt: skip


MERGE_STATE_BAD = [
    ("v_a", TypeError, lambda a: (a[0].float().numpy(), *a[1:])),
    ("v_a", ValueError, lambda a: (a[0][None], *a[1:])),
    ("v_a", TypeError, lambda a: (a[0].to(torch.int32), a[1], a[2].to(torch.int32), a[3])),
    ("v_a", TypeError, lambda a: (a[0].double(), a[1], a[2].double(), a[3])),
    ("v_b", TypeError, lambda a: (a[0], a[1], a[2].half(), a[3])),
    ("v_b", ValueError, lambda a: (a[0], a[1], a[2][:, :, :4], a[3])),
    ("v_b", ValueError, lambda a: (a[0], a[1], a[2][:3], a[3])),
    ("s_a", TypeError, lambda a: (a[0], a[1].bfloat16(), *a[2:])),
    ("s_a", TypeError, lambda a: (a[0], a[1].double(), *a[2:])),
    ("s_a", ValueError, lambda a: (a[0], a[1].t().contiguous(), *a[2:])),  # (H, T): pass lse.t()
    ("s_a", ValueError, lambda a: (a[0], a[1][..., None], *a[2:])),
    ("s_b", ValueError, lambda a: (*a[:3], a[3][:2])),
    ("s_b", TypeError, lambda a: (*a[:3], None)),
    ("s_b", ValueError, lambda a: (*a[:3], a[3].to("meta"))),
    ("v_b", ValueError, lambda a: (a[0], a[1], a[2].to("meta"), a[3])),
]


@pytest.mark.parametrize("name, error, mutate", MERGE_STATE_BAD, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(MERGE_STATE_BAD)])
def test_merge_state_bad_inputs_are_named(name, error, mutate):
    args = mutate(_good_pair())
    before = [x.clone() if isinstance(x, torch.Tensor) and x.device.type != "meta" else None for x in args]
    with pytest.raises(error, match=rf"^{name}: "):
        ragged_attn.merge_state(*args)
    for x, b in zip(args, before):
        if b is not None:
            assert torch.equal(x, b)


@pytest.mark.parametrize("base", ["e", "log10", None, 2, "LOG2"])
def test_bad_lse_base_is_named(base):
    a = _good_pair()
    with pytest.raises(ValueError, match=r"^lse_base: "):
        ragged_attn.merge_state(*a, lse_base=base)
    with pytest.raises(ValueError, match=r"^lse_base: "):
        ragged_attn.merge_states(torch.stack([a[0], a[2]], 1), torch.stack([a[1], a[3]], 1), lse_base=base)


MERGE_STATES_BAD = [
    ("v", ValueError, lambda v, s: (v[:, 0], s)),  # 3-D: that is merge_state's shape
    ("v", TypeError, lambda v, s: (v.to(torch.int8), s)),
    ("v", TypeError, lambda v, s: ([v], s)),
    ("s", ValueError, lambda v, s: (v, s[:, :1])),
    ("s", ValueError, lambda v, s: (v, s.transpose(1, 2))),
    ("s", ValueError, lambda v, s: (v, s[:, 0])),
    ("s", TypeError, lambda v, s: (v, s.half())),
    ("s", ValueError, lambda v, s: (v, s.to("meta"))),
]


@pytest.mark.parametrize("name, error, mutate", MERGE_STATES_BAD, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(MERGE_STATES_BAD)])
def test_merge_states_bad_inputs_are_named(name, error, mutate):
    v, s = torch.randn(4, 3, 2, 8, dtype=torch.float16), torch.randn(4, 3, 2)
    with pytest.raises(error, match=rf"^{name}: "):
        ragged_attn.merge_states(*mutate(v, s))


# --- split attention merges back to the unsplit one ----------------------------------------------


def _split_case(gen, lens_q, lens_k, splits, h_q, h_kv, d, dtype):
    cu_q = torch.tensor([0] + lens_q, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    cu_k = torch.tensor([0] + lens_k, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    q = torch.randn(int(cu_q[-1]), h_q, d, generator=gen).to(dtype)
    k = torch.randn(int(cu_k[-1]), h_kv, d, generator=gen).to(dtype)
    v = torch.randn(int(cu_k[-1]), h_kv, d, generator=gen).to(dtype)
    # Part A: each sequence's first `split` keys; part B: the rest.
    idx_a = torch.cat([torch.arange(int(cu_k[i]), int(cu_k[i]) + sp) for i, sp in enumerate(splits)])
    idx_b = torch.cat([torch.arange(int(cu_k[i]) + sp, int(cu_k[i + 1])) for i, sp in enumerate(splits)])
    cu_a = torch.tensor([0] + splits, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    cu_b = torch.tensor([0] + [lk - sp for lk, sp in zip(lens_k, splits)], dtype=torch.int32).cumsum(0, dtype=torch.int32)
    return q, k, v, cu_q, cu_k, (k[idx_a], v[idx_a], cu_a), (k[idx_b], v[idx_b], cu_b)


SPLITS = [  # lens_q, lens_k, split points (keys in part A); 0 and lk make one part empty
    ([5, 0, 9, 1], [12, 7, 20, 33], [4, 3, 0, 33]),
    ([16, 3], [16, 40], [8, 1]),
]


@pytest.mark.parametrize("lse_base", ["log2", "ln"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", range(len(SPLITS)))
def test_split_attention_merges_back(lse_base, causal, dtype, case):
    lens_q, lens_k, splits = SPLITS[case]
    if causal:  # cascade: the prefix is visible to every query, the suffix is causal (bottom-right)
        splits = [min(sp, lk - lq) if lq else sp for sp, lq, lk in zip(splits, lens_q, lens_k)]
    gen = torch.Generator().manual_seed(1000 + case + 10 * causal)
    q, k, v, cu_q, cu_k, (k_a, v_a, cu_a), (k_b, v_b, cu_b) = _split_case(gen, lens_q, lens_k, splits, 8, 2, 32, dtype)
    kw = {"return_lse": True, "lse_layout": "token_major", "lse_base": lse_base, "backend": "reference"}
    mq = max(lens_q)
    o_full, s_full = ragged_attn.attention(q, k, v, cu_q, cu_k, mq, max(lens_k), causal=causal, **kw)
    o_a, s_a = ragged_attn.attention(q, k_a, v_a, cu_q, cu_a, mq, max(splits), causal=False, **kw)
    o_b, s_b = ragged_attn.attention(q, k_b, v_b, cu_q, cu_b, mq, max(int(x) for x in cu_b.diff()), causal=causal, **kw)
    for merge in (ragged_attn.merge_state, fi.merge_state):
        o_m, s_m = merge(o_a, s_a, o_b, s_b, lse_base=lse_base)
        assert o_m.dtype == dtype and s_m.dtype == torch.float32
        # The parts are rounded to dtype before merging: a bf16 merge differs from the unsplit call
        # by a few bf16 ulps, a float32 one by float32 noise.
        tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2**-6, "atol": 2**-6}
        torch.testing.assert_close(o_m, o_full, **tol)
        torch.testing.assert_close(s_m, s_full, rtol=1e-5, atol=1e-5)
    # The same through merge_states, with the parts stacked on dim 1.
    o_n, s_n = ragged_attn.merge_states(torch.stack([o_a, o_b], 1), torch.stack([s_a, s_b], 1), lse_base=lse_base)
    assert torch.equal(o_n, o_m) and torch.equal(s_n, s_m)


def test_split_attention_in_three_parts_with_head_major_lse():
    """FlashAttention's layout (H, T) and natural-log LSE, three key parts, merge_states."""
    gen = torch.Generator().manual_seed(77)
    lens_q, lens_k = [7, 4], [30, 9]
    q, k, v, cu_q, cu_k, _, _ = _split_case(gen, lens_q, lens_k, [0, 0], 4, 4, 16, torch.float32)
    o_full, s_full = ragged_attn.attention(q, k, v, cu_q, cu_k, 7, 30, return_lse=True, backend="reference")
    bounds = [[0, 10, 21, 30], [0, 0, 5, 9]]  # per sequence: part p is keys [b[p], b[p+1])
    outs, lses = [], []
    for p in range(3):
        idx = torch.cat([torch.arange(int(cu_k[i]) + b[p], int(cu_k[i]) + b[p + 1]) for i, b in enumerate(bounds)])
        cu_p = torch.tensor([0] + [b[p + 1] - b[p] for b in bounds], dtype=torch.int32).cumsum(0, dtype=torch.int32)
        o, s = ragged_attn.attention(q, k[idx], v[idx], cu_q, cu_p, 7, 30, return_lse=True, backend="reference")
        outs.append(o)
        lses.append(s.t())  # head-major (H, T) -> (T, H)
    o_m, s_m = ragged_attn.merge_states(torch.stack(outs, 1), torch.stack(lses, 1), lse_base="ln")
    torch.testing.assert_close(o_m, o_full, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s_m, s_full.t(), rtol=1e-5, atol=1e-5)


def test_torch_compile_fullgraph_traces_the_merge():
    import torch._dynamo

    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(61)
    v, s = _rand_state(gen, 8, 3, 2, 16, torch.bfloat16)
    s[0] = -INF
    compiled = torch.compile(lambda v, s: ragged_attn.merge_states(v, s, lse_base="ln"), fullgraph=True)
    v_c, s_c = compiled(v, s)
    v_e, s_e = ragged_attn.merge_states(v, s, lse_base="ln")
    assert (v_c[0] == 0).all() and (s_c[0] == -INF).all()
    torch.testing.assert_close(v_c, v_e, rtol=2**-8, atol=2**-8)  # inductor may fuse in another order
    torch.testing.assert_close(s_c, s_e, rtol=1e-6, atol=1e-6)
    torch._dynamo.reset()


# --- caller's output buffers (out=, s_out=) ---------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("states", [0, 1, 2, 5])
def test_merge_states_writes_callers_buffers_strided_or_not(dtype, states):
    """out / s_out (a ragged_attn extension, for split-KV's combine) take the same result as the
    fresh tensors, in any strides; only the buffers are written."""
    gen = torch.Generator().manual_seed(71 + states)
    v, s = _rand_state(gen, 6, states, 3, 16, dtype)
    s[0, :, 1] = -INF  # a row with no key in any state
    want_v, want_s = ragged_attn.merge_states(v, s)
    big = torch.full((6, 3, 32), 7.0).to(dtype)
    out = big[:, :, ::2]  # strided: every other column
    s_big = torch.full((3, 6), 7.0)
    s_out = s_big.t()  # head-major storage seen as (tokens, heads)
    got_v, got_s = ragged_attn.merge_states(v, s, out=out, s_out=s_out)
    assert got_v is out and got_s is s_out
    assert torch.equal(out, want_v) and torch.equal(s_out, want_s)
    assert (big[:, :, 1::2] == 7.0).all()  # the columns between are untouched
    got_v, got_s = ragged_attn.merge_states(v, s, out=torch.empty_like(want_v))  # out alone
    assert torch.equal(got_v, want_v) and torch.equal(got_s, want_s)


@pytest.mark.parametrize("dtype", DTYPES)
def test_merge_state_writes_callers_buffers(dtype):
    gen = torch.Generator().manual_seed(72)
    v, s = _rand_state(gen, 5, 2, 4, 8, dtype)
    want = ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1], lse_base="ln")
    out, s_out = torch.full((5, 4, 8), math.nan).to(dtype), torch.full((5, 4), math.nan)
    got = ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1], lse_base="ln", out=out, s_out=s_out)
    assert got[0] is out and got[1] is s_out
    assert torch.equal(out, want[0]) and torch.equal(s_out, want[1])
    got = ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1], lse_base="ln", s_out=torch.empty(5, 4))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def _bad_buffers():
    v, s = torch.randn(4, 3, 2, 8, dtype=torch.float16), torch.randn(4, 3, 2)
    return v, s, torch.zeros(4, 2, 8, dtype=torch.float16), torch.zeros(4, 2)


BAD_BUFFERS = [
    ("out", TypeError, lambda v, s, o, l_: (o.float(), l_)),
    ("out", ValueError, lambda v, s, o, l_: (o[:3], l_)),
    ("out", ValueError, lambda v, s, o, l_: (o[:, :1].expand(4, 2, 8), l_)),  # elements share memory
    ("out", ValueError, lambda v, s, o, l_: (o.to("meta"), l_)),
    ("out", ValueError, lambda v, s, o, l_: (v[:, 0], l_)),  # state 0 of v itself
    ("out", TypeError, lambda v, s, o, l_: ([o], l_)),
    ("s_out", TypeError, lambda v, s, o, l_: (o, l_.double())),
    ("s_out", ValueError, lambda v, s, o, l_: (o, l_.t())),
    ("s_out", ValueError, lambda v, s, o, l_: (o, s[:, 1])),  # state 1 of s
    ("s_out", ValueError, lambda v, s, o, l_: (o, o.view(torch.float32)[:, :, :1].reshape(4, 2))),  # inside out
]


@pytest.mark.parametrize("name, error, mutate", BAD_BUFFERS, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD_BUFFERS)])
def test_bad_output_buffers_are_named_and_nothing_is_written(name, error, mutate):
    v, s, o, l_ = _bad_buffers()
    out, s_out = mutate(v, s, o, l_)
    before = [x.clone() for x in (v, s, o, l_)]
    with pytest.raises(error, match=rf"^{name}: "):
        ragged_attn.merge_states(v, s, out=out, s_out=s_out)
    with pytest.raises(error, match=rf"^{name}: "):
        ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1], out=out, s_out=s_out)
    for x, b in zip((v, s, o, l_), before):
        assert torch.equal(x, b)


def test_buffers_torch_cannot_write_in_place_are_refused_before_anything_is_written():
    """A grad-requiring s_out in grad mode and an inference tensor outside inference mode: named,
    and out (checked first, valid) stays unwritten (found by a breaking session, 2026-12-03: out was
    written, then torch raised on s_out)."""
    v, s = torch.randn(3, 2, 2, 4), torch.randn(3, 2, 2)
    out = torch.zeros(3, 2, 4)
    with pytest.raises(ValueError, match=r"^s_out: .*requires_grad"):
        ragged_attn.merge_states(v, s, out=out, s_out=torch.zeros(3, 2, requires_grad=True))
    with pytest.raises(ValueError, match=r"^out: .*requires_grad"):
        ragged_attn.merge_state(v[:, 0], s[:, 0], v[:, 1], s[:, 1], out=torch.nn.Parameter(torch.zeros(3, 2, 4)))
    with torch.inference_mode():
        frozen = torch.zeros(3, 2)
    with pytest.raises(ValueError, match=r"^s_out: .*inference"):
        ragged_attn.merge_states(v, s, out=out, s_out=frozen)
    assert (out == 0).all()
    with torch.no_grad():  # not recorded: a grad-requiring leaf may be written
        leaf = torch.zeros(3, 2, requires_grad=True)
        got_v, got_s = ragged_attn.merge_states(v, s, out=out, s_out=leaf)
    want_v, want_s = ragged_attn.merge_states(v, s)
    assert got_s is leaf and torch.equal(leaf.detach(), want_s) and torch.equal(out, want_v)


def test_torch_compile_fullgraph_traces_the_merge_into_buffers():
    v, s = torch.randn(3, 2, 2, 4), torch.randn(3, 2, 2)

    def f(v, s, o, so):
        return ragged_attn.merge_states(v, s, out=o, s_out=so)

    o, so = torch.empty(3, 2, 4), torch.empty(3, 2)
    torch.compile(f, fullgraph=True, backend="aot_eager")(v, s, o, so)
    want_v, want_s = ragged_attn.merge_states(v, s)
    torch.testing.assert_close(o, want_v)
    torch.testing.assert_close(so, want_s)


def test_torch_compile_dynamic_shapes_merge_into_buffers_of_new_token_counts():
    """dynamic=True (and a second token count, which recompiles dynamically without it): the
    self-overlap check of out / s_out sorted symbolic strides and failed to trace (session 21's
    adversarial pass); it is an eager-only check now, as the span tests already were."""

    def f(a, sa, b, sb, o, so):
        return ragged_attn.merge_state(a, sa, b, sb, out=o, s_out=so)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=True)
    for t in (6, 9):
        a, b, sa, sb = torch.randn(t, 2, 8), torch.randn(t, 2, 8), torch.randn(t, 2), torch.randn(t, 2)
        o, so = torch.full((t, 2, 8), float("nan")), torch.full((t, 2), float("nan"))
        with torch.no_grad():
            compiled(a, sa, b, sb, o, so)
        want_v, want_s = ragged_attn.merge_state(a, sa, b, sb)
        torch.testing.assert_close(o, want_v)
        torch.testing.assert_close(so, want_s)
