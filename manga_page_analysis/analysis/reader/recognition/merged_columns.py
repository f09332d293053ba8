"""Two columns the detector gave one box, read apart (docs/ocr.md, "Two columns read as one").

Tight columns (ruby between them, a narrow balloon) are sometimes detected as one box, thick
as two, and the recogniser reads one of them or a mixture of both, doubtfully. So is a short
balloon of two columns of two or three characters each, found as one square box and read as
one large character (へー and そう as 診). Such a box is cut down the lightest band of its
middle third and each half read; the halves replace it only when each is read more surely.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from manga_page_analysis.analysis.reader.order.lines import (
    VERTICAL_RATIO,
    is_column,
    quad_thickness,
)

MERGED_COLUMN_RATIO: Final = 1.3
"""A column box at least this many times as thick as the image's median column, ..."""
MERGED_COLUMN_BELOW: Final = 0.8
"""... and read with less confidence than this, may be two columns the detector merged (tight
columns with ruby between them): it is cut in two and each half read (docs/ocr.md)."""
MERGED_SQUARE_RATIO: Final = 2.0
"""A box about as tall as it is wide (neither a column nor a row), at least this many times
as wide as the image's median column and read with less confidence than
`MERGED_COLUMN_BELOW`, may be two short columns the detector took for one box (へー and そう
read as 診): it is cut in two and each half read, as a merged column is."""
MERGED_COLUMN_MIN_COLUMNS: Final = 3
"""The median column is measured on at least this many columns (a single bubble has few)."""
INK_LEVEL: Final = 128
"""A pixel darker than this (0-255) is ink, where the cut between two columns is sought."""


def split_merged_columns(
    recogniser: Any,
    source: NDArray[np.uint8],
    crop: Callable[[NDArray[np.float32]], NDArray[np.uint8]],
    boxes: list[NDArray[np.float32]],
    texts: list[str],
    scores: list[float],
    *,
    min_score: float,
) -> tuple[list[NDArray[np.float32]], list[str], list[float]]:
    """The boxes with their readings, where a column box as thick as two columns
    (`MERGED_COLUMN_RATIO` of the image's median column), or a square box as wide as two
    (`MERGED_SQUARE_RATIO`), read doubtfully (under `MERGED_COLUMN_BELOW`) is cut in two at
    the lightest band down its middle third and each half read on its own. The halves read
    (text, at least `min_score`) replace the box when each is read more confidently than the
    whole; the right half comes first. `source`: the image the boxes lie in (BGR); `crop`:
    a box's line cut out of it and laid horizontal, as the lines were cut to be read."""
    from rapidocr.ch_ppocr_rec import TextRecInput

    columns = [box for box in boxes if is_column(box)]
    if len(columns) < MERGED_COLUMN_MIN_COLUMNS:
        return boxes, texts, scores
    typical = statistics.median(quad_thickness(box) for box in columns)
    kept_boxes: list[NDArray[np.float32]] = []
    kept_texts: list[str] = []
    kept_scores: list[float] = []
    for box, text, score in zip(boxes, texts, scores, strict=True):
        halves = []
        square = _is_square(box)
        if score < MERGED_COLUMN_BELOW and (
            (is_column(box) and quad_thickness(box) >= MERGED_COLUMN_RATIO * typical)
            or (square and _width(box) >= MERGED_SQUARE_RATIO * typical)
        ):
            halves = _halves(box, source)
        if halves:
            crops = [crop(half) for half in halves]
            again = recogniser(TextRecInput(img=crops))
            read = [
                (half, half_text, float(half_score))
                for half, half_text, half_score in zip(
                    halves, again.txts, again.scores, strict=True
                )
                if half_text.strip()
                and half_score >= min_score
                # A square box's half may be a column found on its own too: not read twice.
                and not (square and _read_beside(half, half_text, box, boxes, texts))
            ]
            if read and all(half_score > score for _, _, half_score in read):
                kept_boxes += [half for half, _, _ in read]
                kept_texts += [half_text for _, half_text, _ in read]
                kept_scores += [half_score for _, _, half_score in read]
                continue
        kept_boxes.append(box)
        kept_texts.append(text)
        kept_scores.append(score)
    return kept_boxes, kept_texts, kept_scores


def _is_square(box: NDArray[np.float32]) -> bool:
    """Neither a column nor a row (`lines.VERTICAL_RATIO` either way)."""
    width, height = box.max(axis=0) - box.min(axis=0)
    return float(max(width, height)) < VERTICAL_RATIO * float(min(width, height))


def _width(box: NDArray[np.float32]) -> float:
    xs = box[:, 0]
    return float(xs.max() - xs.min())


def _read_beside(
    half: NDArray[np.float32],
    text: str,
    whole: NDArray[np.float32],
    boxes: list[NDArray[np.float32]],
    texts: list[str],
) -> bool:
    """True when a box other than `whole` overlaps `half` and one of their readings holds the
    other: the half is a column that was found, and read, on its own."""
    x0, y0 = half.min(axis=0)
    x1, y1 = half.max(axis=0)
    mine = text.strip()
    for box, other in zip(boxes, texts, strict=True):
        if box is whole or not (theirs := other.strip()):
            continue
        bx0, by0 = box.min(axis=0)
        bx1, by1 = box.max(axis=0)
        overlap = min(x1, bx1) > max(x0, bx0) and min(y1, by1) > max(y0, by0)
        if overlap and (mine in theirs or theirs in mine):
            return True
    return False


def _halves(box: NDArray[np.float32], source: NDArray[np.uint8]) -> list[NDArray[np.float32]]:
    """A column box cut in two (right half first) down the band of its middle third that
    holds the least ink; none when it is too thin to cut. `source`: the image (BGR); only
    the box's pixels are made grey (the whole page's take 40 ms)."""
    x0, y0 = box.min(axis=0)
    x1, y1 = box.max(axis=0)
    left, right = int(x0), int(np.ceil(x1))
    grey = source[int(y0) : int(np.ceil(y1)), left:right].mean(axis=2)
    ink = (grey < INK_LEVEL).sum(axis=0)
    if ink.size < 3:
        return []
    third = ink.size // 3
    cut = float(left + third + int(np.argmin(ink[third : ink.size - third])))
    return [
        np.array([[cut, y0], [x1, y0], [x1, y1], [cut, y1]], dtype=np.float32),
        np.array([[x0, y0], [cut, y0], [cut, y1], [x0, y1]], dtype=np.float32),
    ]
