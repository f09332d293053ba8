"""The second look at a small image adds only boxes the first look missed, a doubtful line
read again keeps only a reading that restores voiced marks, and two columns read as one box
are read apart (no engine: a recogniser that answers by the crop's size)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from manga_page_analysis.analysis.reader.recognition.detect_and_read import (
    MIN_TEXT_SCORE,
    _line_crop,
    _new,
    _read_voicing_again,
)
from manga_page_analysis.analysis.reader.recognition.merged_columns import split_merged_columns


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


@dataclass
class Read:
    txts: tuple[str, ...]
    scores: tuple[float, ...]


class Recogniser:
    """Reads each crop as the reading given for its height (a padded crop is taller); a
    height it was given no reading for reads as nothing."""

    def __init__(self, readings: dict[int, tuple[str, float]]) -> None:
        self.readings = readings
        self.heights: list[int] = []

    def __call__(self, request: Any) -> Read:
        self.heights += [crop.shape[0] for crop in request.img]
        found = [self.readings.get(crop.shape[0], ("", 0.0)) for crop in request.img]
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


def split(
    recogniser: Any,
    source: np.ndarray,
    boxes: list[np.ndarray],
    texts: list[str],
    scores: list[float],
) -> tuple[list[np.ndarray], list[str], list[float]]:
    """`split_merged_columns` with the lines cut as the reader cuts them (page scale)."""
    crop = lambda box: _line_crop(source, box, 1.0)  # noqa: E731
    return split_merged_columns(
        recogniser, source, crop, boxes, texts, scores, min_score=MIN_TEXT_SCORE
    )


def two_columns_read_as_one() -> tuple[np.ndarray, list[np.ndarray]]:
    """A white image with three columns of ink 30 px thick and, at x 40-100, two columns
    set so close (a 6 px gap at x 68-74) that the detector gave them one box."""
    source = np.full((300, 400, 3), 255, dtype=np.uint8)
    for x0, x1 in ((42, 68), (74, 98), (200, 230), (260, 290), (320, 350)):
        source[20:280:12, x0:x1] = 0  # rows of glyph strokes
    boxes = [quad(40, 20, 100, 280), quad(200, 20, 230, 280), quad(260, 20, 290, 280)]
    return source, [*boxes, quad(320, 20, 350, 280)]


def test_a_column_box_as_thick_as_two_read_badly_is_read_as_two_columns():
    source, boxes = two_columns_read_as_one()
    # The halves' crops are laid horizontal: their height is the half's thickness.
    recogniser = Recogniser({32: ("しくじったな…", 0.89), 28: ("早い内に布団を", 0.87)})
    texts, scores = ["", "あ", "い", "う"], [0.0, 0.99, 0.99, 0.99]
    split_boxes, texts, scores = split(recogniser, source, boxes, texts, scores)
    assert texts == ["しくじったな…", "早い内に布団を", "あ", "い", "う"]  # right half first
    assert scores[:2] == [0.89, 0.87]
    assert [float(box[:, 0].min()) for box in split_boxes[:2]] == [68.0, 40.0]  # cut in the gap


def test_a_half_read_as_nothing_is_dropped_and_the_other_kept():
    source, boxes = two_columns_read_as_one()
    recogniser = Recogniser({32: ("", 0.0), 28: ("いろいろ悩んでた", 0.83)})
    texts = ["さるいる道", "あ", "い", "う"]
    _, texts, _ = split(recogniser, source, boxes, texts, [0.59, 1, 1, 1])
    assert texts == ["いろいろ悩んでた", "あ", "い", "う"]


def test_a_thick_column_read_well_or_halves_read_worse_stay_whole():
    source, boxes = two_columns_read_as_one()
    confident = Recogniser({})
    texts = ["見出し", "あ", "い", "う"]
    assert split(confident, source, boxes, texts, [0.95, 1, 1, 1])[1] == texts
    assert confident.heights == []  # not read again
    worse = Recogniser({32: ("ど１る", 0.5), 28: ("コレ", 0.34)})
    assert split(worse, source, boxes, texts, [0.78, 1, 1, 1])[1] == texts


def test_a_doubtful_line_without_kana_that_take_voiced_marks_is_not_read_again():
    recogniser = Recogniser({})
    texts = ["東京駅", "OK!", "ーっ…", "ノノミ"]
    assert _read_voicing_again(recogniser, [crop(40)] * 4, texts, [0.7] * 4)[0] == texts
    assert recogniser.heights == []


def test_a_line_too_doubtful_to_be_kept_is_not_read_again():
    recogniser = Recogniser({})
    assert _read_voicing_again(recogniser, [crop(40)], ["とんな"], [0.2]) == (["とんな"], [0.2])
    assert recogniser.heights == []


def two_short_columns_read_as_one_box() -> tuple[np.ndarray, list[np.ndarray]]:
    """Three columns 30 px thick and, at x 40-100, a short balloon of two columns of two
    characters (へー, そう) that the detector gave one square box, 60 by 56."""
    source = np.full((300, 400, 3), 255, dtype=np.uint8)
    for x0, x1 in ((42, 68), (74, 98)):
        source[22:76:12, x0:x1] = 0
    for x0, x1 in ((200, 230), (260, 290), (320, 350)):
        source[20:280:12, x0:x1] = 0
    columns = [quad(200, 20, 230, 280), quad(260, 20, 290, 280), quad(320, 20, 350, 280)]
    return source, [quad(40, 20, 100, 76), *columns]


def test_a_square_box_as_wide_as_two_columns_read_badly_is_read_as_two_columns():
    source, boxes = two_short_columns_read_as_one_box()
    # The halves are columns, 56 px long: laid horizontal, 32 and 28 px high.
    recogniser = Recogniser({32: ("そう", 0.93), 28: ("へー", 0.9)})
    split_boxes, texts, _ = split(
        recogniser, source, boxes, ["診", "あ", "い", "う"], [0.73, 1, 1, 1]
    )
    assert texts == ["そう", "へー", "あ", "い", "う"]
    assert [float(box[:, 0].min()) for box in split_boxes[:2]] == [68.0, 40.0]


def test_a_square_box_no_wider_than_a_column_and_a_half_stays_whole():
    source, boxes = two_short_columns_read_as_one_box()
    recogniser = Recogniser({})
    narrow = [quad(40, 20, 80, 76), *boxes[1:]]  # 40 px: a large glyph, not two columns
    assert (
        split(recogniser, source, narrow, ["診", "あ", "い", "う"], [0.73, 1, 1, 1])[1][0] == "診"
    )
    assert recogniser.heights == []


def test_the_half_of_a_square_box_that_is_a_column_read_on_its_own_is_not_read_twice():
    source, boxes = two_short_columns_read_as_one_box()
    # The right-hand column was also found, and read, in a box of its own.
    found = quad(70, 20, 100, 76)
    recogniser = Recogniser({32: ("ナナメだな", 0.95), 28: ("なんだか", 0.9)})
    _, texts, _ = split(
        recogniser,
        source,
        [*boxes, found],
        ["そフィ", "あ", "い", "う", "ナナメだな"],
        [0.7, 1, 1, 1, 1],
    )
    assert texts == ["なんだか", "あ", "い", "う", "ナナメだな"]
