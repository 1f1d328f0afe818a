"""CPU checks of tools/bench_vllm_mixed.py's batch (issue 14 item 4): the lengths follow the issue's
ranges, the builder's metadata and page table describe the keys it wrote, and its float32
reference agrees with the library's reference backend on a small paged batch."""

from __future__ import annotations

import importlib.util
import math
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "bench_vllm_mixed", os.path.join(ROOT, "tools", "bench_vllm_mixed.py")
)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench  # dataclasses look their module up while the file runs
_spec.loader.exec_module(bench)

SMALL = dict(n_prefill=2, n_decode=5, prefill_q=(3, 9), prefill_context=(0, 20), decode_k=(5, 40))


def test_default_lengths_follow_the_issue():
    lens_q, lens_k, kinds = bench.vllm_mixed_lengths()
    assert (lens_q, lens_k, kinds) == bench.vllm_mixed_lengths(bench.SEED)  # seeded
    assert kinds == ["decode"] * 64 + ["prefill"] * 4  # decode rows first by default
    for lq, lk, kind in zip(lens_q, lens_k, kinds, strict=True):
        if kind == "decode":
            assert lq == 1 and 2048 <= lk <= 32768
        else:
            assert 512 <= lq <= 2048 and 0 <= lk - lq <= 8192
    for order in ("prefill_first", "shuffled", "longest_first"):
        other = bench.vllm_mixed_lengths(order=order)
        assert sorted(zip(*other, strict=True)) == sorted(zip(lens_q, lens_k, kinds, strict=True))
    assert bench.vllm_mixed_lengths(order="prefill_first")[2][:4] == ["prefill"] * 4
    longest = bench.vllm_mixed_lengths(order="longest_first")[1]
    assert longest == sorted(lens_k, reverse=True)  # FA3's batch-level LPT order, by key length
    with pytest.raises(ValueError, match="order"):
        bench.vllm_mixed_lengths(order="sorted")


def test_allowed_pairs_counts_the_bottom_right_mask():
    for lq, lk in [(1, 7), (5, 5), (3, 10), (6, 2), (4, 0), (0, 3)]:
        i = torch.arange(lq)[:, None]
        j = torch.arange(lk)[None, :]
        assert bench.allowed_pairs([lq], [lk]) == int((j <= i + lk - lq).sum())


@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_batch_builder_invariants(page_size):
    lens_q, lens_k, kinds = bench.vllm_mixed_lengths(7, **SMALL)
    b = bench.build_batch(lens_q, lens_k, kinds, page_size, h_q=4, h_kv=2, d=16, device="cpu", seed=3)
    nseq = len(lens_q)
    assert b.q.shape == (sum(lens_q), 4, 16) and b.q.dtype == torch.bfloat16
    assert b.k_pool.shape[1:] == (page_size, 2, 16) and b.v_pool.shape == b.k_pool.shape
    assert b.cu_seqlens_q.dtype == b.seqused_k.dtype == b.page_table.dtype == torch.int32
    assert b.cu_seqlens_q.tolist() == [0] + [sum(lens_q[: i + 1]) for i in range(nseq)]
    assert b.starts_q == b.cu_seqlens_q.tolist()[:-1]
    assert b.seqused_k.tolist() == lens_k
    assert all(b.lens_q[s] == 1 for s in range(nseq) if kinds[s] == "decode")
    pages = [-(-n // page_size) for n in lens_k]
    assert b.page_table.shape == (nseq, max(pages))
    used = [p for s in range(nseq) for p in b.page_table[s, : pages[s]].tolist()]
    assert len(used) == len(set(used)), "a page belongs to two sequences (or twice to one)"
    assert all(0 <= p < b.k_pool.shape[0] for p in used) and b.k_pool.shape[0] > len(used)  # spare pages
    assert b.max_seqlen_q == max(lens_q) and b.max_seqlen_k == max(lens_k)
    k, v, cu_k = b.ragged_kv()
    assert cu_k.tolist() == [0] + [sum(lens_k[: i + 1]) for i in range(nseq)]
    for s in range(nseq):  # the ragged copy holds each sequence's keys in order, read through the table
        ks, vs = b.keys(s)
        assert torch.equal(k[cu_k[s] : cu_k[s + 1]], ks) and torch.equal(v[cu_k[s] : cu_k[s + 1]], vs)
        t = lens_k[s] - 1
        page = int(b.page_table[s, t // page_size])
        assert torch.equal(ks[t], b.k_pool[page, t % page_size])
    assert b.kv_bytes() == sum(lens_k) * 2 * (16 + 16) * 2
    assert b.flops() == 2 * 4 * 32 * bench.allowed_pairs(lens_q, lens_k)


def test_nan_pool_fill_poisons_only_unused_slots():
    lens_q, lens_k, kinds = bench.vllm_mixed_lengths(8, **SMALL)
    b = bench.build_batch(lens_q, lens_k, kinds, 4, h_q=2, h_kv=1, d=8, device="cpu", pool_fill="nan")
    k, v, _ = b.ragged_kv()
    assert torch.isfinite(k.float()).all() and torch.isfinite(v.float()).all()
    nan_rows = int(torch.isnan(b.k_pool.float().view(-1, 8)).all(dim=1).sum())
    assert nan_rows == b.k_pool.shape[0] * 4 - sum(lens_k)


def test_reference_matches_the_library_reference_backend():
    import ragged_attn

    lens_q, lens_k, kinds = bench.vllm_mixed_lengths(9, **SMALL)
    lens_q[-1], lens_k[-1] = 6, 3  # a chunk longer than its keys: its first rows see no key
    b = bench.build_batch(lens_q, lens_k, kinds, 4, h_q=4, h_kv=2, d=16, device="cpu", dtype=torch.float32)
    want = ragged_attn.attention(
        b.q, b.k_pool, b.v_pool, b.cu_seqlens_q, None, b.max_seqlen_q, b.max_seqlen_k,
        seqused_k=b.seqused_k, page_table=b.page_table, causal=True, backend="reference",
    )  # fmt: skip
    refs = bench.reference_rows(b, range(len(lens_q)))
    err, ok = bench.error_vs_reference(want, b, refs)
    assert ok and err < 1e-5, err
    subset = bench.reference_subset(b)
    assert [kinds[s] for s in subset].count("prefill") == 1 and len(subset) == 3
    shifted = want.clone()
    shifted[b.starts_q[subset[0]]] += 1.0  # a decode row's output
    assert not bench.error_vs_reference(shifted, b, {s: refs[s] for s in subset})[1]
    assert math.isclose(
        bench.error_vs_reference(shifted, b, {s: refs[s] for s in subset})[0], 1.0, rel_tol=1e-5
    )


def test_heads_and_head_dim_come_from_the_environment(monkeypatch):
    # VLLM_BENCH_HEADS / VLLM_BENCH_D: the same batch at another class (read when the module loads).
    monkeypatch.setenv("VLLM_BENCH_HEADS", "16/4")
    monkeypatch.setenv("VLLM_BENCH_D", "64")
    spec = importlib.util.spec_from_file_location("bench_vllm_mixed_d64", os.path.join(ROOT, "tools", "bench_vllm_mixed.py"))
    other = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = other
    try:
        spec.loader.exec_module(other)
        assert (other.H_Q, other.H_KV, other.D) == (16, 4, 64)
        lens_q, lens_k, kinds = other.vllm_mixed_lengths(**SMALL)
        batch = other.build_batch(lens_q, lens_k, kinds, 16, device="cpu")
        assert batch.q.shape[1:] == (16, 64) and batch.k_pool.shape[2:] == (4, 64)
    finally:
        del sys.modules[spec.name]
    assert (bench.H_Q, bench.H_KV, bench.D) == (32, 8, 128)  # the default module is untouched
