"""Issue 12 item 3: `ragged_attn.attention` under torch.compile, on the CPU (reference backend).

The call becomes one torch.library custom op (ragged_attn/torch_op.py) with a fake
implementation, so fullgraph=True traces it; eager calls never touch the op.
"""

from __future__ import annotations

import pytest
import torch

import ragged_attn
from ragged_attn import torch_op
from tests.cases import Case

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class _Block(torch.nn.Module):
    """A projection, packed attention and an output projection: what a model's layer does."""

    def __init__(self, d: int, **options):
        super().__init__()
        self.proj_in = torch.nn.Linear(d, d)
        self.proj_out = torch.nn.Linear(d, d)
        self.options = options

    def forward(self, q, k, v, cu_q, cu_k, max_q: int, max_k: int):
        out, lse = ragged_attn.attention(self.proj_in(q), k, v, cu_q, cu_k, max_q, max_k, return_lse=True,
                                         **self.options)  # fmt: skip
        return self.proj_out(out), lse


def _inputs(seed, lens_q, lens_k, h_q=4, h_kv=2, d=32):
    args, _ = Case(seed, lens_q, lens_k, h_q, h_kv, d, d).make()
    return args


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    with torch.no_grad():
        yield
    torch._dynamo.reset()


@pytest.mark.parametrize(
    "options",
    [dict(causal=True), dict(causal="top_left", window_size=(3, 0)), dict(lse_layout="padded", lse_base="log2"),
     dict(lse_layout="token_major", softmax_scale=0.3), dict(causal=True, split_kv=False)],
    ids=["causal", "top-left-window", "padded-lse", "token-major", "unsplit"],
)  # fmt: skip
def test_fullgraph_compile_matches_eager_with_no_graph_break(options):
    torch.manual_seed(0)
    block = _Block(32, **options)
    args = _inputs(81, [5, 9, 0, 3], [7, 9, 2, 3])
    want = block(*args)
    explanation = torch._dynamo.explain(block)(*args)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    got = torch.compile(block, fullgraph=True, backend="aot_eager")(*args)
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    assert torch.equal(got[1], want[1])


def test_graph_holds_the_custom_op():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    block = _Block(32, causal=True)
    torch.compile(block, fullgraph=True, backend=backend)(*_inputs(82, [4, 6], [4, 6]))
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert any("ragged_attn.attention" in t for t in targets), targets


def test_compiled_model_serves_new_lengths():
    torch.manual_seed(1)
    block = _Block(32, causal=True)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager", dynamic=True)
    for seed, lens_q, lens_k in ((83, [5, 9], [7, 9]), (84, [1, 2, 12], [3, 2, 12]), (85, [16], [20])):
        args = _inputs(seed, lens_q, lens_k)
        got, want = compiled(*args), block(*args)
        torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5, msg=f"lengths {lens_q}/{lens_k}")
        assert torch.equal(got[1], want[1]), f"lse, lengths {lens_q}/{lens_k}"


def test_inductor_fullgraph_on_cpu():
    torch.manual_seed(2)
    block = _Block(32, causal=True, lse_layout="padded")
    args = _inputs(86, [3, 8], [5, 8])
    got = torch.compile(block, fullgraph=True)(*args)
    want = block(*args)
    torch.testing.assert_close(got[0], want[0], atol=1e-4, rtol=1e-4)
    assert torch.equal(got[1], want[1])


def test_out_and_lse_buffers_under_compile_are_written_in_place():
    args = _inputs(87, [4, 5], [4, 7])
    q, k, v, cu_q, cu_k, mq, mk = args

    def f(q, k, v, out, lse):
        return ragged_attn.attention(q, k, v, cu_q, cu_k, mq, mk, causal=True, return_lse=True, out=out, lse=lse)

    out, lse = torch.full((9, 4, 32), 3.0), torch.full((4, 9), 3.0)
    got_out, got_lse = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, out, lse)
    want, want_lse = ragged_attn.attention(*args, causal=True, return_lse=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    assert torch.equal(got_out, want) and torch.equal(got_lse, want_lse)


def test_opcheck_schema_fake_and_dispatch():
    q, k, v, cu_q, cu_k, mq, mk = _inputs(88, [3, 5], [6, 5])
    for return_lse, layout in ((False, "head_major"), (True, "head_major"), (True, "padded"), (True, "token_major")):
        torch.library.opcheck(
            torch.ops.ragged_attn.attention.default,
            (q, k, v, cu_q, cu_k, mq, mk, None, None, None, "NHD", "bottom_right", -1, 0, None, return_lse, layout,
             "ln", "auto"),
            test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"),
        )  # fmt: skip


def test_eager_calls_do_not_go_through_the_op(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the eager path went through the custom op")

    monkeypatch.setattr(torch_op, "attention_op", refuse)
    args = _inputs(89, [3, 4], [3, 4])
    out = ragged_attn.attention(*args, causal=True)
    assert out.shape == (7, 4, 32)


def test_attention_op_in_eager_equals_attention():
    args = _inputs(90, [3, 0, 6], [5, 1, 6])
    want, want_lse = ragged_attn.attention(*args, causal="bottom_right", return_lse=True, lse_layout="padded")
    got, got_lse = ragged_attn.attention_op(*args, causal="bottom_right", return_lse=True, lse_layout="padded")
    assert torch.equal(got, want) and torch.equal(got_lse, want_lse)
    assert torch.equal(ragged_attn.attention_op(*args), ragged_attn.attention(*args))


def test_padded_lse_under_compile_needs_max_seqlen_q():
    q, k, v, cu_q, cu_k, _, mk = _inputs(91, [3, 4], [3, 4])

    def f(q):
        return ragged_attn.attention(q, k, v, cu_q, cu_k, None, mk, return_lse=True, lse_layout="padded")

    with pytest.raises(Exception, match="max_seqlen_q"):
        torch.compile(f, fullgraph=True, backend="aot_eager")(q)


@pytest.mark.parametrize("causal,window", [("sideways", (-1, -1)), (False, 5)], ids=["causal", "window"])
def test_attention_op_names_arguments_the_schema_cannot_carry(causal, window):
    args = _inputs(92, [3], [3])
    with pytest.raises(ValueError, match="causal" if causal == "sideways" else "window_size"):
        ragged_attn.attention_op(*args, causal=causal, window_size=window)


@pytest.mark.parametrize(
    "kwargs,name",
    [({"sinks": [0.0, 0.0]}, "sinks"), ({"page_table": [[0]]}, "page_table"), ({"kv_layout": 3}, "kv_layout"),
     ({"out": "buffer"}, "out"), ({"lse_base": None}, "lse_base")],
    ids=["sinks-list", "page-table-list", "kv-layout-int", "out-str", "lse-base-none"],
)  # fmt: skip
def test_attention_op_names_arguments_of_types_the_schema_cannot_carry(kwargs, name):
    """torch's schema check would raise a RuntimeError about the op's signature; attention_op names
    the argument first (found by a breaking session, 2026-12-03)."""
    args = _inputs(94, [3], [3])
    with pytest.raises(TypeError, match=rf"^{name}: expected"):
        ragged_attn.attention_op(*args, **kwargs)


@pytest.mark.filterwarnings("ignore:Error detected in GeneratedBackwardFor_ragged_attn")
def test_compiling_a_backward_names_the_forward_only_op():
    block = _Block(32, causal=True)
    args = _inputs(93, [3, 4], [3, 4])
    with torch.enable_grad(), pytest.raises(Exception, match="ragged_attn"):
        torch.compile(block, fullgraph=True, backend="aot_eager")(*args)


def test_compiled_call_with_an_input_as_out_stops_instead_of_overwriting_it():
    """out=q under torch.compile was written over q (functionalization gave the op a copy, so its
    overlap check saw none): attention_op refuses the identity where dynamo still sees it."""
    q, k, v, cu_q, cu_k, mq, mk = _inputs(92, [3, 5], [3, 5])
    before = q.clone()

    def f(q, k, v, o):
        return ragged_attn.attention(q, k, v, cu_q, cu_k, mq, mk, out=o)

    with pytest.raises(Exception, match="Observed exception|out: expected memory apart"):
        torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, q)
    assert torch.equal(q, before), "q was overwritten"
    with pytest.raises(ValueError, match="^out: expected memory apart from the inputs, got q itself"):
        ragged_attn.attention_op(q, k, v, cu_q, cu_k, mq, mk, out=q)
