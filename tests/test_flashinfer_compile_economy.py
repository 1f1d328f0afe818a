"""Compile economy on FlashInfer's cuDNN prefill test shapes (issue 5, item 5), on the CPU.

FlashInfer's own `cudnn_batch_prefill_with_kv_cache` test parametrization (batch {1, 4}, s_qo
{8, 17, 700}, s_kv {8, 32, 1066} with s_qo <= s_kv, page size {8, 16, 64}, H_kv {1, 4}, H_q 4,
causal {T, F}, return_lse {T, F}, d 128, bf16, HND pools) is described with meta tensors exactly as
`ragged_attn.compat.flashinfer` passes it to `attention`, classified by `layout_class_of` and
compiled for sm_90a by `warmup`: at most one kernel per causal x LSE combination (4 in all).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import ragged_attn
from ragged_attn import compile_cache

pytestmark = pytest.mark.cute

pytest.importorskip("cutlass.cute")

BATCH = (1, 4)
S_QO = (8, 17, 700)
S_KV = (8, 32, 1066)
PAGE_SIZE = (8, 16, 64)
H_KV = (1, 4)
H_Q = 4
CAUSAL = (True, False)
RETURN_LSE = (True, False)
D = 128


def flashinfer_calls():
    """The keyword arguments the FlashInfer adapter gives `attention` for each parametrized case."""
    meta = dict(device="meta")
    for b, s_qo, s_kv, ps, h_kv, causal, lse in itertools.product(
        BATCH, S_QO, S_KV, PAGE_SIZE, H_KV, CAUSAL, RETURN_LSE
    ):
        if s_qo > s_kv:
            continue
        pages = math.ceil(s_kv / ps)
        yield dict(
            q=torch.empty(b * s_qo, H_Q, D, dtype=torch.bfloat16, **meta),
            k=torch.empty(b * pages, h_kv, ps, D, dtype=torch.bfloat16, **meta),  # HND
            v=torch.empty(b * pages, h_kv, ps, D, dtype=torch.bfloat16, **meta),
            cu_seqlens_q=torch.empty(b + 1, dtype=torch.int32, **meta),
            max_seqlen_q=s_qo,
            max_seqlen_k=s_kv,
            seqused_q=torch.empty(b, dtype=torch.int32, **meta),
            seqused_k=torch.empty(b, dtype=torch.int32, **meta),
            page_table=torch.empty(b, pages, dtype=torch.int32, **meta),
            kv_layout="HND",
            causal=causal,
            softmax_scale=1 / math.sqrt(D),
            return_lse=lse,
            lse_layout="padded",
            lse_base="log2",
        )


def test_flashinfer_cudnn_prefill_shapes_compile_at_most_four_kernels(monkeypatch, tmp_path):
    monkeypatch.setenv("RAGGED_ATTN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    compile_cache.clear_memory()
    calls = list(flashinfer_calls())
    classes = {ragged_attn.layout_class_of(**call, arch="sm_90a") for call in calls}
    before = ragged_attn.cache_info().compiles
    warmed = ragged_attn.warmup(calls, arch="sm_90a", progress=False)
    compiles = ragged_attn.cache_info().compiles - before
    print(f"FlashInfer cuDNN prefill parametrization: {len(calls)} cases -> {len(classes)} layout classes, "
          f"{compiles} kernels compiled")
    assert set(warmed) == classes
    assert all(lc.kv == "paged" and (lc.d_qk, lc.d_v) == (128, 128) for lc in classes)
    assert compiles == len(classes) <= 4, f"{compiles} compiles for {len(classes)} classes"
