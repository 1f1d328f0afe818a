"""Which layout classes an ahead-of-time build compiles (`--classes`).

Class sets: `serving` (`serving_classes()`: fp16/bf16 x every head-dim class x mask none/causal x
LSE on/off x ragged/paged, 96 classes), `scores` (`score_classes()`: issue 14's softcap / sinks /
both classes, ragged and paged, 432), `all` (every class served: the serving set, the window
family and the score classes, 576), or a FILE: one class name per line (`LayoutClass.name`, `#`
comments), or a JSON list of names or of LayoutClass field dicts.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

from ..layout_class import ARCHES, DTYPES, HEAD_DIM_CLASSES, KV_KINDS, MASK_FAMILIES, LayoutClass


def serving_classes(arch: str = "sm_90a") -> list[LayoutClass]:
    """The documented serving set: fp16 and bf16 (out dtype = input dtype), every head-dim class,
    masks none and causal, LSE on and off, ragged and paged KV (2 x 6 x 2 x 2 x 2 = 96 classes)."""
    return [
        LayoutClass(arch, dq, dv, dt, dt, mask, lse, kv)
        for dt, (dq, dv), mask, lse, kv in itertools.product(
            DTYPES, HEAD_DIM_CLASSES, ("none", "causal"), (False, True), KV_KINDS
        )
    ]


def plain_classes(arch: str = "sm_90a") -> list[LayoutClass]:
    """The classes without softcap or sinks: the serving set and the window family (144)."""
    return [
        LayoutClass(arch, dq, dv, dt, dt, mask, lse, kv)
        for dt, (dq, dv), mask, lse, kv in itertools.product(
            DTYPES, HEAD_DIM_CLASSES, MASK_FAMILIES, (False, True), KV_KINDS
        )
    ]


# Issue 14's class flags, each combination the dispatch chooses (backends.layout_class_for).
SCORE_FLAGS = ({"softcap": True}, {"sinks": True}, {"softcap": True, "sinks": True})


def score_classes(arch: str = "sm_90a") -> list[LayoutClass]:
    """The softcap / sinks classes the kernels serve: softcap, sinks and both x fp16/bf16 x every
    head-dim class x every mask family x LSE on/off x ragged/paged K/V (the paged ones served
    since their GPU tests passed, 2026-12-03): 3 x 2 x 6 x 3 x 2 x 2 = 432 classes."""
    return [
        LayoutClass(arch, dq, dv, dt, dt, mask, lse, kv, **flags)
        for flags, dt, (dq, dv), mask, lse, kv in itertools.product(
            SCORE_FLAGS, DTYPES, HEAD_DIM_CLASSES, MASK_FAMILIES, (False, True), KV_KINDS
        )
    ]


def all_classes(arch: str = "sm_90a") -> list[LayoutClass]:
    """Every class the kernels serve on `arch`: the 144 plain classes, then the 432 softcap /
    sinks classes (576)."""
    return plain_classes(arch) + score_classes(arch)


def parse_class_name(name: str) -> LayoutClass:
    """The LayoutClass of a `LayoutClass.name` such as `sm_90a-d128x128-bf16-bf16-causal-lse-ragged`.
    Raises ValueError naming the part that does not parse."""
    parts = name.strip().split("-")
    flags = {}
    for flag in ("sinks", "softcap"):  # optional trailing parts, in `LayoutClass.name`'s order
        if len(parts) > 7 and parts[-1] == flag:
            flags[flag] = True
            parts.pop()
    if len(parts) != 7:
        raise ValueError(
            f"layout class name {name!r}: expected 7 '-'-separated parts, then optionally '-softcap' and "
            f"'-sinks' in that order (e.g. {serving_classes()[0].name}, {serving_classes()[0].name}-softcap-sinks)"
        )
    arch, dims, dtype, out_dtype, mask, lse, kv = parts
    if not (dims.startswith("d") and "x" in dims):
        raise ValueError(f"layout class name {name!r}: head dims {dims!r} are not 'd<d_qk>x<d_v>'")
    try:
        d_qk, d_v = (int(x) for x in dims[1:].split("x"))
    except ValueError:
        raise ValueError(f"layout class name {name!r}: head dims {dims!r} are not 'd<d_qk>x<d_v>'") from None
    if lse not in ("lse", "nolse"):
        raise ValueError(f"layout class name {name!r}: {lse!r} is neither 'lse' nor 'nolse'")
    return LayoutClass(arch, d_qk, d_v, dtype, out_dtype, mask, lse == "lse", kv, **flags)


def classes_from_file(path: str | os.PathLike) -> list[LayoutClass]:
    """Classes listed in a file: one name per line (`#` starts a comment), or a JSON list whose
    items are names or LayoutClass field dicts. Raises OSError, ValueError/TypeError (naming the
    line or item) for a bad file."""
    text = Path(path).read_text()
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except RecursionError:
            raise ValueError(f"{path}: JSON nested too deep to parse") from None
        out = []
        for i, item in enumerate(items):
            if isinstance(item, str):
                out.append(parse_class_name(item))
            elif isinstance(item, dict):
                out.append(LayoutClass(**item))
            else:
                raise TypeError(f"{path}: item {i} is neither a class name nor a dict: {item!r}")
        return out
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line:
            try:
                out.append(parse_class_name(line))
            except ValueError as e:
                raise ValueError(f"{path}:{lineno}: {e}") from None
    return out


def resolve_classes(spec: str, arch: str = "sm_90a") -> list[LayoutClass]:
    """`serving`, `scores`, `all`, or a file (see `classes_from_file`); duplicates dropped, order kept."""
    if arch not in ARCHES:
        raise ValueError(f"arch: expected one of {ARCHES}, got {arch!r}")
    if spec == "serving":
        classes = serving_classes(arch)
    elif spec == "scores":
        classes = score_classes(arch)
    elif spec == "all":
        classes = all_classes(arch)
    else:
        classes = classes_from_file(spec)
    return list(dict.fromkeys(classes))
