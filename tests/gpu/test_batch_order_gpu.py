"""GPU tests of the batch order (tile_scheduler.py "Batch order", TileConfig.batch_order: a launch's
sequences dealt by key length, longest first, sorted in each CTA's prologue by forward.py
`sort_batch`): launch_forward(batch_order=True) and (batch_order=False) on the same inputs give
bit-identical outputs (each tile computes the same; only which CTA takes it and when changes),
both within the tolerance of the float32 reference, into NaN-poisoned caller buffers whose rows
outside every sequence stay NaN, under `torch.cuda.set_sync_debug_mode("error")`. Ragged and paged
K/V (page 16, NaN in unused pool slots), token-major and padded LSE (the padded layout takes the
per-sequence tile order, whose sequence index is mapped through the order too), row packing and
split-KV on top, empty sequences and seqused_q gaps, equal key lengths (ties keep the caller's
order), a batch past the cap (300 sequences: the caller's order), and the library's own choice
through `attention` and `Plan.run` on vLLM's mixed batch (split_kv.choose_batch_order takes it).

Run on an H200 (from the repository root):
    python -m pytest tests/gpu/test_batch_order_gpu.py -m gpu -q -p no:cacheprovider
"""

from __future__ import annotations

import math
import random

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (sm_90a)"),
]

from tests.gpu.test_kernel_sm90 import compiled_for  # noqa: E402


def _launch(case, batch_order, pack_rows=None, num_splits=1):
    """launch_forward of the case's class with batch_order (and optionally pack_rows, num_splits)
    forced, into NaN-poisoned caller buffers; returns (out, lse, valid rows, the reference)."""
    import ragged_attn
    from ragged_attn import backends
    from ragged_attn.kernels.sm90 import launch_forward
    from ragged_attn.problem import build_problem
    from tests.cases import valid_rows

    args, kwargs = case.make("cuda")
    problem, tensors = build_problem(*args, **kwargs, return_lse=True)
    lc = backends.layout_class_for(problem)
    assert lc.d_qk == case.d_qk
    fn = compiled_for(lc)
    q = args[0]
    total_q = q.shape[0]
    out = torch.full((total_q, case.h_q, case.d_v), math.nan, dtype=case.dtype, device="cuda")
    lse = torch.full(problem.lse_shape(), math.nan, device="cuda")
    kw = backends.kernel_arguments(problem, tensors._replace(out=out, lse=lse), out, lse)
    torch.cuda.set_sync_debug_mode("error")
    try:
        launch_forward(fn, **kw, num_splits=num_splits, pack_rows=pack_rows, batch_order=batch_order)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    want = ragged_attn.attention(*args, **kwargs, return_lse=True, backend="reference")
    return out, lse, valid_rows(case, args[3]), want


def _check_both_orders(case, pack_rows=None, num_splits=1):
    from tests.cases import close

    got = {order: _launch(case, order, pack_rows, num_splits) for order in (True, False)}
    (out_on, lse_on, rows, want), (out_off, lse_off, _, _) = got[True], got[False]
    assert torch.equal(out_on.nan_to_num(7.0), out_off.nan_to_num(7.0)), f"{case.id}: out differs between orders"
    assert torch.equal(lse_on.nan_to_num(7.0), lse_off.nan_to_num(7.0)), f"{case.id}: LSE differs between orders"
    close(out_on[rows], want[0][rows], f"{case.id} out")
    others = sorted(set(range(out_on.shape[0])) - set(rows))
    if others:
        assert torch.isnan(out_on[others].float()).all(), "a row outside every sequence was written"
    if case.lse_layout == "token_major":
        close(lse_on[rows], want[1][rows], f"{case.id} lse", atol=1e-2, rtol=0)


def _case(seed, lens_q, lens_k, page_size=0, lse_layout="token_major", h_q=32, h_kv=8, d=128, **kw):
    from tests.cases import Case

    return Case(seed, lens_q, lens_k, h_q, h_kv, d, d, dtype=torch.bfloat16, causal=True, page_size=page_size,
                lse_layout=lse_layout, **kw)  # fmt: skip


def _mixed_lengths(seed, batch, longest=6000):
    rng = random.Random(seed)
    lens_q = [rng.choice([0, 1, 1, 1, 3, 40, 130, 300]) for _ in range(batch)]
    lens_k = [lq + rng.choice([0, 5, 700, rng.randrange(0, longest)]) for lq in lens_q]
    return lens_q, lens_k


@pytest.mark.parametrize("page_size", [0, 16], ids=["ragged", "paged16"])
@pytest.mark.parametrize("batch", [2, 9, 40])
def test_orders_agree_bitwise_and_with_the_reference(batch, page_size):
    lens_q, lens_k = _mixed_lengths(1000 + batch, batch)
    _check_both_orders(_case(batch + page_size, lens_q, lens_k, page_size=page_size))


@pytest.mark.parametrize("d", [64, 96, 192])
def test_other_head_dims(d):
    lens_q, lens_k = _mixed_lengths(77 + d, 23, longest=3000)
    d_v = 128 if d == 192 else d
    from tests.cases import Case

    case = Case(d, lens_q, lens_k, 16, 4, d, d_v, dtype=torch.bfloat16, causal=True, lse_layout="token_major")
    _check_both_orders(case)


def test_padded_lse_takes_the_per_sequence_order():
    # A padded LSE (B, s_max, H_q) keeps tiles_max slots per sequence (the packed order is off): the
    # order maps the per-sequence index too; padded rows past each length get -inf either way.
    lens_q, lens_k = [5, 0, 70, 1, 33, 2], [4000, 9, 800, 5000, 33, 2600]
    _check_both_orders(_case(11, lens_q, lens_k, lse_layout="padded", h_q=8, h_kv=2))


def test_seqused_gaps_ties_and_empty_sequences():
    # Equal key lengths (ties: the caller's order among them), empty sequences, rows between the
    # sequences that nobody covers (seqused_q < the cu_seqlens_q gap).
    lens_q, lens_k = [1, 0, 7, 1, 1, 0, 64, 1], [3000, 3000, 3000, 0, 4100, 4100, 900, 3000]
    _check_both_orders(_case(12, lens_q, lens_k, q_gaps=True))
    _check_both_orders(_case(13, lens_q, lens_k, page_size=16, q_gaps=True))


@pytest.mark.parametrize("num_splits", [1, 3])
def test_with_row_packing_and_split_kv(num_splits):
    lens_q, lens_k = _mixed_lengths(14, 30)
    _check_both_orders(_case(14 + num_splits, lens_q, lens_k), pack_rows=True, num_splits=num_splits)
    _check_both_orders(_case(16 + num_splits, lens_q, lens_k, page_size=16), pack_rows=True, num_splits=num_splits)


def test_a_batch_past_the_cap_keeps_the_callers_order():
    # 300 sequences > TileConfig.batch_order (256): the prologue leaves the caller's order, asked or not.
    lens_q, lens_k = _mixed_lengths(15, 300, longest=600)
    _check_both_orders(_case(15, lens_q, lens_k, h_q=8, h_kv=2))


def test_library_orders_vllms_mixed_batch():
    """vLLM's mixed batch (4 prefill chunks + 64 decode rows over up to 7,000 keys, 32/8, d128):
    split_kv.choose_batch_order takes the order (>= 4,096 keys, more tiles than SMs), and
    `attention` and `Plan.run` (its fast path) return the reference's results."""
    from ragged_attn.kernels.sm90.launch import sm_count
    from ragged_attn.kernels.sm90.split_kv import choose_batch_order, choose_pack_rows
    from tests.gpu.test_pack_rows_gpu import library_calls_match_the_reference, vllm_like_call

    lens_q = [300, 512, 77, 128] + [1] * 64
    lens_k = [1200, 2048, 4000, 7000] + [1000 + 97 * i for i in range(64)]
    args = vllm_like_call(lens_q, lens_k, seed=4)
    rows = choose_pack_rows(len(lens_q), sum(lens_q), max(lens_q), 32, 8, 128, 0, max(lens_k))
    ctas = sm_count(args[0].device)
    assert choose_batch_order(len(lens_q), sum(lens_q), max(lens_q), max(lens_k), 32, 8, ctas, rows) == 1
    library_calls_match_the_reference(args)
