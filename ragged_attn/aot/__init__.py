"""`python -m ragged_attn aot build`: compile layout classes ahead of time into DSL-free libraries.

One concern per module, each depending only on those listed before it:
    errors.py   AotBuildError, DslUnavailable
    classes.py  the class sets (`serving`, `scores`, `all`) and class files: which classes to build
    link.py     finding the C compiler, the DSL's dialect runtime, the CUDA runtime and libtvm_ffi
                (`toolchain`), and linking one exported object into `<class>.so` (`link_library`)
    builder.py  compile + export + link per class (worker processes), then the directory's
                `manifest.json` under its file lock (`build`, `write_manifest`)
    cli.py      the command line (`main`)
prebuilt.py loads what this builds. Every name below is importable from `ragged_attn.aot`; a test
that replaces one replaces it in the module that looks it up (e.g. `aot.builder._build_one`).
"""

from __future__ import annotations

from .builder import (
    MANIFEST_LOCK_NAME,
    MANIFEST_LOCK_TIMEOUT_S,
    build,
    check_out_dir,
    dsl_unavailable,
    function_name,
    manifest_header,
    write_manifest,
)
from .classes import (
    SCORE_FLAGS,
    all_classes,
    classes_from_file,
    parse_class_name,
    plain_classes,
    resolve_classes,
    score_classes,
    serving_classes,
)
from .cli import main
from .errors import AotBuildError, DslUnavailable
from .link import (
    CUDART_MODES,
    DIALECT_RUNTIME,
    dsl_cuda_major,
    find_cudart,
    find_dialect_runtime,
    installed_dsl_version,
    link_library,
    toolchain,
)

__all__ = [
    "CUDART_MODES",
    "DIALECT_RUNTIME",
    "MANIFEST_LOCK_NAME",
    "MANIFEST_LOCK_TIMEOUT_S",
    "SCORE_FLAGS",
    "AotBuildError",
    "DslUnavailable",
    "all_classes",
    "build",
    "check_out_dir",
    "classes_from_file",
    "dsl_cuda_major",
    "dsl_unavailable",
    "find_cudart",
    "find_dialect_runtime",
    "function_name",
    "installed_dsl_version",
    "link_library",
    "main",
    "manifest_header",
    "parse_class_name",
    "plain_classes",
    "resolve_classes",
    "score_classes",
    "serving_classes",
    "toolchain",
    "write_manifest",
]
