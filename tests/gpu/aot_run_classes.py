"""Run every class of a prebuilt directory on the GPU with the CuTe DSL import blocked (issue 13).

Usage: RAGGED_ATTN_AOT_DIR=DIR python tests/gpu/aot_run_classes.py [CLASS_NAME ...]
With no names, every class of DIR/manifest.json. Prints one JSON object on its last line:
    times_s: {"import": s, "first_call": s (import ragged_attn .. first finished call, after torch
              and CUDA init), "further": [s per further class, first call each, synchronized]},
    errors: {class: "max |out-ref| ..." or the exception}, ok: {class: bool},
    info: [prebuilt_hits, compiles, disk_hits], attempts: [cutlass imports attempted].
Any `cutlass` import is refused and recorded; the DSL is reported missing, as on a runtime install.
Tolerance (docs/DESIGN.md): |out - ref| <= 2e-2 + 2e-2 |ref|; LSE within 1e-2 (natural log).
"""

from __future__ import annotations

import json
import sys
import time

ATTEMPTS: list[str] = []


class _BlockCutlass:
    def find_spec(self, name, path=None, target=None):
        if name == "cutlass" or name.startswith("cutlass."):
            ATTEMPTS.append(name)
            raise ImportError(f"cutlass import blocked: {name}")
        return None  # not ours: the next finder looks


def problem(lc, torch):
    """A small problem of class `lc`: B=2 sequences (lq 5/130, lk 7/200), H_q=4, H_kv=2, the class's
    exact head dims, paged as an NHD pool of 16-token pages with a shuffled table; softcap 8.0 and
    float32 sinks (4,) for a -softcap / -sinks class."""
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[lc.dtype]
    g = torch.Generator(device="cuda").manual_seed(13)
    lq, lk = [5, 130], [7, 200]
    cu_q = torch.tensor([0, 5, 135], dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lq), 4, lc.d_qk, device="cuda", dtype=dt, generator=g)
    kw = dict(
        causal=lc.mask == "causal",
        window_size=(32, 8) if lc.mask == "window" else (-1, -1),
        return_lse=lc.lse,
    )
    if lc.softcap:
        kw["softcap"] = 8.0
    if lc.sinks:
        kw["sinks"] = torch.randn(4, device="cuda", generator=g)
    if lc.kv == "ragged":
        k = torch.randn(sum(lk), 2, lc.d_qk, device="cuda", dtype=dt, generator=g)
        v = torch.randn(sum(lk), 2, lc.d_v, device="cuda", dtype=dt, generator=g)
        cu_k = torch.tensor([0, 7, 207], dtype=torch.int32, device="cuda")
        return (q, k, v, cu_q, cu_k, 130, 200), kw
    ps, pages = 16, 32  # 13 pages per sequence (200 keys) x 2, from a pool with spare pages
    k = torch.randn(pages, ps, 2, lc.d_qk, device="cuda", dtype=dt, generator=g)
    v = torch.randn(pages, ps, 2, lc.d_v, device="cuda", dtype=dt, generator=g)
    table = torch.randperm(pages, device="cuda", generator=g)[:26].to(torch.int32).view(2, 13)
    kw.update(seqused_k=torch.tensor(lk, dtype=torch.int32, device="cuda"), page_table=table)
    return (q, k, v, cu_q, None, 130, 200), kw


def check(lc, got, want) -> tuple[bool, str]:
    """(ok, text): |out - ref| <= 2e-2 + 2e-2 |ref| everywhere and, with LSE, |lse - ref| <= 1e-2."""
    got, want = (got, want) if lc.lse else ((got,), (want,))
    err = (got[0].float() - want[0].float()).abs()
    ok = bool((err <= 2e-2 + 2e-2 * want[0].float().abs()).all())
    text = f"max |out-ref| {err.max().item():.3g}"
    if lc.lse:
        lse_err = (got[1] - want[1]).abs().max().item()
        ok = ok and lse_err <= 1e-2
        text += f", max |lse-ref| {lse_err:.3g}"
    return ok, text


def main(names: list[str]) -> dict:
    sys.meta_path.insert(0, _BlockCutlass())
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    import ragged_attn
    from ragged_attn import backends, compile_cache, prebuilt
    from ragged_attn.aot import parse_class_name

    t_import = time.perf_counter() - t0
    backends.cute_import_error = lambda: "the CuTe DSL is not installed (blocked)"
    if not names:
        directory = prebuilt.search_dirs()[0]
        names = [e["name"] for e in json.loads((directory / "manifest.json").read_text())["classes"]]
    classes = [parse_class_name(n) for n in names]
    inputs = [problem(lc, torch) for lc in classes]
    torch.cuda.synchronize()
    times, outs = [], []
    for lc, (args, kw) in zip(classes, inputs):
        t = time.perf_counter()
        outs.append(ragged_attn.attention(*args, **kw, backend="cute"))
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    first_call = t_import + times[0]  # the inputs' construction in between is not counted
    result = {
        "times_s": {"import": t_import, "first_call": first_call, "further": times[1:]},
        "errors": {},
        "ok": {},
    }
    for lc, (args, kw), got in zip(classes, inputs, outs):
        want = ragged_attn.attention(*args, **kw, backend="reference")
        result["ok"][lc.name], result["errors"][lc.name] = check(lc, got, want)
    info = compile_cache.cache_info()
    result["info"] = [info.prebuilt_hits, info.compiles, info.disk_hits]
    result["attempts"] = ATTEMPTS
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
