"""The systems the harness times: ragged_attn itself and the peers users would pick instead.

Each system is optional. `availability()` says why one cannot run at all ("n/a: not installed");
`setup(w, inp)` runs once per workload (cuDNN builds its graph there, as FlashInfer does per
shape, and returns the build seconds, reported apart); `bind(w, inp)` returns a zero-argument
call over one input set (everything a caller would do once per batch, e.g. padding or expanding
K/V heads, happens here, outside the timed call) and a function that turns its output into THD
(total_q, H_q, d_v) for the spot check. A system that declines a workload raises `Unsupported`.

Peer facts (docs/DESIGN.md, measured on our H200 2026-11-30): FA4's compile cache is the dict
`flash_attn.cute.interface._flash_attn_fwd.compile_cache.cache`; cuDNN frontend 1.32 ranks its
python engines with cuDNN's library plans in one list, so the harness pins the first library plan
on sm_90; torch 2.11's `varlen_attn` has no GQA, so K/V heads are expanded before timing. FA3
(the `fa3-fwd` 0.0.3 wheel, installed on the device by shared/device/README.md's call 3) is built
bf16-only, without paged KV and without windows (its fa3_fwd_config.CONFIG).
"""

from __future__ import annotations

import importlib.metadata
import inspect
import math
from collections.abc import Callable

import torch

from .workloads import Inputs, Workload

Call = Callable[[], object]
Unpack = Callable[[object], torch.Tensor]


class Unsupported(Exception):
    """The system does not serve this workload (reported as n/a with the reason)."""


class Pending(Exception):
    """ragged_attn's kernel has not landed for this workload (reported as pending)."""


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _first(out):
    return out[0] if isinstance(out, tuple) else out


class System:
    name = "?"

    def availability(self, device: torch.device) -> str | None:
        """None if the system can run here, else why not (reported as n/a)."""
        return None

    def versions(self) -> dict:
        return {}

    def compiled(self) -> int | None:
        """Kernels compiled so far in this process (None: the system compiles nothing at run time)."""
        return None

    def setup(self, w: Workload, inp: Inputs) -> float | None:
        return None

    def bind(self, w: Workload, inp: Inputs) -> tuple[Call, Unpack]:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------


class RaggedAttn(System):
    """`ragged_attn.attention(..., backend=...)`; backend "reference" calls
    `ragged_attn.reference.attention_reference` (the CPU smoke test)."""

    name = "ragged_attn"

    def __init__(self, backend: str = "cute"):
        self.backend = backend

    def versions(self) -> dict:
        import ragged_attn

        return {"ragged_attn": f"{ragged_attn.__version__} (backend={self.backend})",
                "nvidia-cutlass-dsl": _version("nvidia-cutlass-dsl") or "not installed"}

    def _fn(self):
        try:
            if self.backend == "reference":
                from ragged_attn.reference import attention_reference

                return attention_reference, {}
            import ragged_attn

            return ragged_attn.attention, {"backend": self.backend}
        except (ImportError, AttributeError) as e:
            raise Pending(f"{type(e).__name__}: {e}") from e

    def compiled(self) -> int | None:
        import ragged_attn

        info_fn = getattr(ragged_attn, "cache_info", None)
        if info_fn is None or self.backend == "reference":
            return None
        info = info_fn()
        for key in ("compiles", "compiled", "misses"):
            if isinstance(info, dict) and key in info:
                return int(info[key])
            if hasattr(info, key):
                return int(getattr(info, key))
        return None

    def bind(self, w, inp):
        fn, extra = self._fn()
        kw = {"causal": w.causal, **extra}
        if inp.page_table is not None:
            kw.update(page_table=inp.page_table, seqused_k=inp.seqused_k)

        def call():
            try:
                return fn(inp.q, inp.k, inp.v, inp.cu_seqlens_q, inp.cu_seqlens_k, inp.max_seqlen_q,
                          inp.max_seqlen_k, **kw)
            except (NotImplementedError, ImportError) as e:
                raise Pending(f"{type(e).__name__}: {e}") from e

        return call, _first


# ---------------------------------------------------------------------------------------------


class FA4(System):
    """`flash_attn.cute.flash_attn_varlen_func` (FlashAttention 4, CuTe DSL)."""

    name = "fa4"

    def availability(self, device):
        if device.type != "cuda":
            return "needs CUDA"
        try:
            import flash_attn.cute  # noqa: F401
        except Exception as e:  # noqa: BLE001 - any import failure means the peer is absent
            return f"not installed ({type(e).__name__}: {e})"
        return None

    def versions(self):
        return {"flash-attn-4": _version("flash-attn-4") or "?"}

    def compiled(self):
        from flash_attn.cute import interface

        return len(interface._flash_attn_fwd.compile_cache.cache)

    def bind(self, w, inp):
        from flash_attn.cute import flash_attn_varlen_func

        kw = {"cu_seqlens_q": inp.cu_seqlens_q, "max_seqlen_q": inp.max_seqlen_q,
              "max_seqlen_k": inp.max_seqlen_k, "causal": w.causal}
        if inp.page_table is None:
            kw["cu_seqlens_k"] = inp.cu_seqlens_k
        else:
            kw.update(page_table=inp.page_table, seqused_k=inp.seqused_k)
        return (lambda: flash_attn_varlen_func(inp.q, inp.k, inp.v, **kw)), _first


# ---------------------------------------------------------------------------------------------


class FA3(System):
    """`fa3_fwd_interface.flash_attn_varlen_func` (FlashAttention 3, Hopper, ahead-of-time CUDA):
    the `fa3-fwd` wheel, FA3's hopper/flash_attn_interface.py forward repackaged.

    Its build (fa3_fwd_config.CONFIG) disables fp16, paged KV and local (window) attention, so
    those decline here; no bench workload carries a window, so only dtype and paged KV are checked.
    GQA is native (no K/V expansion); causal is bottom-right like ours; softmax_scale defaults to
    d_qk ** -0.5; num_splits and pack_gqa stay at the interface's defaults (1, heuristic), as a
    caller of `flash_attn_varlen_func` gets them. It returns `out` (`(out, lse)` only with
    return_attn_probs=True). Kernels are compiled into the wheel: nothing compiles at run time.
    """

    name = "fa3"

    def availability(self, device):
        if device.type != "cuda":
            return "needs CUDA"
        try:
            import fa3_fwd_interface  # noqa: F401
        except Exception as e:  # noqa: BLE001 - any import failure (no wheel, CUDA mismatch) means absent
            return f"not installed ({type(e).__name__}: {e})"
        return None

    def versions(self):
        return {"fa3-fwd": _version("fa3-fwd") or "?"}

    def bind(self, w, inp):
        if w.dtype != "bf16":
            raise Unsupported(f"{w.dtype}: the fa3-fwd wheel is bf16-only (FLASHATTENTION_DISABLE_FP16)")
        if inp.page_table is not None:
            raise Unsupported("paged KV: not in the fa3-fwd wheel (FLASHATTENTION_DISABLE_PAGEDKV)")
        from fa3_fwd_interface import flash_attn_varlen_func

        args = (inp.q, inp.k, inp.v, inp.cu_seqlens_q, inp.cu_seqlens_k, inp.max_seqlen_q, inp.max_seqlen_k)
        return (lambda: flash_attn_varlen_func(*args, causal=w.causal)), _first


# ---------------------------------------------------------------------------------------------


class CudnnTHD(System):
    """cuDNN frontend SDPA graph over THD tensors (ragged offsets), one graph per shape as
    FlashInfer's `cudnn_batch_prefill_with_kv_cache` builds it; paged K/V through block tables."""

    name = "cudnn"

    def __init__(self):
        self.graphs_built = 0
        self._handle = None
        self._g = None

    def availability(self, device):
        if device.type != "cuda":
            return "needs CUDA"
        try:
            import cudnn  # noqa: F401
        except Exception as e:  # noqa: BLE001
            return f"not installed ({type(e).__name__}: {e})"
        return None

    def versions(self):
        import cudnn

        return {"nvidia-cudnn-frontend": getattr(cudnn, "__version__", "?"),
                "cudnn backend": str(cudnn.backend_version())}

    def compiled(self):
        return self.graphs_built

    def setup(self, w, inp):
        import time

        import cudnn

        if w.dtype != "bf16":
            raise Unsupported("harness builds bf16 graphs only")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if self._handle is None:
            self._handle = cudnn.create_handle()
        cudnn.set_stream(self._handle, torch.cuda.current_stream().cuda_stream)
        m, b = w.model, w.batch
        sq, sk = inp.max_seqlen_q, inp.max_seqlen_k
        bf16, i32 = cudnn.data_type.BFLOAT16, cudnn.data_type.INT32
        g = cudnn.pygraph(io_data_type=bf16, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=self._handle)

        def off(name):  # (B+1, 1, 1, 1) element offsets
            return g.tensor(name=name, dim=[b + 1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=i32)

        t = {}
        t["q"] = g.tensor(name="q", dim=[b, m.h_q, sq, m.d_qk], stride=[m.h_q * m.d_qk, m.d_qk, m.h_q * m.d_qk, 1],
                          data_type=bf16)
        t["q_off"] = off("q_off")
        t["q"].set_ragged_offset(t["q_off"])
        paged = inp.page_table is not None
        if paged:
            for n, d in (("k", m.d_qk), ("v", m.d_v)):
                pool = inp.k if n == "k" else inp.v  # (P, ps, H_kv, D) NHD, seen as (P, H_kv, ps, D)
                p, ps = pool.shape[0], pool.shape[1]
                t[n] = g.tensor(name=n, dim=[p, m.h_kv, ps, d], stride=[ps * m.h_kv * d, d, m.h_kv * d, 1],
                                data_type=bf16)
                t[n + "_table"] = g.tensor(name=n + "_table", dim=[b, 1, inp.page_table.shape[1], 1],
                                           stride=[inp.page_table.shape[1], 1, 1, 1], data_type=i32)
        else:
            for n, d in (("k", m.d_qk), ("v", m.d_v)):
                t[n] = g.tensor(name=n, dim=[b, m.h_kv, sk, d], stride=[sk * m.h_kv * d, d, m.h_kv * d, 1],
                                data_type=bf16)
                t[n + "_off"] = off(n + "_off")
                t[n].set_ragged_offset(t[n + "_off"])
        t["len_q"] = g.tensor(name="len_q", dim=[b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=i32)
        t["len_k"] = g.tensor(name="len_k", dim=[b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=i32)
        kw = {"seq_len_q": t["len_q"], "seq_len_kv": t["len_k"], "use_padding_mask": True,
              "attn_scale": 1.0 / math.sqrt(m.d_qk), "generate_stats": False,
              "use_causal_mask_bottom_right": w.causal, "compute_data_type": cudnn.data_type.FLOAT}
        if paged:
            kw.update(paged_attention_k_table=t["k_table"], paged_attention_v_table=t["v_table"],
                      paged_attention_max_seq_len_kv=sk)
        o = g.sdpa(t["q"], t["k"], t["v"], name="sdpa", **kw)
        o = o[0] if isinstance(o, (tuple, list)) else o  # (O, Stats); Stats is None without stats
        t["o_off"] = off("o_off")
        o.set_output(True).set_dim([b, m.h_q, sq, m.d_v]).set_stride(
            [sq * m.h_q * m.d_v, m.d_v, m.h_q * m.d_v, 1]).set_data_type(bf16)
        o.set_ragged_offset(t["o_off"])
        t["o"] = o
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A])
        self._pin_library_plan(g)
        g.check_support()
        g.build_plans()
        ws = torch.empty(max(1, g.get_workspace_size()), dtype=torch.uint8, device=inp.q.device)
        torch.cuda.synchronize()
        self._g, self._t, self._ws = g, t, ws
        self.graphs_built += 1
        return time.perf_counter() - t0

    @staticmethod
    def _pin_library_plan(g) -> None:
        """cuDNN FE 1.32 ranks its python engines and the library's plans in one list: pin the
        first library plan (docs/DESIGN.md peer facts)."""
        from cudnn.engines.engine_ids import is_python_engine

        for i, cfg in enumerate(g.plans):
            if not is_python_engine(cfg.engine_id):
                g.select_plan(i)
                return
        raise Unsupported("no cuDNN library plan for this graph")

    def bind(self, w, inp):
        if self._g is None:
            raise Unsupported("graph not built")
        m, t = w.model, self._t
        dev = inp.q.device

        def off4(cu, per_token):
            return (cu.to(torch.int64) * per_token).to(torch.int32).reshape(-1, 1, 1, 1).contiguous()

        q_lens = torch.tensor(w.q_lens, dtype=torch.int32, device=dev).reshape(-1, 1, 1, 1)
        k_lens = torch.tensor(w.k_lens, dtype=torch.int32, device=dev).reshape(-1, 1, 1, 1)
        out = torch.empty(w.total_q, m.h_q, m.d_v, dtype=inp.q.dtype, device=dev)
        pack = {t["q"]: inp.q, t["k"]: inp.k, t["v"]: inp.v, t["o"]: out,
                t["q_off"]: off4(inp.cu_seqlens_q, m.h_q * m.d_qk), t["o_off"]: off4(inp.cu_seqlens_q, m.h_q * m.d_v),
                t["len_q"]: q_lens, t["len_k"]: k_lens}
        if inp.page_table is None:
            pack[t["k_off"]] = off4(inp.cu_seqlens_k, m.h_kv * m.d_qk)
            pack[t["v_off"]] = off4(inp.cu_seqlens_k, m.h_kv * m.d_v)
        else:
            table = inp.page_table.reshape(w.batch, 1, -1, 1).contiguous()
            pack[t["k_table"]] = table
            pack[t["v_table"]] = table
        g, ws, handle = self._g, self._ws, self._handle

        def call():
            g.execute(pack, ws, handle=handle)
            return out

        return call, lambda o: o


# ---------------------------------------------------------------------------------------------


class TorchVarlen(System):
    """`torch.nn.attention.varlen.varlen_attn` (FA2 inside torch); K/V heads expanded for GQA."""

    name = "torch-varlen"

    def availability(self, device):
        if device.type != "cuda":
            return "needs CUDA"
        try:
            from torch.nn.attention.varlen import varlen_attn  # noqa: F401
        except ImportError as e:
            return f"not installed ({e})"
        return None

    def bind(self, w, inp):
        from torch.nn.attention.varlen import varlen_attn

        params = inspect.signature(varlen_attn).parameters
        if w.model.d_qk != w.model.d_v:
            raise Unsupported(f"d_qk {w.model.d_qk} != d_v {w.model.d_v}")
        if inp.page_table is not None:
            raise Unsupported("paged KV: this torch's varlen_attn has no block_table") if "block_table" not in params \
                else Unsupported("paged KV not wired for torch varlen_attn")
        ratio = w.model.h_q // w.model.h_kv
        k = inp.k.repeat_interleave(ratio, dim=1) if ratio > 1 else inp.k
        v = inp.v.repeat_interleave(ratio, dim=1) if ratio > 1 else inp.v
        kw = {}
        if "is_causal" in params:
            kw["is_causal"] = w.causal
        elif w.causal:
            kw["window_size"] = (-1, 0)
        args = (inp.q, k, v, inp.cu_seqlens_q, inp.cu_seqlens_k, inp.max_seqlen_q, inp.max_seqlen_k)
        return (lambda: varlen_attn(*args, **kw)), _first


# ---------------------------------------------------------------------------------------------


class SdpaCudnnPadded(System):
    """`F.scaled_dot_product_attention` restricted to the cuDNN backend over a padded batch
    (B, H, s_max, D): what a caller without a varlen API does. Uniform lengths use is_causal;
    mixed lengths a boolean (B, 1, s_q, s_k) mask (bottom-right causal and key padding), built
    once per batch outside the timed call. GQA: enable_gqa if the backend takes it, else K/V
    heads expanded (decided once per process)."""

    name = "sdpa-cudnn"

    def __init__(self):
        self._native_gqa: bool | None = None

    def availability(self, device):
        if device.type != "cuda":
            return "needs CUDA"
        return None

    @staticmethod
    def _pad(x: torch.Tensor, lens, cu) -> torch.Tensor:
        b, s = len(lens), max(lens)
        out = x.new_zeros(b, s, *x.shape[1:])
        for i, n in enumerate(lens):
            out[i, :n] = x[cu[i]:cu[i] + n]
        return out.transpose(1, 2).contiguous()  # (B, H, s, D)

    def bind(self, w, inp):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention as sdpa

        if inp.page_table is not None:
            raise Unsupported("paged KV: SDPA takes dense K/V")
        cu_q = inp.cu_seqlens_q.tolist()
        cu_k = inp.cu_seqlens_k.tolist()
        q = self._pad(inp.q, w.q_lens, cu_q)
        k = self._pad(inp.k, w.k_lens, cu_k)
        v = self._pad(inp.v, w.k_lens, cu_k)
        uniform = len(set(w.q_lens)) == 1 and w.q_lens == w.k_lens
        kw = {}
        if uniform:
            kw["is_causal"] = w.causal
        else:
            sq, sk = q.shape[2], k.shape[2]
            i = torch.arange(sq, device=q.device).view(1, sq, 1)
            j = torch.arange(sk, device=q.device).view(1, 1, sk)
            lq = torch.tensor(w.q_lens, device=q.device).view(-1, 1, 1)
            lk = torch.tensor(w.k_lens, device=q.device).view(-1, 1, 1)
            mask = j < lk
            if w.causal:
                mask = mask & (j <= i + lk - lq)
            kw["attn_mask"] = mask.unsqueeze(1)
        ratio = w.model.h_q // w.model.h_kv
        if ratio > 1:
            if self._native_gqa is None:
                try:
                    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                        sdpa(q, k, v, enable_gqa=True, **kw)
                    self._native_gqa = True
                except RuntimeError:
                    self._native_gqa = False
            if self._native_gqa:
                kw["enable_gqa"] = True
            else:
                k = k.repeat_interleave(ratio, dim=1)
                v = v.repeat_interleave(ratio, dim=1)

        def call():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return sdpa(q, k, v, **kw)

        def unpack(o):  # (B, H, s, D) -> (total_q, H, D)
            o = o.transpose(1, 2)
            return torch.cat([o[b, :n] for b, n in enumerate(w.q_lens)])

        return call, unpack

    def note(self) -> str:
        return {None: "", True: "enable_gqa", False: "K/V expanded for GQA"}[self._native_gqa]


SYSTEMS = {
    "ragged_attn": RaggedAttn,
    "fa4": FA4,
    "fa3": FA3,
    "cudnn": CudnnTHD,
    "torch-varlen": TorchVarlen,
    "sdpa-cudnn": SdpaCudnnPadded,
}


def make_systems(names: list[str], ours_backend: str) -> list[System]:
    out = []
    for n in names:
        if n not in SYSTEMS:
            raise ValueError(f"--peers: unknown system {n!r}; known: {', '.join(SYSTEMS)}")
        out.append(RaggedAttn(ours_backend) if n == "ragged_attn" else SYSTEMS[n]())
    return out

