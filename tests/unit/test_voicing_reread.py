"""A doubtful line is read with 10 % of its thickness added as paper across it and, when
that did not make the recogniser surer, with 20 %; from the wider read only a reading that
adds voiced marks is taken (no engine: a recogniser that answers by the crop's height)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from manga_page_analysis.analysis.reader.recognition.detect_and_read import _read_voicing_again


@dataclass
class Read:
    txts: tuple[str, ...]
    scores: tuple[float, ...]


class Recogniser:
    """Reads a crop 48 px high (40 + 10 % on each side) or 56 px high (40 + 20 %) as told."""

    def __init__(self, narrow: tuple[str, float], wide: tuple[str, float]) -> None:
        self.readings = {48: narrow, 56: wide}
        self.heights: list[int] = []

    def __call__(self, request: Any) -> Read:
        self.heights += [crop.shape[0] for crop in request.img]
        found = [self.readings[crop.shape[0]] for crop in request.img]
        return Read(tuple(text for text, _ in found), tuple(score for _, score in found))


def line() -> np.ndarray:
    return np.full((40, 200, 3), 255, dtype=np.uint8)


def test_a_mark_seen_only_with_more_paper_is_added():
    recogniser = Recogniser(("とんな練習", 0.70), ("どんな練習", 0.93))
    assert _read_voicing_again(recogniser, [line()], ["とんな練習"], [0.89]) == (
        ["どんな練習"],
        [0.93],
    )
    assert recogniser.heights == [48, 56]


def test_a_line_the_first_paper_made_surer_is_not_read_a_third_time():
    recogniser = Recogniser(("とんな練習", 0.91), ("どんな練習", 0.95))
    assert _read_voicing_again(recogniser, [line()], ["とんな練習"], [0.89]) == (
        ["とんな練習"],
        [0.89],
    )
    assert recogniser.heights == [48]


def test_a_mark_taken_off_by_the_wider_read_is_not_trusted():
    recogniser = Recogniser(("まで", 0.5), ("まて", 0.95))
    assert _read_voicing_again(recogniser, [line()], ["まで"], [0.8]) == (["まで"], [0.8])


def test_the_wider_read_does_not_put_back_a_mark_the_narrower_one_took_off():
    # 朝練て is printed: the first read added a mark, the 10 % read took it off.
    recogniser = Recogniser(("朝練て", 0.69), ("朝練で", 0.8))
    assert _read_voicing_again(recogniser, [line()], ["朝練で"], [0.59]) == (["朝練て"], [0.69])


def test_a_wider_read_adding_a_mark_less_confidently_is_not_taken():
    recogniser = Recogniser(("とんな", 0.5), ("どんな", 0.75))
    assert _read_voicing_again(recogniser, [line()], ["とんな"], [0.8]) == (["とんな"], [0.8])
