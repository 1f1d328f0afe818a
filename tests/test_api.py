"""The public calls on the CPU: backend choice, plan, warmup and compile counting, DSL version check."""

from __future__ import annotations

import os

import pytest
import torch

import ragged_attn
from ragged_attn import backends
from ragged_attn.reference import attention_reference
from tests.cases import Case
from tests.test_layout_class import meta_call


def test_auto_on_cpu_is_the_reference():
    case = Case(51, [7, 3], [9, 3], 4, 2, 64, 64, dtype=torch.bfloat16, causal=True)
    args, kwargs = case.make()
    assert torch.equal(ragged_attn.attention(*args, **kwargs), attention_reference(*args, **kwargs))


def test_plan_on_cpu_runs_new_shapes_like_attention():
    first = Case(52, [5, 9], [5, 9], 8, 2, 128, 128, dtype=torch.bfloat16, causal=True, lse_layout="token_major")
    args, kwargs = first.make()
    plan = ragged_attn.plan(*args, **kwargs, return_lse=True)
    assert plan.layout_class is None and plan.backend == "auto"
    other = Case(53, [1, 0, 30], [4, 2, 30], 4, 4, 128, 128, dtype=torch.bfloat16, causal=True, lse_layout="token_major")
    args2, kwargs2 = other.make()
    out, lse = plan.run(*args2)
    want_out, want_lse = ragged_attn.attention(*args2, **kwargs2, return_lse=True)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)


@pytest.mark.parametrize("extra", [dict(page_size=4, kv_layout="HND"), dict(q_gaps=True)], ids=["paged", "seqused"])
def test_plan_with_per_call_tensors_runs_them_per_call(extra):
    """page_table / seqused_* given to plan() describe the planned call; run() takes its own
    (a newcomer found plan(..., page_table=...).run(...) raising "multiple values")."""
    first = Case(54, [5, 9], [6, 9], 4, 2, 64, 64, dtype=torch.bfloat16, causal=True, **extra)
    args, kwargs = first.make()
    plan = ragged_attn.plan(*args, **kwargs)
    other = Case(55, [3, 0, 11], [7, 2, 12], 4, 2, 64, 64, dtype=torch.bfloat16, causal=True, **extra)
    args2, kwargs2 = other.make()
    per_call = {name: kwargs2[name] for name in ("seqused_q", "seqused_k", "page_table") if name in kwargs2}
    assert per_call, "the case should carry per-call tensors"
    got = plan.run(*args2, **per_call)
    assert torch.equal(got, ragged_attn.attention(*args2, **kwargs2))


def test_cute_declines_cpu_tensors_naming_the_reason():
    case = Case(54, [4], [4], 2, 2, 64, 64, dtype=torch.float16)
    args, kwargs = case.make()
    with pytest.raises(NotImplementedError, match="CUDA tensors"):
        ragged_attn.attention(*args, **kwargs, backend="cute")
    with pytest.raises(NotImplementedError, match="CUDA tensors"):
        ragged_attn.plan(*args, **kwargs, backend="cute")


def test_wrong_dsl_version_is_refused(monkeypatch):
    from importlib import metadata

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "9.9.9" if name == "nvidia-cutlass-dsl" else real(name))
    backends.cute_import_error.cache_clear()
    try:
        reason = backends.cute_import_error()
    finally:
        monkeypatch.undo()
        backends.cute_import_error.cache_clear()
    assert reason is not None and "9.9.9" in reason and "4.8.1" in reason


def test_warmup_rejects_other_items():
    with pytest.raises(TypeError, match="problems_or_classes"):
        ragged_attn.warmup(["sm_90a-d128"], progress=False)


@pytest.mark.cute
def test_warmup_compiles_once_per_distinct_class(tmp_path, monkeypatch):
    """Calls that differ only in run-time facts share a class; compiles == distinct classes."""
    pytest.importorskip("cutlass.cute")
    monkeypatch.setenv("RAGGED_ATTN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    from ragged_attn import compile_cache

    compile_cache.clear_memory()
    calls = [
        meta_call(d=64, causal=True),
        meta_call(d=64, causal="top_left", total_q=7, batch=40, h_q=28, h_kv=4),
        meta_call(d=64, causal=True, softmax_scale=0.3, max_seqlen_q=9000),
        meta_call(d=128, dtype=torch.float16, return_lse=True, lse_layout="padded", max_seqlen_q=33),
        meta_call(d=128, dtype=torch.float16, return_lse=True, lse_base="log2"),
    ]
    classes = ragged_attn.warmup(calls, progress=False)
    assert len(classes) == 2
    info = ragged_attn.cache_info()
    assert info.compiles == 2, info
    assert set(info.classes) == set(classes)
    ragged_attn.warmup(calls, progress=False)
    assert ragged_attn.cache_info().compiles == 2, "a warm class compiled again"
    compile_cache.clear_memory()  # a "new process": the disk entries load without compiling
    ragged_attn.warmup(classes, progress=False)
    info = ragged_attn.cache_info()
    assert info.compiles == 0 and info.disk_hits == 2, info
    assert os.stat(tmp_path / "cache").st_mode & 0o077 == 0, "cache directory is not private to the user"
    compile_cache.clear_memory()


@pytest.mark.parametrize(
    "function,keyword",
    [("plan", "foo"), ("plan", "for_class_only"), ("plan", "arch"), ("layout_class_of", "foo"),
     ("layout_class_of", "for_class_only")],
)  # fmt: skip
def test_an_unexpected_keyword_names_the_public_function(function, keyword):
    """plan(..., foo=1) said "build_problem() got an unexpected keyword argument 'foo'" (an internal
    function; build_problem's own for_class_only was even accepted): the TypeError names the call
    the caller made and the keyword (arch is layout_class_of's own keyword; plan takes none)."""
    case = Case(56, [5, 9], [5, 9], 4, 2, 64, 64, dtype=torch.bfloat16, causal=True)
    args, kwargs = case.make()
    if function == "layout_class_of":
        args = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
    with pytest.raises(TypeError) as info:
        getattr(ragged_attn, function)(*args, **kwargs, **{keyword: 1})
    message = str(info.value)
    assert message.startswith(f"{function}() got an unexpected keyword argument {keyword!r}"), message
    assert "build_problem" not in message and "causal" in message
