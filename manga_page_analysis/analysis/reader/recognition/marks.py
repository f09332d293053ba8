"""Punctuation marks the recogniser loses or writes in another form (docs/ocr.md, "Marks").

- **Two marks set upright in one cell of a column** ("tate-chu-yoko": ！！, ！？). The recogniser
  reads a column laid on its side, so the pair lies on its side too, two bars it reads as
  nothing, and the column loses it. A column whose last cell of ink is two narrow marks side by
  side has that cell read again upright; a confident pair of marks is added to the column.
- **An image that is one piece of lettering** (a crop of a sound effect) is read, where a
  page's rules would drop it (`whole_image_lettering`).
- Leader dots counted, and long and wave dashes read, down a column: `column_marks`.

`source` images are BGR arrays, as rapidocr reads them; boxes are quadrilaterals (4×2) in them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from PIL import Image

from manga_page_analysis.analysis.reader.order.lines import Block, TextLine, is_column
from manga_page_analysis.analysis.reader.recognition.column_cells import INK_LEVEL
from manga_page_analysis.analysis.reader.regions.panels import LIGHT, paper_level, runs

TAIL_CELL_LENGTH: Final = 0.8
"""A column's last cell spans at most this many of its thicknesses (a character's cell is about
as long as the column is thick; the box adds a little paper on each side)."""
MARK_MAX_WIDTH: Final = 0.35
"""Each of the two marks of an upright pair is at most this share of the column's thickness
wide (a kana's strokes span most of the cell)."""
UPRIGHT_MIN_SCORE: Final = 0.7
"""The cell read upright is taken only as confidently as this. Its shape (two narrow marks
side by side, the cell's last ink) already says it is a pair of marks; the recogniser only
says which: a shout's bold pair was read "!!" at 0.77 (0.9 until round 10)."""
UPRIGHT_MARKS: Final = frozenset("!?")
"""What is set upright two to a cell (after NFKC: ！ is !)."""
LONE_MIN_AREA: Final = 1.5
"""A balloon holding only a mark is at least this many squares of the page's median line
thickness (a character with a margin round it)."""
LONE_MIN_SIDE: Final = 1.2
"""... each side at least this many thicknesses."""
LONE_MAX_AREA: Final = 0.05
"""... and at most this share of the page (a larger patch of paper is a panel's sky)."""
LONE_MIN_PAPER: Final = 0.8
"""... and at least this share of the area within its outline is paper (a mark is little ink;
the gaps between strokes of art are mostly holes)."""
LONE_MAX_PIECES: Final = 12
"""Its ink is at most this many pieces (four two-dot leaders are eight)."""
DOT_MAX_SIZE: Final = 0.3
"""A dot of an ellipsis is at most this many line thicknesses across, ..."""
DOT_MAX_RATIO: Final = 2.0
"""... and the dots of one ellipsis are alike: none this many times as large as another (see
`_marks_in`)."""
DOT_MAX_PITCH: Final = 4.0
"""The dots of an ellipsis are set close: at most this many dots' sizes apart (specks
scattered over a patch are not)."""
DOTS_SCORE: Final = 0.9
"""The score given to an ellipsis found by its dots (it is not recognised)."""
LONE_MIN_ROUND: Final = 0.6
"""... and its outline fills at least this share of its box (a balloon is round; paper
between strokes of art winds)."""
LONE_MAX_LENGTH: Final = 5.0
"""Its ink is at most this many line thicknesses long (a few cells of dots), ..."""
LONE_MIN_LENGTH: Final = 0.3
"""... at least this many long (not a speck) ..."""
LONE_MAX_WIDTH: Final = 0.6
"""... and at most this many wide: one narrow column (or row) of marks."""
LONE_CELL: Final = 1.2
"""Ink that is not dots is recognised when it is at most this many thicknesses long: a cell."""
LONE_PAD: Final = 0.25
"""Paper kept round the marks' ink when it is recognised, in line thicknesses."""
LONE_MIN_SCORE: Final = 0.5
"""A lone mark is taken when read at least this confidently."""
WHOLE_IMAGE_SHARE: Final = 0.5
"""A block whose box covers this share of the image is the image's one piece of lettering."""
FULL_WIDTH: Final = str.maketrans({"!": "！", "?": "？"})


def read_marks(
    recogniser: Any,
    source: NDArray[np.uint8],
    boxes: Sequence[NDArray[np.float32]],
    texts: Sequence[str],
) -> list[str]:
    """`texts` (one per box), for each column whose last cell holds two upright marks that
    its reading lacks, with those marks added (`upright_pair`).
    `recogniser`: rapidocr's text recogniser, called once for all such cells."""
    from rapidocr.ch_ppocr_rec import TextRecInput

    texts = list(texts)
    grey: NDArray[Any] | None = None
    cells: list[tuple[int, NDArray[np.uint8]]] = []
    for index, (box, text) in enumerate(zip(boxes, texts, strict=True)):
        if not text.strip() or not is_column(box) or _ends_with_mark(text):
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
    rows = runs(np.asarray(ink.any(axis=1)))
    if not rows:
        return None
    start, end = rows[-1]
    for run_start, _ in reversed(rows[:-1]):
        if end - run_start > TAIL_CELL_LENGTH * thickness:
            break
        start = run_start
    across = runs(np.asarray(ink[start:end].any(axis=0)))
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


def _ends_with_mark(text: str) -> bool:
    return unicodedata.normalize("NFKC", text.rstrip()[-1:]) in UPRIGHT_MARKS


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


def lone_marks(
    engine: Any, page: Image.Image, lines: Sequence[TextLine], grey: NDArray[np.uint8]
) -> list[TextLine]:
    """Balloons holding nothing but marks ("……", "！", "‥‥"), as lines: the detector does not
    find marks on their own. A balloon here is a patch of paper holding no line, at least
    `LONE_MIN_AREA` squares of the page's median line thickness (each side `LONE_MIN_SIDE`)
    and at most `LONE_MAX_AREA` of the page, round (`LONE_MIN_ROUND`) and mostly paper within
    its outline (`LONE_MIN_PAPER`), whose ink is one narrow column or row of small pieces
    (`_marks_in`). Two or more dots in a line are an ellipsis of that many dots; other ink
    within one cell is recognised upright, and taken when read as ！ or ？ marks alone at
    least `LONE_MIN_SCORE` confidently."""
    import cv2
    from rapidocr.ch_ppocr_rec import TextRecInput

    if not lines:
        return []
    thickness = float(np.median([line.thickness for line in lines]))
    paper = np.ascontiguousarray(grey >= LIGHT * paper_level(grey), dtype=np.uint8)
    _, labels, stats, _ = cv2.connectedComponentsWithStats(paper, connectivity=4)
    holding = set()  # the patch of paper round each line: the commonest in its box
    for line in lines:
        inside = labels[int(line.y0) : int(np.ceil(line.y1)), int(line.x0) : int(np.ceil(line.x1))]
        inside = inside[inside > 0]
        if inside.size:
            holding.add(int(np.bincount(inside).argmax()))
    found: list[TextLine] = []
    cells: list[tuple[int, int, int, int]] = []
    w, h, area = (stats[:, index].astype(np.int64) for index in (2, 3, 4))
    candidates = (
        (area >= LONE_MIN_AREA * thickness**2)
        & (np.minimum(w, h) >= LONE_MIN_SIDE * thickness)
        & (w * h <= LONE_MAX_AREA * grey.size)
    )
    candidates[0] = False  # ink
    for label in np.flatnonzero(candidates).tolist():
        if label in holding:
            continue
        left, top, width, height = stats[label, :4].tolist()
        window = slice(top, top + height), slice(left, left + width)
        marks = _marks_in(labels[window] == label, paper[window], thickness)
        if marks is None:
            continue
        (x0, y0, x1, y1), dots = marks
        x0, y0, x1, y1 = x0 + left, y0 + top, x1 + left, y1 + top
        if dots:
            found.append(TextLine(x0, y0, x1, y1, ellipsis(dots), DOTS_SCORE))
        elif max(x1 - x0, y1 - y0) <= LONE_CELL * thickness:
            cells.append((x0, y0, x1, y1))
    if not cells:
        return found
    source = np.asarray(page)[:, :, ::-1]  # BGR, as rapidocr reads an image
    crops = []
    for x0, y0, x1, y1 in cells:
        # A square of paper round the ink, so that it is read upright.
        side = max(x1 - x0, y1 - y0) + 2 * max(2, round(LONE_PAD * thickness))
        left, top = max(0, (x0 + x1 - side) // 2), max(0, (y0 + y1 - side) // 2)
        crops.append(np.ascontiguousarray(source[top : top + side, left : left + side]))
    read = engine._load_rec_model()(TextRecInput(img=crops))
    for (x0, y0, x1, y1), reading, score in zip(cells, read.txts, read.scores, strict=True):
        text = "".join(unicodedata.normalize("NFKC", reading).split())
        if text and set(text) <= UPRIGHT_MARKS and float(score) >= LONE_MIN_SCORE:
            # Its place is the evidence (a round balloon round one cell of ink), as a counted
            # ellipsis's is: a mark read alone scores low however plain it is (0.55 for a
            # clear "!"), and the block bar would drop it.
            mark = text.translate(FULL_WIDTH)
            found.append(TextLine(x0, y0, x1, y1, mark, max(float(score), DOTS_SCORE)))
    return found


def ellipsis(dots: int) -> str:
    """`dots` dots written as the print groups them: three-dot ellipses (…) when they divide
    by three, else two-dot leaders (‥), else an ellipsis and leaders ("…‥" for five)."""
    if dots % 3 == 0:
        return "…" * (dots // 3)
    if dots % 2 == 0 or dots < 3:
        return "‥" * max(1, dots // 2)
    return "…" + ellipsis(dots - 3)


def _marks_in(
    patch: NDArray[np.bool_], paper: NDArray[np.uint8], thickness: float
) -> tuple[tuple[int, int, int, int], int] | None:
    """The box (x0, y0, x1, y1 in the patch's pixels) of the ink inside the paper `patch`, and
    how many dots it is (0: not dots alone), when the patch is round and mostly paper and its
    ink one narrow column or row of at most `LONE_MAX_PIECES` pieces, each within a
    character's cell (`lone_marks`); else None. Dots: two or more round pieces in one line,
    each at most `DOT_MAX_SIZE` thicknesses, none more than `DOT_MAX_RATIO` times as large as
    another (nor as long as it is wide); the line no wider than `DOT_MAX_RATIO` dots (a
    screentone's grid of dots is wider), nor longer than `DOT_MAX_PITCH` dots per dot."""
    import cv2

    mask = np.ascontiguousarray(patch, dtype=np.uint8)
    contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    filled = np.zeros_like(mask)
    cv2.drawContours(filled, contours, -1, 1, thickness=cv2.FILLED)
    inside = int(filled.sum())
    if inside < LONE_MIN_ROUND * mask.size or int(mask.sum()) < LONE_MIN_PAPER * inside:
        return None
    ink = np.ascontiguousarray((filled > 0) & (paper == 0), dtype=np.uint8)
    _, _, stats, _ = cv2.connectedComponentsWithStats(ink, connectivity=8)
    pieces = stats[1:]
    if not 1 <= len(pieces) <= LONE_MAX_PIECES or (pieces[:, 2:4] > thickness).any():
        return None  # nothing, or lettering, or a piece larger than a character: art
    x0, y0 = int(pieces[:, 0].min()), int(pieces[:, 1].min())
    x1 = int((pieces[:, 0] + pieces[:, 2]).max())
    y1 = int((pieces[:, 1] + pieces[:, 3]).max())
    thin, long = sorted((x1 - x0, y1 - y0))
    if thin > LONE_MAX_WIDTH * thickness or not (
        LONE_MIN_LENGTH * thickness <= long <= LONE_MAX_LENGTH * thickness
    ):
        return None
    sizes = pieces[:, 2:4].max(axis=1)
    dots = (
        len(pieces) >= 2
        and int(sizes.max()) <= DOT_MAX_SIZE * thickness
        and int(sizes.max()) <= DOT_MAX_RATIO * int(sizes.min())
        and bool((sizes <= DOT_MAX_RATIO * pieces[:, 2:4].min(axis=1) + 1).all())
        and thin <= DOT_MAX_RATIO * int(sizes.max())
        and long <= DOT_MAX_PITCH * len(pieces) * int(sizes.max())
    )
    return (x0, y0, x1, y1), len(pieces) if dots else 0
