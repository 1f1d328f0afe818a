"""Issue 12 item 5: what a new user tripped on (CPU Plan classes, causal spellings, the CLI, the README note)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ragged_attn
from ragged_attn.__main__ import main
from tests.cases import Case

ROOT = Path(__file__).resolve().parent.parent


def _args(dtype=torch.bfloat16, h_q=4, h_kv=2, d=64, seed=5):
    args, _ = Case(seed, [5, 7], [5, 9], h_q, h_kv, d, d, dtype=dtype).make()
    return args


@pytest.mark.parametrize(
    "change,dtype,h_q,h_kv,d",
    [("dtype", torch.float16, 4, 2, 64), ("head dim class", torch.bfloat16, 4, 2, 128)],
    ids=["dtype", "head-dim"],
)
def test_cpu_plan_refuses_another_layout_class(change, dtype, h_q, h_kv, d):
    plan = ragged_attn.plan(*_args(), causal=True)
    assert plan.layout_class is None and "d64x64-causal" in plan.reference_class
    with pytest.raises(ValueError, match="make another plan"):
        plan.run(*_args(dtype=dtype, h_q=h_q, h_kv=h_kv, d=d))


def test_a_paged_plan_run_with_ragged_tensors_names_page_table():
    """Ragged against paged K/V is the page table's doing, so the error names it, both ways (found
    by a breaking session, 2026-12-03: it named q)."""
    q, k, v, cu_q, cu_k, mq, mk = _args()
    pool = torch.randn(4, 4, 2, 64).to(torch.bfloat16)
    paged = {"page_table": torch.tensor([[0, 1], [2, 3]], dtype=torch.int32),
             "seqused_k": torch.tensor([5, 7], dtype=torch.int32)}  # fmt: skip
    plan = ragged_attn.plan(q, pool, pool, cu_q, None, mq, 8, **paged)
    with pytest.raises(ValueError, match=r"^page_table: these tensors need class .*-ragged-.* plan was made for .*-paged-"):
        plan.run(q, k, v, cu_q, cu_k, mq, mk)
    plan = ragged_attn.plan(q, k, v, cu_q, cu_k, mq, mk)
    with pytest.raises(ValueError, match=r"^page_table: these tensors need class .*-paged-"):
        plan.run(q, pool, pool, cu_q, None, mq, 8, **paged)
    with pytest.raises(ValueError, match=r"^q: these tensors need class"):  # the same K/V kind: q's dtype
        plan.run(*_args(dtype=torch.float16))


def test_cpu_plan_accepts_calls_of_the_same_class():
    plan = ragged_attn.plan(*_args(d=64), return_lse=True)
    # Head counts, lengths and a head dim inside the same class (40 rides the d64 class) are run time.
    for args in (_args(h_q=6, h_kv=3, seed=6), _args(d=40, seed=7)):
        out, lse = plan.run(*args)
        want, want_lse = ragged_attn.attention(*args, return_lse=True)
        assert torch.equal(out, want) and torch.equal(lse, want_lse)


def test_cpu_plan_refuses_another_device_type():
    plan = ragged_attn.plan(*_args(), backend="reference")
    meta = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in _args()]
    with pytest.raises(ValueError, match="make another plan"):
        plan.run(*meta)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_out_is_q_dtype_on_every_backend(dtype, backend):
    """One out-dtype rule (the kernels'): out is q's dtype. The reference computes in float32 and
    rounds once: its output equals the float32 computation of the same values cast to q's dtype."""
    seed = int(torch.randint(0, 2**31 - 1, ()).item())  # fresh inputs each run
    args = _args(dtype=dtype, seed=seed)
    out, lse = ragged_attn.attention(*args, causal=True, return_lse=True, backend=backend)
    assert out.dtype == dtype and lse.dtype == torch.float32
    q, k, v, *meta = args
    want, want_lse = ragged_attn.attention(q.float(), k.float(), v.float(), *meta, causal=True, return_lse=True,
                                           backend="reference")  # fmt: skip
    assert torch.equal(out, want.to(dtype)), f"seed {seed}: not the float32 result rounded to {dtype}"
    assert torch.equal(lse, want_lse)
    plan = ragged_attn.plan(*args, causal=True, backend=backend)
    assert plan.run(*args).dtype == dtype


@pytest.mark.parametrize("entry", ["attention", "plan.run"])
def test_out_of_another_dtype_is_a_type_error_before_writing(entry):
    """The reference wrote a float32 `out` for bf16 inputs where the kernels decline; now every
    backend refuses it the same way, and the buffer is untouched."""
    args = _args(dtype=torch.bfloat16)
    buf = torch.full((args[0].shape[0], 4, 64), 5.0)  # float32
    call = ragged_attn.attention if entry == "attention" else ragged_attn.plan(*args).run
    with pytest.raises(TypeError, match="out: expected dtype bfloat16 .*every backend.*got float32"):
        call(*args, out=buf)
    assert torch.all(buf == 5.0)


def test_causal_bottom_right_spelling_is_causal_true():
    args = _args()
    want = ragged_attn.attention(*args, causal=True)
    assert torch.equal(ragged_attn.attention(*args, causal="bottom_right"), want)
    assert not torch.equal(ragged_attn.attention(*args, causal="top_left"), want)


@pytest.mark.parametrize("bad", ["bottomright", "causal", 1], ids=["typo", "word", "int"])
def test_other_causal_values_are_named_errors(bad):
    with pytest.raises(ValueError, match="causal"):
        ragged_attn.attention(*_args(), causal=bad)


def test_unknown_command_says_so(capsys):
    assert main(["foo"]) == 2
    captured = capsys.readouterr()
    assert "unknown command 'foo'" in captured.err and "usage:" in captured.out


def test_help_is_not_an_unknown_command(capsys):
    assert main(["--help"]) == 0
    assert "unknown command" not in capsys.readouterr().err


def test_readme_names_the_shadowing_folder_and_the_check():
    text = (ROOT / "README.md").read_text()
    assert "shadows the installed package" in text and "print(ragged_attn.__file__)" in text


def test_a_bare_ragged_attn_folder_beside_a_script_shadows_the_package(tmp_path):
    """What the README warns about, reproduced: the folder wins and `attention` is missing."""
    (tmp_path / "ragged_attn").mkdir()
    (tmp_path / "script.py").write_text("import ragged_attn\nprint(hasattr(ragged_attn, 'attention'))\n")
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stdout + done.stderr


def test_docstrings_cite_the_design_page_in_the_repository():
    assert (ROOT / "docs" / "DESIGN.md").is_file()
    skipped = {"fast_launch.py"}  # issue 11's file, cited once there; left to its owner
    for path in (ROOT / "ragged_attn").rglob("*.py"):
        if "kernels" in path.parts or path.name in skipped:
            continue
        text = path.read_text()
        bare = text.replace("docs/DESIGN.md", "")
        assert "DESIGN.md" not in bare, f"{path.relative_to(ROOT)} cites DESIGN.md outside docs/"
