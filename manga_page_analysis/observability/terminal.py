"""Text for a person's terminal: control characters shown, never obeyed.

Titles come from crawled sites, kinds and errors from hosts and servers; an
escape sequence among them would retitle or clear the terminal that prints
it, and a stray newline would forge a line of a log. `visible` is the one
rule every human-readable table and log line goes through (`--json` output
and JSON logs are escaped by the JSON encoder instead).
"""

from __future__ import annotations

import unicodedata
from typing import Final

HIDDEN_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Unicode categories written as escapes: controls (C0, DEL, C1), format characters
(bidi overrides, zero-width), lone surrogates, line and paragraph separators."""


def visible(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every character of `HIDDEN_CATEGORIES` written as a Python escape
    (`\\x1b`, `\\u202e`); with `keep_newlines`, `\\n` stays a line break (tracebacks).
    Printable text (CJK, ideographic spaces, emoji) is unchanged, and so is the
    result of a second call."""
    if text.isprintable():
        return text
    return "".join(_shown(char, keep_newlines) for char in text)


def _shown(char: str, keep_newlines: bool) -> str:
    if char == "\n" and keep_newlines:
        return char
    if unicodedata.category(char) not in HIDDEN_CATEGORIES:
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
