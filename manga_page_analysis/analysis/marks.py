"""Punctuation marks the recogniser loses or writes in another form (docs/ocr.md, "Marks").

- **Two marks set upright in one cell of a column** ("tate-chu-yoko": ！！, ！？). The recogniser
  reads a column laid on its side, so the pair lies on its side too, two bars it reads as
  nothing, and the column loses it. A column whose last cell of ink is two narrow marks side by
  side has that cell read again upright; a confident pair of marks is added to the column.
- **The wave dash.** The recogniser writes 〜 as a tilde (~ or ～); in Japanese text it is 〜.
- **An image that is one piece of lettering** (a crop of a sound effect) is read, where a
  page's rules would drop it (`whole_image_lettering`).

`source` images are BGR arrays, as rapidocr reads them; boxes are quadrilaterals (4×2) in them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from manga_page_analysis.analysis.layout import VERTICAL_RATIO, Block

INK_LEVEL: Final = 128
"""A pixel darker than this (0-255) is ink."""
TAIL_CELL_LENGTH: Final = 0.8
"""A column's last cell spans at most this many of its thicknesses (a character's cell is about
as long as the column is thick; the box adds a little paper on each side)."""
MARK_MAX_WIDTH: Final = 0.35
"""Each of the two marks of an upright pair is at most this share of the column's thickness
wide (a kana's strokes span most of the cell)."""
UPRIGHT_MIN_SCORE: Final = 0.9
"""The cell read upright is taken only as confidently as this."""
UPRIGHT_MARKS: Final = frozenset("!?")
"""What is set upright two to a cell (after NFKC: ！ is !)."""
WHOLE_IMAGE_SHARE: Final = 0.5
"""A block whose box covers this share of the image is the image's one piece of lettering."""
FULL_WIDTH: Final = str.maketrans({"!": "！", "?": "？"})
TILDES: Final = str.maketrans({"~": "〜", "～": "〜"})


def read_marks(
    recogniser: Any,
    source: NDArray[np.uint8],
    boxes: Sequence[NDArray[np.float32]],
    texts: Sequence[str],
) -> list[str]:
    """`texts` (one per box) with wave dashes written 〜 and, for each column whose last cell
    holds two upright marks that its reading lacks, those marks added (`upright_pair`).
    `recogniser`: rapidocr's text recogniser, called once for all such cells."""
    from rapidocr.ch_ppocr_rec import TextRecInput

    texts = [wave_dashes(text) for text in texts]
    grey: NDArray[Any] | None = None
    cells: list[tuple[int, NDArray[np.uint8]]] = []
    for index, (box, text) in enumerate(zip(boxes, texts, strict=True)):
        if not text.strip() or not _is_column(box) or _ends_with_mark(text):
            continue
        if grey is None:
            grey = source.mean(axis=2)
        cell = tail_pair(grey, box)
        if cell is not None:
            x0, y0, x1, y1 = cell
            cells.append((index, np.ascontiguousarray(source[y0:y1, x0:x1])))
    if not cells:
        return texts
    read = recogniser(TextRecInput(img=[crop for _, crop in cells]))
    for (index, _), reading, score in zip(cells, read.txts, read.scores, strict=True):
        texts[index] += upright_pair(reading, float(score))
    return texts


def tail_pair(grey: NDArray[Any], box: NDArray[np.float32]) -> tuple[int, int, int, int] | None:
    """The last cell of ink in the column `box` (x0, y0, x1, y1 in `grey`'s pixels: the box's
    width, two rows of paper above and below its ink) when it holds two narrow marks side by
    side; else None.
    The cell is the ink after the last gap that leaves it at most `TAIL_CELL_LENGTH` long
    (an exclamation mark's dot is a run of its own)."""
    x0, y0 = (int(edge) for edge in box.min(axis=0))
    x1, y1 = (int(np.ceil(edge)) for edge in box.max(axis=0))
    x0, y0 = max(0, x0), max(0, y0)
    ink = grey[y0:y1, x0:x1] < INK_LEVEL
    thickness = x1 - x0
    if ink.size == 0 or thickness <= 0:
        return None
    rows = _runs(np.asarray(ink.any(axis=1)))
    if not rows:
        return None
    start, end = rows[-1]
    for run_start, _ in reversed(rows[:-1]):
        if end - run_start > TAIL_CELL_LENGTH * thickness:
            break
        start = run_start
    across = _runs(np.asarray(ink[start:end].any(axis=0)))
    if len(across) != 2 or any(b - a > MARK_MAX_WIDTH * thickness for a, b in across):
        return None
    return x0, y0 + max(0, start - 2), x1, y0 + min(ink.shape[0], end + 2)


def upright_pair(reading: str, score: float) -> str:
    """The marks to add for a cell read upright as `reading`: "！！" for "!!" read at least
    `UPRIGHT_MIN_SCORE` confidently (two or three of ! and ?), else ""."""
    marks = "".join(unicodedata.normalize("NFKC", reading).split())
    if score >= UPRIGHT_MIN_SCORE and 2 <= len(marks) <= 3 and set(marks) <= UPRIGHT_MARKS:
        return marks.translate(FULL_WIDTH)
    return ""


def wave_dashes(text: str) -> str:
    """`text` with tildes written as the wave dash 〜 when it holds Japanese (kana or kanji):
    Japanese text has no tilde, and NFKC does not map one onto the other."""
    if not any(_is_japanese(char) for char in text):
        return text
    return text.translate(TILDES)


def _is_japanese(char: str) -> bool:
    return "\u3041" <= char <= "\u30ff" or unicodedata.name(char, "").startswith("CJK UNIFIED")


def _ends_with_mark(text: str) -> bool:
    return unicodedata.normalize("NFKC", text.rstrip()[-1:]) in UPRIGHT_MARKS


def _is_column(box: NDArray[np.float32]) -> bool:
    width, height = box.max(axis=0) - box.min(axis=0)
    return float(height) >= VERTICAL_RATIO * float(width)


def _runs(mask: NDArray[Any]) -> list[tuple[int, int]]:
    """The [start, end) spans where `mask` is true."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return [(int(start), int(end)) for start, end in zip(edges[::2], edges[1::2], strict=True)]


def whole_image_lettering(blocks: Sequence[Block], size: tuple[int, int]) -> list[Block]:
    """The block that covers at least `WHOLE_IMAGE_SHARE` of an image of `size` (width,
    height), as a list of one; else none. Such an image is a crop of one piece of lettering
    sent to be read (a sound effect, a logo): what a page's rules drop as display lettering
    or as doubtful is all there is to read in it."""
    area = max(1, size[0] * size[1])
    return [
        block
        for block in blocks
        if block.text and (block.x1 - block.x0) * (block.y1 - block.y0) >= WHOLE_IMAGE_SHARE * area
    ][:1]
