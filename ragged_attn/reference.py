"""The exact PyTorch implementation of the whole contract: the test oracle and the CPU backend.

Float32 scores, softmax and P @ V whatever the input dtype, one sequence at a time, queries in
chunks so long sequences fit in memory; the output is rounded to q's dtype (the kernels' rule, one
for both backends), the LSE stays float32. It reads the lengths back to the host (`.tolist()`): it is
the oracle, not the product path. Every value check happens before anything is written.

Non-finite inputs (the one definition, docs/SUPPORT_MATRIX.md "Non-finite inputs"): row i of a
sequence is computed over the keys it may see (causal / window / lengths) and over nothing else,
in IEEE arithmetic. A NaN (or inf) in a key or value that the row may not see never reaches it; a
NaN in a key it may see makes its output and LSE NaN, a NaN in a value it may see makes that
column of its output NaN. Sinks (issue 14) follow the same arithmetic: a sink of -inf is no sink
for that head, +inf takes the whole softmax mass (O = 0, LSE = +inf), NaN makes the head's rows
NaN (O and LSE, rows that see no key included, as the kernel's finalize gives them); softcap maps a score of +-inf to +-softcap (tanh saturates) and NaN to NaN. (`probs @ V` alone would spread `0 * NaN` from masked keys:
`_masked_pv` keeps them out, tests/test_reference.py checks it against a per-row float64 loop.)
"""

from __future__ import annotations

import math

import torch

from .problem import Problem, Tensors, build_problem

LOG2_E = 1.0 / math.log(2.0)
# Score elements (queries x keys x heads) materialised at once per chunk: 64 Mi floats = 256 MiB.
_CHUNK_ELEMENTS = 1 << 26


def allowed_keys(lq: int, lk: int, problem: Problem, device) -> torch.Tensor:
    """(lq, lk) bool: query i may attend key j (causal / window in the problem's frame)."""
    left, right = problem.window
    offset = lk - lq if problem.alignment == "bottom_right" else 0
    i = torch.arange(lq, device=device).unsqueeze(1) + offset
    j = torch.arange(lk, device=device).unsqueeze(0)
    ok = torch.ones(lq, lk, dtype=torch.bool, device=device)
    if right >= 0:
        ok &= j <= i + right
    if left >= 0:
        ok &= j >= i - left
    return ok


def _lengths(t: Tensors, problem: Problem) -> tuple[list[int], list[int], list[int], list[int]]:
    """Host lists: q starts, q lengths, k starts (ragged; 0 for paged), k lengths. Checks their values."""
    cu_q = t.cu_seqlens_q.tolist()
    b = problem.batch
    for i in range(b):
        if not 0 <= cu_q[i] <= cu_q[i + 1] <= problem.total_q:
            raise ValueError(
                f"cu_seqlens_q: expected non-decreasing offsets within [0, total_q = {problem.total_q}] "
                f"(the rows of q), got {cu_q[i]} then {cu_q[i + 1]} at sequence {i}"
            )
    len_q = [cu_q[i + 1] - cu_q[i] for i in range(b)]
    if t.seqused_q is not None:
        used = t.seqused_q.tolist()
        for i in range(b):
            if not 0 <= used[i] <= len_q[i]:
                raise ValueError(
                    f"seqused_q: expected a length in [0, {len_q[i]}] (the gap between starts) at sequence {i}, "
                    f"got {used[i]}"
                )
        len_q = used
    if t.cu_seqlens_k is not None:
        cu_k = t.cu_seqlens_k.tolist()
        limit = problem.total_k if problem.kv == "ragged" else None  # page pools: only differences count
        within = f"within [0, total_k = {limit}] (the rows of k)" if limit is not None else ">= 0"
        for i in range(b):
            if cu_k[i] > cu_k[i + 1] or cu_k[i] < 0 or (limit is not None and cu_k[i + 1] > limit):
                raise ValueError(
                    f"cu_seqlens_k: expected non-decreasing offsets {within}, got {cu_k[i]} then {cu_k[i + 1]} "
                    f"at sequence {i}"
                )
        len_k = [cu_k[i + 1] - cu_k[i] for i in range(b)]
    else:
        cu_k, len_k = [0] * (b + 1), None
    if t.seqused_k is not None:
        used = t.seqused_k.tolist()
        for i in range(b):
            bound = len_k[i] if (len_k is not None and problem.kv == "ragged") else None
            if used[i] < 0 or (bound is not None and used[i] > bound):
                want = f"in [0, {bound}] (the gap between starts)" if bound is not None else ">= 0"
                raise ValueError(f"seqused_k: expected a key count {want} at sequence {i}, got {used[i]}")
        len_k = used
    if problem.kv == "paged":
        capacity = problem.max_pages_per_seq * problem.page_size
        source = "seqused_k" if t.seqused_k is not None else "cu_seqlens_k"  # where the key lengths came from
        for i in range(b):
            if len_k[i] > capacity:
                raise ValueError(
                    f"{source}: expected at most max_pages * page_size = {capacity} keys per sequence, got "
                    f"{len_k[i]} at sequence {i}"
                )
        cu_k = [0] * (b + 1)
        for i in range(b):
            pages = t.page_table[i, : (len_k[i] + problem.page_size - 1) // problem.page_size]
            if pages.numel() and (pages.min() < 0 or pages.max() >= problem.num_pages):
                raise ValueError(
                    f"page_table: expected page ids in [0, {problem.num_pages}) for the pages sequence {i} "
                    f"uses, got {pages.min().item()}..{pages.max().item()}"
                )
    for name, bound, lens in (("max_seqlen_q", problem.max_seqlen_q, len_q), ("max_seqlen_k", problem.max_seqlen_k, len_k)):
        if bound is not None and lens and max(lens) > bound:
            raise ValueError(f"{name}: expected an upper bound of the lengths, got {bound} < {max(lens)}")
    return cu_q[:-1], len_q, cu_k[:-1], len_k


def _gather_kv(t: Tensors, problem: Problem, b: int, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(length, H_kv, D) keys and values of sequence b."""
    if problem.kv == "ragged":
        return t.k[start : start + length], t.v[start : start + length]
    ps = problem.page_size
    n_pages = (length + ps - 1) // ps
    pages = t.page_table[b, :n_pages].long()

    def gather(pool: torch.Tensor) -> torch.Tensor:
        if problem.kv_layout == "HND":
            pool = pool.transpose(1, 2)  # -> (num_pages, page_size, H_kv, D)
        return pool[pages].reshape(n_pages * ps, problem.h_kv, pool.shape[-1])[:length]

    return gather(t.k), gather(t.v)


def _masked_pv(probs: torch.Tensor, vf: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
    """probs @ vf summed over the keys each row may see only, for a vf with non-finite entries.

    probs: (H, r, lk), exactly 0 where a row may not see a key; vf: (H, lk, Dv); seen: (r, lk)
    bool. The finite part is one matmul with the non-finite entries zeroed; the non-finite
    entries then apply IEEE rules over the seen keys only: NaN * p and inf * 0 give NaN, inf * p
    (p > 0) gives +-inf, +inf + -inf gives NaN. Counts of hits are matmuls of 0/1 floats (> 0 is
    exact: sums of non-negative terms)."""
    bad = ~torch.isfinite(vf)
    o = torch.matmul(probs, torch.where(bad, 0.0, vf))
    seen_f = seen.to(probs.dtype).unsqueeze(0)  # (1, r, lk)
    positive = (probs > 0).to(probs.dtype)  # masked keys have p == 0 exactly
    zero_seen = seen_f * (probs == 0).to(probs.dtype)
    nan = torch.matmul(seen_f, torch.isnan(vf).to(probs.dtype)) > 0
    nan |= torch.matmul(zero_seen, torch.isinf(vf).to(probs.dtype)) > 0
    pos_inf = torch.matmul(positive, (vf == math.inf).to(probs.dtype)) > 0
    neg_inf = torch.matmul(positive, (vf == -math.inf).to(probs.dtype)) > 0
    o = torch.where(pos_inf, math.inf, o)
    o = torch.where(neg_inf, -math.inf, o)
    return torch.where(nan | (pos_inf & neg_inf), math.nan, o)


def _lse_view(problem: Problem, lse: torch.Tensor, b: int, q_start: int, lq: int) -> torch.Tensor:
    """The (lq, H_q) slice of the LSE buffer for sequence b."""
    if problem.lse_layout == "head_major":
        return lse[:, q_start : q_start + lq].t()
    if problem.lse_layout == "token_major":
        return lse[q_start : q_start + lq]
    return lse[b, :lq]


def run_reference(problem: Problem, t: Tensors) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Compute out (and lse) for a checked problem; writes only t.out / t.lse (allocated if None)."""
    if problem.device.type == "meta":
        raise ValueError("q: meta tensors carry no data to attend over; layout_class_of takes them")
    q_starts, len_q, k_starts, len_k = _lengths(t, problem)
    if problem.lse_layout == "padded" and problem.return_lse and len_q and max(len_q) > problem.lse_s_max:
        raise ValueError(
            f"lse: expected a padded buffer with s_max >= the longest query sequence ({max(len_q)} rows), "
            f"got s_max = {problem.lse_s_max}"
        )
    out = t.out
    if out is None:  # rows outside every sequence stay 0
        out = torch.zeros((problem.total_q, problem.h_q, problem.d_v), dtype=problem.out_dtype, device=problem.device)
    lse = t.lse
    if problem.return_lse and lse is None:  # rows outside every sequence stay -inf
        lse = torch.full(problem.lse_shape(), -math.inf, dtype=torch.float32, device=problem.device)
    elif lse is not None and problem.lse_layout == "padded":
        lse.fill_(-math.inf)
    lse_factor = 1.0 if problem.lse_base == "ln" else LOG2_E
    ratio = problem.gqa_ratio
    softcap = problem.softcap
    sinks = None if t.sinks is None else t.sinks.float().unsqueeze(1)  # (H_q, 1), natural log, unscaled
    for b in range(problem.batch):
        lq, lk = len_q[b], len_k[b]
        if lq == 0:
            continue
        qs = q_starts[b]
        keys, values = _gather_kv(t, problem, b, k_starts[b], lk)
        kf = keys.float().repeat_interleave(ratio, dim=1).transpose(0, 1)  # (H_q, lk, D)
        vf = values.float().repeat_interleave(ratio, dim=1).transpose(0, 1)  # (H_q, lk, Dv)
        allowed = allowed_keys(lq, lk, problem, problem.device)
        finite_v = bool(torch.isfinite(vf).all())
        rows = max(1, _CHUNK_ELEMENTS // max(1, lk * problem.h_q))
        for r0 in range(0, lq, rows):
            r1 = min(lq, r0 + rows)
            qf = t.q[qs + r0 : qs + r1].float().transpose(0, 1)  # (H_q, r, D)
            scores = torch.matmul(qf, kf.transpose(1, 2)) * problem.softmax_scale  # (H_q, r, lk)
            if softcap:  # Gemma 2 / FA's softcap: after the scale, before the mask
                scores = torch.tanh(scores / softcap) * softcap
            scores = scores.masked_fill(~allowed[r0:r1].unsqueeze(0), -math.inf)
            row_lse = torch.logsumexp(scores, dim=-1)  # (H_q, r), -inf for rows that see no key
            if sinks is not None:  # one more softmax column per head, with no value: the LSE includes it
                row_lse = torch.logaddexp(row_lse, sinks.expand_as(row_lse))
            # Only a row that sees no key (LSE -inf) is shifted by 0 (its probs are exactly 0); a
            # +inf or NaN LSE (an overflowed or NaN score it sees) makes the row NaN, as IEEE does.
            empty = row_lse == -math.inf
            probs = torch.exp(scores - torch.where(empty, 0.0, row_lse).unsqueeze(-1))
            # (H_q, r, Dv); rows that see no key are exactly 0
            o = torch.matmul(probs, vf) if finite_v else _masked_pv(probs, vf, allowed[r0:r1])
            if sinks is not None:  # a NaN sink: its head's rows are NaN, those that see no key too (the kernel's)
                o = torch.where(row_lse.isnan().unsqueeze(-1), math.nan, o)
            out[qs + r0 : qs + r1] = o.transpose(0, 1).to(out.dtype)
            if lse is not None:
                _lse_view(problem, lse, b, qs, lq)[r0:r1] = (row_lse * lse_factor).t()
    return out, lse


def attention_reference(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    *,
    seqused_q=None,
    seqused_k=None,
    page_table=None,
    kv_layout="NHD",
    causal=False,
    window_size=(-1, -1),
    softmax_scale=None,
    return_lse=False,
    lse_layout="head_major",
    lse_base="ln",
    out=None,
    lse=None,
    sinks=None,
    softcap=0.0,
    split_kv=True,
):
    """`ragged_attn.attention` computed by PyTorch in float32, on any device (CPU included).

    Same arguments, shapes and conventions as `ragged_attn.attention`; out is q's dtype (computed in
    float32, rounded once), lse float32. Unlike the kernels, it
    reads cu_seqlens / seqused / page_table back to the host (one sync per call) and checks their
    values (ValueError for offsets out of order or out of range, lengths above max_seqlen_*,
    page ids outside the pool). Fully masked rows and empty key ranges give O = 0, LSE = -inf
    (LSE = the head's sink, in the LSE's base, with sinks). split_kv is checked and changes nothing
    (the reference never splits).
    """
    problem, tensors = build_problem(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
        seqused_q=seqused_q, seqused_k=seqused_k, page_table=page_table, kv_layout=kv_layout,
        causal=causal, window_size=window_size, softmax_scale=softmax_scale, return_lse=return_lse,
        lse_layout=lse_layout, lse_base=lse_base, out=out, lse=lse, sinks=sinks, softcap=softcap,
        split_kv=split_kv,
    )  # fmt: skip
    o, l_ = run_reference(problem, tensors)
    return (o, l_) if return_lse else o
