"""What Postgres can store, checked before any SQL is sent.

A value Postgres refuses (a NUL character in `text` or `jsonb`, a surrogate
code point, which is no UTF-8, an integer past its column's range) would fail
the statement with a driver error, and the caller's transaction with it: a host
enqueueing inside its own request would lose the whole request. Checked here
first, it is refused with the package's own error, and the transaction stays usable.
"""

from __future__ import annotations

import re
from typing import Final

INT4_MIN: Final = -(2**31)
INT4_MAX: Final = 2**31 - 1
"""Range of a Postgres `integer` column (page numbers, `max_attempts`)."""

_UNSTORABLE_CHAR: Final = re.compile("[\x00\ud800-\udfff]")
# In JSON text a NUL is the escape `\u0000`, after an even run of backslashes
# (an odd run makes the first backslash of `\u0000` an escaped one).
_JSON_NUL: Final = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def unstorable_text(value: str) -> str | None:
    """Why `value` cannot be stored in a `text` column (`None` when it can)."""
    found = _UNSTORABLE_CHAR.search(value)
    if found is None:
        return None
    char = found.group()
    at = found.start()
    if char == "\x00":
        return f"it holds a NUL character (at {at}), which Postgres text cannot store"
    return f"it holds a lone surrogate U+{ord(char):04X} (at {at}), which is no UTF-8"


def json_holds_nul(json_text: str) -> bool:
    """Whether JSON text holds a NUL character (the escape `\\u0000`), which `jsonb` refuses."""
    return "\\u0000" in json_text and _JSON_NUL.search(json_text) is not None
