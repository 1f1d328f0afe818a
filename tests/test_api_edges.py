"""Edge cases found by session 21's second adversarial pass (the CLI, layout classes, warmup, the
op entry): each was accepted silently or named in a misleading way."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ragged_attn
from ragged_attn import LayoutClass
from ragged_attn.aot import main as aot_main
from ragged_attn.aot import parse_class_name
from ragged_attn.torch_op import attention_op
from tests.cases import Case

BASE = ("sm_90a", 32, 32, "fp16", "fp16", "none", False, "ragged")


def _with(**fields):
    names = ("arch", "d_qk", "d_v", "dtype", "out_dtype", "mask", "lse", "kv")
    values = dict(zip(names, BASE))
    values.update(fields)
    return LayoutClass(**values)


def test_layout_class_head_dims_are_ints():
    """32.0 == 32 passed the membership test: the class was named `d32.0x32.0` and failed later,
    inside the DSL's compile."""
    assert _with().name == "sm_90a-d32x32-fp16-fp16-none-nolse-ragged"
    for field in ("d_qk", "d_v"):
        with pytest.raises(TypeError, match=f"^LayoutClass.{field}: expected an int, got float"):
            _with(**{field: 32.0})


def test_layout_class_output_dtype_is_the_input_dtype():
    """No call can use a class whose output dtype differs (the output is q's dtype on every
    backend), yet warmup compiled one."""
    with pytest.raises(ValueError, match="^LayoutClass.out_dtype: expected 'fp16', the input dtype .* got 'bf16'"):
        _with(out_dtype="bf16")


def test_bool_messages_name_numpy_bools_as_such():
    with pytest.raises(TypeError, match=r"^LayoutClass.lse: expected a bool, got numpy\.bool"):
        _with(lse=np.True_)
    args, _ = Case(2110, [3, 4], [3, 4], 2, 2, 32, 32).make()
    for call in (ragged_attn.attention, attention_op):
        with pytest.raises(TypeError, match=r"^return_lse: expected a bool, got numpy\.bool"):
            call(*args, return_lse=np.True_)
        with pytest.raises(TypeError, match=r"^split_kv: expected a bool, got numpy\.bool"):
            call(*args, split_kv=np.False_)


def test_class_names_with_flags_out_of_order_say_the_order():
    name = "sm_90a-d128x128-bf16-bf16-causal-lse-ragged"
    assert parse_class_name(name + "-softcap-sinks").sinks
    with pytest.raises(ValueError, match="'-softcap' and '-sinks' in that order"):
        parse_class_name(name + "-sinks-softcap")


@pytest.mark.parametrize("jobs", ["0", "-3", "two"])
def test_aot_build_jobs_must_be_positive(jobs, capsys):
    """--jobs 0 and negatives ran as 1 silently."""
    with pytest.raises(SystemExit) as info:
        aot_main(["build", "--list", "--jobs", jobs])
    assert info.value.code == 2
    assert "--jobs: expected an int >= 1" in capsys.readouterr().err


def test_warmup_takes_a_dicts_own_arch(monkeypatch):
    """A dict of layout_class_of's keywords may hold `arch` (layout_class_of takes it); it was
    Python's 'got multiple values for keyword argument'. Differing from warmup's arch= is a
    ValueError."""
    from ragged_attn import compile_cache

    monkeypatch.setattr(compile_cache, "get_kernel", lambda layout_class, compile_fn, **kw: None)
    monkeypatch.setattr(ragged_attn.backends, "cute_import_error", lambda: None)
    q = torch.empty(8, 4, 64, dtype=torch.bfloat16, device="meta")
    cu = torch.empty(3, dtype=torch.int32, device="meta")
    item = dict(q=q, k=q, v=q, cu_seqlens_q=cu, cu_seqlens_k=cu, causal=True, arch="sm_90a")
    (got,) = ragged_attn.warmup([item], progress=False)
    assert got.arch == "sm_90a" and got.d_qk == 64 and got.mask == "causal"
    assert ragged_attn.warmup([item], arch="sm_90a", progress=False) == [got]
    with pytest.raises(ValueError, match="^problems_or_classes: an item's arch 'sm_90a' differs"):
        ragged_attn.warmup([item], arch="sm_100a", progress=False)


def test_attention_op_padded_lse_message_does_not_blame_torch_compile_in_eager():
    args, _ = Case(2111, [3, 4], [3, 4], 2, 2, 32, 32).make()
    q, k, v, cu_q, cu_k, _, mk = args
    out = torch.empty_like(q)
    with pytest.raises(ValueError, match=r"^max_seqlen_q: a padded LSE made by the op \(torch.compile, attention_op\)"):
        attention_op(q, k, v, cu_q, cu_k, None, mk, return_lse=True, lse_layout="padded", out=out)
