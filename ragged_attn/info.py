"""What `python -m ragged_attn info` prints: versions, GPU, backends, cache directory, prebuilt
(AOT) directories."""

from __future__ import annotations

import platform
from importlib import metadata

import torch

from . import __version__


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def collect() -> dict[str, str]:
    """Facts about this install, as strings (reads no tensors, compiles nothing)."""
    from .backends import cute_import_error

    facts = {
        "ragged_attn": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "nvidia-cutlass-dsl": _version("nvidia-cutlass-dsl"),
        "apache-tvm-ffi": _version("apache-tvm-ffi"),
    }
    if torch.cuda.is_available():
        dev = torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(dev)
        facts["gpu"] = f"{torch.cuda.get_device_name(dev)} (sm_{major}{minor})"
        facts["cuda"] = str(torch.version.cuda)
    else:
        facts["gpu"] = "none (CUDA not available)"
    reason = cute_import_error()
    if reason is not None:
        cute = f"unavailable: {reason}"
    elif not torch.cuda.is_available():
        cute = "installed (compiles sm_90a kernels here; runs them on an sm_90 GPU)"
    elif torch.cuda.get_device_capability() != (9, 0):
        cute = "installed, but this GPU is not sm_90 (kernels exist for sm_90a)"
    else:
        cute = "available"
    facts["backends"] = f"reference: available; cute: {cute}"
    try:
        from .compile_cache import cache_dir

        facts["cache directory"] = str(cache_dir())
    except ImportError as exc:  # compile cache not importable
        facts["cache directory"] = f"unknown ({exc})"
    except ValueError as exc:  # a bad RAGGED_ATTN_DISK_CACHE: info is where one looks for it
        facts["cache directory"] = f"invalid setting: {exc}"
    facts["prebuilt"] = _prebuilt_summary()
    return facts


def _prebuilt_summary() -> str:
    """Each prebuilt directory in lookup order (RAGGED_ATTN_AOT_DIR's, then the kernels package's)
    with the classes its manifest offers this installation, or why it offers none."""
    from .prebuilt import AOT_DIR_ENV, read_manifest, search_dirs

    dirs = search_dirs()
    if not dirs:
        return f"none (set {AOT_DIR_ENV}; `python -m ragged_attn aot build --help`)"
    parts = []
    for directory in dirs:
        try:
            entries, reason = read_manifest(directory)
        except Exception as exc:  # the installation's own facts (the DSL) unreadable: say so, go on
            entries, reason = {}, f"{type(exc).__name__}: {exc}"
        text = f"{directory}: {len(entries)} class{'es' * (len(entries) != 1)}"
        parts.append(text + (f" ({reason})" if reason else ""))
    return "; ".join(parts)
