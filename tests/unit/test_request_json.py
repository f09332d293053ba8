"""`parse_json`: request JSON is bounded in size and depth before it is decoded."""

from __future__ import annotations

import pytest

from manga_page_analysis.admin import BadRequest, parse_json
from manga_page_analysis.admin.request_json import MAX_JSON_DEPTH, json_depth


def test_deep_nesting_is_a_bad_request_not_a_recursion_error() -> None:
    with pytest.raises(BadRequest, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        parse_json(b"[" * 3000 + b"]" * 3000, what="the body")
    with pytest.raises(BadRequest, match="nested deeper"):
        parse_json(b'{"a": ' * 100 + b"1" + b"}" * 100, what="the body")


def test_brackets_inside_strings_do_not_count() -> None:
    text = '{"a": "[[[[{{{{\\"]]]]", "b": [[1]]}'
    assert json_depth(text) == 3
    assert parse_json(text.encode(), what="x") == {"a": '[[[[{{{{"]]]]', "b": [[1]]}
    nested = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert parse_json(nested, what="x") is not None


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"x" * 70_000, "larger than 65536 bytes"),
        (b"\xff\xfe", "JSON in UTF-8"),
        (b"{not json", "must be JSON"),
        (b"9" * 5000, "must be JSON"),  # past int()'s digit limit
    ],
)
def test_other_bad_json_is_a_bad_request_naming_what(raw: bytes, message: str) -> None:
    with pytest.raises(BadRequest, match=message) as refused:
        parse_json(raw, what="the body")
    assert str(refused.value).startswith("the body ")
