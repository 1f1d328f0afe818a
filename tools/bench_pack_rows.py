"""Row packing forced on and off, interleaved, on batches around `split_kv.choose_pack_rows`' rule.

For each batch (32/8 heads, d 128, bf16, causal, LSE, ragged K/V with q and k lengths alike unless
said): the tile counts unpacked and row-packed, what the rule picks (PACK_ROWS_ALWAYS / PACK_ROWS_LONG with max_seqlen_k), and the
d128 class's GPU time with `launch_forward(pack_rows=False)` and `(pack_rows=True)`, both in one
`gpu_ms_interleaved` run (L2 flushed, sleep head start), so the rule's threshold can be set from
measurements (docs/benchmarks/2026-12-03-h200-issue10-session12, section 6; -session13).

Usage: [RAGGED_ATTN_SM90_PREBUILT=DIR] [PACK_BENCH_ROUNDS=20] python tools/bench_pack_rows.py
(the kernel from DIR/<class>.o when there, else compiled here; needs a GPU)
"""

from __future__ import annotations

import datetime
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))

from bench_paged_sm90 import kernel  # noqa: E402
from ragged_attn.bench.timing import gpu_ms_interleaved  # noqa: E402
from ragged_attn.bench.workloads import longtail_lengths, uniform_lengths_until  # noqa: E402
from ragged_attn.kernels.sm90 import launch_forward  # noqa: E402
from ragged_attn.kernels.sm90.split_kv import choose_pack_rows, row_packed_tiles, unsplit_tiles  # noqa: E402

H_Q, H_KV, D = 32, 8, 128


def batches():
    """(name, lens_q, lens_k): prefill mixes that a 1/10 rule packed, short rows over one block and
    over long keys, decode rows."""
    from bench_vllm_mixed import vllm_mixed_lengths

    vq, vk, _ = vllm_mixed_lengths()
    return [
        ("longtail14", list(longtail_lengths()), None),
        ("100 x 300", [300] * 100, None),
        ("32 x 64", [64] * 32, None),
        ("64 x 32", [32] * 64, None),
        ("32 x 64 over 2048", [64] * 32, [2048] * 32),
        ("32 x 64 over 8192", [64] * 32, [8192] * 32),
        ("uniform14", list(uniform_lengths_until(16384)), None),
        ("vLLM mixed (ragged K/V)", list(vq), list(vk)),
        ("decode 64 x 1 over 4096", [1] * 64, [4096] * 64),
        ("spec 16 x 4 over 2048", [4] * 16, [2048] * 16),
    ]


def main():
    dev = torch.device("cuda")
    fwd = kernel("ragged")
    rounds = int(os.environ.get("PACK_BENCH_ROUNDS", "20"))
    g = torch.Generator(device=dev).manual_seed(0)
    rows = []
    for name, lens_q, lens_k in batches():
        lens_k = lens_k or lens_q
        tq, tk = sum(lens_q), sum(lens_k)
        q = torch.randn(tq, H_Q, D, device=dev, dtype=torch.bfloat16, generator=g)
        k = torch.randn(tk, H_KV, D, device=dev, dtype=torch.bfloat16, generator=g)
        v = torch.randn(tk, H_KV, D, device=dev, dtype=torch.bfloat16, generator=g)
        cu_q = torch.tensor([0] + torch.tensor(lens_q).cumsum(0).tolist(), dtype=torch.int32, device=dev)
        cu_k = torch.tensor([0] + torch.tensor(lens_k).cumsum(0).tolist(), dtype=torch.int32, device=dev)
        outs = {p: torch.empty_like(q) for p in (False, True)}
        lses = {p: torch.empty(tq, H_Q, device=dev) for p in (False, True)}

        def call(pack):
            return lambda: launch_forward(
                fwd, q=q, k=k, v=v, out=outs[pack], lse=lses[pack], cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                seqused_q=None, seqused_k=None, batch=len(lens_q), max_seqlen_q=max(lens_q), lse_s_max=0,
                softmax_scale=D**-0.5, window_left=-1, window_right=-1, bottom_right=True,
                lse_strides=(0, H_Q, H_Q, 1), pack_rows=pack,
            )  # fmt: skip

        fns = {"unpacked": call(False), "packed": call(True)}
        ms = gpu_ms_interleaved(fns, dev, head_start_us=300, reps=rounds)
        diff = (outs[False].float() - outs[True].float()).abs().max().item()
        args = (len(lens_q), tq, max(lens_q), H_Q, H_KV)
        unpacked_tiles = unsplit_tiles(*args, 128, False)
        packed_tiles = row_packed_tiles(*args, 128)
        rows.append((name, len(lens_q), tq, unpacked_tiles, packed_tiles, choose_pack_rows(*args, 128, 0, max(lens_k)),
                     ms["unpacked"], ms["packed"], diff))  # fmt: skip
        print(f"done {name}", flush=True)
    print(f"\n{datetime.date.today()} {torch.cuda.get_device_name()}: h {H_Q}/{H_KV}, d {D}, bf16, causal, LSE, "
          f"{rounds} interleaved rounds (GPU ms medians)")  # fmt: skip
    print("| batch | B | tokens | tiles unpacked | tiles packed | rule packs | unpacked ms | packed ms | packed / unpacked | max diff |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, b, t, ut, pt, rule, mu, mp, diff in rows:
        print(f"| {name} | {b} | {t} | {ut} | {pt} ({pt / ut:.2f}) | {rule} | {mu:.4f} | {mp:.4f} | {mp / mu:.3f} | {diff:.3g} |")


if __name__ == "__main__":
    main()
