"""Does vLLM's mixed batch gain when its decode rows (HBM-bound) run beside its prefill chunks
(tensor-bound) instead of before them? A probe for issue 14 item 4, no kernel change.

The kernel deals tiles in linear order from one counter (tile_scheduler.py); with the batch order
on, the decode rows (the longest keys) come first, so the first ~900 us stream K/V on every SM and
the chunks' math follows: the mixed batch (~1650 us) costs about decode alone (~1045) + chunks alone
(~615-645). This probe measures what dealing both kinds together would give, at sequence
granularity, by feeding the kernel a batch in a hand-made order with its batch order off:

- each prefill chunk (lq queries over lk keys, bottom-right causal) is cut into pieces of PIECE
  queries: piece [s, e) is a sequence of e - s queries over the chunk's first lk - lq + e keys
  (the same page-table row), which sees exactly the keys those queries see in the chunk, so its
  rows are the chunk's rows;
- the decode rows (longest keys first) and the pieces (most keys first) are merged so that the
  pieces spread evenly through the decode rows ("even"), or all pieces first / all decode first.
Every variant's output, mapped back to the original rows, is compared with the library call's.

Also: the decode rows alone on fewer CTAs (launch.sm_count patched): how much HBM bandwidth a
part of the SMs can draw, which bounds what any overlap can give.

Env: PROBE_PIECES (default "64,128,256"), PROBE_CTAS (default "132,100,66"), BENCH_REPS (15),
RAGGED_ATTN_SM90_PREBUILT (objects of the d128 paged / ragged classes). Usage on the H200:
    python3 tools/probe_mixed_overlap.py
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_vllm_mixed as vb  # noqa: E402

import ragged_attn  # noqa: E402
from ragged_attn import backends  # noqa: E402
from ragged_attn import compile_cache  # noqa: E402
from ragged_attn import problem as problem_mod  # noqa: E402
from ragged_attn.bench.timing import gpu_ms_interleaved  # noqa: E402
from ragged_attn.kernels import sm90  # noqa: E402
from ragged_attn.kernels.sm90 import launch as launch_mod  # noqa: E402


def pieces_of(batch: vb.MixedBatch, piece: int):
    """[(kind, orig b, q start in the original q, lq, lk)]: decode rows as they are, chunks cut into
    pieces of `piece` queries (the last shorter)."""
    seqs = []
    for b, (lq, lk, kind) in enumerate(zip(batch.lens_q, batch.lens_k, batch.kinds, strict=True)):
        s0 = batch.starts_q[b]
        if kind == "decode" or piece <= 0:
            seqs.append((kind, b, s0, lq, lk))
            continue
        for s in range(0, lq, piece):
            e = min(lq, s + piece)
            seqs.append((kind, b, s0 + s, e - s, lk - lq + e))
    return seqs


def merged(seqs, how: str):
    """The order: decode rows by keys (longest first) and pieces by keys (most first), then
    "even" (pieces spread through the decode rows by count), "pieces_first" or "decode_first"."""
    dec = sorted([s for s in seqs if s[0] == "decode"], key=lambda s: -s[4])
    pre = sorted([s for s in seqs if s[0] != "decode"], key=lambda s: -s[4])
    if how == "pieces_first":
        return pre + dec
    if how == "decode_first":
        return dec + pre
    out, n, m = [], len(dec), len(pre)
    total = n + m
    i = j = 0
    for t in range(total):  # position t takes a piece when the pieces' share passes a whole one
        if j < m and (i >= n or (t + 1) * m // total > j):
            out.append(pre[j])
            j += 1
        else:
            out.append(dec[i])
            i += 1
    return out


def launch_kwargs(batch: vb.MixedBatch, order):
    """(kwargs of launch_forward, the original q rows of the new rows) for a batch in `order`."""
    dev = batch.q.device
    rows = torch.cat([torch.arange(s, s + lq, device=dev) for _, _, s, lq, _ in order])
    q = batch.q.index_select(0, rows).contiguous()
    cu = [0]
    for seq in order:
        cu.append(cu[-1] + seq[3])
    table = batch.page_table.index_select(0, torch.tensor([seq[1] for seq in order], device=dev))
    used = torch.tensor([seq[4] for seq in order], dtype=torch.int32, device=dev)
    cu_q = torch.tensor(cu, dtype=torch.int32, device=dev)
    args = (q, batch.k_pool, batch.v_pool, cu_q, None, max(seq[3] for seq in order), max(seq[4] for seq in order))
    kw = dict(seqused_k=used, page_table=table, causal=True)
    problem, tensors = problem_mod.build_problem(*args, **kw)
    lc = backends.check_support(problem)
    out = torch.empty(q.shape[0], q.shape[1], batch.v_pool.shape[3], device=dev, dtype=q.dtype)
    kwargs = backends.kernel_arguments(problem, tensors._replace(out=out, lse=None), out, None)
    return lc, kwargs, rows


def main() -> None:
    dev = torch.device("cuda")
    reps = int(os.environ.get("BENCH_REPS", "15"))
    pieces = vb.env_ints("PROBE_PIECES", "64,128,256")
    ctas = vb.env_ints("PROBE_CTAS", "132,100,66")
    lens_q, lens_k, kinds = vb.vllm_mixed_lengths(vb.SEED, order="decode_first")
    batch = vb.build_batch(lens_q, lens_k, kinds, 16, device=dev)
    paged_args = (batch.q, batch.k_pool, batch.v_pool, batch.cu_seqlens_q, None, batch.max_seqlen_q, batch.max_seqlen_k)
    paged_kw = dict(seqused_k=batch.seqused_k, page_table=batch.page_table, causal=True)
    lc = ragged_attn.layout_class_of(*paged_args, **paged_kw)
    vb.preload_prebuilt("ragged_attn", [lc], os.environ.get("RAGGED_ATTN_SM90_PREBUILT", ""))
    compiled = compile_cache.get_kernel(lc, sm90.compile_forward)
    with torch.no_grad():
        ref = ragged_attn.attention(*paged_args, **paged_kw)
        impls, checks = {"library call (batch order on)": lambda: ragged_attn.attention(*paged_args, **paged_kw)}, {}
        for piece in [0, *pieces]:
            seqs = pieces_of(batch, piece)
            for how in ("decode_first", "even", "pieces_first") if piece else ("decode_first",):
                order = merged(seqs, how)
                lc2, kw, rows = launch_kwargs(batch, order)
                assert lc2 == lc, (lc2, lc)
                for border in (False, True) if how == "even" or not piece else (False,):
                    name = f"pieces {piece or 'none'} {how} batch_order={int(border)}"

                    def call(kw=kw, border=border):
                        sm90.launch_forward(compiled, **kw, pack_rows=True, batch_order=border)
                        return kw["out"]

                    kw["out"].fill_(float("nan"))
                    call()
                    torch.cuda.synchronize()
                    got = torch.empty_like(ref)
                    got[rows] = kw["out"]
                    checks[name] = (got.float() - ref.float()).abs().max().item()
                    impls[name] = call
        # decode rows alone on fewer CTAs
        dec = [b for b, kind in enumerate(kinds) if kind == "decode"]
        dbatch = vb.build_batch([lens_q[b] for b in dec], [lens_k[b] for b in dec], ["decode"] * len(dec), 16, device=dev)
        dorder = merged(pieces_of(dbatch, 0), "decode_first")
        _, dkw, _ = launch_kwargs(dbatch, dorder)
        real = launch_mod.sm_count
        for n in ctas:

            def dcall(n=n):
                launch_mod.sm_count = lambda _dev, n=n: n
                try:
                    sm90.launch_forward(compiled, **dkw, pack_rows=True, batch_order=False)
                finally:
                    launch_mod.sm_count = real
                return dkw["out"]

            impls[f"decode rows alone, {n} CTAs"] = dcall
        times = gpu_ms_interleaved(impls, dev, 1000.0, reps)
    gb = dbatch.kv_bytes() / 1e9
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, {reps} rounds; mixed batch page 16, "
          f"{len(lens_q)} sequences; decode rows {gb:.3f} GB of K/V")  # fmt: skip
    print("| variant | GPU us | x library call | max diff vs library call |")
    print("|---|---|---|---|")
    base = times["library call (batch order on)"]
    for name, ms in times.items():
        extra = f"{checks[name]:.3g}" if name in checks else (f"{gb / ms:.2f} TB/s" if "alone" in name else "")
        print(f"| {name} | {ms * 1e3:.1f} | {ms / base:.3f} | {extra} |")


if __name__ == "__main__":
    main()
