"""CPU smoke test of the benchmark harness (`python -m ragged_attn bench`) on the reference backend.

The peers need CUDA, so here they must read n/a; ragged_attn runs through
`ragged_attn.reference.attention_reference` at tiny sizes (suite `smoke`).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

pytest.importorskip("ragged_attn.reference")

from ragged_attn.bench import main
from ragged_attn.bench.workloads import SUITES, Workload, allowed_pairs, make_inputs, suite


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    rc = main(["--suite", "smoke", "--ours-backend", "reference", "--device", "cpu", "--out", str(out)])
    return rc, out


def test_bench_writes_json_and_table(smoke_run):
    rc, out = smoke_run
    assert rc == 0, "bench returned non-zero"
    data = json.loads((out / "smoke.json").read_text())
    report = (out / "report.md").read_text()
    names = [w.name for w in suite("smoke")]
    assert [row["workload"]["name"] for row in data["workloads"]] == names
    for name in names:
        assert f"| {name} |" in report, f"{name} missing from the markdown table"
    assert "| workload | B | total_q |" in report, "TFLOP/s table header missing"


@pytest.mark.parametrize("name", [w.name for w in SUITES["smoke"]()])
def test_bench_numbers_are_sane(smoke_run, name):
    _, out = smoke_run
    data = json.loads((out / "smoke.json").read_text())
    row = next(r for r in data["workloads"] if r["workload"]["name"] == name)
    ours = row["systems"]["ragged_attn"]
    assert ours["status"] == "ok", f"{name}: ragged_attn (reference) status {ours}"
    assert ours["median_ms"] > 0 and ours["host_us"] > 0 and ours["first_call_s"] > 0, ours
    w = row["workload"]
    assert math.isclose(ours["tflops"], w["flops"] / (ours["median_ms"] * 1e-3) / 1e12, rel_tol=1e-9)
    assert ours["max_err"] <= 2e-2, f"{name}: reference vs itself differs by {ours['max_err']}"
    for peer in ("fa4", "cudnn", "torch-varlen", "sdpa-cudnn"):
        rec = row["systems"][peer]
        assert rec["status"] == "n/a" and rec["reason"], f"{name}: {peer} on CPU should be n/a, got {rec}"


def test_merge_rebuilds_the_report(smoke_run, tmp_path):
    _, out = smoke_run
    assert main(["merge", str(out / "smoke.json"), "--out", str(tmp_path), "--no-plots"]) == 0
    assert "| tiny-gqa/2mix |" in (tmp_path / "report.md").read_text()


def test_plots_written_when_matplotlib_present(smoke_run):
    pytest.importorskip("matplotlib")
    _, out = smoke_run
    for f in ("tflops.png", "host_us.png", "compiles.png"):
        assert (out / f).stat().st_size > 1000, f"{f} missing or empty"


@pytest.mark.parametrize("lq,lk", [(1, 1), (5, 5), (3, 9), (9, 3), (7, 16), (16, 7), (0, 4), (4, 0)])
@pytest.mark.parametrize("causal", [True, False])
def test_allowed_pairs_matches_a_mask_count(lq, lk, causal):
    i = torch.arange(lq).unsqueeze(1) + (lk - lq)
    j = torch.arange(lk).unsqueeze(0)
    mask = (j <= i) if causal else torch.ones(lq, lk, dtype=torch.bool)
    assert allowed_pairs(lq, lk, causal) == int(mask.sum())


def test_flops_counts_dqk_and_dv():
    w = next(w for w in suite("smoke") if w.model.d_qk != w.model.d_v)
    assert w.flops == 2 * w.model.h_q * (w.model.d_qk + w.model.d_v) * w.pairs


@pytest.mark.parametrize("name", sorted(SUITES))
def test_suites_are_seeded_and_reproducible(name):
    assert suite(name) == suite(name), f"suite {name} is not deterministic"


def test_paged_inputs_match_ragged_lengths():
    w = next(w for w in suite("smoke") if w.page_size)
    inp = make_inputs(w, torch.device("cpu"), 0)
    assert isinstance(w, Workload) and inp.page_table.shape[0] == w.batch
    assert inp.seqused_k.tolist() == list(w.k_lens)
    pages = [p for b, n in enumerate(w.k_lens) for p in inp.page_table[b, : -(-n // w.page_size)].tolist()]
    assert sorted(pages) == list(range(inp.k.shape[0])), "every page used exactly once"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU default of --ours-backend")
def test_bench_defaults_run_on_a_cpu_machine(tmp_path):
    """`python -m ragged_attn bench --suite smoke` with no backend flag works on a CPU box (a
    newcomer found it crashing while plotting an all-"pending" log axis)."""
    assert main(["--suite", "smoke", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "smoke.json").read_text())
    assert all(row["systems"]["ragged_attn"]["status"] == "ok" for row in data["workloads"] if row["workload"]["timed"])
    assert (tmp_path / "host_us.png").exists()
