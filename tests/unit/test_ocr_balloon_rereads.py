"""Which balloons the analyzer reads again, and how: one whose ink its lines leave uncovered
is also looked at enlarged; one holding lettering but no line is not (no engine: the reading
is recorded)."""

from __future__ import annotations

from typing import Any

import pytest
from PIL import Image

from manga_page_analysis.analysis.reader import ocr_analyzer as ocr
from manga_page_analysis.analysis.reader.order.lines import TextLine


def test_an_uncovered_balloon_is_looked_at_twice_and_an_empty_one_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[tuple[tuple[int, int], bool]] = []
    column = TextLine(300, 120, 330, 380, "まあドンマイ")

    def read_lines(
        engine: Any, page: Image.Image, known: Any = (), *, look_twice: bool = True
    ) -> list[TextLine]:
        reads.append((page.size, look_twice))
        return [column] if len(reads) == 1 else []

    monkeypatch.setattr(ocr, "read_lines", read_lines)
    monkeypatch.setattr(ocr, "uncovered_bubbles", lambda lines, grey: [(150, 100, 350, 400)])
    monkeypatch.setattr(ocr, "empty_bubbles", lambda lines, grey: [(200, 520, 300, 660)])
    monkeypatch.setattr(ocr, "read_holes", lambda engine, page, lines, grey: [])
    monkeypatch.setattr(ocr, "lone_marks", lambda engine, page, lines, grey: [])
    ocr._lines(object(), Image.new("RGB", (500, 800), "white"))
    assert reads == [((500, 800), True), ((200, 300), True), ((100, 140), False)]
