"""The public calls: `attention`, `plan` / `Plan.run`, `layout_class_of`, `warmup`, `cache_info`.

Rules (docs/DESIGN.md contract 3-5):
- `attention` checks every argument (problem.build_problem) before anything is written.
- backend="auto" runs the reference on CPU tensors and the GPU kernel on CUDA tensors; where the
  kernel declines, NotImplementedError says why and points to backend="reference". Never a silent
  slow path.
- The kernel path reads no device memory back to the host and allocates only out / lse.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable

import torch
from torch.compiler import is_compiling

from . import _checks as chk
from . import backends, torch_op
from .layout_class import LayoutClass, head_dim_class
from .problem import Problem, build_problem
from .reference import run_reference


def attention(
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
    backend="auto",
):
    """Attention forward over a ragged (THD) batch. Argument names follow FlashAttention's varlen API.

    Shapes (tokens x heads x head_dim; B sequences):
        q: (total_q, H_q, D_qk), float16 / bfloat16 (float32 on the reference backend only).
        k, v: ragged (total_k, H_kv, D_qk) / (total_k, H_kv, D_v) with cu_seqlens_k; or page pools
            with page_table: kv_layout "NHD" (num_pages, page_size, H_kv, D) as in FlashAttention and
            vLLM, or "HND" (num_pages, H_kv, page_size, D) as in FlashInfer's cuDNN prefill.
            Same dtype and device as q. H_q must be a multiple of H_kv (GQA: query head h reads kv
            head h // (H_q / H_kv)). Head dims are multiples of 8, at most 256. The last dim of every
            tensor is contiguous; for fp16/bf16, base addresses and other strides are multiples of
            16 bytes (TMA's rule).
        cu_seqlens_q, cu_seqlens_k: int32 (B + 1,) start offsets in tokens (prefix sums of lengths).
        max_seqlen_q, max_seqlen_k: Python ints, upper bounds of the lengths (never tensors: that
            would force a device-to-host sync). max_seqlen_q sizes the kernel's grid; without it
            total_q is used (correct, more idle CTAs).
        seqused_q, seqused_k: int32 (B,): rows used from each start when fewer than the gap to the
            next start (FA3/FA4's names). For page pools, seqused_k (or cu_seqlens_k) gives the key
            lengths. Rows outside every sequence (gaps, or before cu_seqlens_q[0] / after
            cu_seqlens_q[B]) are never written: a passed `out` keeps them; an `out` allocated here
            has them zero when seqused_q is given or on the reference backend, and unspecified
            otherwise (the kernel path does not pay a memset for rows cu_seqlens_q covers).
        page_table: int32 (B, max_pages), page ids into the pool (FlashInfer's block_tables).
        causal: False, True or "bottom_right" (the same: bottom-right aligned, query i of a sequence
            with lq queries and lk keys sees key j iff j <= i + lk - lq, FlashAttention's
            convention), or "top_left" (j <= i). Anything else is a ValueError.
        window_size: (left, right), -1 unbounded, in the same frame: query i sees keys
            [i + off - left, i + off + right] (off = lk - lq, or 0 for "top_left"). Causal fixes right = 0.
        softmax_scale: float in [2**-126, float32 max / log2(e)] (the kernels fold log2(e) into
            it in float32), default 1 / sqrt(D_qk).
        return_lse: also return the log-sum-exp of the scaled scores per (query, head), float32.
        lse_layout: "head_major" (H_q, total_q) as FlashAttention, "token_major" (total_q, H_q), or
            "padded" (B, s_max, H_q) as FlashInfer's cuDNN prefill, with s_max = max_seqlen_q or
            the passed buffer's extent; a passed buffer may store those axes in any compact dim
            order. Padded rows past a sequence's length hold -inf.
        lse_base: "ln" (natural log) or "log2" (FlashInfer's spelling).
        sinks: None (off) or a float32 (H_q,) tensor on q's device: one attention-sink logit per
            query head, in natural-log units and not multiplied by softmax_scale. It is one more
            softmax column per head that adds exp(sinks[h]) to the denominator and carries no
            value: O = sum_j exp(s_j) v_j / (exp(sinks[h]) + sum_j exp(s_j)), and the LSE is
            log(exp(sinks[h]) + sum_j exp(s_j)) (in lse_base). A row that sees no key gets O = 0,
            LSE = sinks[h]. FA4's `learnable_sink`, FlashInfer's attention-sink wrapper, gpt-oss's
            `sinks` (transformers' `s_aux`). Values are not checked (that would read device memory):
            -inf is no sink for that head, +inf takes all the mass (O = 0, LSE = +inf), NaN makes
            the head's rows NaN (O and LSE, rows that see no key included). Any stride on the
            reference; the kernel serves a stride-1 tensor, with ragged K/V or page pools (a
            `-sinks` layout class; the values are run time).
        softcap: 0.0 (off) or a float in [2**-126, float32 max]: the scores s = softmax_scale * q.k
            become softcap * tanh(s / softcap) before the causal / window mask (Gemma 2's
            attn_logit_softcapping, FlashAttention's `softcap`). The kernel serves it with ragged
            K/V or page pools (a `-softcap` layout class; the cap is run time; tanh there is the
            hardware's tanh.approx.f32, about 2**-11 relative error, so a cap c moves a score by up
            to ~c * 5e-4).
        split_kv: True (default): a launch may split each tile's key blocks over several CTAs and
            merge them (split-KV, for rows with few queries over many keys; the count is chosen per
            launch from the batch: docs/SUPPORT_MATRIX.md, "Split-KV"). False: never split, so a
            row's output is computed the same way whatever else is in the batch (batch-invariant,
            what FlashAttention 3's num_splits=1 gives; slower for decode-heavy batches on the GPU).
            The reference backend never splits.
        out, lse: optional destinations (shapes above). out's dtype is q's on every backend (the
            kernels write the input dtype; the reference computes in float32 and rounds to q's
            dtype), so another dtype is a TypeError; lse is float32.
        backend: "auto" (reference on CPU tensors, the GPU kernel on CUDA tensors), "reference"
            (exact PyTorch in float32, any device; reads lengths back to the host), or "cute".

    Empty sequences and rows that see no key give O = 0 and LSE = -inf (LSE = the head's sink
    with sinks).

    Under torch.compile (and torch.export) the call is one torch.library custom op,
    `torch.ops.ragged_attn.attention` (or `attention_into` with out / lse), with a fake
    implementation, so `fullgraph=True` traces it and CUDA graphs capture it; there `causal` is one
    of False, True, "bottom_right", "top_left" and a padded LSE needs max_seqlen_q
    (ragged_attn/torch_op.py).

    Returns:
        out (total_q, H_q, D_v) in q's dtype, or (out, lse) when return_lse (lse float32).
    Forward only, on every backend: with grad mode enabled, a q, k, v or sinks that requires grad
    is a ValueError naming it (call under torch.no_grad() or torch.inference_mode()); the kernel has
    no backward, and the reference refuses the same calls rather than build an autograd graph.

    Raises:
        TypeError / ValueError: a bad argument (named in the message), among them an out / lse
            overlapping any input (q, k, v, cu_seqlens_q/k, seqused_q/k, page_table; the message
            names both), an input that requires grad with grad mode enabled, or an out / lse torch
            would refuse to write in place (one that requires grad with grad mode enabled, an
            inference tensor outside torch.inference_mode()); nothing is written.
        NotImplementedError: the kernel does not serve this valid problem (the message says why,
            naming the argument: among them `sinks` of a stride other than 1); backend="reference"
            does.
    """
    if is_compiling():  # torch.compile / export: one custom op in the graph (ragged_attn/torch_op.py)
        return torch_op.attention_op(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
            seqused_q=seqused_q, seqused_k=seqused_k, page_table=page_table, kv_layout=kv_layout, causal=causal,
            window_size=window_size, softmax_scale=softmax_scale, return_lse=return_lse, lse_layout=lse_layout,
            lse_base=lse_base, out=out, lse=lse, sinks=sinks, softcap=softcap, split_kv=split_kv, backend=backend,
        )  # fmt: skip
    fast_key = None  # (forward only: the fast path declines inputs that require grad; the check below names them)
    if lse is None and type(backend) is str and backend != "reference" and type(window_size) is tuple:
        # Options that a full check accepted before (with the same types) need no second check;
        # the tensors always get BoundKernel's predicate. Anything unusual takes the checked path.
        try:
            fast_key = (type(causal), causal, window_size, type(window_size[0]), type(window_size[-1]),
                        type(softmax_scale), softmax_scale, type(return_lse), return_lse, lse_layout, lse_base,
                        kv_layout, backend, type(softcap), softcap, type(split_kv), split_kv, sinks is None,
                        page_table is None)  # fmt: skip
            bound = _FAST_PATHS.get(fast_key)
        except (TypeError, IndexError):  # an unhashable option or an empty window: the checked path names it
            bound = fast_key = None
        if bound is not None:
            result = bound.try_launch(
                q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, seqused_q, seqused_k, page_table, out, None,
                max_seqlen_k, sinks,
            )  # fmt: skip
            if result is not None:
                return result
    if torch.is_grad_enabled():  # forward only, on every backend and path (the fast one declines them)
        chk.forward_only(q, k, v, sinks)
    chk.choice("backend", backend, backends.BACKENDS)
    problem, tensors = build_problem(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
        seqused_q=seqused_q, seqused_k=seqused_k, page_table=page_table, kv_layout=kv_layout,
        causal=causal, window_size=window_size, softmax_scale=softmax_scale, return_lse=return_lse,
        lse_layout=lse_layout, lse_base=lse_base, out=out, lse=lse, sinks=sinks, softcap=softcap, split_kv=split_kv,
    )  # fmt: skip
    if _use_reference(problem, backend):
        o, l_ = run_reference(problem, tensors)
    else:
        layout_class = backends.check_support(problem)
        o, l_ = backends.launch_cute(layout_class, problem, tensors)
        if fast_key is not None:
            # Ragged and paged calls have keys of their own (page_table is None ends the key, and
            # kv_layout is in it): alternating them (a serving step's prefill and decode halves)
            # keeps both bindings, each BoundKernel serving its class's K/V kind.
            _FAST_PATHS[fast_key] = _bind(layout_class, problem, default_scale=softmax_scale is None)
    return (o, l_) if return_lse else o


# The keywords `plan` and `layout_class_of` take in **options: attention's keyword-only arguments.
_ATTENTION_KEYWORDS = tuple(
    name for name, p in inspect.signature(attention).parameters.items() if p.kind is p.KEYWORD_ONLY
)


def _check_keywords(function: str, options: dict) -> None:
    """TypeError naming `function` (the public call) and the first keyword attention does not take
    (build_problem's own keywords included), as Python names an unexpected keyword."""
    for name in options:
        if name not in _ATTENTION_KEYWORDS:
            raise TypeError(
                f"{function}() got an unexpected keyword argument {name!r} (it takes attention's keyword "
                f"arguments: {', '.join(_ATTENTION_KEYWORDS)})"
            )


# attention's fast paths: option key (with kv_layout and ragged / paged) -> BoundKernel of the
# last class those options ran on.
_FAST_PATHS: dict = {}


def _bind(layout_class: LayoutClass, problem: Problem, default_scale: bool):
    """The class's BoundKernel (fast path); a -sinks class's takes each call's sinks."""
    from . import compile_cache
    from .fast_launch import BoundKernel
    from .kernels import sm90

    return BoundKernel(compile_cache.get_kernel(layout_class, sm90.compile_forward), problem, default_scale)


def _use_reference(problem: Problem, backend: str) -> bool:
    return backend == "reference" or (backend == "auto" and problem.device.type != "cuda")


def layout_class_of(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    *,
    arch: str | None = None,
    **options,
) -> LayoutClass:
    """The layout class (compile key) that `attention` with these arguments would run.

    Same arguments as `attention` (minus out/lse/backend, which do not change the class), plus
    `arch` ("sm_90a" by default, or the arch of q's CUDA device). Works on meta tensors, so
    classes can be computed on a machine with no GPU. A padded LSE needs no max_seqlen_q here
    (s_max is not part of the key); when one is given, the kernel's row limit is checked.

    Raises:
        TypeError / ValueError: a bad argument, as `attention` would; a keyword `attention` does not
            take is a TypeError naming layout_class_of and the keyword.
        NotImplementedError: no kernel class serves this problem, or the kernel declines it
            (sinks of a stride other than 1, more than 65535 sequences or query heads, a padded
            LSE of more than 65535 * 128 rows, 2**29 tokens or more): the message says why.
            sinks / softcap give a class with the `sinks` / `softcap` flag (name suffixes
            -softcap, -sinks), with ragged K/V or page pools.
    """
    _check_keywords("layout_class_of", options)
    for name in ("out", "lse", "backend"):
        options.pop(name, None)
    problem, _ = build_problem(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **options, for_class_only=True
    )
    if arch is None:
        arch = backends.arch_of(problem.device)
    layout_class = backends.layout_class_for(problem, arch)
    backends.check_kernel_limits(problem)
    return layout_class


class Plan:
    """A call bound to one layout class and one set of options; `run` is the low-overhead path.

    Built by `ragged_attn.plan`. Options (causal, window, scale, softcap, LSE layout and base,
    kv_layout, backend) are fixed at plan time; shapes, lengths, head counts and strides may change between
    runs as long as the layout class stays the same. On the reference backend (layout_class None)
    the plan is bound to the same fields (dtypes, head-dim class, mask family, LSE on/off, KV kind)
    and the device type, plus sinks on/off, named by `reference_class`, and refuses another one
    alike. On the kernel, softcap and sinks are layout-class flags: a plan with a softcap runs the
    `-softcap` class (the cap fixed at plan time) through the fast path; a plan with sinks runs the
    `-sinks` class, each run passing its own `sinks` tensor, also through the fast path (a float32,
    stride-1 (H_q,) tensor on the plan's device; anything else takes the checked path, which names
    it). Paged plans run these classes too, through the fast path like ragged ones (each run passes
    its page pools in the plan's kv_layout, a page_table and seqused_k or cu_seqlens_k).
    On either backend a run must pass sinks exactly when its plan had them.
    """

    def __init__(self, problem: Problem, backend: str, layout_class: LayoutClass | None, options: dict, bound=None):
        self.problem = problem
        self.backend = backend
        self.layout_class = layout_class
        self.reference_class = reference_class_of(problem) if layout_class is None else None
        self._options = options
        self._bound = bound

    def __repr__(self) -> str:
        if self.layout_class is None:
            return f"Plan(backend={self.backend!r}, reference_class={self.reference_class!r})"
        return f"Plan(backend={self.backend!r}, layout_class={self.layout_class})"

    def run(
        self,
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
        out=None,
        lse=None,
        sinks=None,
    ):
        """Run the planned call on new tensors of the same layout.

        Arguments as `attention`. On the kernel, a fast path checks what can differ from the plan
        (the compiled TVM-FFI entry checks ranks, dtypes, devices, strides, alignment and shared
        extents in C; a Python predicate checks the kernel's limits, H_q % H_kv, the class's head
        dims, the plan's device and that a passed `out` overlaps nothing; fast_launch.py) and
        launches, in about 10 us of host time on an H200; paged plans too (the predicate then
        checks the page table's dtype, rows and row stride and the pool's limits as well). If a
        check fails, or the call passes an LSE buffer, empty tensors or an empty page pool, or a
        page_table to a ragged plan (or none to a paged one), the full checks of `attention` run
        and raise the named ValueError/TypeError (or serve the call); nothing is written before. softmax_scale
        left to its default is 1/sqrt(d_qk) of each call's q. A call whose tensors need another
        layout class is a ValueError. sinks: as `attention` (float32 (H_q,)); a plan made with
        sinks needs them on every run and a plan made without refuses them (ValueError: another
        class, on both backends; ValueError naming sinks).

        Returns:
            out, or (out, lse) when the plan returns the LSE.
        Raises:
            TypeError / ValueError: as `attention` (an out overlapping any input and inputs that
                require grad with grad mode enabled included), or
                tensors that need another layout class than the plan's; nothing is written.
            NotImplementedError: as `attention`, for a call the kernel does not serve.
        """
        if self._bound is not None:  # declines inputs that require grad with grad mode on
            result = self._bound.try_launch(
                q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, seqused_q, seqused_k, page_table, out, lse,
                max_seqlen_k, sinks,
            )  # fmt: skip
            if result is not None:
                return result
        if torch.is_grad_enabled():  # forward only, as `attention`
            chk.forward_only(q, k, v, sinks)
        planned_sinks = self.layout_class.sinks if self.layout_class is not None else self.reference_class.endswith("-sinks")
        if (sinks is not None) != planned_sinks:
            raise ValueError(
                "sinks: this plan was made with sinks; pass them (float32 (H_q,)) on every run"
                if planned_sinks
                else "sinks: this plan was made without sinks, got a tensor; make a plan with sinks=..."
            )
        problem, tensors = build_problem(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
            seqused_q=seqused_q, seqused_k=seqused_k, page_table=page_table, out=out, lse=lse, sinks=sinks,
            **self._options,
        )  # fmt: skip
        if self.layout_class is None:  # the reference backend: the same rule, its own class names
            wanted = reference_class_of(problem)
            if wanted != self.reference_class:
                raise ValueError(
                    f"{_mismatch_argument(wanted, self.reference_class)}: these tensors need class {wanted}, "
                    f"the plan was made for {self.reference_class}; make another plan"
                )
            o, l_ = run_reference(problem, tensors)
            return (o, l_) if problem.return_lse else o
        layout_class = backends.check_support(problem)
        if layout_class != self.layout_class:
            raise ValueError(
                f"{_mismatch_argument(layout_class.name, self.layout_class.name)}: these tensors need layout "
                f"class {layout_class.name}, the plan was made for {self.layout_class.name}; make another plan"
            )
        o, l_ = backends.launch_cute(layout_class, problem, tensors)
        return (o, l_) if problem.return_lse else o


def _mismatch_argument(wanted: str, planned: str) -> str:
    """The argument a run's class mismatch is named after: page_table when ragged and paged K/V
    differ (class names end in "-ragged" / "-paged" before any flag suffix), else q."""
    if ("-paged" in wanted) != ("-paged" in planned):
        return "page_table"
    return "q"


def reference_class_of(problem: Problem) -> str:
    """What a reference-backend Plan is bound to: a layout class's fields plus the device type.

    The fields are those of `LayoutClass` without the arch (dtype, out dtype, head-dim class, mask
    family, LSE on/off, KV kind), so a plan refuses the same calls on the CPU as on the GPU; fp32
    and head dims no kernel class holds keep their own names. "-sinks" ends the name of a call
    with sinks (a run must pass sinks exactly when its plan had them).
    """
    dims = head_dim_class(problem.d_qk, problem.d_v) or (problem.d_qk, problem.d_v)
    return (
        f"{chk.dtype_name(problem.dtype)}-out{chk.dtype_name(problem.out_dtype)}-d{dims[0]}x{dims[1]}-"
        f"{problem.mask_family}-lse{'1' if problem.return_lse else '0'}-{problem.kv}-{problem.device.type}"
        + ("-sinks" if problem.has_sinks else "")
    )


def plan(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    *,
    backend="auto",
    **options,
) -> Plan:
    """Check a call once and bind it to its layout class (compiling the kernel now if needed).

    Same arguments as `attention`; out/lse are not bound, and seqused_q / seqused_k /
    page_table / sinks only describe the planned call (a page_table makes it a paged plan, sinks
    a sinks plan): each `run(...)` passes its own. softcap is fixed at plan time. On the kernel
    backend ("cute", or "auto" on CUDA) sinks / softcap choose the `-sinks` / `-softcap` class
    (compiled now), with ragged K/V or page pools. Returns a `Plan` whose `run(...)` takes tensors
    of the same layout with any shapes/lengths.

    Raises:
        TypeError: a keyword `attention` does not take (named with plan, as Python names one); else
            as `attention` does (TypeError / ValueError naming a bad argument, NotImplementedError
            for a call the kernel does not serve).
    """
    _check_keywords("plan", options)
    chk.choice("backend", backend, backends.BACKENDS)
    for name in ("out", "lse"):
        options.pop(name, None)
    per_call = {
        name: options.pop(name) for name in ("seqused_q", "seqused_k", "page_table", "sinks") if name in options
    }
    problem, _ = build_problem(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **options, **per_call
    )
    if _use_reference(problem, backend):
        return Plan(problem, backend, None, options)
    layout_class = backends.check_support(problem)

    bound = _bind(layout_class, problem, default_scale=options.get("softmax_scale") is None)
    return Plan(problem, backend, layout_class, options, bound)


def warmup(problems_or_classes: Iterable, *, arch: str | None = None, progress: bool = True) -> list[LayoutClass]:
    """Load (prebuilt directories, else the persistent cache) or compile the kernels for these
    classes ahead of traffic.

    Args:
        problems_or_classes: LayoutClass objects, or dicts of `layout_class_of` keyword arguments
            (meta tensors are fine). Duplicates compile once.
        arch: the target arch for dicts ("sm_90a" by default; compiling needs no GPU); a dict may
            give its own `arch` instead (ValueError where the two differ).
        progress: show a tqdm bar.
    Returns:
        The distinct classes, in first-seen order.
    Raises:
        NotImplementedError: a class with neither a prebuilt kernel nor the CuTe DSL installed
            (the message names it and both remedies), or no kernel serves a problem (as
            `layout_class_of` says).
        TypeError: an item that is neither a LayoutClass nor a dict; TypeError / ValueError from
            `layout_class_of` for a bad dict, or a bad RAGGED_ATTN_DISK_CACHE value.
        Never for the disk cache's state: a damaged, read-only or locked cache warns
        (CompileCacheWarning) and loads a valid entry or compiles in memory.
    """
    from tqdm.auto import tqdm

    if isinstance(problems_or_classes, (LayoutClass, dict, str)) or not isinstance(problems_or_classes, Iterable):
        raise TypeError(
            "problems_or_classes: expected an iterable of LayoutClass or dict items, got "
            f"{type(problems_or_classes).__name__}"
        )
    classes: list[LayoutClass] = []
    for item in problems_or_classes:
        if isinstance(item, dict):
            if "arch" in item and arch is not None and item["arch"] != arch:
                raise ValueError(
                    f"problems_or_classes: an item's arch {item['arch']!r} differs from warmup's arch={arch!r}; "
                    "give it in one place"
                )
            item = layout_class_of(**{"arch": arch or "sm_90a", **item})
        if not isinstance(item, LayoutClass):
            raise TypeError(f"problems_or_classes: expected LayoutClass or dict items, got {type(item).__name__}")
        if item not in classes:
            classes.append(item)
    reason = backends.cute_import_error()
    if reason is not None:  # only prebuilt kernels can serve (ragged_attn/prebuilt.py)
        from . import prebuilt

        for layout_class in classes:
            if not prebuilt.has_prebuilt(layout_class):
                raise NotImplementedError(prebuilt.missing_kernel_message(layout_class, reason))
    from . import compile_cache
    from .kernels import sm90

    for layout_class in tqdm(classes, desc="ragged_attn warmup", disable=not progress, unit="class"):
        compile_cache.get_kernel(layout_class, sm90.compile_forward)
    return classes


def cache_info():
    """Per-process compile counters (a `CacheInfo`): compiles, memory hits, disk hits, prebuilt hits
    (kernels loaded from an AOT package), compile seconds, classes."""
    from . import compile_cache

    return compile_cache.cache_info()
