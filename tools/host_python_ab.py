"""The fast path's Python cost on any machine (no GPU needed): CPU tensors, a no-op kernel entry, the
tile counter stubbed (on a GPU it is a dict hit), 2 x 64 tokens, 8/2 heads, d128, bf16, causal.
Prints median microseconds per call of BoundKernel.try_launch and Plan.run, with and without a
caller's out. Run it for two trees in alternating processes (a busy host falls on both alike):
    for r in 1 2 3; do for t in . .devcache/hostab/58bbb6a; do (cd /tmp && PYTHONPATH=$OLDPWD/$t \
      python $OLDPWD/tools/host_python_ab.py); done; done
(tools/host_ab.sh prepare REF writes an older tree there). The GPU host time is tools/host_overhead.py's.
Paged rows (a tree whose fast path serves page tables): the same q over NHD / HND page pools (11 pages
of 16 slots, a (2, 4) page table, seqused_k, cu_seqlens_k None), the fast path (try_launch, Plan.run)
against the checked path's Python (build_problem, the class and kernel limits of check_support,
launch_cute and launch_forward with the same no-op entry; check_support's device and prebuilt
checks need a GPU and are left out, so the checked row is a lower bound)."""
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
from ragged_attn import api


class _KeyProbe(dict):
    """attention's fast-path dict for one call: records the key the call looks up."""
    def get(self, key, default=None):
        self.key = key
        return default


def bind_attention(bound, *args, **kwargs):
    """Bind `bound` under the key attention(*args, **kwargs, backend="cute") looks up (backend is in
    the key; on the CPU the checked path declines the call), so attention's fast path can be timed."""
    keys = api._FAST_PATHS
    api._FAST_PATHS = probe = _KeyProbe()
    try:
        ragged_attn.attention(*args, **kwargs, backend="cute")
    except NotImplementedError:
        pass
    api._FAST_PATHS = keys
    keys[probe.key] = bound


bind_attention(noop, q, k, v, cu, cu, 64, 64, causal=True, out=out)
rows["attention(out=)"] = lambda: ragged_attn.attention(q, k, v, cu, cu, 64, 64, causal=True, out=out, backend="cute")
g = torch.Generator().manual_seed(1)
table = torch.randperm(11, generator=g)[:8].to(torch.int32).view(2, 4)
used_k = torch.tensor([64, 64], dtype=torch.int32)
pools = {
    "NHD": (torch.randn(11, 16, 2, 128).to(torch.bfloat16), torch.randn(11, 16, 2, 128).to(torch.bfloat16)),
    "HND": (torch.randn(11, 2, 16, 128).to(torch.bfloat16), torch.randn(11, 2, 16, 128).to(torch.bfloat16)),
}
from ragged_attn import backends, compile_cache
from ragged_attn.kernels.sm90 import launch as sm90_launch
from ragged_attn.problem import build_problem
compile_cache.get_kernel = lambda layout_class, compile_fn: (lambda *a: None)
sm90_launch.sm_count = lambda device: 132
sm90_launch.tile_counter = fl.tile_counter
for layout, (kp, vp) in pools.items():
    pplan = ragged_attn.plan(q, kp, vp, cu, None, 64, 64, causal=True, page_table=table, seqused_k=used_k,
                             kv_layout=layout)
    pnoop = BoundKernel(lambda *a: None, pplan.problem)
    if pnoop.try_launch(q, kp, vp, cu, None, 64, None, used_k, table, out, None) is None:
        print(f"paged {layout}: this tree's fast path declines page tables")
        continue
    pplan._bound = pnoop
    bind_attention(pnoop, q, kp, vp, cu, None, 64, 64, seqused_k=used_k, page_table=table, kv_layout=layout,
                   causal=True, out=out)

    def checked(kp=kp, vp=vp, layout=layout, out=out):  # attention's checked path, Python only
        problem, t = build_problem(q, kp, vp, cu, None, 64, 64, seqused_k=used_k, page_table=table, kv_layout=layout,
                                   causal=True, out=out)
        layout_class = backends.layout_class_for(problem, "sm_90a")
        backends.check_kernel_limits(problem)
        return backends.launch_cute(layout_class, problem, t)

    rows.update({
        f"{layout}:try_launch(out=)": lambda kp=kp, vp=vp, b=pnoop: b.try_launch(q, kp, vp, cu, None, 64, None, used_k,
                                                                                   table, out, None),
        f"{layout}:try_launch(alloc)": lambda kp=kp, vp=vp, b=pnoop: b.try_launch(q, kp, vp, cu, None, 64, None, used_k,
                                                                                    table, None, None),
        f"{layout}:Plan.run(out=)": lambda kp=kp, vp=vp, p=pplan: p.run(q, kp, vp, cu, None, 64, 64, seqused_k=used_k,
                                                                         page_table=table, out=out),
        f"{layout}:attention(out=)": lambda kp=kp, vp=vp, layout=layout: ragged_attn.attention(
            q, kp, vp, cu, None, 64, 64, seqused_k=used_k, page_table=table, kv_layout=layout, causal=True, out=out,
            backend="cute"),
        f"{layout}:checked(out=)": checked,
        f"{layout}:checked(alloc)": lambda c=checked: c(out=None),
    })
assert all(fn() is not None for fn in rows.values())  # every row is served (none declines)
print(" ".join(f"{name}={bench(fn, n=20000 if 'checked' not in name else 2000):.2f}" for name, fn in rows.items()))
