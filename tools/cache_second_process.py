"""Device check: a second process with a warm RAGGED_ATTN_CACHE_DIR loads kernels without compiling.

Run after the GPU tests filled the cache (same RAGGED_ATTN_CACHE_DIR). Prints cache_info() and the
max error of one call against the reference; exits 1 if anything compiled or the result is off.
"""

import sys

import torch

import ragged_attn

g = torch.Generator(device="cuda").manual_seed(0)
q = torch.randn(700, 16, 128, device="cuda", dtype=torch.bfloat16, generator=g)
k = torch.randn(900, 4, 128, device="cuda", dtype=torch.bfloat16, generator=g)
v = torch.randn(900, 4, 128, device="cuda", dtype=torch.bfloat16, generator=g)
cu_q = torch.tensor([0, 300, 700], dtype=torch.int32, device="cuda")
cu_k = torch.tensor([0, 400, 900], dtype=torch.int32, device="cuda")
out = ragged_attn.attention(q, k, v, cu_q, cu_k, 400, 500, causal=True)
want = ragged_attn.attention(q, k, v, cu_q, cu_k, 400, 500, causal=True, backend="reference")
err = (out.float() - want.float()).abs().max().item()
info = ragged_attn.cache_info()
print(f"second process: {info}; max abs err vs reference {err:.3e}")
sys.exit(0 if info.compiles == 0 and info.disk_hits >= 1 and err < 2e-2 else 1)
