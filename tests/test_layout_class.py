"""The layout class is the only compile key: golden snapshot + property test (meta tensors, no GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ragged_attn
from ragged_attn import LayoutClass, layout_class_of

GOLDEN = Path(__file__).parent / "golden_layout_classes.json"


def meta_call(*, total_q=100, total_k=120, h_q=8, h_kv=2, d=128, d_v=None, batch=3, dtype=torch.bfloat16,
              row_pad_q=0, row_pad_k=0, pool=None, **options):
    """Meta tensors of a call; pool=(num_pages, page_size, max_pages, kv_layout) makes k/v page
    pools with a (batch, max_pages) page table and seqused_k instead of ragged k/v."""
    d_v = d if d_v is None else d_v
    q = torch.empty(total_q, h_q, d + row_pad_q, dtype=dtype, device="meta")[..., :d]
    cu = torch.empty(batch + 1, dtype=torch.int32, device="meta")
    if pool is not None:
        num_pages, page_size, max_pages, kv_layout = pool
        dims = (num_pages, page_size, h_kv) if kv_layout == "NHD" else (num_pages, h_kv, page_size)
        k = torch.empty(*dims, d + row_pad_k, dtype=dtype, device="meta")[..., :d]
        v = torch.empty(*dims, d_v, dtype=dtype, device="meta")
        return dict(q=q, k=k, v=v, cu_seqlens_q=cu, page_table=torch.empty(batch, max_pages, dtype=torch.int32,
                    device="meta"), seqused_k=torch.empty(batch, dtype=torch.int32, device="meta"),
                    kv_layout=kv_layout, **options)
    k = torch.empty(total_k, h_kv, d + row_pad_k, dtype=dtype, device="meta")[..., :d]
    v = torch.empty(total_k, h_kv, d_v, dtype=dtype, device="meta")
    return dict(q=q, k=k, v=v, cu_seqlens_q=cu, cu_seqlens_k=cu, **options)


# The calls whose classes the golden file records: every family the kernels serve today, on every
# head-dim class, plus real head dims that ride an envelope (their keys name the class's dims).
SNAPSHOT_CALLS = {
    f"d{d}{'' if d == d_v else f'x{d_v}'}-{dt}-{name}": dict(d=d, d_v=d_v, dtype=dtype, **opts)
    for d, d_v in ((32, 32), (64, 64), (96, 96), (128, 128), (192, 128), (256, 256))
    for dt, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16))
    for name, opts in {
        "full": {},
        "causal": dict(causal=True),
        "causal-top-left-lse": dict(causal="top_left", return_lse=True),
        "window-lse-padded": dict(window_size=(128, 0), return_lse=True, lse_layout="padded", max_seqlen_q=64),
    }.items()
} | {
    f"envelope-d{d}x{d_v}-bf16-causal": dict(d=d, d_v=d_v, causal=True)
    for d, d_v in ((8, 8), (40, 40), (80, 80), (112, 112), (160, 96), (200, 136), (64, 128))
} | {
    # Page pools: one class per family for NHD and HND pools and any page size (issue 5).
    "paged-d128-bf16-causal-lse-padded-hnd-page16": dict(
        pool=(40, 16, 9, "HND"), causal=True, return_lse=True, lse_layout="padded", max_seqlen_q=64),
    "paged-d128-bf16-causal-lse-padded-nhd-page3": dict(
        pool=(200, 3, 50, "NHD"), causal=True, return_lse=True, lse_layout="padded", max_seqlen_q=64),
    "paged-d128-bf16-full-nhd-page1": dict(pool=(500, 1, 200, "NHD")),
    "paged-d64-fp16-window-hnd-page256": dict(pool=(4, 256, 2, "HND"), d=64, dtype=torch.float16,
                                              window_size=(64, 0)),
} | {
    # Issue 14: softcap / sinks classes, ragged and paged K/V (the flags are named only when on).
    "d128-bf16-causal-softcap": dict(causal=True, softcap=30.0),
    "d64-fp16-window-lse-sinks": dict(d=64, dtype=torch.float16, window_size=(128, 0), return_lse=True,
                                      sinks=torch.empty(8, device="meta")),
    "d128-bf16-causal-lse-softcap-sinks": dict(causal=True, return_lse=True, softcap=50.0,
                                               sinks=torch.empty(8, device="meta")),
    "envelope-d80x80-bf16-full-sinks": dict(d=80, sinks=torch.empty(8, device="meta")),
    "paged-d128-bf16-causal-lse-softcap-sinks-nhd-page16": dict(
        pool=(40, 16, 9, "NHD"), causal=True, return_lse=True, softcap=50.0,
        sinks=torch.empty(8, device="meta")),
    "paged-d64-fp16-window-sinks-hnd-page8": dict(pool=(30, 8, 12, "HND"), d=64, dtype=torch.float16,
                                                  window_size=(64, 0), sinks=torch.empty(8, device="meta")),
    "paged-d256-bf16-full-lse-softcap-nhd-page1": dict(pool=(300, 1, 100, "NHD"), d=256, return_lse=True,
                                                       softcap=30.0),
}


def current_snapshot() -> dict:
    return {name: layout_class_of(**meta_call(**call)).as_dict() for name, call in SNAPSHOT_CALLS.items()}


def test_golden_snapshot_of_layout_classes():
    """A change of the compile key is a visible diff. Regenerate with RAGGED_ATTN_UPDATE_GOLDEN=1."""
    import os

    snapshot = current_snapshot()
    if os.environ.get("RAGGED_ATTN_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    assert snapshot == json.loads(GOLDEN.read_text())


@settings(max_examples=200, deadline=None)
@given(
    total_q=st.integers(0, 5000),
    total_k=st.integers(0, 5000),
    batch=st.integers(0, 300),
    h_kv=st.integers(1, 16),
    ratio=st.integers(1, 8),
    row_pad_q=st.sampled_from([0, 8, 64]),
    row_pad_k=st.sampled_from([0, 16]),
    scale=st.one_of(st.none(), st.floats(1e-3, 10.0)),
    left=st.integers(0, 4096),
    right=st.integers(0, 4096),
    lse_base=st.sampled_from(["ln", "log2"]),
    lse_layout=st.sampled_from(["head_major", "token_major", "padded"]),
    s_max=st.integers(0, 9000),
    max_k=st.one_of(st.none(), st.integers(0, 9000)),
    alignment=st.sampled_from([True, "top_left"]),
)
def test_runtime_facts_never_change_the_class(total_q, total_k, batch, h_kv, ratio, row_pad_q, row_pad_k, scale,
                                              left, right, lse_base, lse_layout, s_max, max_k, alignment):
    """Batch, lengths, H_q, H_kv (ratio), strides, scale, window sizes, LSE base/layout/s_max: runtime."""
    common = dict(total_q=total_q, total_k=total_k, batch=batch, h_q=h_kv * ratio, h_kv=h_kv, row_pad_q=row_pad_q,
                  row_pad_k=row_pad_k, softmax_scale=scale, max_seqlen_q=s_max, max_seqlen_k=max_k)
    lse = dict(return_lse=True, lse_layout=lse_layout, lse_base=lse_base)
    assert layout_class_of(**meta_call(**common)) == layout_class_of(**meta_call())
    assert layout_class_of(**meta_call(**common, causal=alignment, **lse)) == layout_class_of(
        **meta_call(causal=True, return_lse=True))
    assert layout_class_of(**meta_call(**common, window_size=(left, right))) == layout_class_of(
        **meta_call(window_size=(1, 1)))


@settings(max_examples=100, deadline=None)
@given(
    num_pages=st.integers(1, 5000),
    page_size=st.integers(1, 512),
    max_pages=st.integers(0, 300),
    kv_layout=st.sampled_from(["NHD", "HND"]),
    batch=st.integers(0, 300),
    h_kv=st.integers(1, 16),
    ratio=st.integers(1, 8),
    row_pad_k=st.sampled_from([0, 16]),
    cap=st.sampled_from([0.0, 2**-126, 5.0, 50.0]),
    with_sinks=st.booleans(),
)
def test_page_geometry_never_changes_the_class(num_pages, page_size, max_pages, kv_layout, batch, h_kv, ratio,
                                               row_pad_k, cap, with_sinks):
    """Page size, page count, table width, pool layout (NHD/HND), heads and strides: run time; so
    is the cap, while softcap / sinks on or off picks the paged class with those flags (issue 14)."""
    h_q = h_kv * ratio
    score = {"softcap": cap, "sinks": torch.empty(h_q, device="meta") if with_sinks else None}
    call = meta_call(pool=(num_pages, page_size, max_pages, kv_layout), batch=batch, h_q=h_q, h_kv=h_kv,
                     row_pad_k=row_pad_k, causal=True, **score)
    plain = layout_class_of(**meta_call(pool=(8, 16, 4, "NHD"), causal=True))
    lc = layout_class_of(**call)
    assert lc.kv == "paged" and (lc.softcap, lc.sinks) == (cap != 0.0, with_sinks)
    assert lc == LayoutClass(**{**plain.as_dict(), "softcap": cap != 0.0, "sinks": with_sinks})


def test_options_that_are_in_the_key_do_change_it():
    base = layout_class_of(**meta_call())
    assert layout_class_of(**meta_call(d=64)) != base
    assert layout_class_of(**meta_call(dtype=torch.float16)) != base
    assert layout_class_of(**meta_call(causal=True)) != base
    assert layout_class_of(**meta_call(return_lse=True)) != base
    assert layout_class_of(**meta_call(window_size=(5, -1))) != base
    assert layout_class_of(**meta_call(pool=(8, 16, 4, "NHD"))) != base


def test_every_head_dim_rides_the_cheapest_class_that_holds_it():
    """Every (d_qk, d_v) the API accepts (multiples of 8 up to 256) has a class; it holds the dims
    and no other class that holds them does less work per pair. Past 256 there is none."""
    from ragged_attn.layout_class import HEAD_DIM_CLASSES, head_dim_class

    for d_qk in range(8, 257, 8):
        for d_v in range(8, 257, 8):
            cls = head_dim_class(d_qk, d_v)
            assert cls in HEAD_DIM_CLASSES and d_qk <= cls[0] and d_v <= cls[1], (d_qk, d_v, cls)
            holders = [c for c in HEAD_DIM_CLASSES if d_qk <= c[0] and d_v <= c[1]]
            assert sum(cls) == min(sum(c) for c in holders), (d_qk, d_v, cls)
    for dims in HEAD_DIM_CLASSES:
        assert head_dim_class(*dims) == dims
    assert head_dim_class(264, 8) is None and head_dim_class(8, 264) is None
    lc = layout_class_of(**meta_call(d=96))
    assert (lc.d_qk, lc.d_v) == (96, 96)
    lc = layout_class_of(**meta_call(d=40))
    assert (lc.d_qk, lc.d_v) == (64, 64)


def test_unserved_problems_decline_with_reason():
    with pytest.raises(NotImplementedError, match="float16/bfloat16"):
        layout_class_of(**meta_call(dtype=torch.float32))
    with pytest.raises(NotImplementedError, match="sm_90a"):
        layout_class_of(**meta_call(), arch="sm_80")


def test_layout_class_rejects_bad_fields():
    with pytest.raises(ValueError, match="mask"):
        LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "sliding", False, "ragged")
    assert ragged_attn.LayoutClass("sm_90a", 64, 64, "fp16", "fp16", "none", True, "ragged").name == (
        "sm_90a-d64x64-fp16-fp16-none-lse-ragged"
    )
