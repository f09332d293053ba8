"""The one parser of JSON that comes with a request: bodies and cursors.

`json.loads` recurses once per nesting level, so 6 KB of `[` is a
`RecursionError`; here the depth is counted first, without recursion, and
anything past `MAX_JSON_DEPTH` or `MAX_BODY_BYTES` is a `BadRequest` (a 400)
before the decoder sees it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from manga_page_analysis.errors import BadRequest

MAX_BODY_BYTES: Final = 64 * 1024
"""Largest request body the admin API reads (its only body is `{"force": bool}`)."""
MAX_JSON_DEPTH: Final = 16
"""Deepest nesting of arrays and objects accepted; the API's own JSON is one level deep."""

_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS: Final = re.compile(r"[\[\]{}]")


def parse_json(raw: bytes, *, what: str, max_bytes: int = MAX_BODY_BYTES) -> Any:
    """`raw` (UTF-8 JSON) decoded; `BadRequest` naming `what` (`"the body"`) when it
    is larger than `max_bytes`, nested deeper than `MAX_JSON_DEPTH`, or not JSON."""
    if len(raw) > max_bytes:
        raise BadRequest(f"{what} is larger than {max_bytes} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(f"{what} must be JSON in UTF-8") from None
    if json_depth(text) > MAX_JSON_DEPTH:
        raise BadRequest(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except ValueError:  # JSONDecodeError, and integers too long to convert
        raise BadRequest(f"{what} must be JSON") from None


def json_depth(text: str) -> int:
    """How deep arrays and objects nest in `text` (brackets inside strings do not count);
    a loop, not a recursion, and meaningful for malformed JSON too."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest
