"""A doubtful column whose box took in its ruby is read again without it (pages drawn with
numpy; a stand-in recogniser records what it is shown)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from manga_page_analysis.analysis.reader.recognition.column_ruby import (
    _column_alone,
    read_without_ruby,
)

PAPER, INK = 250, 20


def column_with_ruby() -> tuple[np.ndarray, np.ndarray]:
    """A page (BGR) with two kanji 20 px wide at x 40-60 and their ruby, 8 px wide, at
    x 63-71; and the box the detector gave them, holding both."""
    page = np.full((120, 120, 3), PAPER, dtype=np.uint8)
    page[20:40, 40:60] = INK
    page[44:64, 40:60] = INK
    page[22:30, 63:71] = INK
    page[48:56, 63:71] = INK
    box = np.array([[38, 18], [73, 18], [73, 66], [38, 66]], dtype=np.float32)
    return page, box


class Recogniser:
    """Reads every crop as `reading`, and keeps the crops' widths (a column is laid on its
    side: its width is the crop's height)."""

    def __init__(self, reading: str, score: float) -> None:
        self.reading, self.score = reading, score
        self.widths: list[int] = []

    def __call__(self, request: Any) -> SimpleNamespace:
        self.widths += [crop.shape[0] for crop in request.img]
        return SimpleNamespace(
            txts=[self.reading] * len(request.img), scores=[self.score] * len(request.img)
        )


def test_the_column_alone_is_its_widest_run_of_ink_with_a_little_paper():
    page, box = column_with_ruby()
    column = _column_alone(box, page)
    assert column is not None
    (x0, y0), (x1, y1) = column.min(axis=0), column.max(axis=0)
    assert (x0, x1) == (38, 62) and (y0, y1) == (18, 66)


def test_two_columns_of_one_size_are_not_a_column_and_its_ruby():
    page, _ = column_with_ruby()
    page[22:56, 63:71] = PAPER
    page[20:64, 64:84] = INK  # a second column, as wide as the first
    wide = np.array([[38, 18], [86, 18], [86, 66], [38, 66]], dtype=np.float32)
    assert _column_alone(wide, page) is None


def test_a_doubtful_column_takes_the_reading_without_its_ruby():
    page, box = column_with_ruby()
    recogniser = Recogniser("気絶", 0.95)
    texts, scores = read_without_ruby(recogniser, page, [box], ["气色"], [0.61])
    assert (texts, scores) == (["気絶"], [0.95])
    assert recogniser.widths == [24]  # read without the ruby


def test_a_reading_less_confident_than_the_first_is_not_taken():
    page, box = column_with_ruby()
    texts, scores = read_without_ruby(Recogniser("気色", 0.5), page, [box], ["气色"], [0.61])
    assert (texts, scores) == (["气色"], [0.61])


def test_a_confident_column_is_not_read_again():
    page, box = column_with_ruby()
    recogniser = Recogniser("気絶", 0.99)
    assert read_without_ruby(recogniser, page, [box], ["気絶"], [0.9]) == (["気絶"], [0.9])
    assert recogniser.widths == []


def test_a_row_is_not_read_again():
    page, _ = column_with_ruby()
    row = np.array([[10, 40], [110, 40], [110, 60], [10, 60]], dtype=np.float32)
    recogniser = Recogniser("x", 0.99)
    assert read_without_ruby(recogniser, page, [row], ["ab"], [0.4]) == (["ab"], [0.4])
    assert recogniser.widths == []
