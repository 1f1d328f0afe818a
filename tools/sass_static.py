"""Static SASS of one layout class, on the CPU (no GPU): compile the class for sm_90a (optionally with
TileConfig fields replaced), disassemble its cubin with nvdisasm, and summarize each loop whose body
holds MUFU.EX2 (the softmax loops of the MMA warpgroups): instructions by opcode, HGMMA / MUFU /
barrier counts, and the loop's length. Predict a kernel change's instruction cost here before
spending device time on it (the device's METHOD.md: count first, predict, then measure).

Usage: python tools/sass_static.py D_QK MASK [FIELD=VALUE,...] [--kv ragged|paged] [--flags softcap,sinks]
       [--listing FILE] [--cubin FILE]
  e.g. python tools/sass_static.py 128 causal
       python tools/sass_static.py 64 causal tile_n=64,num_stages=6
       python tools/sass_static.py 128 causal --kv paged --flags softcap,sinks
R2UR in a loop's summary (per-thread values moved to uniform registers, e.g. WGMMA descriptors built
in the vector datapath) marks a loop whose pipeline state ptxas could not keep uniform (session 15:
the d192 classes' O turns passed under one warp's branch, tile_config.o_turn_every_thread).
Needs nvdisasm: NVDISASM=/path/to/nvdisasm, else `nvdisasm` on PATH (pip download
nvidia-cuda-nvdisasm --no-deps, unzip, nvidia/cu13/bin/nvdisasm). Sets CUTE_DSL_ARCH=sm_90a.
--cubin summarizes a cubin built elsewhere, e.g. a peer's kernel compiled on this CPU box (FA4 4.0.0b36
compiles its sm90 forward without a GPU under torch's FakeTensorMode with FLASH_ATTENTION_ARCH=sm_90a,
CUTE_DSL_ARCH=sm_90a, CUTE_DSL_KEEP_CUBIN=1 and CUTE_DSL_DUMP_DIR=DIR).
Loops are found from backward branches (a BRA to a label above it); nested loops print separately.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)(.*);")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def compile_cubin(d_qk: int, mask: str, kv: str, fields: dict, out_dir: str, flags: tuple = ()) -> str:
    """The class's cubin path (compiled with its tile config, `fields` replaced; flags: the class's
    optional flags, "softcap" / "sinks", or "nolse" for the class without an LSE)."""
    from ragged_attn.kernels.sm90 import compile_forward
    from ragged_attn.kernels.sm90.tile_config import tile_config
    from ragged_attn.layout_class import LayoutClass

    d_v = 128 if d_qk == 192 else d_qk
    lse = "nolse" not in flags  # "nolse": the class without an LSE (what the suites time)
    options = {f: True for f in flags if f != "nolse"}
    lc = LayoutClass("sm_90a", d_qk, d_v, "bf16", "bf16", mask, lse, kv, **options)
    config = dataclasses.replace(tile_config(lc), **fields)
    compile_forward(lc, extra_options=f"--keep-cubin --dump-dir {out_dir}", config=config)
    (cubin,) = [os.path.join(out_dir, f) for f in os.listdir(out_dir) if f.endswith(".cubin")]
    return cubin


def parse(listing: str) -> tuple[list[tuple[str, str, str]], dict[str, int]]:
    """([(label or '', opcode, operands)], {label: index of the next instruction})."""
    insns, labels, pending = [], {}, []
    for line in listing.splitlines():
        m = _LABEL.match(line.strip())
        if m:
            pending.append(m.group(1))
            continue
        m = _INSN.search(line)
        if m:
            for lab in pending:
                labels[lab] = len(insns)
            pending = []
            insns.append((m.group(2) or "", m.group(3), m.group(4)))
    return insns, labels


def loops(insns, labels) -> list[tuple[int, int]]:
    """(first, last) instruction indices of each backward branch's loop, innermost first."""
    found = []
    for i, (_, op, rest) in enumerate(insns):
        if op.startswith("BRA"):
            t = _TARGET.search(rest)
            if t and t.group(1) in labels and labels[t.group(1)] <= i:
                found.append((labels[t.group(1)], i))
    return sorted(found, key=lambda r: r[1] - r[0])


def summarize(insns, first: int, last: int) -> str:
    body = insns[first : last + 1]
    ops = collections.Counter(op.split(".")[0] for _, op, _ in body)
    key = {k: ops.get(k, 0) for k in ("HGMMA", "MUFU", "FMNMX", "FFMA", "FMUL", "FADD", "F2FP", "BAR", "SYNCS",
                                       "WARPGROUP", "SHFL", "BRA", "R2UR")}  # fmt: skip
    uniform = sum(n for op, n in ops.items() if op.startswith("U"))
    head = f"loop [{first}, {last}]: {len(body)} instructions, uniform datapath {uniform}; " + ", ".join(
        f"{k} {v}" for k, v in key.items()
    )
    top = ", ".join(f"{op} {n}" for op, n in ops.most_common(12))
    text = head + "\n    most: " + top
    waits = [i for i, (_, op, _) in enumerate(body) if op.startswith("WARPGROUP.DEPBAR")]
    if waits:
        # The loop's last WGMMA wait (the overlapped mainloop's P V wait): what the softmax does
        # before it overlaps the warpgroup's own P V GEMM (session 26: ptxas moves it).
        before = collections.Counter(op.split(".")[0] for _, op, _ in body[: waits[-1]])
        text += f"\n    last wgmma wait at {waits[-1]}; before it FFMA {before['FFMA']}, MUFU {before['MUFU']}"
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("d_qk", type=int)
    ap.add_argument("mask", choices=("none", "causal", "window"))
    ap.add_argument("fields", nargs="?", default="", help="TileConfig fields, FIELD=VALUE,...")
    ap.add_argument("--kv", default="ragged", choices=("ragged", "paged"))
    ap.add_argument("--flags", default="", help="the class's optional flags: softcap, sinks, nolse (comma-separated)")
    ap.add_argument("--listing", help="also write the whole disassembly here")
    ap.add_argument(
        "--cubin", help="summarize this cubin, not a compiled class (d_qk and mask only label it)"
    )
    args = ap.parse_args()
    if args.cubin and (args.fields or args.kv != "ragged" or args.flags):
        ap.error("--cubin: the class's fields, --kv and --flags describe a compiled class, not a given cubin")
    if args.cubin and not os.path.isfile(args.cubin):
        ap.error(f"--cubin: no such file: {args.cubin}")
    nvdisasm = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if not nvdisasm:
        sys.exit("sass_static: nvdisasm not found (set NVDISASM; see this script's docstring)")
    fields = {k: (int(v) if v.lstrip("-").isdigit() else v) for k, v in (kv.split("=") for kv in args.fields.split(",") if kv)}
    with tempfile.TemporaryDirectory() as tmp:
        flags = tuple(f for f in args.flags.split(",") if f)
        cubin = args.cubin or compile_cubin(args.d_qk, args.mask, args.kv, fields, tmp, flags)
        listing = subprocess.run([nvdisasm, "-c", cubin], check=True, capture_output=True, text=True).stdout
    if args.listing:
        with open(args.listing, "w") as f:
            f.write(listing)
    insns, labels = parse(listing)
    what = (
        f"cubin {os.path.basename(args.cubin)}" if args.cubin else f"{args.kv} {fields or '(class config)'}"
    )
    print(f"d{args.d_qk} {args.mask} {what}: {len(insns)} instructions")
    for first, last in loops(insns, labels):
        if any(op.startswith("MUFU.EX2") for _, op, _ in insns[first : last + 1]):
            print(summarize(insns, first, last))


if __name__ == "__main__":
    main()
