"""The fast path's Python cost on any machine (no GPU needed): CPU tensors, a no-op kernel entry, the
tile counter stubbed (on a GPU it is a dict hit), 2 x 64 tokens, 8/2 heads, d128, bf16, causal.
Prints median microseconds per call of BoundKernel.try_launch and Plan.run, with and without a
caller's out. Run it for two trees in alternating processes (a busy host falls on both alike):
    for r in 1 2 3; do for t in . .devcache/hostab/58bbb6a; do (cd /tmp && PYTHONPATH=$OLDPWD/$t \
      python $OLDPWD/tools/host_python_ab.py); done; done
(tools/host_ab.sh prepare REF writes an older tree there). The GPU host time is tools/host_overhead.py's."""
import statistics, sys, time
import torch
import ragged_attn
from ragged_attn.fast_launch import BoundKernel
import ragged_attn.fast_launch as fl
if hasattr(fl, "tile_counter"):  # the persistent kernel's counter: on a GPU a dict hit, here a stand-in
    _counter = torch.zeros((1,), dtype=torch.int32)
    fl.tile_counter = lambda q: _counter
torch.manual_seed(0)
q = torch.randn(128, 8, 128, dtype=torch.bfloat16)
k = torch.randn(128, 2, 128, dtype=torch.bfloat16)
v = torch.randn(128, 2, 128, dtype=torch.bfloat16)
cu = torch.tensor([0, 64, 128], dtype=torch.int32)
out = torch.empty_like(q)
plan = ragged_attn.plan(q, k, v, cu, cu, 64, 64, causal=True)
noop = BoundKernel(lambda *a: None, plan.problem)
plan._bound = noop
def bench(fn, n=20000):
    for _ in range(2000): fn()
    ts = []
    for _ in range(9):
        t = time.perf_counter()
        for _ in range(n): fn()
        ts.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(ts)
assert plan.run(q, k, v, cu, cu, 64, 64, out=out) is not None
rows = {
    "try_launch(out=)": lambda: noop.try_launch(q, k, v, cu, cu, 64, None, None, None, out, None),
    "try_launch(alloc)": lambda: noop.try_launch(q, k, v, cu, cu, 64, None, None, None, None, None),
    "Plan.run(out=)": lambda: plan.run(q, k, v, cu, cu, 64, 64, out=out),
    "Plan.run(alloc)": lambda: plan.run(q, k, v, cu, cu, 64, 64),
}
print(" ".join(f"{name}={bench(fn):.2f}" for name, fn in rows.items()))
