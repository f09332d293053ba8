"""Leader dots, long dashes and stretched wave dashes in a column, which the recogniser
miscounts or loses (docs/ocr.md, "Dots and dashes in a column").

- **Leader dots** ("……", "‥‥"): the recogniser reads a run of dots down a column as some
  number of ellipses, not as many dots as there are. The dots are counted in the image and
  the run is written as the print groups them (`marks.ellipsis`).
- **A long dash** ("――") set after (or before) a column's last character: the detector often
  stops the column where the dash starts, so it is neither in the box nor read. A straight
  stroke as thin as lettering that continues the column along its axis, and ends in paper,
  is taken into the column and written as one ― per cell it spans.
- **A wave dash stretched over cells** ("〜〜〜" as one long wavy stroke) at a column's start
  or end is read as nothing: `wave_dashes`.

Helpers of `marks.read_marks`; `grey` is the image the boxes lie in, 0-255, ink dark.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from manga_page_analysis.analysis.reader.order.lines import is_column
from manga_page_analysis.analysis.reader.recognition.column_cells import INK_LEVEL, cells_spanned
from manga_page_analysis.analysis.reader.recognition.marks import ellipsis
from manga_page_analysis.analysis.reader.recognition.wave_dashes import wave_at_ends

DOT_MAX_SIZE: Final = 0.3
"""A leader dot is at most this many column thicknesses across, ..."""
DOT_MIN_SIZE: Final = 0.08
"""... at least this many (and 2 px: not a speck of dust), ..."""
DOT_MAX_ELONGATION: Final = 2.0
"""... about round (neither side this many times the other: a kana's short stroke is a bar), ..."""
DOT_MAX_OFF_AXIS: Final = 0.2
"""... and centred on the column's axis, within this many thicknesses (voiced marks and the
small circle of ゜ sit at a cell's corner, "、" and "。" at its top right)."""
DOT_MAX_GAP: Final = 4.0
"""The dots of one run are at most this many dots' sizes apart along the column, in one line
(centres within half a dot across it) and alike (none `DOT_MAX_ELONGATION` times the first's
size)."""
DOT_INK_LEVEL: Final = 170
"""A pixel darker than this is ink where dots are counted: a small dot blurred by a scan has a
core of a pixel or two under `INK_LEVEL`."""
DOT_MAX_INK: Final = 0.4
"""Dots are counted only in a column at most this share ink (lettering on paper)."""
DOT_CHARS: Final = "…‥・･.．⋯·"
"""What the recogniser writes for dots down a column."""
DOT_RUN = re.compile(f"[{re.escape(DOT_CHARS)}]+")
LONE_STOP = re.compile(f"(?<=[^{re.escape(DOT_CHARS)}\\s])[.．･](?=[^{re.escape(DOT_CHARS)}\\s])")
ROUND_CHARS: Final = "0oOcCeｃｅｏ０○。°"
"""What the recogniser makes of leader dots set alone down a column, each dot a round glyph:
"000000000", "cccccc" (a column of nothing but these is dots: no word is)."""
ROUND_MIN: Final = 3
"""... at least this many of them (a "0" or "o" alone may be a glyph of a word)."""
DASH_MIN_LENGTH: Final = 1.0
"""A long dash is at least this many column thicknesses long (a kana's longest stroke, of い
or り, is shorter than its cell), ..."""
DASH_MIN_OUTSIDE: Final = 0.6
"""... this many of them outside the box, ..."""
DASH_MAX_LENGTH: Final = 4.0
"""... at most this many (a frame line runs on: the dash must end in paper within them), ..."""
DASH_MAX_WIDTH: Final = 0.2
"""... at most this many thick (a stroke of the lettering; a filled shape is not a dash), ..."""
DASH_MAX_OFF_AXIS: Final = 0.2
"""... centred on the column's axis within this many thicknesses, ..."""
DASH_MAX_GAP: Final = 0.8
"""... and starts within this many thicknesses of the column's last ink."""
DASH_OVERHANG: Final = 0.2
"""A piece of ink that starts in the box and leaves it by at most this many thicknesses is the
column's last character (a box is sometimes tight)."""
DASH_MAX_BREAK: Final = 0.15
"""A thin line broken where it prints light is one dash across gaps this many thicknesses long."""
DASH_RUNS_INTO: Final = 0.3
"""Ink that starts within this many thicknesses of the dash's end is what the dash runs into
(a balloon's outline, a head drawn below), not ink beside it."""
DASH_SIDE: Final = 0.15
"""Beside the dash, this many thicknesses either side of the column, there is paper alone (a
speed line is one of many, and art round a frame line is not paper)."""
DASH_CHARS: Final = "ー一―－—‐-|｜"
"""What the recogniser writes for the part of a dash it did read."""
DASH: Final = "―"
LONG_VOWEL: Final = "ー"


def dots_and_dashes(
    source: NDArray[np.uint8], boxes: Sequence[NDArray[np.float32]], texts: Sequence[str]
) -> tuple[list[NDArray[np.float32]], list[str]]:
    """`boxes` and `texts` with each column's runs of leader dots counted (`counted_dots`) and
    a long dash continuing it taken in (`dash_beyond`), and a wave dash stretched over its
    first or last cells read (`wave_at_ends`). `source`: the image the boxes lie in
    (BGR); only the pixels round each column are made grey."""
    import cv2

    boxes, texts = list(boxes), list(texts)
    for index, (box, text) in enumerate(zip(boxes, texts, strict=True)):
        if not text.strip() or not is_column(box):
            continue
        x0, y0 = box.min(axis=0)
        x1, y1 = box.max(axis=0)
        reach = (DASH_MAX_LENGTH + 1) * float(x1 - x0)
        left, top = max(0, int(x0 - (x1 - x0))), max(0, int(y0 - reach))
        right = min(source.shape[1], int(np.ceil(x1 + (x1 - x0))))
        bottom = min(source.shape[0], int(np.ceil(y1 + reach)))
        grey = cv2.cvtColor(
            np.ascontiguousarray(source[top:bottom, left:right]), cv2.COLOR_BGR2GRAY
        )
        shift = np.array([left, top], dtype=np.float32)
        local = box - shift
        others = [other - shift for other in boxes[:index] + boxes[index + 1 :]]
        counted = as_dots(counted_dots(grey, local, text))  # after: its dots are the reader's
        texts[index] = wave_at_ends(grey, local, middle_dot(counted))
        grown, texts[index] = dash_beyond(grey, local, texts[index], others)
        boxes[index] = grown + shift
    return boxes, texts


def as_dots(text: str) -> str:
    """A column read as `ROUND_MIN` or more round glyphs and nothing else, written as that many
    leader dots (`marks.ellipsis`); any other `text` as it is. Dots set alone down a column
    are often read one round glyph each (the count is then the recogniser's, and right more
    often than not); their column is too thin for `counted_dots` to tell a dot in it."""
    compact = "".join(text.split())
    if len(compact) >= ROUND_MIN and set(compact) <= set(ROUND_CHARS):
        return ellipsis(len(compact))
    return text


def counted_dots(grey: NDArray[Any], box: NDArray[np.float32], text: str) -> str:
    """`text` (read in the column `box`) with its runs of dots written as many dots as the
    image has (`marks.ellipsis`), when the image and the text hold as many runs (of two or
    more dots in the image). A run the text lacks is not added: dots counted where the text
    has none may be specks of a background."""
    runs = dot_run_spans(grey, box)
    found = [count for count, _ in runs]
    read = [(match.start(), match.end()) for match in DOT_RUN.finditer(text)]
    if (
        len(found) == len(read) + 1
        and text
        and not DOT_RUN.match(text[-1])
        and runs[-1][1] > float(box.max(axis=0)[1])
    ):
        # One run more, at the column's end, cut by the box (its last dot lies below it): the
        # leaders that end the line ("もしかして…"), which the recogniser did not see.
        read.append((len(text), len(text)))
    if not found or len(read) != len(found):
        return text
    pieces, end = [], 0
    for (first, last), count in zip(read, found, strict=True):
        pieces += [text[end:first], ellipsis(count)]
        end = last
    return "".join(pieces) + text[end:]


def middle_dot(text: str) -> str:
    """`text` (read down a column) with a lone full stop between two characters written as the
    middle dot ・ (２・３回, ジョン・スミス): a Latin full stop is not set down a column, the
    centred dot is, and the recogniser reads it as "." laid on its side."""
    return LONE_STOP.sub("・", text)


def dot_runs(grey: NDArray[Any], box: NDArray[np.float32]) -> list[int]:
    """How many dots each run of leader dots down the column `box` has (`dot_run_spans`)."""
    return [count for count, _ in dot_run_spans(grey, box)]


def dot_run_spans(grey: NDArray[Any], box: NDArray[np.float32]) -> list[tuple[int, float]]:
    """Each run of two or more leader dots down the column `box`, top first: how many dots,
    and where its last dot's foot lies (`grey`'s rows).
    A dot: `DOT_MIN_SIZE` to `DOT_MAX_SIZE` thicknesses across, about round
    (`DOT_MAX_ELONGATION`), on the axis (`DOT_MAX_OFF_AXIS`); a run: dots next to each other
    down the column (only ink across the axis parts them: not specks of art beside it),
    in one line, alike in size, at most `DOT_MAX_GAP` dots' sizes apart. A run that leaves
    the box is followed for up to a thickness past its end (a box often cuts the last dot)."""
    x0, y0 = box.min(axis=0)
    x1, y1 = box.max(axis=0)
    thickness = float(x1 - x0)
    reach_top, reach_bottom = max(0.0, y0 - thickness), min(grey.shape[0], y1 + thickness)
    reach = np.array(
        [[x0, reach_top], [x1, reach_top], [x1, reach_bottom], [x0, reach_bottom]],
        dtype=np.float32,
    )
    pieces, _, axis = _pieces(grey, reach, DOT_INK_LEVEL)
    inside = (max(0, int(y0)) - max(0, int(reach_top)), int(np.ceil(y1)) - max(0, int(reach_top)))
    if len(pieces) < 2 or pieces[:, 4].sum() > DOT_MAX_INK * thickness * (y1 - y0):
        return []  # lettering on a dark ground: specks of the ground would be counted
    left, top, width, height = (pieces[:, index] for index in range(4))
    size = np.maximum(width, height)
    centre, middle = left + width / 2, top + height / 2
    across = DOT_MAX_OFF_AXIS * thickness / 2
    on_axis = (left < axis + across) & (left + width > axis - across)
    is_dot = (
        (size <= DOT_MAX_SIZE * thickness)
        & (size >= max(2.0, DOT_MIN_SIZE * thickness))
        & (np.maximum(width, height) <= DOT_MAX_ELONGATION * np.minimum(width, height) + 1)
        & (np.abs(centre - axis) <= DOT_MAX_OFF_AXIS * thickness)
    )
    found: list[tuple[int, float]] = []
    run: list[int] = []
    origin = max(0, int(reach_top))

    def close() -> None:
        if len(run) >= 2 and any(inside[0] <= middle[dot] < inside[1] for dot in run):
            found.append((len(run), origin + float(max(top[dot] + height[dot] for dot in run))))
        run.clear()

    for index in np.argsort(middle, kind="stable").tolist():
        if not is_dot[index]:
            if on_axis[index]:
                close()
            continue
        if run:
            previous, first = run[-1], run[0]
            apart = max(size[previous], size[index])
            if abs(centre[index] - centre[previous]) > apart / 2:
                if not on_axis[index]:
                    continue  # a speck beside the line of dots
                close()
            elif top[index] - (top[previous] + height[previous]) > DOT_MAX_GAP * apart or max(
                size[index], size[first]
            ) > DOT_MAX_ELONGATION * min(size[index], size[first]):
                close()  # far apart, or unlike: another mark
        run.append(index)
    close()
    return found


def dash_beyond(
    grey: NDArray[Any],
    box: NDArray[np.float32],
    text: str,
    others: Sequence[NDArray[np.float32]] = (),
) -> tuple[NDArray[np.float32], str]:
    """The column `box` and its `text`, with a long dash below (or above) it taken in: a
    straight stroke on the column's axis (`DASH_MAX_OFF_AXIS`), as thin as lettering
    (`DASH_MAX_WIDTH`), starting within `DASH_MAX_GAP` of the column's last ink and leaving the
    box by `DASH_MIN_LENGTH` to `DASH_MAX_LENGTH` thicknesses, then ending in paper, with
    paper alone beside it (`DASH_SIDE`) and in no other box (`others`). It is written as one
    ― per cell (a cell as long as the column is thick), in place of the dash characters the
    text already ends (begins) with; as ー per cell where the reading ends in ー (the
    recogniser took the part it saw for a long vowel: きもちいーー, not a dash)."""
    height = grey.shape[0]
    for below in (True, False):
        flipped = grey if below else grey[::-1]
        quad = box.copy()
        if not below:
            quad[:, 1] = height - quad[:, 1]
        stroke = _stroke_after(flipped, quad, others_flipped(others, height, below))
        if stroke is None:
            continue
        _, end, cells = stroke
        x0, y0 = box.min(axis=0)
        x1, y1 = box.max(axis=0)
        if below:
            grown = np.array([[x0, y0], [x1, y0], [x1, end], [x0, end]], dtype=np.float32)
            mark = LONG_VOWEL if text.rstrip().endswith(LONG_VOWEL) else DASH
            return grown, text.rstrip().rstrip(DASH_CHARS) + mark * cells
        top = float(height - end)
        grown = np.array([[x0, top], [x1, top], [x1, y1], [x0, y1]], dtype=np.float32)
        return grown, DASH * cells + text.lstrip().lstrip(DASH_CHARS)
    return box, text


def others_flipped(
    others: Sequence[NDArray[np.float32]], height: int, below: bool
) -> list[NDArray[np.float32]]:
    if below:
        return list(others)
    flipped = []
    for other in others:
        quad = other.copy()
        quad[:, 1] = height - quad[:, 1]
        flipped.append(quad)
    return flipped


def _stroke_after(
    grey: NDArray[Any], box: NDArray[np.float32], others: Sequence[NDArray[np.float32]]
) -> tuple[int, int, int] | None:
    """(first row, row after the last, cells) of a long dash below the column `box`."""
    import cv2

    x0 = float(box[:, 0].min())
    x1, y1 = box.max(axis=0)
    thickness = float(x1 - x0)
    if thickness < 4:
        return None
    side = DASH_SIDE * thickness
    left, right = max(0, int(x0 - side)), min(grey.shape[1], int(np.ceil(x1 + side)))
    top = max(0, int(y1 - thickness))  # the stroke may start inside the box
    bottom = min(grey.shape[0], int(np.ceil(y1 + (DASH_MAX_LENGTH + 0.5) * thickness)))
    if bottom - int(y1) < DASH_MIN_LENGTH * thickness:
        return None
    ink = np.ascontiguousarray(grey[top:bottom, left:right] < INK_LEVEL, dtype=np.uint8)
    _, _, stats, _ = cv2.connectedComponentsWithStats(ink, connectivity=8)
    axis = (x0 + x1) / 2 - left
    beyond = y1 - top  # the box's end, in the window's rows
    pieces = sorted(
        (piece for piece in stats[1:].tolist() if piece[2] > 2 or piece[3] > 2),  # no specks
        key=lambda piece: piece[1],
    )
    # The column's own lettering: pieces that start in the box and barely leave it.
    pieces = [
        piece
        for piece in pieces
        if not (piece[1] < beyond and piece[1] + piece[3] <= beyond + DASH_OVERHANG * thickness)
    ]
    thin = max(2.0, DASH_MAX_WIDTH * thickness)
    chain: list[list[int]] = []  # the dash's pieces: a thin line may break where it is light
    for piece in pieces:
        p_left, p_top, p_width, _, _ = piece
        on_axis = abs(p_left + p_width / 2 - axis) <= DASH_MAX_OFF_AXIS * thickness
        if p_width > thin or not on_axis:
            break
        if chain and p_top - (chain[-1][1] + chain[-1][3]) > DASH_MAX_BREAK * thickness:
            break
        chain.append(piece)
    if not chain:
        return None
    s_top, s_end = chain[0][1], max(piece[1] + piece[3] for piece in chain)
    beside = [
        piece
        for piece in pieces
        if piece not in chain
        and piece[1] < s_end - max(2.0, DASH_RUNS_INTO * thickness)
        and piece[1] + piece[3] > s_top
    ]
    area = sum(piece[4] for piece in chain)
    s_left = min(piece[0] for piece in chain)
    width = max(piece[0] + piece[2] for piece in chain) - s_left
    if (
        beside  # ink beside it: art, or one of many speed lines
        or width > thin  # not straight down the column: a curve of an outline
        or s_end - s_top < DASH_MIN_LENGTH * thickness
        or s_end - beyond < DASH_MIN_OUTSIDE * thickness
        or s_end >= ink.shape[0] - 1  # it runs on out of the window: a frame line
        or area < 0.5 * width * (s_end - s_top)  # not one straight stroke
    ):
        return None
    # The column's last ink: near its axis (a neighbouring column's may reach into the window).
    near = slice(max(0, int(axis - thickness / 3)), int(np.ceil(axis + thickness / 3)))
    above = np.flatnonzero(ink[:s_top, near].any(axis=1))
    last_ink = int(above[-1]) + 1 if above.size else 0
    if s_top - last_ink > DASH_MAX_GAP * thickness or s_top - beyond > DASH_MAX_GAP * thickness:
        return None
    start, end = top + s_top, top + s_end
    for other in others:
        o_x0, o_y0 = other.min(axis=0)
        o_x1, o_y1 = other.max(axis=0)
        across = o_x0 < x1 and x0 < o_x1
        if across and o_y0 < end and start < o_y1 and o_y0 >= y1 - 1:
            return None  # another line's box lies on it: it is that line's
    return start, end, cells_spanned(end - start, thickness)


def _pieces(
    grey: NDArray[Any], box: NDArray[np.float32], level: int
) -> tuple[NDArray[Any], float, float]:
    """The pieces of ink in the box (left, top, width, height, area each), its thickness and
    its axis (x, in the box's pixels)."""
    import cv2

    x0, y0 = (max(0, int(edge)) for edge in box.min(axis=0))
    x1, y1 = (int(np.ceil(edge)) for edge in box.max(axis=0))
    ink = np.ascontiguousarray(grey[y0:y1, x0:x1] < level, dtype=np.uint8)
    if ink.size == 0:
        return np.zeros((0, 5), dtype=np.int64), 1.0, 0.0
    _, _, stats, _ = cv2.connectedComponentsWithStats(ink, connectivity=8)
    return stats[1:].astype(np.float64), float(x1 - x0), (x1 - x0) / 2
