"""Where a kernel's warps wait on mbarriers, from ncu's SASS source page (CSV).

Input: `ncu -i REPORT --page source --csv --print-source sass > FILE.csv` of a report with the
SourceCounters section. For every executed SYNCS.PHASECHK...TRYWAIT (a pipeline wait's first
check) it prints: the address, how often it ran (warp-level executions), the barrier operand, the
share of all warp-state samples on the branch that re-checks it (the wait's stall), and how often
its retry path ran (the TRYWAIT at the branch target: first checks that found the phase incomplete
and the retries after them). Used in docs/benchmarks/2026-12-03-h200-issue10-session11.

Usage: python tools/ncu_barrier_waits.py FILE.csv [FILE.csv ...]
"""

from __future__ import annotations

import csv
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def read(path: str) -> list[dict[str, str]]:
    """The SASS rows of an ncu source-page CSV (its first line names the kernel)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = rows[1]
    return [dict(zip(header, r)) for r in rows[2:]]


def _num(row: dict[str, str], key: str) -> float:
    try:
        return float(row.get(key) or 0)
    except ValueError:
        return 0.0


def waits(rows: list[dict[str, str]]) -> list[tuple[str, int, str, float, int | None]]:
    """(address, executions, barrier operand, sample share of its re-check branch, retry-path
    executions or None) per executed TRYWAIT whose branch `@!P BRA target` follows within 40 rows."""
    total = sum(_num(r, SAMPLES) for r in rows) or 1.0
    by_address = {r["Address"]: r for r in rows}
    found = []
    for i, row in enumerate(rows):
        src = row["Source"]
        if "TRYWAIT" not in src or _num(row, EXECUTED) <= 0:
            continue
        pred = src.split("TRYWAIT", 1)[1].split(",")[0].strip()
        operand = src.split("TRYWAIT", 1)[1].strip()
        branch = next(
            (r for r in rows[i + 1 : i + 41] if r["Source"].strip().startswith(f"@!{pred}") and " BRA " in r["Source"]),
            None,
        )
        if branch is None:
            continue
        target = by_address.get(branch["Source"].split()[-1])
        retries = int(_num(target, EXECUTED)) if target is not None else None
        found.append((row["Address"], int(_num(row, EXECUTED)), operand, _num(branch, SAMPLES) / total, retries))
    return found


def main(paths: list[str]) -> None:
    for path in paths:
        rows = read(path)
        print(f"== {path}: {sum(_num(r, SAMPLES) for r in rows):.0f} samples")
        for address, executed, operand, share, retries in waits(rows):
            print(f"  {address[-5:]} ex={executed:>7} {operand[:30]:30} wait samples {share * 100:5.2f}% retries {retries}")


if __name__ == "__main__":
    main(sys.argv[1:])
