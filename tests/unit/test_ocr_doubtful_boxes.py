"""Boxes the detector doubted (scored under its bar) are kept only when read as words,
confidently."""

from __future__ import annotations

import numpy as np

from manga_page_analysis.analysis.reader.recognition.detect_and_read import (
    DOUBTFUL_MIN_TEXT_SCORE,
    _confirmed,
)


def box(x: float) -> np.ndarray:
    return np.array([[x, 0], [x + 10, 0], [x + 10, 40], [x, 40]], dtype=np.float32)


def read(texts: list[str], scores: list[float], doubtful: int) -> list[str]:
    boxes = [box(20 * index) for index in range(len(texts))]
    crops = [np.full((8, 8, 3), index, dtype=np.uint8) for index in range(len(texts))]
    kept_boxes, kept_crops, kept_texts, kept_scores = _confirmed(
        boxes, crops, texts, scores, doubtful
    )
    # Each line keeps its own box, crop and score.
    for kept_box, crop, text, score in zip(
        kept_boxes, kept_crops, kept_texts, kept_scores, strict=True
    ):
        index = texts.index(text)
        assert np.array_equal(kept_box, boxes[index]) and crop[0, 0, 0] == index
        assert score == scores[index]
    return kept_texts


def test_lines_the_detector_was_sure_of_are_all_kept_however_read():
    assert read(["うん", "0"], [0.2, 0.3], doubtful=0) == ["うん", "0"]


def test_a_doubtful_box_read_confidently_as_words_is_kept():
    texts = ["それにしても", "魔王城で夏の一大イベント開催！！"]
    assert read(texts, [0.99, DOUBTFUL_MIN_TEXT_SCORE], doubtful=1) == texts


def test_a_doubtful_box_read_doubtfully_is_dropped():
    texts = ["それにしても", "集青年記長合"]
    assert read(texts, [0.99, DOUBTFUL_MIN_TEXT_SCORE - 0.1], doubtful=1) == ["それにしても"]


def test_a_doubtful_box_read_as_a_lone_letter_or_digits_is_dropped():
    """What the recogniser makes of a stroke of art, however confidently."""
    texts = ["それにしても", "非", "00", "U", "うん"]
    assert read(texts, [0.99, 0.95, 0.92, 0.93, 1.0], doubtful=4) == ["それにしても", "うん"]
