"""Bandwidth of merge_state / merge_states on the GPU: the fused kernel beside the torch path.

Issue 14 item 3: at least 70% of the H200's copy bandwidth (~4.3 TB/s) on 32k tokens x 32 heads x
d128. Cases: merge_state (2 states, two contiguous (T, H, D) tensors) and merge_states with S = 2
and 4 ((T, S, H, D) contiguous), bf16, LSE base 2, 1% of the rows' parts -inf. Times:
ragged_attn.bench.timing.gpu_ms (each rep after an L2 flush and a sleep head start, so host launch
time stays out), the median of REPS reps; the 2026-12-03 numbers were taken with CUDA events around
each call alone (launch latency included). GB/s counts the
bytes a single pass must move: every input read once (v and the float32 LSEs), every output written
once. Printed beside it: the fraction of 4.3 TB/s and of a torch copy of the same bytes timed the
same way. The torch path is timed with RAGGED_ATTN_MERGE_KERNEL=0 (ragged_attn/merge.py).

Usage (CUDA; < 60 s with the two compiles): PYTHONPATH=$PWD python3 tools/bench_merge.py
"""

from __future__ import annotations

import datetime
import math
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import ragged_attn  # after the sys.path line
from ragged_attn import merge
from ragged_attn.bench.timing import gpu_ms

T, H, D, DTYPE = 32768, 32, 128, torch.bfloat16
TARGET_TBS = 4.3  # the H200's copy bandwidth as issue 14 states it
REPS = 30
HEAD_START_US = 200.0  # the sleep before each timed call: longer than the host's launch path


def cases(gen):
    """(name, fn, v, s): the timed call and the stacked inputs it reads."""
    out = []
    for states in (2, 2, 4):
        v = torch.randn(T, states, H, D, generator=gen, device="cuda", dtype=DTYPE)
        s = torch.randn(T, states, H, generator=gen, device="cuda") * 4.0
        s[torch.rand(s.shape, generator=gen, device="cuda") < 0.01] = -math.inf
        if not out:  # merge_state: two separate contiguous tensors per part
            parts = (v[:, 0].contiguous(), s[:, 0].contiguous(), v[:, 1].contiguous(), s[:, 1].contiguous())
            out.append(("merge_state", lambda p=parts: ragged_attn.merge_state(*p), v, s))
        else:
            out.append((f"merge_states S={states}", lambda v=v, s=s: ragged_attn.merge_states(v, s), v, s))
    return out


def first_call(fn):
    """(whether the fused kernel served it, fn's result): merge._merge_kernel spied on once."""
    launches = []
    real = merge._merge_kernel

    def spy(*args, **kwargs):
        launches.append(args[0])
        return real(*args, **kwargs)

    merge._merge_kernel = spy
    try:
        result = fn()
    finally:
        merge._merge_kernel = real
    return bool(launches), result


def with_torch_path(fn):
    def run():
        os.environ[merge.KERNEL_ENV] = "0"
        try:
            return fn()
        finally:
            os.environ.pop(merge.KERNEL_ENV, None)

    return run


def main() -> int:
    if not torch.cuda.is_available():
        print("bench_merge: needs a CUDA GPU", file=sys.stderr)
        return 2
    os.environ.pop(merge.KERNEL_ENV, None)
    dev = torch.cuda.get_device_name()
    cuda = torch.device("cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    print(f"# merge bandwidth, {dev}, torch {torch.__version__}, {datetime.date.today()}, "
          f"T={T} H={H} D={D} {str(DTYPE).replace('torch.', '')}, median of {REPS} after an L2 flush and a sleep head start")
    print(f"{'case':<20} {'path':<7} {'ms':>8} {'GB/s':>8} {'of 4.3TB/s':>11} {'of copy':>8}")
    for name, fn, v, s in cases(gen):
        kernel, got = first_call(fn)  # compiles on the first call
        want = with_torch_path(fn)()
        torch.testing.assert_close(got[0], want[0], rtol=2**-7, atol=2**-7)
        torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)
        moved = v.numel() * v.element_size() + s.numel() * 4 + got[0].numel() * got[0].element_size() + got[1].numel() * 4
        src = torch.empty(moved // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        copy_ms = gpu_ms(lambda src=src, dst=dst: dst.copy_(src), cuda, HEAD_START_US, REPS)
        del src, dst
        for path, f in (("kernel" if kernel else "torch*", fn), ("torch", with_torch_path(fn))):
            ms = gpu_ms(f, cuda, HEAD_START_US, REPS)
            gbs = moved / ms / 1e6  # bytes / (ms * 1e-3 s) / 1e9
            print(f"{name:<20} {path:<7} {ms:8.3f} {gbs:8.0f} {gbs / (TARGET_TBS * 1e3):10.1%} {copy_ms / ms:8.1%}")
        print(f"{'':<20} {'copy':<7} {copy_ms:8.3f} {moved / copy_ms / 1e6:8.0f}  ({moved / 1e9:.3f} GB moved)")
    print("torch* = the kernel did not serve this case (not an sm_90 GPU or no CuTe DSL): torch path twice")
    return 0


if __name__ == "__main__":
    sys.exit(main())
