"""A wave dash stretched over a column's first or last cells ("〜〜〜" set as one long wavy
stroke), which the recogniser reads as nothing (docs/ocr.md, "Dots and dashes in a column"):
a stroke that swings back and forth across the column's axis is written as one 〜 per cell.

A helper of `column_marks.dots_and_dashes`; `grey` is the image the box lies in, ink dark.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from manga_page_analysis.analysis.reader.recognition.column_cells import INK_LEVEL, cells_spanned

WAVE_MIN_LENGTH: Final = 1.5
"""A wave dash stretched down a column (the recogniser reads it as nothing) is at least this
many thicknesses long (one cell's 〜 is read), ..."""
WAVE_MAX_WIDTH: Final = 0.5
"""... at most this many wide (a kana spans its cell), ..."""
WAVE_MIN_TURNS: Final = 2.0
"""... and turns back and forth across its axis at least this many times per thickness of its
length, each swing at least `WAVE_MIN_SWING` of a thickness (a straight dash does not turn;
a kana's stroke turns once or twice)."""
WAVE_MIN_SWING: Final = 0.05
"""See `WAVE_MIN_TURNS`: a smaller swing is the wobble of a straight stroke."""
WAVE: Final = "〜"
WAVE_CHARS: Final = "〜～~"
"""A reading that already begins (ends) with one of these has its wave dash."""


def wave_at_ends(grey: NDArray[Any], box: NDArray[np.float32], text: str) -> str:
    """`text` (read in the column `box`) with a wave dash stretched over the column's first
    (or last) cells written as one 〜 per cell, when its reading lacks it there. The wave: the
    first (last) piece of ink across the column's axis, alone in its rows, at least
    `WAVE_MIN_LENGTH` thicknesses long and at most `WAVE_MAX_WIDTH` wide, turning across its
    axis `WAVE_MIN_TURNS` times per thickness."""
    pieces, labels, thickness, axis = _labelled(grey, box)
    if len(pieces) == 0:
        return text
    left, top, width, height = (pieces[:, index] for index in range(4))
    across = (left < axis + thickness / 4) & (left + width > axis - thickness / 4)
    column = np.flatnonzero(across)
    if len(column) == 0:
        return text
    first = int(column[np.argmin(top[column])])
    last = int(column[np.argmax(top[column] + height[column])])
    for end, piece in (("first", first), ("last", last)):
        ends_with = text.strip()[:1] if end == "first" else text.strip()[-1:]
        if ends_with and ends_with in WAVE_CHARS:
            continue
        rows = slice(int(top[piece]), int(top[piece] + height[piece]))
        beside = [
            other
            for other in column.tolist()
            if other != piece
            and top[other] < rows.stop - 1
            and top[other] + height[other] > rows.start + 1
        ]
        if (
            beside
            or height[piece] < WAVE_MIN_LENGTH * thickness
            or width[piece] > WAVE_MAX_WIDTH * thickness
            or _turns(labels[rows] == piece + 1, thickness)
            < WAVE_MIN_TURNS * height[piece] / thickness
        ):
            continue
        waves = WAVE * cells_spanned(float(height[piece]), thickness)
        return waves + text.lstrip() if end == "first" else text.rstrip() + waves
    return text


def _turns(stroke: NDArray[np.bool_], thickness: float) -> int:
    """How many times the stroke's middle, row by row, turns back across the column by at
    least `WAVE_MIN_SWING` of a thickness."""
    filled = stroke.any(axis=1)
    if not filled.any():
        return 0
    columns = np.arange(stroke.shape[1])
    lefts = np.where(stroke, columns, stroke.shape[1]).min(axis=1)[filled]
    rights = np.where(stroke, columns, -1).max(axis=1)[filled]
    middles = (lefts + rights) / 2
    swing = max(1.0, WAVE_MIN_SWING * thickness)
    turns, direction, extreme = 0, 0, float(middles[0])
    for middle in middles.tolist():
        if direction * (middle - extreme) > 0:
            extreme = middle  # further the same way
        elif abs(middle - extreme) >= swing:
            turns += direction != 0  # back the other way (the first swing sets the way)
            direction = 1 if middle > extreme else -1
            extreme = middle
    return turns


def _labelled(
    grey: NDArray[Any], box: NDArray[np.float32]
) -> tuple[NDArray[Any], NDArray[np.int32], float, float]:
    """The pieces of ink in the box (left, top, width, height, area each; piece i is label
    i + 1 of the labels), its thickness and its axis (x, in the box's pixels)."""
    import cv2

    x0, y0 = (max(0, int(edge)) for edge in box.min(axis=0))
    x1, y1 = (int(np.ceil(edge)) for edge in box.max(axis=0))
    ink = np.ascontiguousarray(grey[y0:y1, x0:x1] < INK_LEVEL, dtype=np.uint8)
    if ink.size == 0:
        return np.zeros((0, 5)), np.zeros((0, 0), dtype=np.int32), 1.0, 0.0
    _, labels, stats, _ = cv2.connectedComponentsWithStats(ink, connectivity=8)
    return stats[1:].astype(np.float64), np.asarray(labels, dtype=np.int32), x1 - x0, (x1 - x0) / 2
