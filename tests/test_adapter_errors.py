"""The adapters' errors name the adapter's own arguments, as the caller spelled them.

A newcomer trial found FlashInfer, torch varlen and FlashAttention calls refused with
`attention`'s internal names (max_seqlen_q for FlashInfer's max_token_per_sequence, cu_seqlens_q
for torch's cu_seq_q, page_table for block_table). Each adapter now calls `attention` through
`ragged_attn.compat._names.caller_names` with its own table. Every case here: the exception type
is `attention`'s, the message starts with the caller's name, names no internal argument the
caller did not pass, and nothing was written.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from ragged_attn import attention
from ragged_attn.compat._names import rename_message
from ragged_attn.compat.flash_attn import flash_attn_varlen_func as fa2_varlen
from ragged_attn.compat.flash_attn_cute import flash_attn_varlen_func as fa4_varlen
from ragged_attn.compat.flashinfer import cudnn_batch_prefill_with_kv_cache
from ragged_attn.compat.torch_varlen import varlen_attn
from tests.cases import Case


def _refused(exc_type, call, lead: str, absent: tuple[str, ...] = (), untouched=None) -> str:
    """Run call; check the error's type, its leading name, the names it must not use, and that
    `untouched` (a tensor the call could write) kept its bytes. Returns the message."""
    before = untouched.clone() if untouched is not None else None
    with pytest.raises(exc_type) as info:
        call()
    message = str(info.value)
    assert type(info.value) is exc_type, f"{type(info.value).__name__}: {message}"
    assert message.startswith(f"{lead}: "), f"expected the message to name {lead!r} first: {message!r}"
    for name in absent:
        assert name not in message, f"message names {name!r}, which the caller did not pass: {message!r}"
    if untouched is not None:
        assert torch.equal(untouched, before), "the output buffer was written before the error"
    return message


# --- the renaming rule itself -----------------------------------------------------------------

_TORCH = {"q": "query", "k": "key", "cu_seqlens_q": "cu_seq_q", "causal": "is_causal", "backend": "be"}


def test_rename_replaces_the_leading_name_and_whole_names_in_the_text():
    got = rename_message("k: expected the dtype of q (float16) and q's heads, got bfloat16", _TORCH)
    assert got == "key: expected the dtype of query (float16) and query's heads, got bfloat16"


def test_rename_leaves_names_inside_other_names_alone():
    got = rename_message(
        "cu_seqlens_q: expected offsets within [0, total_q = 12] for H_q = 4 and x.q", _TORCH
    )
    assert got == "cu_seq_q: expected offsets within [0, total_q = 12] for H_q = 4 and x.q"


def test_rename_touches_english_words_only_as_keywords():
    got = rename_message(
        'q: causal attention on this backend; pass causal=False or backend="reference"', _TORCH
    )
    assert got == 'query: causal attention on this backend; pass is_causal=False or be="reference"'


@pytest.mark.parametrize(
    "message",
    [
        "expected a tensor, got q",
        "head dims: kernels serve (d_qk, d_v), got q",
        "query: already the caller's",
    ],
    ids=["no-leading-name", "not-an-argument", "already-renamed"],
)
def test_rename_passes_other_messages_through(message):
    assert rename_message(message, _TORCH) == message


# --- FlashInfer ---------------------------------------------------------------------------------


def _fi_call(seed, **overrides):
    case = Case(seed, [5, 7], [5, 7], 4, 2, 64, 64, dtype=torch.bfloat16, causal=True)
    (q, k, v, cu_q, cu_k, mq, mk), _ = case.make()
    out = torch.full_like(q, 3.0)
    kw = {
        "max_token_per_sequence": mq,
        "max_sequence_kv": mk,
        "batch_offsets_q": cu_q,
        "batch_offsets_k": cu_k,
        "batch_offsets_units": "tokens",
        "causal": True,
        "return_lse": True,
        "out": out,
    }
    kw.update(overrides)
    return (lambda: cudnn_batch_prefill_with_kv_cache(q, k, v, 0.125, None, **kw)), out


def test_flashinfer_max_token_per_sequence_too_small_is_named():
    call, out = _fi_call(301, max_token_per_sequence=3)
    msg = _refused(ValueError, call, "max_token_per_sequence", ("max_seqlen",), out)
    assert "3 < 7" in msg


def test_flashinfer_max_sequence_kv_too_small_is_named():
    call, out = _fi_call(302, max_sequence_kv=3)
    _refused(ValueError, call, "max_sequence_kv", ("max_seqlen",), out)


def test_flashinfer_decreasing_batch_offsets_q_is_named():
    call, out = _fi_call(
        303, batch_offsets_q=torch.tensor([0, 8, 5], dtype=torch.int32), max_token_per_sequence=8
    )
    msg = _refused(ValueError, call, "batch_offsets_q", ("seqused", "cu_seqlens"), out)
    assert "non-decreasing offsets" in msg and "got 8 then 5 at sequence 1" in msg  # not a length of -3


def test_flashinfer_actual_seq_lens_q_past_the_gap_is_named():
    call, out = _fi_call(304, actual_seq_lens_q=torch.tensor([6, 7], dtype=torch.int32))
    msg = _refused(ValueError, call, "actual_seq_lens_q", ("seqused", "cu_seqlens"), out)
    assert "[0, 5]" in msg and "got 6" in msg


def test_flashinfer_lengths_past_q_without_offsets_are_named():
    lens = torch.tensor([5, 9], dtype=torch.int32)
    call, out = _fi_call(
        305,
        batch_offsets_q=None,
        batch_offsets_k=None,
        actual_seq_lens_q=lens,
        actual_seq_lens_kv=torch.tensor([5, 7], dtype=torch.int32),
        max_token_per_sequence=9,
    )
    msg = _refused(ValueError, call, "actual_seq_lens_q", ("seqused", "cu_seqlens", "non-decreasing"), out)
    assert "12 rows of q" in msg and "summing to 14" in msg


def test_flashinfer_k_cache_dtype_is_named():
    case = Case(306, [4, 6], [4, 6], 4, 2, 64, 64, dtype=torch.float16)
    (q, k, v, cu_q, cu_k, _, _), _ = case.make()
    msg = _refused(
        TypeError,
        lambda: cudnn_batch_prefill_with_kv_cache(
            q,
            k.bfloat16(),
            v,
            0.125,
            None,
            max_token_per_sequence=6,
            max_sequence_kv=6,
            batch_offsets_q=cu_q,
            batch_offsets_k=cu_k,
            batch_offsets_units="tokens",
            causal=False,
            return_lse=False,
        ),
        "k_cache",
    )
    assert "dtype of q (float16)" in msg


def test_flashinfer_block_tables_dtype_is_named():
    case = Case(307, [3, 5], [9, 20], 4, 2, 64, 64, dtype=torch.bfloat16, page_size=8, kv_layout="HND")
    (q, k, v, _, _, mq, mk), kw = case.make()
    out = torch.full_like(q, 3.0)
    lens_q = torch.tensor(case.lens_q, dtype=torch.int32)
    _refused(
        TypeError,
        lambda: cudnn_batch_prefill_with_kv_cache(
            q,
            k,
            v,
            0.125,
            None,
            max_token_per_sequence=mq,
            max_sequence_kv=mk,
            actual_seq_lens_q=lens_q,
            actual_seq_lens_kv=kw["seqused_k"],
            block_tables=kw["page_table"].long(),
            causal=False,
            return_lse=False,
            out=out,
        ),
        "block_tables",
        ("page_table",),
        out,
    )


def test_flashinfer_ragged_attn_backend_is_named_in_the_advice():
    call, out = _fi_call(308, ragged_attn_backend="cute")
    with pytest.raises(NotImplementedError, match='ragged_attn_backend="reference"') as info:
        call()
    assert 'pass backend="reference"' not in str(info.value)
    assert torch.all(out == 3.0)


def _fi_nan(**overrides):
    """A valid float32 FlashInfer call on the CPU (lengths 3, 5 over q's 8 rows, 4, 6 over k's 10)
    with a NaN-poisoned out (8, 4, 16), and a NaN-poisoned lse (8, 4) passed with batch_offsets_stats;
    returns (call, out, lse)."""
    g = torch.Generator().manual_seed(309)
    q, k, v = (torch.randn(n, h, 16, generator=g) for n, h in ((8, 4), (10, 2), (10, 2)))
    out, lse = torch.full((8, 4, 16), math.nan), torch.full((8, 4), math.nan)
    lens_q, lens_kv = torch.tensor([3, 5], dtype=torch.int32), torch.tensor([4, 6], dtype=torch.int32)
    kw = {"max_token_per_sequence": 5, "max_sequence_kv": 6, "actual_seq_lens_q": lens_q,
          "actual_seq_lens_kv": lens_kv, "causal": True, "return_lse": True, "out": out}  # fmt: skip
    kw.update(overrides)
    if "batch_offsets_stats" in kw:
        kw["lse"] = lse
    return (lambda: cudnn_batch_prefill_with_kv_cache(q, k, v, 0.25, None, **kw)), out, lse


@pytest.mark.parametrize(
    "name,lengths,words",
    [("actual_seq_lens_q", [3, 9], ["the 8 rows of q", "2 lengths summing to 12"]),
     ("actual_seq_lens_q", [-2, 5], [">= 0", "got -2 at index 0"]),
     ("actual_seq_lens_kv", [4, 9], ["the 10 rows of k_cache", "2 lengths summing to 13"])],
    ids=["q-past-q", "q-negative", "kv-past-k-cache"],
)  # fmt: skip
def test_flashinfer_lengths_without_offsets_are_named_as_lengths(name, lengths, words):
    """Without batch_offsets_q / _k the lengths are packed from row 0: lengths that run past q's
    (k_cache's) rows are reported as the lengths the caller passed, not as offsets ("got 3 then 12")."""
    lens = torch.tensor(lengths, dtype=torch.int32)
    call, out, _ = _fi_nan(**{name: lens}, max_token_per_sequence=9, max_sequence_kv=9)
    msg = _refused(ValueError, call, name, ("seqused", "cu_seqlens", "non-decreasing", "then"))
    for word in words:
        assert word in msg, msg
    assert torch.isnan(out).all()


@pytest.mark.parametrize(
    "name,offsets,row",
    [("batch_offsets_q", [0, 3 * 64 + 1, 8 * 64], 64), ("batch_offsets_k", [0, 4 * 32 + 5, 10 * 32], 32),
     ("batch_offsets_o", [0, 3 * 64 + 3, 8 * 64], 64), ("batch_offsets_stats", [0, 13, 32], 4)],
    ids=["q", "k", "o", "stats"],
)  # fmt: skip
def test_flashinfer_element_offsets_that_are_not_whole_rows_are_named(name, offsets, row):
    """Element offsets are token * H * D (H_q for stats): others were floor-divided silently. On the
    CPU (values read anyway) they are a ValueError naming the argument, the row size and the value."""
    call, out, lse = _fi_nan(**{name: torch.tensor(offsets, dtype=torch.int32)})
    msg = _refused(ValueError, call, name, ("seqused", "cu_seqlens"))
    assert f"multiples of {row}" in msg and f"got {offsets[1]} at index 1" in msg, msg
    assert torch.isnan(out).all() and torch.isnan(lse).all()


def test_flashinfer_whole_row_element_offsets_still_pass():
    """The same offsets on whole rows run (the check refuses only what floor division changed)."""
    rows = {"batch_offsets_q": [0, 3 * 64, 8 * 64], "batch_offsets_k": [0, 4 * 32, 10 * 32],
            "batch_offsets_o": [0, 3 * 64, 8 * 64], "batch_offsets_stats": [0, 12, 32]}  # fmt: skip
    call, out, lse = _fi_nan(**{name: torch.tensor(x, dtype=torch.int32) for name, x in rows.items()})
    got_out, got_lse = call()
    assert got_out is out and got_lse is lse
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()


@pytest.mark.parametrize("name", ["actual_seq_lens_q", "actual_seq_lens_kv"])
def test_flashinfer_lengths_on_the_meta_device_are_named(name):
    """Lengths on the meta device have no values to move to q's device: torch said "Cannot copy out
    of meta tensor"; the adapter names the argument and the devices, as `attention` names a meta tensor."""
    call, out, _ = _fi_nan(**{name: torch.tensor([3, 5] if name.endswith("_q") else [4, 6], dtype=torch.int32,
                                                 device="meta")})  # fmt: skip
    msg = _refused(ValueError, call, name)
    assert "the device of q" in msg and "got one on meta" in msg, msg
    assert torch.isnan(out).all()


@pytest.mark.parametrize(
    "exc,kw,lead,words",
    [(ValueError, {"s_aux": torch.zeros(3)}, "s_aux", "got (3,)"),
     (TypeError, {"s_aux": [0.0] * 4}, "s_aux", "got list"),
     (ValueError, {"s_aux": torch.zeros(4, device="meta")}, "s_aux", "got one on meta"),
     (TypeError, {"s_aux": torch.zeros(4, dtype=torch.int64)}, "s_aux", "int64"),
     (ValueError, {"scaling": -1.0}, "scaling", "got -1.0"),
     (ValueError, {"sliding_window": -3}, "sliding_window", "got -3"),
     (TypeError, {"sliding_window": 2.5}, "sliding_window", "float")],
    ids=["s_aux-shape", "s_aux-list", "s_aux-meta", "s_aux-int", "scaling-negative", "window-negative",
         "window-float"],
)  # fmt: skip
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_transformers_s_aux_and_scaling_are_named_as_passed(exc, kw, lead, words, padded):
    """transformers passes gpt-oss's sinks as s_aux and the softmax scale as scaling: errors name
    those, not attention's sinks / softmax_scale (both call sites: with and without a padding mask);
    a bad sliding_window is named as such, not as the window_size it maps to."""
    pytest.importorskip("transformers")
    from ragged_attn.compat.transformers import attention_forward

    g = torch.Generator().manual_seed(310)
    q, k, v = (torch.randn(1, h, 5, 16, generator=g) for h in (4, 2, 2))
    mask = torch.tensor([[False, True, True, True, True]]) if padded else None
    call = lambda: attention_forward(SimpleNamespace(is_causal=True), q, k, v, mask, **kw)
    msg = _refused(exc, call, lead, ("sinks", "softmax_scale"))
    assert words in msg, msg


# --- torch varlen_attn --------------------------------------------------------------------------


def _torch_args(seed, dtype=torch.bfloat16):
    case = Case(seed, [5, 7], [5, 7], 4, 2, 64, 64, dtype=dtype)
    args, _ = case.make()
    return list(args)


@pytest.mark.parametrize(
    "position,value,exc,lead,absent",
    [
        (3, lambda a: a[3].long(), TypeError, "cu_seq_q", ("cu_seqlens",)),
        (4, lambda a: a[4].long(), TypeError, "cu_seq_k", ("cu_seqlens",)),
        (3, lambda a: torch.tensor([0, 8, 5], dtype=torch.int32), ValueError, "cu_seq_q", ("cu_seqlens",)),
        (5, lambda a: 3, ValueError, "max_q", ("max_seqlen",)),
        (6, lambda a: 3, ValueError, "max_k", ("max_seqlen",)),
        (0, lambda a: a[0].half(), TypeError, "key", ("k:", "of q ")),
    ],
    ids=[
        "cu_seq_q-int64",
        "cu_seq_k-int64",
        "cu_seq_q-decreasing",
        "max_q-small",
        "max_k-small",
        "query-fp16",
    ],
)
def test_torch_varlen_names_torch_arguments(position, value, exc, lead, absent):
    args = _torch_args(310 + position)
    args[position] = value(args)
    msg = _refused(exc, lambda: varlen_attn(*args, enable_gqa=True), lead, absent)
    if lead == "key":
        assert "the dtype of query (float16)" in msg


def test_torch_varlen_scale_is_named():
    args = _torch_args(317)
    _refused(ValueError, lambda: varlen_attn(*args, enable_gqa=True, scale=-1.0), "scale", ("softmax_scale",))


@pytest.mark.parametrize("window", [None, 5, (3,)], ids=["None", "int", "1-tuple"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_torch_varlen_window_size_not_a_pair_is_named(window, is_causal):
    """It was a bare TypeError ('NoneType' object is not iterable) or an IndexError."""
    args = _torch_args(330 + is_causal)
    msg = _refused(ValueError, lambda: varlen_attn(*args, enable_gqa=True, is_causal=is_causal, window_size=window),
                   "window_size")  # fmt: skip
    assert "pair" in msg and repr(window) in msg


@pytest.mark.parametrize(
    "window,is_causal", [((-1, 0), False), ((-1, -1), True), ([4, 0], False), ((4, -1), True)]
)
def test_torch_varlen_causal_spellings_agree(window, is_causal):
    """window_size=(-1, 0) (torch 2.11+) and is_causal=True (torch 2.10) are one causal mask; a left
    bound keeps its window."""
    args = _torch_args(332)
    got = varlen_attn(*args, enable_gqa=True, is_causal=is_causal, window_size=window)
    left = window[0]
    assert torch.equal(got, attention(*args, causal=True, window_size=(left, 0)))


def test_torch_varlen_block_table_dtype_is_named():
    case = Case(318, [3, 5], [9, 20], 4, 2, 64, 64, dtype=torch.bfloat16, page_size=8)
    (q, k, v, cu_q, _, mq, mk), kw = case.make()
    _refused(
        TypeError,
        lambda: varlen_attn(
            q,
            k,
            v,
            cu_q,
            None,
            mq,
            mk,
            enable_gqa=True,
            seqused_k=kw["seqused_k"],
            block_table=kw["page_table"].long(),
        ),
        "block_table",
        ("page_table",),
    )


@pytest.mark.parametrize(
    "aux", [True, False, "lse", {"lse": True}, 1], ids=["True", "False", "str", "dict", "int"]
)
def test_torch_varlen_return_aux_without_lse_attribute_is_refused(aux):
    """return_aux=True used to drop the LSE silently (getattr(True, "lse", False))."""
    args = _torch_args(319)
    msg = _refused(TypeError, lambda: varlen_attn(*args, enable_gqa=True, return_aux=aux), "return_aux")
    assert "AuxRequest" in msg and type(aux).__name__ in msg


def _torch_aux_request(lse: bool):
    """torch's own AuxRequest where this torch has one (2.11+), else any object with `.lse`."""
    try:
        from torch.nn.attention.varlen import AuxRequest
    except ImportError:
        return SimpleNamespace(lse=lse)
    return AuxRequest(lse=lse)


@pytest.mark.parametrize("lse", [True, False])
def test_torch_varlen_return_aux_with_lse_attribute(lse):
    args = _torch_args(320 + lse)
    got = varlen_attn(*args, enable_gqa=True, return_aux=_torch_aux_request(lse))
    want = attention(*args, return_lse=lse)
    if lse:
        assert isinstance(got, tuple) and torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert got[1].shape == (4, args[0].shape[0])
    else:
        assert isinstance(got, torch.Tensor) and torch.equal(got, want)


# --- FlashAttention -----------------------------------------------------------------------------


def _paged(seed):
    case = Case(seed, [3, 5], [9, 20], 4, 2, 64, 64, dtype=torch.bfloat16, page_size=8)
    (q, k, v, cu_q, _, mq, mk), kw = case.make()
    return q, k, v, cu_q, mq, mk, kw


def test_flash_attn_block_table_dtype_is_named():
    q, k, v, cu_q, mq, mk, kw = _paged(320)
    out = torch.full_like(q, 3.0)
    _refused(
        TypeError,
        lambda: fa2_varlen(
            q,
            k,
            v,
            cu_q,
            None,
            mq,
            mk,
            block_table=kw["page_table"].long(),
            seqused_k=kw["seqused_k"],
            out=out,
        ),
        "block_table",
        ("page_table",),
        out,
    )


def test_flash_attn_page_table_keeps_its_name():
    """FA4's keyword is page_table: an error about it keeps that name."""
    q, k, v, cu_q, mq, mk, kw = _paged(321)
    _refused(
        TypeError,
        lambda: fa2_varlen(
            q, k, v, cu_q, None, mq, mk, page_table=kw["page_table"].long(), seqused_k=kw["seqused_k"]
        ),
        "page_table",
        ("block_table",),
    )


@pytest.mark.parametrize("adapter", ["fa2", "fa4"])
def test_flash_attn_learnable_sink_is_named(adapter):
    args = _torch_args(322)
    sink = torch.randn(3)  # H_q = 4
    if adapter == "fa2":
        call = lambda: fa2_varlen(*args, learnable_sink=sink)
    else:
        q, k, v, cu_q, cu_k, mq, mk = args
        call = lambda: fa4_varlen(
            q,
            k,
            v,
            cu_seqlens_q=cu_q,
            cu_seqlens_k=cu_k,
            max_seqlen_q=mq,
            max_seqlen_k=mk,
            learnable_sink=sink,
        )
    msg = _refused(ValueError, call, "learnable_sink", ("sinks:",))
    assert "(4,)" in msg and "(3,)" in msg
