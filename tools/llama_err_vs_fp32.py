"""How far ragged_attn's bf16 Llama (tests/gpu/test_transformers_gpu.py's random GQA decoder) lies
from the same model in float32 with sdpa, beside sdpa's own bf16 run: tells a kernel error from
bf16 rounding when the bf16-vs-bf16 test's tolerance trips.
Usage: python tools/llama_err_vs_fp32.py SEED [SEED ...] (the seeds its failure messages print)"""

from __future__ import annotations

import copy
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import transformers  # noqa: E402

import ragged_attn.compat.transformers as rt  # noqa: E402,F401  (registers the implementation)
from tests.gpu.test_transformers_gpu import CUTE, _llama, _padded  # noqa: E402


@torch.no_grad()
def main():
    for seed in map(int, sys.argv[1:]):
        torch.manual_seed(seed)
        ours = _llama(CUTE).eval()
        ref = _llama("sdpa").eval()
        ref.load_state_dict(ours.state_dict())
        ref32 = copy.deepcopy(ref).to("cuda", torch.float32)
        ours, ref = ours.to("cuda", torch.bfloat16), ref.to("cuda", torch.bfloat16)
        for side in ("right", "left"):
            g = torch.Generator().manual_seed(seed)
            lens = torch.randint(1, 300, (8,), generator=g).tolist()
            ids, mask = _padded(g, lens, 512, side)
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            outs = {
                name: m.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)
                .last_hidden_state[mask.bool()].float()
                for name, m in (("ours", ours), ("sdpa_bf16", ref), ("sdpa_fp32", ref32))
            }
            want = outs["sdpa_fp32"]
            print(
                f"seed {seed} {side} lens {lens}: max |x| {want.abs().max().item():.2f}; "
                f"ours-fp32 {(outs['ours'] - want).abs().max().item():.4f}, "
                f"sdpa_bf16-fp32 {(outs['sdpa_bf16'] - want).abs().max().item():.4f}, "
                f"ours-sdpa_bf16 {(outs['ours'] - outs['sdpa_bf16']).abs().max().item():.4f}",
                flush=True,
            )


if __name__ == "__main__":
    print(transformers.__version__)
    main()
