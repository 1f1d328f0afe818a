"""GPU tests of the tail split (TileConfig.tail_split; kernels/sm90/tail_split.py, tail_merge.py): the
d128 no-mask classes built with it, the launch's last tiles taken in pieces and merged by their last
piece, against the float32 reference.

The cases run through tests/gpu/test_kernel_sm90.py's `run_case` (NaN-poisoned caller buffers,
fresh random inputs, `torch.cuda.set_sync_debug_mode("error")`, |out - ref| <= 2e-2 + 2e-2 |ref|,
LSE within 1e-2, rows outside every sequence untouched) with `tail` = (tail_tiles, pieces) forced,
or "auto" (the rules): few and all tiles in pieces, 2 to 16 pieces, pieces without a key block
(short keys), partial tiles and rows past len_q, unequal lengths, seqused gaps, GQA, both LSE
layouts in both bases, fp16 and non-compact strides. Then: no tail (0 tiles) gives the class's own
output bit for bit; the rules' choice on a batch they split; a CUDA graph replayed; back-to-back
launches (the counters the launch leaves 0).

Run on an H100 / H200 (from the repository root):
    python -m pytest tests/gpu/test_tail_split_gpu.py -m gpu -q -p no:cacheprovider
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (sm_90a)"),
]

from tests.gpu.test_kernel_sm90 import compiled_for, compiled_tail_for, run_case  # noqa: E402


def _case(**kw):
    c = dict(seed=5, hq=8, hkv=2, d=128, dtype="bf16", mask="none", lse="none")
    c.update(kw)
    return c


TAIL_CASES = {
    "few_tiles_4_pieces": _case(lens_q=[1000, 1000], lens_k=[1000, 1000], tail=(5, 4)),
    "all_tiles_16_pieces": _case(lens_q=[512, 512], lens_k=[2048, 2048], tail=(64, 16)),
    "more_tiles_than_the_launch": _case(lens_q=[300], lens_k=[1500], hq=4, hkv=4, tail=(100, 3)),
    "empty_shares": _case(lens_q=[256, 256, 256], lens_k=[300, 100, 10], tail=(48, 16)),
    "unequal_lengths": _case(lens_q=[700, 33, 1300, 1], lens_k=[900, 2100, 1300, 5000], tail=(9, 5)),
    "seqused_gaps": _case(lens_q=[129, 0, 400], lens_k=[1000, 300, 2500], seqused=True, tail=(7, 3)),
    "no_keys_in_one": _case(lens_q=[200, 200], lens_k=[0, 1200], tail=(8, 4)),
    "gqa8_lse_token": _case(lens_q=[640, 640], lens_k=[3000, 3000], hq=16, hkv=2, lse="token", tail=(11, 6)),
    "lse_head_log2": _case(lens_q=[384, 900], lens_k=[1800, 777], lse="head", log2=True, tail=(12, 7)),
    "fp16_strided": _case(lens_q=[500, 260], lens_k=[1400, 2600], dtype="fp16", pad_stride=8, tail=(6, 8)),
    "two_pieces": _case(lens_q=[1024], lens_k=[4096], hq=32, hkv=8, lse="token", tail=(32, 2)),
}


@pytest.mark.parametrize("name", list(TAIL_CASES))
def test_forced_tail(name):
    run_case(TAIL_CASES[name])


def _batch(lens, hq, hkv, d=128, seed=0, dtype=torch.bfloat16):
    g = torch.Generator(device="cpu").manual_seed(seed)
    total = sum(lens)
    q = torch.randn(total, hq, d, generator=g).to(dtype).cuda()
    k = torch.randn(total, hkv, d, generator=g).to(dtype).cuda()
    v = torch.randn(total, hkv, d, generator=g).to(dtype).cuda()
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
    return q, k, v, cu


def _kwargs(q, k, v, cu, lens, out, lse=None):
    return dict(
        q=q, k=k, v=v, out=out, lse=lse, cu_seqlens_q=cu, cu_seqlens_k=cu, seqused_q=None, seqused_k=None,
        batch=len(lens), max_seqlen_q=max(lens), lse_s_max=0, softmax_scale=1.0 / math.sqrt(q.shape[2]),
        window_left=-1, window_right=-1, bottom_right=True, max_seqlen_k=max(lens),
        lse_strides=(0, q.shape[1], q.shape[1], 1) if lse is not None else (0, 0, 0, 0),
    )  # fmt: skip


@pytest.mark.parametrize("lse", [False, True], ids=["nolse", "lse"])
def test_no_tail_is_the_class_bit_for_bit(lse):
    """Forced to 0 tail tiles, a tail_split build runs only whole tiles: the class's own output (and
    LSE), bit for bit."""
    from ragged_attn.kernels.sm90 import launch_forward
    from ragged_attn.kernels.sm90.tail_split import tail_class
    from ragged_attn.layout_class import LayoutClass

    lc = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "none", lse, "ragged")
    lens = [1500, 700, 2048]
    q, k, v, cu = _batch(lens, 16, 4, seed=3)
    outs = []
    for fn, tail in ((compiled_for(lc), None), (compiled_tail_for(lc)[0], tail_class(lc, compiled_tail_for(lc)[1], (0, 1)))):
        out = torch.full_like(q, float("nan"))
        lse_t = torch.full((q.shape[0], q.shape[1]), float("nan"), device="cuda") if lse else None
        launch_forward(fn, **_kwargs(q, k, v, cu, lens, out, lse_t), tail=tail)
        outs.append((out, lse_t))
    torch.cuda.synchronize()
    assert torch.equal(outs[0][0], outs[1][0])
    if lse:
        assert torch.equal(outs[0][1], outs[1][1])


def _auto_batch_heads():
    """A uniform no-mask batch the rules split on this GPU: 1 x 4096 (32 tiles per head) with the
    fewest heads >= the SM count's tiles whose last wave holds at most a third of the SMs."""
    from ragged_attn.kernels.sm90.launch import sm_count
    from ragged_attn.kernels.sm90.tail_split import choose_tail_split

    sms = sm_count(torch.device("cuda"))
    for hq in range(-(-sms // 32), 4 * sms):
        tail = choose_tail_split("none", 1, 4096, 4096, 4096, 4096, hq, sms, 128, 128)
        if tail != (0, 1) and 3 * tail[0] <= sms:
            return hq, tail
    raise AssertionError("no head count the rules split")


def test_auto_tail_on_a_batch_the_rules_split():
    hq, tail = _auto_batch_heads()
    assert tail[1] >= 2
    run_case(_case(lens_q=[4096], lens_k=[4096], hq=hq, hkv=1, tail="auto"))


def test_graph_replay_and_back_to_back_launches():
    """The tail split under a CUDA graph (its workspace and counters from the graph's pool) and
    launched back to back: each replay gives the eager result exactly (the merge folds the pieces in
    piece order, whichever finishes last), and a second eager launch too."""
    from ragged_attn.kernels.sm90 import launch_forward
    from ragged_attn.kernels.sm90.tail_split import tail_class
    from ragged_attn.layout_class import LayoutClass

    hq, _ = _auto_batch_heads()
    lc = LayoutClass("sm_90a", 128, 128, "bf16", "bf16", "none", False, "ragged")
    fn, cfg = compiled_tail_for(lc)
    tail = tail_class(lc, cfg)
    lens = [4096]
    q, k, v, cu = _batch(lens, hq, 1, seed=9)
    eager = torch.full_like(q, float("nan"))
    launch_forward(fn, **_kwargs(q, k, v, cu, lens, eager), tail=tail)
    again = torch.full_like(q, float("nan"))
    launch_forward(fn, **_kwargs(q, k, v, cu, lens, again), tail=tail)
    torch.cuda.synchronize()
    assert torch.equal(eager, again)
    out = torch.full_like(q, float("nan"))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        launch_forward(fn, **_kwargs(q, k, v, cu, lens, out), tail=tail)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch_forward(fn, **_kwargs(q, k, v, cu, lens, out), tail=tail)
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, eager)


def test_pieces_ran_and_left_their_counters_zero(monkeypatch):
    """The launch really ran pieces: every slot of its NaN-filled workspace is written (each piece of
    each warpgroup writes its whole slot), and every counter the pieces counted on is 0 again (the
    last piece resets it) while the output matches the reference."""
    from ragged_attn.kernels.sm90 import tail_split

    seen = []
    own = tail_split.tail_arguments

    def spy(*args, **kw):
        tiles, pieces, work, counts = own(*args, **kw)
        work.fill_(float("nan"))
        seen.append((tiles, pieces, work, counts))
        return tiles, pieces, work, counts

    monkeypatch.setattr(tail_split, "tail_arguments", spy)
    run_case(_case(lens_q=[1024, 1024], lens_k=[2048, 2048], hq=8, hkv=2, lse="token", tail=(10, 5)))
    ((tiles, pieces, work, counts),) = seen
    assert (tiles, pieces) == (10, 5)
    assert not torch.isnan(work).any(), "a piece's workspace slot was not written"
    assert not counts.any(), "a tail counter was left non-zero"
