"""The capture-time tile counters of the sm90 launch path (ragged_attn/kernels/sm90/launch.py), on
the CPU: a stand-in for a CUDA tensor and a patched capture flag exercise the bank's bookkeeping
(the counters themselves are zeroed int32 tensors, here on the CPU)."""

from __future__ import annotations

import threading

import torch

from ragged_attn.kernels.sm90 import launch


class _FakeCudaTensor:
    is_cuda = True
    device = torch.device("cpu")

    def get_device(self) -> int:
        return 7  # a device index no real test uses


def _capturing(monkeypatch, flag: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: flag)


def test_captured_launches_take_distinct_slots_then_a_spent_bank_is_replaced(monkeypatch):
    monkeypatch.setattr(launch, "_CAPTURE_BANK_SLOTS", 3)
    monkeypatch.setattr(launch, "_CAPTURE_BANKS", {})
    monkeypatch.setattr(launch, "_SPENT_BANKS", [])
    monkeypatch.setattr(launch, "_BANKS_WANTED", set())
    q = _FakeCudaTensor()
    _capturing(monkeypatch, True)
    before = launch.tile_counter(q)  # no bank made yet: a fresh tensor (the graph pool's on a GPU)
    assert before.shape == (1,) and int(before) == 0
    assert launch._BANKS_WANTED == {7}, "the next launch outside a capture is told to make the bank"
    launch._new_capture_bank(7, q.device)  # what the next launch outside a capture does
    assert not launch._BANKS_WANTED
    bank = launch._CAPTURE_BANKS[7][0]
    slots = [launch.tile_counter(q) for _ in range(3)]
    assert launch._BANKS_WANTED == {7}, "the last slot taken asks for a new bank"
    assert [s.data_ptr() for s in slots] == [bank[i : i + 1].data_ptr() for i in range(3)]
    spare = launch.tile_counter(q)  # spent: a fresh tensor, never a slot already handed out
    assert spare.data_ptr() not in {s.data_ptr() for s in slots}
    launch._new_capture_bank(7, q.device)
    assert launch._SPENT_BANKS and launch._SPENT_BANKS[-1] is bank, "a spent bank stays alive for its graphs"
    assert launch._CAPTURE_BANKS[7][1] == 0 and launch._CAPTURE_BANKS[7][0] is not bank
    launch._new_capture_bank(7, q.device)  # not spent: kept
    assert len(launch._SPENT_BANKS) == 1


def test_threads_capturing_at_once_never_share_a_slot(monkeypatch):
    monkeypatch.setattr(launch, "_CAPTURE_BANK_SLOTS", 4000)
    monkeypatch.setattr(launch, "_CAPTURE_BANKS", {})
    monkeypatch.setattr(launch, "_SPENT_BANKS", [])
    monkeypatch.setattr(launch, "_BANKS_WANTED", set())
    q = _FakeCudaTensor()
    launch._new_capture_bank(7, q.device)
    _capturing(monkeypatch, True)
    taken: list[int] = []
    lock = threading.Lock()

    def take():
        mine = [launch.tile_counter(q).data_ptr() for _ in range(500)]
        with lock:
            taken.extend(mine)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(taken) == 4000 and len(set(taken)) == 4000, "two captured launches got one counter"
