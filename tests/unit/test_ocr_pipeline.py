"""The second look at a small image adds only boxes the first look missed, and a doubtful
line read again keeps only a reading that restores voiced marks (no engine)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from manga_page_analysis.analysis.ocr_pipeline import (
    _new,
    _read_voicing_again,
    differs_in_voicing_only,
)


def quad(x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype=np.float32)


def test_a_column_found_only_enlarged_is_added_beside_its_furigana():
    furigana = quad(51, 89, 74, 132)
    column = quad(17, 19, 59, 276)  # overlaps the ruby a little, as stylised lettering does
    assert _new(column, [furigana])


def test_a_box_found_again_is_not_added_twice():
    first = quad(100, 10, 130, 200)
    assert not _new(quad(102, 12, 131, 198), [first])  # the same column, a little moved
    assert not _new(quad(95, 5, 135, 260), [first])  # the same column, grown
    assert not _new(quad(100, 10, 130, 120), [first])  # part of it


def test_a_box_elsewhere_is_new():
    assert _new(quad(10, 10, 40, 200), [quad(100, 10, 130, 200)])
    assert _new(quad(10, 10, 40, 200), [])


def test_readings_that_differ_only_in_voiced_marks():
    assert differs_in_voicing_only("とんな練習", "どんな練習")
    assert differs_in_voicing_only("ズポンの", "ズボンの")
    assert not differs_in_voicing_only("どんな", "どんな")  # the same reading
    assert not differs_in_voicing_only("朝練で", "朝練て!")  # another length
    assert not differs_in_voicing_only("父しぶり", "久しぶり")  # another character


@dataclass
class Read:
    txts: tuple[str, ...]
    scores: tuple[float, ...]


class Recogniser:
    """Reads each crop as the reading given for its height (a padded crop is taller)."""

    def __init__(self, readings: dict[int, tuple[str, float]]) -> None:
        self.readings = readings
        self.heights: list[int] = []

    def __call__(self, request: Any) -> Read:
        self.heights += [crop.shape[0] for crop in request.img]
        found = [self.readings[crop.shape[0]] for crop in request.img]
        return Read(tuple(text for text, _ in found), tuple(score for _, score in found))


def crop(height: int) -> np.ndarray:
    return np.full((height, 5 * height, 3), 255, dtype=np.uint8)


def test_a_doubtful_line_read_again_keeps_a_more_confident_reading_with_its_voiced_marks():
    recogniser = Recogniser({40: ("とんな練習", 0.73), 48: ("どんな練習", 0.81)})
    texts, scores = _read_voicing_again(recogniser, [crop(40)], ["とんな練習"], [0.73])
    assert (texts, scores) == (["どんな練習"], [0.81])
    assert recogniser.heights == [48]  # four rows of paper added on each side


def test_a_second_reading_that_changes_more_than_voiced_marks_is_not_taken():
    recogniser = Recogniser({40: ("ウェー", 0.7), 48: ("ヴェーブ", 0.99)})
    assert _read_voicing_again(recogniser, [crop(40)], ["ウェー"], [0.7]) == (["ウェー"], [0.7])


def test_a_less_confident_second_reading_is_not_taken():
    recogniser = Recogniser({40: ("朝練で", 0.6), 48: ("朝練て", 0.5)})
    assert _read_voicing_again(recogniser, [crop(40)], ["朝練で"], [0.6]) == (["朝練で"], [0.6])


def test_a_confident_line_is_not_read_again():
    recogniser = Recogniser({})
    assert _read_voicing_again(recogniser, [crop(40)], ["どんな"], [0.99]) == (["どんな"], [0.99])
    assert recogniser.heights == []
