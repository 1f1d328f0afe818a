"""Summaries of `ncu --page source --csv --print-source sass` output (tools/ncu_round_issue10.sh
with NCU_SOURCE=1): per kernel, the warp-level instructions executed and warp-stall samples by
opcode, by region (runs of SASS lines with one execution count: per CTA, per tile, per warp and
item, ...) and the lines with the most samples with their top stall reasons.

Usage: python tools/ncu_sass_summary.py FILE.csv [--kernel N] [--opcodes K] [--regions] [--top K] [--footprint]
       [--span LO-HI ...]
Reading the counts: a line executed once per warp per tile shows tiles x warps; e.g. on 64 x 128
d64 (32/8 heads, packed 192-row tiles) 18432 = 1536 tiles x 12 MMA warps and 16384 = 4096 items x
4 warps. Used for the session-5 findings in docs/benchmarks/2026-12-02-h200-issue10-session5.
"""

from __future__ import annotations

import argparse
import collections
import csv
import re


def read_kernels(path: str) -> list[dict]:
    """[{name, header, rows}] per kernel of the CSV (one "Kernel Name" line opens each)."""
    kernels, cur = [], None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if row and row[0] == "Kernel Name":
                cur = {"name": row[1], "header": None, "rows": []}
                kernels.append(cur)
            elif row and row[0] == "Address" and cur is not None:
                cur["header"] = row
            elif cur is not None and cur["header"] and len(row) > 5:
                cur["rows"].append(row)
    return kernels


def _num(kernel: dict, row: list, col: str) -> float:
    i = kernel["header"].index(col)
    try:
        return float(row[i] or 0)
    except ValueError:
        return 0.0


EXEC, SAMPLES = "Instructions Executed", "Warp Stall Sampling (All Samples)"


def _stall_cols(kernel: dict) -> list[str]:
    """The header's stall-reason columns (all samples, not the not-issued ones)."""
    return [c for c in kernel["header"] if c.startswith("stall_") and "Not Issued" not in c]


def opcode_table(kernel: dict, top: int) -> list[str]:
    src = kernel["header"].index("Source")
    inst, samp = collections.Counter(), collections.Counter()
    for row in kernel["rows"]:
        m = re.match(r"(@!?U?P\w+\s+)?([A-Z0-9_]+)", row[src].strip())
        op = m.group(2) if m else row[src].strip()[:10]
        inst[op] += _num(kernel, row, EXEC)
        samp[op] += _num(kernel, row, SAMPLES)
    total_i, total_s = sum(inst.values()) or 1, sum(samp.values()) or 1
    out = [f"instructions executed (warp-level) {total_i:.0f}, stall samples {total_s:.0f}"]
    for op, n in inst.most_common(top):
        out.append(f"  {op:12s} {n:10.0f} {100 * n / total_i:5.1f}%   samples {samp[op]:6.0f} {100 * samp[op] / total_s:5.1f}%")
    return out


def region_table(kernel: dict, min_lines: int = 8, min_samples: float = 20) -> list[str]:
    regions, cur = [], None
    for i, row in enumerate(kernel["rows"]):
        e, s = _num(kernel, row, EXEC), _num(kernel, row, SAMPLES)
        if e == 0 and s == 0:
            continue
        if cur and cur[2] == e:
            cur[1], cur[3], cur[4] = i, cur[3] + 1, cur[4] + s
        else:
            cur = [i, i, e, 1, s]
            regions.append(cur)
    total = sum(r[4] for r in regions) or 1
    return [
        f"  lines {a:5d}-{b:5d}  executed {e:8.0f}  ({n:4d} lines)  samples {s:5.0f} ({100 * s / total:4.1f}%)"
        for a, b, e, n, s in regions
        if n >= min_lines or s >= min_samples
    ]


def top_lines(kernel: dict, top: int) -> list[str]:
    h = kernel["header"]
    src = h.index("Source")
    stall_cols = _stall_cols(kernel)
    rows = kernel["rows"]
    best = sorted(range(len(rows)), key=lambda i: -_num(kernel, rows[i], SAMPLES))[:top]
    out = []
    for i in sorted(best):
        r = rows[i]
        reasons = sorted(((_num(kernel, r, c), c[6:]) for c in stall_cols), reverse=True)[:3]
        why = " ".join(f"{n}:{v:.0f}" for v, n in reasons if v)
        out.append(f"  {i:5d} {_num(kernel, r, EXEC):8.0f} {_num(kernel, r, SAMPLES):4.0f} {why:36s} {r[src].strip()[:80]}")
    return out


def footprint(kernel: dict, line_bytes: int = 128) -> list[str]:
    """The code a launch touched: SASS lines executed at least once and the distinct `line_bytes`
    (instruction-cache line) blocks they sit in, beside the kernel's whole listing; and the stall
    reasons summed over every line, largest first (session 23: is the cost of a launch after another
    kernel proportional to the code it fetches cold?)."""
    h = kernel["header"]
    addr = h.index("Address")
    rows = kernel["rows"]
    executed = [r for r in rows if _num(kernel, r, EXEC) > 0]
    blocks = set()
    for r in executed:
        try:
            blocks.add(int(r[addr], 16) // line_bytes)
        except ValueError:
            pass
    stall_cols = _stall_cols(kernel)
    totals = sorted(((sum(_num(kernel, r, c) for r in rows), c[6:]) for c in stall_cols), reverse=True)
    total = sum(v for v, _ in totals) or 1
    reasons = ", ".join(f"{n} {v:.0f} ({100 * v / total:.1f}%)" for v, n in totals[:6] if v)
    return [
        f"footprint: {len(executed)} of {len(rows)} SASS lines executed, in {len(blocks)} {line_bytes}-byte blocks",
        f"stall samples by reason: {reasons}",
    ]


def span(kernel: dict, lo: int, hi: int) -> list[str]:
    """One run of SASS lines lo..hi (e.g. a loop's body, from --regions): its iterations (the first
    line's executions), instructions per iteration, stall reasons as shares of its samples, and its
    warp cycles per iteration in issue slots, (samples / selected samples) x instructions per
    iteration: samples are spread over all resident warps, so raw counts do not compare between
    kernels with different warps awake (session 24: the paged launch's producer warps 1-3 took
    samples from its MMA loop), while the share of samples that issued does."""
    rows = kernel["rows"][lo : hi + 1]
    if not rows:
        return [f"span {lo}-{hi}: no lines"]
    iters = _num(kernel, rows[0], EXEC) or 1
    insts = sum(_num(kernel, r, EXEC) for r in rows)
    stall_cols = _stall_cols(kernel)
    totals = {c[6:]: sum(_num(kernel, r, c) for r in rows) for c in stall_cols}
    samples = sum(totals.values())
    selected = totals.get("selected", 0)
    ranked = sorted(totals.items(), key=lambda x: -x[1])[:8]
    shares = ", ".join(f"{n} {100 * v / (samples or 1):.1f}%" for n, v in ranked if v)
    per_iter = insts / iters
    cycles = f"{samples / selected * per_iter:.0f}" if selected else "n/a (no selected samples)"
    return [
        f"span {lo}-{hi}: {iters:.0f} iterations, {per_iter:.1f} instructions each, {samples:.0f} samples",
        f"  warp cycles per iteration ~ {cycles} (samples / selected x instructions per iteration)",
        f"  stall shares: {shares}",
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--kernel", type=int, help="only kernel N (0-based, report order)")
    ap.add_argument("--opcodes", type=int, default=25, help="opcodes to list (0: none)")
    ap.add_argument("--regions", action="store_true", help="list the regions")
    ap.add_argument("--top", type=int, default=0, help="lines with the most stall samples")
    ap.add_argument("--footprint", action="store_true", help="executed lines and code blocks, stall reasons")
    ap.add_argument(
        "--span", action="append", default=[], metavar="LO-HI", help="a run of lines (a loop): cycles per iteration"
    )
    a = ap.parse_args()
    for n, k in enumerate(read_kernels(a.csv)):
        if a.kernel is not None and n != a.kernel:
            continue
        print(f"== kernel {n}: {k['name'][:100]}")
        if a.opcodes:
            print("\n".join(opcode_table(k, a.opcodes)))
        if a.footprint:
            print("\n".join(footprint(k)))
        if a.regions:
            print("\n".join(region_table(k)))
        if a.top:
            print("\n".join(top_lines(k, a.top)))
        for s in a.span:
            lo, _, hi = s.partition("-")
            print("\n".join(span(k, int(lo), int(hi))))


if __name__ == "__main__":
    main()
