"""CPU self-checks of the GPU sweep (tests/gpu/test_sweep_gpu.py, generator in tests/sweep_cases.py).

- The generator is a pure function of (seed, index), bounded in work, and the default sweep
  (300 problems) covers every feature at least once; the full gate (3000) reaches every layout class.
- Every problem's arguments pass the API's checks and map to the class the sweep expects
  (`layout_class_of` on meta tensors).
- The checks pass with the reference backend standing in for the kernel, and fail on a wrong
  "kernel" (outputs perturbed one way at a time), so a GPU pass means something.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest
import torch

import ragged_attn
from ragged_attn.layout_class import (
    DTYPES,
    HEAD_DIM_CLASSES,
    KV_KINDS,
    MASK_FAMILIES,
    LayoutClass,
    head_dim_class,
)
from tests import sweep_cases as sc
from tests.cases import valid_rows
from tests.sweep_cases import (
    DEFAULT_SEED,
    DEFAULT_SIZE,
    build,
    draw,
    expected_class,
    mask_family,
    run_and_check,
)

DEFAULT = [draw(DEFAULT_SEED, i) for i in range(DEFAULT_SIZE)]
GATE = DEFAULT + [draw(DEFAULT_SEED, i) for i in range(DEFAULT_SIZE, 3000)]


def test_draw_depends_on_seed_and_index_only():
    random.seed(1)
    again = [draw(DEFAULT_SEED, i) for i in reversed(range(DEFAULT_SIZE))][::-1]
    random.seed(2)
    assert again == DEFAULT
    assert draw(DEFAULT_SEED + 1, 17) != draw(DEFAULT_SEED, 17)
    assert len({p.describe().split(":", 1)[1] for p in DEFAULT}) == DEFAULT_SIZE, "two problems are the same"


def _out_of_bounds(p) -> list[str]:
    """What about `p` breaks the generator's bounds (empty when nothing)."""
    rules = {
        "batch": 1 <= p.batch <= sc.MAX_BATCH,
        "lengths": all(0 <= n <= sc.MAX_LEN for n in p.lens_q + p.lens_k),
        "GQA ratio": p.h_q % p.h_kv == 0 and 1 <= p.h_q // p.h_kv <= sc.MAX_RATIO,
        "head dims": p.d_qk % 8 == 0 and p.d_v % 8 == 0 and head_dim_class(p.d_qk, p.d_v) is not None,
        "scores": p.scores <= sc.MAX_SCORES,
        "q rows x heads": sum(p.lens_q) * p.h_q <= sc.MAX_TOKEN_HEADS,
        "kv rows x heads": p.kv_rows * p.h_kv <= sc.MAX_TOKEN_HEADS,
        "max_seqlen_q": p.max_seqlen_q is None or p.max_seqlen_q >= max(p.lens_q),
        "max_seqlen_k": p.max_seqlen_k is None or p.max_seqlen_k >= max(p.lens_k),
        "gaps": all(g is None or len(g) == p.batch for g in (p.gaps_q, p.gaps_k)),
    }
    return [name for name, ok in rules.items() if not ok]


def test_gate_problems_are_valid_and_bounded():
    bad = {f"case{p.index}": _out_of_bounds(p) for p in GATE if _out_of_bounds(p)}
    assert not bad, f"problems out of bounds: {bad}"


@pytest.mark.parametrize("p", DEFAULT, ids=lambda p: f"case{p.index}")
def test_arguments_pass_the_api_checks_and_map_to_the_expected_class(p):
    built = build(p, "meta")
    args = built.args
    if args[5] is None and p.lse_layout == "padded":  # layout_class_of takes no lse buffer to size s_max
        args = args[:5] + (max(p.lens_q),) + args[6:]
    options = {name: value for name, value in built.kwargs.items() if name != "backend"}
    assert ragged_attn.layout_class_of(*args, **options, arch="sm_90a") == expected_class(p)


@pytest.mark.parametrize("p", [p for p in GATE if p.api == "plan" and p.lse_layout == "padded"][:50],
                         ids=lambda p: f"case{p.index}")
def test_padded_lse_plans_name_their_s_max(p):
    """A plan binds no LSE buffer, so a padded LSE's s_max must come from max_seqlen_q (the API
    refuses a padded-LSE plan without it; the sweep drew such plans before 2026-12-02)."""
    assert p.max_seqlen_q is not None and p.max_seqlen_q >= max(p.lens_q)


def _has_rows_that_see_no_key(p) -> bool:
    causal = p.causal is not False
    left, right = p.window[0], 0 if causal else p.window[1]
    for lq, lk in zip(p.lens_q, p.lens_k):
        off = 0 if p.causal == "top_left" else lk - lq
        for i in {0, lq - 1} if lq else ():  # key ranges slide with i: only the end rows can be empty
            lo = max(0, i + off - left) if left >= 0 else 0
            hi = min(lk - 1, i + off + right) if right >= 0 else lk - 1
            if hi < lo:
                return True
    return False


def test_default_sweep_covers_every_feature():
    ps = DEFAULT
    seen = Counter()
    for p in ps:
        lc = expected_class(p)
        dims = (p.d_qk, p.d_v)
        seen.update(
            {
                f"class {lc.d_qk}x{lc.d_v}",
                f"exact dims {dims}" if dims in HEAD_DIM_CLASSES else "envelope",
                p.dtype,
                f"ratio {p.h_q // p.h_kv}",
                f"causal {p.causal!r}",
                f"mask {lc.mask}",
                f"kv {lc.kv}",
                f"lse {p.lse_layout}",
                f"lse base {p.lse_base}",
                f"api {p.api}",
                f"backend {p.backend}",
            }
        )
        if dims not in HEAD_DIM_CLASSES:
            seen[f"envelope {dims}"] += 1
        seen["batch 1"] += p.batch == 1
        seen["batch >= 100"] += p.batch >= 100
        seen["batch 300"] += p.batch == 300
        seen["empty sequence"] += 0 in p.lens_q or 0 in p.lens_k
        seen["length 8192"] += sc.MAX_LEN in p.lens_q + p.lens_k
        seen["no query rows"] += p.total_q == 0
        seen["no key rows"] += not p.paged and p.kv_rows == 0
        seen["rows that see no key"] += _has_rows_that_see_no_key(p)
        seen["seqused_q"] += p.gaps_q is not None
        seen["rows before cu_seqlens_q[0]"] += p.q_lead > 0
        seen["rows after cu_seqlens_q[B]"] += p.q_tail > 0
        seen["ragged seqused_k"] += not p.paged and p.gaps_k is not None
        seen["ragged rows before/after keys"] += not p.paged and p.k_lead > 0 and p.k_tail > 0
        seen["causal window"] += lc.mask == "window" and p.causal is not False
        seen["top-left window"] += lc.mask == "window" and p.causal == "top_left"
        seen["two-sided window"] += p.causal is False and min(p.window) >= 0
        seen["custom scale"] += p.softmax_scale is not None
        seen["max_seqlen_q None"] += p.max_seqlen_q is None
        seen["max_seqlen_q loose"] += p.max_seqlen_q is not None and p.max_seqlen_q > max(p.lens_q)
        seen["max_seqlen_k None"] += p.max_seqlen_k is None
        seen["strided inputs"] += p.in_pad > 0
        seen["out buffer"] += p.out_buffer
        seen["out allocated"] += not p.out_buffer
        seen["out columns past d_v"] += p.out_pad > 0
        seen["two calls"] += p.calls == 2
        if p.lse_layout is not None:
            seen["lse buffer" if p.lse_buffer else "lse allocated"] += 1
        if p.lse_layout == "padded":
            seen[f"padded lse order {p.lse_order}"] += p.lse_buffer
            seen["padded lse s_max > longest"] += p.lse_s_extra > 0 and p.lse_buffer
        if p.paged:
            seen[f"pool {p.kv_layout}"] += 1
            seen[f"paged lengths {p.paged_lengths}"] += 1
            seen["page size 1"] += p.page_size == 1
            seen["page size 256"] += p.page_size == 256
            seen["page size not a power of two"] += p.page_size & (p.page_size - 1) != 0
            seen["table columns past the pages"] += p.table_extra > 0
    want = (
        [f"class {a}x{b}" for a, b in HEAD_DIM_CLASSES] + [f"exact dims {d}" for d in HEAD_DIM_CLASSES]
        + ["envelope", "envelope (72, 72)", "bf16", "fp16"] + [f"ratio {r}" for r in range(1, sc.MAX_RATIO + 1)]
        + [f"causal {c!r}" for c in (False, True, "bottom_right", "top_left")]
        + [f"mask {m}" for m in MASK_FAMILIES] + [f"kv {k}" for k in KV_KINDS]
        + [f"lse {x}" for x in ("token_major", "head_major", "padded", None)] + ["lse base ln", "lse base log2"]
        + ["api attention", "api plan", "backend auto", "backend cute", "lse buffer", "lse allocated"]
        + [f"padded lse order {o}" for o in sc.LSE_ORDERS] + ["pool NHD", "pool HND"]
        + [f"paged lengths {x}" for x in ("seqused_k", "cu_seqlens_k", "both")]
    )  # fmt: skip
    want += [name for name in seen if not name.startswith(("class", "exact", "envelope", "ratio", "causal"))]
    missing = [name for name in want if not seen[name]]
    assert not missing, f"the default sweep never draws: {missing}"
    assert sum(1 for name in seen if name.startswith("envelope (")) >= 15, "too few envelope dims"
    assert (40, 40) in sc.ENVELOPE_DIMS and (72, 72) in sc.ENVELOPE_DIMS


def test_gate_reaches_every_layout_class_and_envelope():
    classes = {expected_class(p) for p in GATE}
    every = {
        LayoutClass("sm_90a", dq, dv, dt, dt, mask, lse, kv)
        for dq, dv in HEAD_DIM_CLASSES for dt in DTYPES for mask in MASK_FAMILIES for lse in (False, True)
        for kv in KV_KINDS
    }  # fmt: skip
    assert classes == every, f"the 3000-problem gate misses {sorted(lc.name for lc in every - classes)}"
    dims = {(p.d_qk, p.d_v) for p in GATE}
    assert set(sc.ENVELOPE_DIMS) <= dims and set(HEAD_DIM_CLASSES) <= dims


def _cheap(p) -> bool:
    return p.scores * (p.d_qk + p.d_v) <= 3e7 and p.batch <= 24 and p.total_q * p.h_q * p.d_qk <= 4e5


CHEAP = [p for p in DEFAULT if _cheap(p)][:40]


@pytest.mark.parametrize("p", CHEAP, ids=lambda p: f"case{p.index}")
def test_checks_pass_with_the_reference_standing_in_for_the_kernel(p):
    run_and_check(p, "cpu", backend="reference")


def test_cheap_subset_spans_the_features():
    assert {p.lse_layout for p in CHEAP} == {None, "token_major", "head_major", "padded"}
    assert {p.kv_layout for p in CHEAP if p.paged} == {"NHD", "HND"}
    assert {p.api for p in CHEAP} == {"attention", "plan"}
    assert any(p.calls == 2 for p in CHEAP) and any(p.gaps_q for p in CHEAP) and any(p.q_lead for p in CHEAP)
    assert any(_has_rows_that_see_no_key(p) for p in CHEAP)


# ----------------------------------------------------------------------------- the checks catch errors
BASE = sc.SweepProblem(
    index=0, seed=1, tier="test", lens_q=(5, 0, 9), lens_k=(7, 3, 12), h_q=4, h_kv=2, d_qk=40, d_v=40,
    dtype="bf16", causal=True, window=(-1, -1), page_size=0, kv_layout="NHD", paged_lengths="",
    lse_layout="padded", lse_base="ln", lse_buffer=True, lse_order=(2, 0, 1), lse_s_extra=3, out_buffer=True,
    out_pad=8, in_pad=0, q_lead=2, q_tail=1, gaps_q=(1, 0, 2), k_lead=0, k_tail=0, gaps_k=None,
    table_extra=0, pool_extra=0, softmax_scale=None, max_seqlen_q=9, max_seqlen_k=12, api="attention",
    calls=1, backend="reference",
)  # fmt: skip


def _rows(p):
    return valid_rows(p, sc._offsets(p.q_lead, p.lens_q, p.gaps_q))


MUTATIONS = {
    # name: (problem overrides, mutate(out_full, lse) after the call, message the checks must raise)
    "row outside written": ({}, lambda o, lse, p: o[0].fill_(0.0), "rows outside every sequence"),
    "column past d_v written": ({}, lambda o, lse, p: o[:, :, p.d_v].fill_(0.0), "columns past d_v"),
    "valid value off": ({}, lambda o, lse, p: o[_rows(p)[3], 1, 5].add_(0.1), "out: max excess error"),
    "padded tail not -inf": ({}, lambda o, lse, p: lse[0, p.lens_q[0]].fill_(0.0), "past a length"),
    "lse off": ({}, lambda o, lse, p: lse[2, 4, 3].add_(0.02), "lse: max excess error"),
    "no-key row O != 0": (
        {"lens_k": (0, 3, 12)},
        lambda o, lse, p: o[_rows(p)[0], 0, 0].fill_(1e-3),
        "sees no key has O != 0",
    ),
    "token-major lse outside written": (
        {"lse_layout": "token_major"},
        lambda o, lse, p: lse[0].fill_(1.0),
        "LSE entries outside",
    ),
    "head-major lse outside written": (
        {"lse_layout": "head_major"},
        lambda o, lse, p: lse[:, -1].fill_(1.0),
        "LSE entries outside",
    ),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_checks_catch_a_wrong_kernel(name, monkeypatch):
    overrides, mutate, message = MUTATIONS[name]
    p = dataclasses.replace(BASE, **overrides)
    run_and_check(p, "cpu")  # the problem passes as it is
    real = ragged_attn.attention

    def wrong_kernel(*args, out=None, lse=None, **kwargs):
        result = real(*args, out=out, lse=lse, **kwargs)
        if out is not None:  # the call under test (the oracle passes no buffers)
            mutate(out.as_strided((out.shape[0], out.shape[1], p.d_v + p.out_pad), out.stride()), lse, p)
        return result

    monkeypatch.setattr(ragged_attn, "attention", wrong_kernel)
    with pytest.raises(AssertionError, match=message):
        run_and_check(p, "cpu")


def test_mask_family_matches_the_problem():
    for causal in (False, True, "bottom_right", "top_left"):
        for window in ((-1, -1), (-1, 0), (5, -1), (5, 0), (-1, 3), (2, 3)):
            if causal is not False and window[1] > 0:
                continue
            q = torch.empty(4, 2, 64, device="meta", dtype=torch.bfloat16)
            cu = torch.zeros(2, dtype=torch.int32, device="meta")
            lc = ragged_attn.layout_class_of(q, q, q, cu, cu, 4, 4, causal=causal, window_size=window)
            assert lc.mask == mask_family(causal, window), (causal, window)
