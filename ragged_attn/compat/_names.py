"""Errors in the caller's names: how an adapter reports what `ragged_attn.attention` refused.

`attention` starts every error with the argument it blames, in its own names ("cu_seqlens_q:
expected dtype int32, got int64"), and may name other arguments in the text ("k: expected the
dtype of q"). A caller of an adapter passed other names (torch's `cu_seq_q`, FlashInfer's
`max_token_per_sequence`), so each adapter calls `attention` inside
`caller_names({attention's name: the adapter's name})`, which rewrites those names in a
TypeError / ValueError / NotImplementedError and re-raises the same exception object (same type,
same traceback). One table per adapter, in the adapter; `attention` itself stays unaware of them.

Rules (tests/test_adapter_errors.py):
- Only messages in the library's form are touched: "<name>: ..." where <name> is one of
  `attention`'s parameters. Anything else (torch's own errors) passes through unchanged.
- The leading name is replaced when the table has it; in the rest of the message a table name is
  replaced where it stands as a whole name (not part of `H_q`, `total_q`, `x.q`). Names without an
  underscore longer than one letter ("backend", "causal", "sinks") are English words too: in the
  text they are replaced only where written as `name=` ("pass backend=..."), never in prose.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from ..api import attention

ATTENTION_NAMES = frozenset(inspect.signature(attention).parameters)
_LEADING = re.compile(r"([A-Za-z_]\w*): ")


def _is_word(name: str) -> bool:
    return len(name) > 1 and "_" not in name


def rename_message(message: str, names: Mapping[str, str]) -> str:
    """`message` with `attention`'s argument names replaced by the caller's (see the module rules)."""
    lead = _LEADING.match(message)
    if lead is None or lead.group(1) not in ATTENTION_NAMES:
        return message
    head = names.get(lead.group(1), lead.group(1))
    body = message[lead.end() :]
    mapped = sorted((n for n in names if names[n] != n), key=len, reverse=True)
    if mapped:
        alternatives = "|".join(re.escape(n) + ("(?==)" if _is_word(n) else r"(?!\w)") for n in mapped)
        body = re.sub(rf"(?<![\w.])(?:{alternatives})", lambda m: names[m.group(0)], body)
    return f"{head}: {body}"


@contextmanager
def caller_names(names: Mapping[str, str]) -> Iterator[None]:
    """Run the body; an error of `attention` that escapes it is re-raised in the caller's names."""
    try:
        yield
    except (TypeError, ValueError, NotImplementedError) as exc:
        if exc.args and isinstance(exc.args[0], str):
            exc.args = (rename_message(exc.args[0], names),) + exc.args[1:]
        raise
