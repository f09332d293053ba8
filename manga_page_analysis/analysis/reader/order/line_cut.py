"""A horizontal line cut where its characters stand far apart (docs/ocr.md, "A line cut at
a wide gap").

The detector sometimes gives one box to two pieces of lettering set on one baseline with
paper (or a small drawing) between them: a series header "第872回" and its subtitle. Japanese
written across a line has no spaces: neighbouring characters of one sentence stand about a
character apart, centre to centre. Where the recogniser places two neighbours more than
`CUT_MIN_GAP` line thicknesses further apart than that, the line is two pieces, and it is cut
there. The pieces keep the box of the line they were cut from (`TextLine.cut_from`), so the
reading order reads them one after the other, left to right, whatever order it reads blocks
in (`blocks.pieces_in_line_order`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

CUT_MIN_GAP: Final = 1.0
"""Two neighbouring characters whose centres stand further apart than one character plus
this many line thicknesses are in two pieces of the line."""
CUT_MIN_CHARACTERS: Final = 4
"""A line of fewer characters is not looked at (each piece needs a word)."""
CUT_MIN_LENGTH: Final = 6.0
"""Nor a line shorter than this many of its thicknesses (a gap needs room)."""


def cut_at_wide_gaps(
    recogniser: Any,
    crop: Callable[[NDArray[np.float32]], NDArray[np.uint8]],
    boxes: list[NDArray[np.float32]],
    texts: list[str],
    scores: list[float],
) -> tuple[list[NDArray[np.float32]], list[str], list[float], list[NDArray[np.float32] | None]]:
    """The lines with each horizontal line of CJK lettering (no spaces) whose recogniser
    places two neighbouring characters a wide gap apart (`CUT_MIN_GAP`) cut there into two
    lines, left piece first. `crop`: a box's line cut out and laid horizontal, as it was
    read. Also returned, per line: the box of the line a piece was cut from, else `None`."""
    from rapidocr.ch_ppocr_rec import TextRecInput

    candidates = [
        index
        for index, (box, text) in enumerate(zip(boxes, texts, strict=True))
        if _may_be_cut(box, text)
    ]
    cuts: dict[int, tuple[int, float, float]] = {}
    for index in candidates:
        # Read alone, so that the positions are measured along this crop only.
        line = crop(boxes[index])
        again = recogniser(TextRecInput(img=[line], return_word_box=True))
        if again.txts[0] != texts[index]:
            continue
        crop_ratio = line.shape[1] / max(1, line.shape[0])
        cut = widest_gap(again.word_results[0], crop_ratio)
        if cut is not None:
            cuts[index] = cut
    out_boxes: list[NDArray[np.float32]] = []
    out_texts: list[str] = []
    out_scores: list[float] = []
    origins: list[NDArray[np.float32] | None] = []
    for index, (box, text, score) in enumerate(zip(boxes, texts, scores, strict=True)):
        if index not in cuts:
            out_boxes.append(box)
            out_texts.append(text)
            out_scores.append(score)
            origins.append(None)
            continue
        split, gap_start, gap_end = cuts[index]
        x0, y0 = box.min(axis=0)
        x1, y1 = box.max(axis=0)
        # The pieces end at the gap's edges: paper between them, as between two lines.
        ends = (float(x0 + gap_start * (x1 - x0)), float(x0 + gap_end * (x1 - x0)))
        for left, right, piece in ((x0, ends[0], text[:split]), (ends[1], x1, text[split:])):
            out_boxes.append(
                np.array([[left, y0], [right, y0], [right, y1], [left, y1]], dtype=np.float32)
            )
            out_texts.append(piece)
            out_scores.append(score)
            origins.append(box)
    return out_boxes, out_texts, out_scores, origins


def widest_gap(word_info: Any, crop_ratio: float) -> tuple[int, float, float] | None:
    """Where a line read with character positions (rapidocr's `WordInfo`: `word_cols`,
    `line_txt_len`) is cut: the index of the first character after its widest gap, and
    where the gap starts and ends along the crop (0..1: half a character past the centres
    of the two characters either side), when that gap exceeds a character by `CUT_MIN_GAP`
    thicknesses; else `None`.
    `crop_ratio`: the crop's width over its height (its thickness)."""
    columns = [column for word in word_info.word_cols for column in word]
    length = float(word_info.line_txt_len)
    if len(columns) < 2 or length <= 0:
        return None
    places = np.asarray(columns, dtype=np.float64) / length  # along the crop, 0..1
    steps = np.diff(places) * crop_ratio  # in line thicknesses
    widest = int(np.argmax(steps))
    if steps[widest] - 1.0 < CUT_MIN_GAP:
        return None
    half = 0.5 / crop_ratio  # half a character, along the crop
    return widest + 1, float(places[widest] + half), float(places[widest + 1] - half)


def _may_be_cut(box: NDArray[np.float32], text: str) -> bool:
    width, height = box.max(axis=0) - box.min(axis=0)
    return (
        float(width) >= CUT_MIN_LENGTH * float(height)
        and len(text) >= CUT_MIN_CHARACTERS
        and not any(char.isspace() for char in text)
        and all(_is_cjk_or_digit(char) for char in text)
    )


def _is_cjk_or_digit(char: str) -> bool:
    # Japanese lettering: kana, kanji, full-width forms, and the digits set among them.
    name = unicodedata.name(char, "")
    return char.isdigit() or name.startswith(
        ("CJK", "HIRAGANA", "KATAKANA", "FULLWIDTH", "IDEOGRAPHIC")
    )
