"""The errors of an ahead-of-time build (`python -m ragged_attn aot build`): what the CLI turns into
exit status 1 (AotBuildError) and 2 (DslUnavailable: bad input, no compile attempted)."""

from __future__ import annotations


class AotBuildError(RuntimeError):
    """A class could not be built (no compiler, a missing library, a failed compile or link, an
    output path that cannot be written)."""


class DslUnavailable(AotBuildError):
    """The installed CuTe DSL cannot build these kernels (missing, or not the required release)."""
