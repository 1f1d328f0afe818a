"""CPU smoke test of the benchmark harness (`python -m ragged_attn bench`) on the reference backend.

The peers need CUDA, so here they must read n/a; ragged_attn runs through
`ragged_attn.reference.attention_reference` at tiny sizes (suite `smoke`).
"""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch

pytest.importorskip("ragged_attn.reference")

from ragged_attn.bench import DEFAULT_PEERS, main
from ragged_attn.bench.peers import FA3, Unsupported, make_systems
from ragged_attn.bench.workloads import (
    MODELS,
    SUITES,
    Model,
    Workload,
    allowed_pairs,
    make_inputs,
    named_workloads,
    suite,
    uniform_lengths_until,
)


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
    for peer in ("fa4", "fa3", "cudnn", "torch-varlen", "sdpa-cudnn"):
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


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU default of --suite")
def test_bare_bench_on_a_cpu_runs_the_smoke_suite_and_says_so(tmp_path, capsys):
    """A newcomer's bare `python -m ragged_attn bench` on a CPU sat for minutes in dense-long on the
    reference backend with no row printed: without --suite a CPU runs smoke, and says why."""
    assert main(["--out", str(tmp_path), "--no-plots"]) == 0
    assert "running the smoke suite" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["smoke.json"]


def test_named_workloads_keep_the_order_asked_and_name_what_is_missing():
    names = ["qwen2.5-7b/1x16384-full", "llama3-8b/1x16384-full"]
    assert [w.name for w in named_workloads("serving-full", names)] == names
    with pytest.raises(ValueError, match=r"workloads: \['nope/1x1'\] not in suite 'serving-full'; it has \["):
        named_workloads("serving-full", ["llama3-8b/1x16384-full", "nope/1x1"])
    with pytest.raises(ValueError, match="unknown suite 'nope'"):
        named_workloads("nope", [])


def test_uniform14_rule_gives_14_sequences_of_16879_tokens():
    """Suite issue10's mix: torch.Generator().manual_seed(1), randint(64, 2048) one length at a
    time until the sum reaches 16384."""
    lens = uniform_lengths_until(16384)
    assert len(lens) == 14 and sum(lens) == 16879, lens
    assert all(64 <= n < 2048 for n in lens), lens
    assert sum(lens[:-1]) < 16384 <= sum(lens), "stops at the length that crosses 16384"


def test_issue10_suite_rows():
    big, small = MODELS["llama3-70b"], MODELS["llama3-8b"]
    d64 = Model("llama3-8b-d64", 32, 8, 64, 64)
    uni = uniform_lengths_until(16384)
    want = [  # (model, lengths, causal)
        (big, (8192,) * 2, True),
        (big, (8192,) * 2, False),
        (small, uni, True),
        (d64, uni, True),
        (small, (256,) * 16, True),
        (small, (512,) * 4, True),
        (small, (128,) * 64, True),
    ]
    got = suite("issue10")
    assert [(w.model, w.q_lens, w.causal) for w in got] == want
    for w in got:
        assert w.k_lens == w.q_lens and w.page_size is None and w.dtype == "bf16" and w.timed, w
    assert (big.h_q, big.h_kv, big.d_qk, big.d_v) == (64, 8, 128, 128)
    assert (small.h_q, small.h_kv, small.d_qk, small.d_v) == (32, 8, 128, 128)
    assert len({w.name for w in got}) == len(got), "workload names are unique"


def test_fa3_is_a_default_peer():
    assert "fa3" in DEFAULT_PEERS
    assert [s.name for s in make_systems(["fa3"], "reference")] == ["fa3"]


def test_fa3_unavailable_when_its_module_does_not_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "fa3_fwd_interface", None)  # import raises ImportError
    fa3 = FA3()
    why = fa3.availability(torch.device("cuda"))  # a device object needs no GPU
    assert why and why.startswith("not installed"), why
    assert fa3.availability(torch.device("cpu")) == "needs CUDA"
    assert set(fa3.versions()) == {"fa3-fwd"}


@pytest.mark.parametrize("kind", ["fp16", "paged"])
def test_fa3_declines_what_its_build_lacks(monkeypatch, kind):
    monkeypatch.setitem(sys.modules, "fa3_fwd_interface", None)  # declines before importing the wheel
    w = next(w for w in suite("smoke") if (w.page_size is not None) == (kind == "paged"))
    if kind == "fp16":
        w = Workload(w.name, w.model, w.q_lens, w.k_lens, w.causal, dtype="fp16")
    with pytest.raises(Unsupported, match="fp16" if kind == "fp16" else "paged"):
        FA3().bind(w, make_inputs(w, torch.device("cpu"), 0))


# --- issue 12 item 5: where the report goes, labelled stdout, a CPU report about the CPU ---------

@pytest.fixture(scope="module")
def default_out_run(tmp_path_factory):
    """`bench --suite smoke` with no --out, from a fresh current folder, its stdout captured."""
    import contextlib
    import io
    import os

    cwd = tmp_path_factory.mktemp("cwd")
    old, buf = os.getcwd(), io.StringIO()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(buf):
            rc = main(["--suite", "smoke", "--ours-backend", "reference", "--device", "cpu", "--no-plots",
                       "--peers", "ragged_attn", "fa4"])  # fmt: skip
    finally:
        os.chdir(old)
    return rc, cwd, buf.getvalue()


def test_bench_prints_the_report_folder_first(default_out_run):
    import datetime

    rc, cwd, stdout = default_out_run
    assert rc == 0
    first = stdout.splitlines()[0]
    want = (cwd / "docs" / "benchmarks" / f"{datetime.date.today().isoformat()}-cpu").resolve()
    assert first.startswith(f"# report folder: {want}") and "--out" in first, first
    assert (want / "smoke.json").is_file() and (want / "report.md").is_file()
    assert f"wrote {want / 'report.md'}" in stdout


def test_bench_stdout_columns_are_labelled(default_out_run):
    from ragged_attn.bench.runner import COLUMNS

    _, _, stdout = default_out_run
    lines = stdout.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("workload ")]
    assert len(heads) == 1, "one header per suite"
    names = lines[heads[0]].split()
    assert names == [n for n, _ in COLUMNS[:-1]], names  # CPU: no GPU-only column
    rows = [line.split() for line in lines if line.startswith("tiny-") and " ok " in line]
    assert len(rows) == len([w for w in suite("smoke") if w.timed])
    data = {row[0]: row for row in rows}
    for w in suite("smoke"):
        row = data[w.name]
        assert len(row) == len(names), f"row fields do not line up with the header: {row}"
        ms, host, first = float(row[names.index("median_ms")]), float(row[names.index("host_us/call")]), \
            float(row[names.index("first_call_s")])
        assert ms > 0 and host > 0 and first > 0, row


def test_cpu_report_describes_no_gpu_timing(default_out_run):
    import datetime

    _, cwd, stdout = default_out_run
    report = (cwd / "docs" / "benchmarks" / f"{datetime.date.today().isoformat()}-cpu" / "report.md").read_text()
    for gpu_word in ("do_bench", "torch.cuda._sleep", "GPU-only", "L2", "triton", "driver", "CUDA (torch)"):
        assert gpu_word not in report, f"the CPU report mentions {gpu_word!r}"
        assert gpu_word not in stdout, f"the CPU run's stdout mentions {gpu_word!r}"
    assert "perf_counter" in report and "reference backend" in report and "CPU (" in report


def test_gpu_report_keeps_its_methods(smoke_run, tmp_path):
    """The same results labelled as a GPU run read as one (the wording follows env.device)."""
    _, out = smoke_run
    data = json.loads((out / "smoke.json").read_text())
    data["env"].update(device="cuda", gpu="NVIDIA H200", sm="sm_90")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "smoke.json").write_text(json.dumps(data))
    assert main(["merge", str(tmp_path / "in"), "--out", str(tmp_path / "gpu"), "--no-plots"]) == 0
    report = (tmp_path / "gpu" / "report.md").read_text()
    assert "do_bench" in report and "NVIDIA H200" in report and "perf_counter" not in report
