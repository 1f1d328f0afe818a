"""Record a function's signature from a library's own source, without importing the library.

    python -m tests.signatures.record SOURCE_FILE FUNCTION LIBRARY VERSION OUT_JSON [GIT_URL@TAG]

SOURCE_FILE is the module as shipped (unzip the wheel: `pip download LIBRARY==VERSION --no-deps`,
then `unzip -o WHEEL 'path/to/module.py' -d /tmp/src`), or, for a release published only as an
sdist (flash-attn), the file at the release tag of its repository (GIT_URL@TAG). The source is parsed with `ast`, so
libraries that need a GPU or a compiled extension to import (flashinfer, flash-attn) can be read on
any machine. Each record keeps the library, version, module path and this command, so a refresh
for a new release is one command; tests/test_compat_signatures.py compares the adapters with it.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

KINDS = {"posonly": "POSITIONAL_ONLY", "args": "POSITIONAL_OR_KEYWORD", "kwonly": "KEYWORD_ONLY"}


def parameters(source: str, function: str) -> list[dict]:
    """[{name, kind, default}] of the top-level `def function` in source; default is source text or None."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            break
    else:
        raise SystemExit(f"{function}: no top-level def in the source")
    a = node.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    rows = []
    for i, arg in enumerate(positional):
        kind = KINDS["posonly"] if i < len(a.posonlyargs) else KINDS["args"]
        rows.append({"name": arg.arg, "kind": kind, "default": None if defaults[i] is None else ast.unparse(defaults[i])})
    if a.vararg is not None:
        rows.append({"name": a.vararg.arg, "kind": "VAR_POSITIONAL", "default": None})
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        rows.append({"name": arg.arg, "kind": KINDS["kwonly"], "default": None if default is None else ast.unparse(default)})
    if a.kwarg is not None:
        rows.append({"name": a.kwarg.arg, "kind": "VAR_KEYWORD", "default": None})
    return rows


def main(argv: list[str]) -> int:
    source_file, function, library, version, out = argv[:5]
    git = argv[5] if len(argv) > 5 else None
    module = Path(source_file)
    parts = module.parts
    # The module path inside the wheel: from the top-level package folder on.
    top = next((i for i, p in enumerate(parts) if p in ("flashinfer", "flash_attn", "torch")), 0)
    record = {
        "library": library,
        "version": version,
        "module": "/".join(parts[top:]),
        "function": function,
        "refresh": None,
        "parameters": parameters(module.read_text(), function),
    }
    path = "/".join(parts[top:])
    record_cmd = f"python -m tests.signatures.record /tmp/src/{path} {function} {library} {version} {out}"
    if git is None:
        fetch = f"pip download {library}=={version} --no-deps -d /tmp/w && unzip -o /tmp/w/*.whl '{path}' -d /tmp/src"
    else:
        url, tag = git.rsplit("@", 1)
        fetch = (f"git clone -q {url} /tmp/repo && mkdir -p /tmp/src/{Path(path).parent} && "
                 f"git -C /tmp/repo show {tag}:{path} > /tmp/src/{path}")
        record_cmd += f" {git}"
    record["refresh"] = f"{fetch} && {record_cmd}"
    params = record.pop("parameters")
    rows = ",\n".join("  " + json.dumps(row) for row in params)
    head = json.dumps(record, indent=1)[:-2]
    Path(out).write_text(f'{head},\n "parameters": [\n{rows}\n ]\n}}\n')
    print(f"{out}: {len(params)} parameters of {library} {version} {function}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
