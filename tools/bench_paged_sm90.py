"""Paged KV speed on the sm_90a kernel beside ragged KV at the same lengths, and FA4 with a page table.

Workload (issue 5, item 6): 14 long-tail sequences (64..2048 tokens, ragged_attn.bench.workloads
.longtail_lengths), q and k lengths alike, 32/8 heads, d 128, bf16, causal, LSE on. Paged pools are
NHD with pages shuffled; page sizes 16, 64 and 128 (issue 10 item 7). Useful TFLOP/s = 4 * H_q * d * allowed pairs / time.
Times: do_bench median and GPU-only median (ragged_attn.bench.timing.gpu_ms). Ours is launched
through `launch_forward` (no API checks); kernels from RAGGED_ATTN_SM90_PREBUILT or compiled here.
PAGED_BENCH_LENS=N,N,... replaces the 14 lengths (e.g. 8192 for one long sequence, or 64 x 128:
`python -c "print(','.join(['128'] * 64))"`), to tell a per-tile cost from a per-block one.
PAGED_BENCH_D=64|96|128|192 picks the head-dim class (192: d_qk 192, d_v 128; default 128).
PAGED_BENCH_IN_ORDER=16,64: also those page sizes with each sequence's pages in order in the pool
(the memory locality alone). PAGED_BENCH_WINDOW=16:64: page 16 shuffled only within runs of 64
consecutive pages (locality at the window's scale kept). PAGED_BENCH_SPREAD=16:64: page 16 drawn at
random from a pool 64 times the batch's pages (how far apart pages lie in memory). PAGED_BENCH_INTERLEAVED=R: after the table, every run again in R rounds interleaved
(ragged_attn.bench.timing.gpu_ms_interleaved: clock drift falls on all runs alike), GPU ms medians.
cuDNN's paged SDPA (ragged_attn.bench.peers.CudnnTHD) runs on every pool too (PAGED_BENCH_CUDNN=0: not).
Mind the order: in the interleaved rounds each run follows the one before it, and a paged launch that
follows another kernel binary costs ~5-7 us more than one after itself (H100, session 19;
tools/probe_kernel_switch.py), so the first paged pool of a round (and a variant's first) is the
cold one. PAGED_BENCH_PAGES=64,128,16 sets the shuffled pools' page sizes and their order (default
16,64,128); PAGED_BENCH_RAGGED_TWICE=1 times the ragged launch twice in a row.
Usage: [RAGGED_ATTN_VARIANTS=v1,v2] [PAGED_BENCH_FA4=0] python tools/bench_paged_sm90.py (variants: the kernels built into
RAGGED_ATTN_SM90_PREBUILT/<variant>/, timed beside this tree's)
"""

from __future__ import annotations

import datetime
import os
import sys

import torch
import triton

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ragged_attn.bench.timing import gpu_ms, gpu_ms_interleaved  # noqa: E402
from ragged_attn.bench.workloads import longtail_lengths  # noqa: E402
from ragged_attn.kernels.sm90 import compile_forward, launch_forward  # noqa: E402
from ragged_attn.layout_class import LayoutClass  # noqa: E402

H_Q, H_KV = 32, 8
D = int(os.environ.get("PAGED_BENCH_D", "128"))  # d_qk
D_V = 128 if D == 192 else D


def kernel(kv, sub=""):
    """This tree's kernel of the class, or (sub) a variant's from RAGGED_ATTN_SM90_PREBUILT/<sub>/
    (None when that build is missing)."""
    lc = LayoutClass("sm_90a", D, D_V, "bf16", "bf16", "causal", True, kv)
    path = os.path.join(os.environ.get("RAGGED_ATTN_SM90_PREBUILT", ""), sub, lc.name + ".o")
    if os.environ.get("RAGGED_ATTN_SM90_PREBUILT") and os.path.exists(path):
        import cutlass.cute as cute

        return cute.runtime.load_module(path, enable_tvm_ffi=True).fwd
    return None if sub else compile_forward(lc)


def make_problem(dev="cuda"):
    """The longtail14 batch: (lens, q, k, v, cu_seqlens, seqused_k, launch_forward's common kwargs
    (out, lse, ...), flops, pools) where pools(page_size) -> shuffled NHD pools (NaN in unused
    slots) holding the same keys, and their page table."""
    spec = os.environ.get("PAGED_BENCH_LENS", "")
    lens = [int(n) for n in spec.split(",")] if spec else list(longtail_lengths())
    dt = torch.bfloat16
    total = sum(lens)
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(total, H_Q, D, device=dev, dtype=dt, generator=g)
    k = torch.randn(total, H_KV, D, device=dev, dtype=dt, generator=g)
    v = torch.randn(total, H_KV, D_V, device=dev, dtype=dt, generator=g)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32, device=dev)
    used = torch.tensor(lens, dtype=torch.int32, device=dev)
    out = torch.empty(total, H_Q, D_V, device=dev, dtype=dt)
    lse = torch.empty(total, H_Q, device=dev)
    pairs = sum(n * (n + 1) // 2 for n in lens)
    flops = 2 * H_Q * (D + D_V) * pairs
    common = dict(out=out, lse=lse, cu_seqlens_q=cu, seqused_q=None, batch=len(lens), max_seqlen_q=max(lens),
                  lse_s_max=0, softmax_scale=D**-0.5, window_left=-1, window_right=-1, bottom_right=True,
                  lse_strides=(0, H_Q, H_Q, 1))

    def pools(ps, in_order=False, window=0, spread=1):
        """NHD pools of page size ps: pages shuffled over the pool (default), in order (in_order),
        shuffled only within runs of `window` consecutive pages (window > 0), or drawn at random
        from a pool `spread` times the pages the batch needs (spread > 1; the rest NaN)."""
        n_pages = [(n + ps - 1) // ps for n in lens]
        need = sum(n_pages)
        gen = torch.Generator().manual_seed(ps)
        if in_order:  # PAGED_BENCH_IN_ORDER: each sequence's pages consecutive in the pool
            perm = torch.arange(need)
        elif window:  # PAGED_BENCH_WINDOW: locality kept at the window's scale, lost below it
            perm = torch.cat([w[torch.randperm(len(w), generator=gen)] for w in torch.arange(need).split(window)])
        else:
            perm = torch.randperm(need * spread, generator=gen)[:need]
        perm = perm.to(dev)
        kp = torch.full((need * spread, ps, H_KV, D), float("nan"), device=dev, dtype=dt)
        vp = torch.full((need * spread, ps, H_KV, D_V), float("nan"), device=dev, dtype=dt)
        table = torch.zeros(len(lens), max(n_pages), dtype=torch.int32, device=dev)
        start, nxt = 0, 0
        for b, (n, npg) in enumerate(zip(lens, n_pages)):
            pages = perm[nxt : nxt + npg]
            table[b, :npg] = pages.to(torch.int32)
            tok = torch.arange(n, device=dev)
            kp[pages[tok // ps], tok % ps] = k[start : start + n]
            vp[pages[tok // ps], tok % ps] = v[start : start + n]
            start, nxt = start + n, nxt + npg
        return kp, vp, table

    return lens, q, k, v, cu, used, common, flops, pools


def launches(q, k, v, cu, used, common):
    """(ragged_call(kernel), paged_call(kernel, k_pool, v_pool, page_table)): zero-argument calls
    of `launch_forward` on make_problem's batch, ragged and paged (NHD pools)."""

    def ragged_call(kern):
        return lambda: launch_forward(kern, q=q, k=k, v=v, cu_seqlens_k=cu, seqused_k=None, **common)

    def paged_call(kern, kp, vp, table):
        return lambda: launch_forward(
            kern, q=q, k=kp, v=vp, cu_seqlens_k=None, seqused_k=used, page_table=table, kv_layout="NHD", **common
        )

    return ragged_call, paged_call


def _raise(error: Exception):
    raise error


def record_cudnn(record, lens, q, k, v, cu, used, pools_by_label):
    """cuDNN THD SDPA ragged and on each pool, one graph per pool built outside the timing by one
    CudnnTHD (one handle; each bound call keeps its own graph); a system that is missing, declines
    or fails is reported as a FAILED row by `record`."""
    from ragged_attn.bench.peers import CudnnTHD
    from ragged_attn.bench.workloads import Inputs, Model, Workload

    system = CudnnTHD()
    why = system.availability(q.device)
    if why:
        record("cuDNN (setup)", lambda: _raise(RuntimeError(why)))
        return
    model = Model("paged-bench", H_Q, H_KV, D, D_V)
    lens_t, max_len = tuple(lens), max(lens)
    cases = [("cuDNN ragged", None, Inputs(q, k, v, cu, cu, max_len, max_len))]
    for ps, (kp, vp, table) in pools_by_label.items():
        cases.append((f"cuDNN paged page {ps}", kp.shape[1], Inputs(q, kp, vp, cu, None, max_len, max_len, table, used)))
    for label, size, inp in cases:
        try:
            w = Workload(label, model, lens_t, lens_t, True, page_size=size)
            system.setup(w, inp)
            fn, _ = system.bind(w, inp)
        except Exception as e:  # noqa: BLE001 (reported as a row, as record does)
            record(f"{label} (setup)", lambda e=e: _raise(e))
            continue
        record(label, fn)


def main():
    dev = "cuda"
    lens, q, k, v, cu, used, common, flops, pools = make_problem(dev)
    out = common["out"]
    rows = []
    timed = {}  # label -> call, for PAGED_BENCH_INTERLEAVED

    def record(label, fn, ref=None):
        print(f"timing {label}", flush=True)
        try:
            fn()
            timed[label] = fn
            torch.cuda.synchronize()
            diff = float("nan") if ref is None else (out.float() - ref.float()).abs().max().item()
            t = triton.testing.do_bench(fn, warmup=20, rep=100, return_mode="median")
            gms = gpu_ms(fn, torch.device(dev), head_start_us=300, reps=20)
            rows.append((label, t, gms, flops / (t * 1e-3) / 1e12, flops / (gms * 1e-3) / 1e12, diff))
        except Exception as e:  # report and keep going
            rows.append((f"{label} FAILED {type(e).__name__}: {e}"[:150], 0, 0, 0, 0, float("nan")))

    ragged_call, paged_call = launches(q, k, v, cu, used, common)
    record("ours ragged", ragged_call(kernel("ragged")))
    ref = out.clone()
    if os.environ.get("PAGED_BENCH_RAGGED_TWICE", "0") == "1":
        # the same ragged launch again, right after the first in each round (the first follows
        # another kernel: what a launch pays for following another kernel, and what it saves when
        # it repeats)
        record("ours ragged again", ragged_call(kernel("ragged")), ref)
    paged = kernel("paged")
    # PAGED_BENCH_PAGES (default 16,64,128): the shuffled pools' page sizes, in the order timed
    # (each round times them in this order after the ragged launch: the first paged launch of a
    # round follows another kernel)
    page_sizes = [int(x) for x in os.environ.get("PAGED_BENCH_PAGES", "16,64,128").split(",")]
    fa4_inputs = {ps: pools(ps) for ps in page_sizes}
    # PAGED_BENCH_IN_ORDER=16,64: also pools of those page sizes whose pages lie in order (labelled
    # "16 in order"): the same kernel and page count, only the pool's memory locality differs.
    for ps in filter(None, os.environ.get("PAGED_BENCH_IN_ORDER", "").split(",")):
        fa4_inputs[f"{ps} in order"] = pools(int(ps), in_order=True)
    # PAGED_BENCH_WINDOW=16:64: page 16 with its pages shuffled only within runs of 64 consecutive
    # pages (2 MiB of 16-key d128 pages at 8 K/V heads: a large page's worth), labelled "16 win64".
    for spec in filter(None, os.environ.get("PAGED_BENCH_WINDOW", "").split(",")):
        ps, w = (int(x) for x in spec.split(":"))
        fa4_inputs[f"{ps} win{w}"] = pools(ps, window=w)
    # PAGED_BENCH_SPREAD=16:64: page 16 drawn at random from a pool 64 times the batch's pages (a
    # serving engine's pool spans most of the GPU's memory), labelled "16 spread64".
    for spec in filter(None, os.environ.get("PAGED_BENCH_SPREAD", "").split(",")):
        ps, f = (int(x) for x in spec.split(":"))
        fa4_inputs[f"{ps} spread{f}"] = pools(ps, spread=f)
    for ps, (kp, vp, table) in fa4_inputs.items():
        record(f"ours paged page {ps}", paged_call(paged, kp, vp, table), ref)
    for sub in filter(None, os.environ.get("RAGGED_ATTN_VARIANTS", "").split(",")):
        alt_ragged, alt_paged = kernel("ragged", sub), kernel("paged", sub)
        if alt_ragged is not None:
            record(f"ours {sub} ragged", ragged_call(alt_ragged), ref)
        for ps, (kp, vp, table) in fa4_inputs.items() if alt_paged is not None else ():
            record(f"ours {sub} paged page {ps}", paged_call(alt_paged, kp, vp, table), ref)
    try:
        if os.environ.get("PAGED_BENCH_FA4", "1") == "0":  # skip FA4 (its JIT compiles take minutes)
            raise ImportError("skipped (PAGED_BENCH_FA4=0)")
        from flash_attn.cute import flash_attn_varlen_func as fa4

        record("FA4 ragged", lambda: fa4(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=max(lens),
                                         max_seqlen_k=max(lens), causal=True, return_lse=True))
        for ps, (kp, vp, table) in fa4_inputs.items():
            record(f"FA4 paged page {ps}", lambda kp=kp, vp=vp, table=table: fa4(
                q, kp, vp, cu_seqlens_q=cu, seqused_k=used, page_table=table, max_seqlen_q=max(lens),
                causal=True, return_lse=True))  # fmt: skip
    except ImportError as e:
        rows.append((f"FA4 not importable: {e}", 0, 0, 0, 0, float("nan")))
    # cuDNN's paged SDPA (FlashInfer's cuDNN prefill; ragged_attn.bench.peers.CudnnTHD) on the same
    # pools: a peer whose instruction stream does not depend on where the pages lie either.
    # PAGED_BENCH_CUDNN=0 skips it.
    if os.environ.get("PAGED_BENCH_CUDNN", "1") != "0":
        record_cudnn(record, lens, q, k, v, cu, used, fa4_inputs)

    name = torch.cuda.get_device_name()
    print(f"\n{datetime.date.today()} {name}: longtail14 {lens}, h {H_Q}/{H_KV}, d {D}/{D_V}, bf16, causal, LSE")
    print("| run | do_bench ms | GPU ms | TFLOP/s (do_bench) | TFLOP/s (GPU) | max abs diff vs ragged |")
    print("|---|---|---|---|---|---|")
    base = rows[0][4] if rows and rows[0][4] else None
    for label, t, gms, tf, tfg, diff in rows:
        rel = f" ({tfg / base:.2f}x ragged)" if base and tfg else ""
        print(f"| {label} | {t:.3f} | {gms:.3f} | {tf:.0f} | {tfg:.0f}{rel} | {diff:.3g} |")
    rounds = int(os.environ.get("PAGED_BENCH_INTERLEAVED", "0"))
    if rounds:
        ms = gpu_ms_interleaved(timed, torch.device(dev), head_start_us=300, reps=rounds)
        print(f"\ninterleaved, {rounds} rounds (GPU ms median, useful TFLOP/s):")
        print("| run | GPU ms | TFLOP/s |")
        print("|---|---|---|")
        first = next(iter(ms.values()))
        for label, m in ms.items():
            # a peer's paged rows also against its own ragged row ("FA4 ragged", "cuDNN ragged")
            peer = label.split(" ")[0]
            own = ms.get(f"{peer} ragged") if peer in ("FA4", "cuDNN") else None
            mine = f", {own / m:.3f}x {peer} ragged" if own and "paged" in label else ""
            print(f"| {label} | {m:.4f} | {flops / (m * 1e-3) / 1e12:.0f} ({first / m:.3f}x ragged{mine}) |")


if __name__ == "__main__":
    main()
