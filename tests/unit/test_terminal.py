"""`visible`: what a terminal is shown of untrusted text, and the text log format."""

from __future__ import annotations

import logging
import sys

from manga_page_analysis.observability.logs import TextFormatter
from manga_page_analysis.observability.terminal import visible


def test_control_characters_are_escaped_and_printable_text_is_kept() -> None:
    assert visible("Evil\x1b]0;PWNED\x07\x1b[2J") == "Evil\\x1b]0;PWNED\\x07\\x1b[2J"
    assert visible("a\tb\nc\r\x7f\x9b") == "a\\x09b\\x0ac\\x0d\\x7f\\x9b"
    assert visible("x\u202egnp.exe\u2028") == "x\\u202egnp.exe\\u2028"
    # Japanese titles, ideographic spaces and emoji are text, not controls.
    kept = "よつばと!\u3000第1話 🍀 Ünïcode"
    assert visible(kept) == kept


def test_a_second_pass_changes_nothing_and_newlines_may_stay() -> None:
    once = visible("a\x1b[31mb\nc")
    assert visible(once) == once
    assert visible("line 1\nline\x1b 2", keep_newlines=True) == "line 1\nline\\x1b 2"


def _record(message: str, *args: object, exc_info: object = None) -> logging.LogRecord:
    return logging.LogRecord("t", logging.ERROR, __file__, 1, message, args, exc_info)  # type: ignore[arg-type]


def test_a_text_log_line_stays_one_line_and_escaped() -> None:
    line = TextFormatter().format(_record("job %s failed: %s", "j1", "boom\n2026 FAKE LINE\x1b[2J"))
    assert "\n" not in line and "\x1b" not in line
    assert line.endswith("job j1 failed: boom\\x0a2026 FAKE LINE\\x1b[2J")


def test_a_traceback_keeps_its_lines_but_not_its_escapes() -> None:
    try:
        raise ValueError("bad \x1b]0;title\x07")
    except ValueError:
        info = sys.exc_info()
    text = TextFormatter().format(_record("failed", exc_info=info))
    assert text.count("\n") >= 3 and "Traceback (most recent call last):" in text
    assert "\x1b" not in text and "ValueError: bad \\x1b]0;title\\x07" in text
