"""Is a short block typeset lettering, or art read as characters? (`without_art`)

A hand-lettered sound effect or a stroke of a drawing that the recogniser reads as one or
two characters ("年", "福", "个", a lone "は" drawn a head high) is not text a reader reads.
Dialogue that short exists ("あ", "え？", "あっ"), so no one signal decides: each short
block gets an *art score*, the mean of signals measured on the page (docs/ocr.md, "Sound
effects and marks are not text"), and is dropped when the score reaches
`ReaderThresholds.max_art` (chosen leaving each manga out in the eval). Pure functions over
blocks and the page in grey, so tests feed drawn images.
"""

from __future__ import annotations

import math
import statistics
import unicodedata
from collections.abc import Sequence
from typing import Final

import cv2
import numpy as np
from numpy.typing import NDArray

from manga_page_analysis.analysis.reader.order.lines import Block

SHORT_MAX_LETTERS: Final = 2
"""Only blocks of one to this many letters, or of one kanji repeated (才才才), are judged:
what art is read as. A longer block is lettering read as words, judged by the rules before;
a block of marks alone ("……", "！") was counted in the image (`recognition.marks`), and its
strokes are dots, not lettering."""
PAPER_LEVEL: Final = 200
"""A pixel at least this light (of 255) is paper, in the ring round a block."""
INK_LEVEL: Final = 128
"""A pixel darker than this is ink, in a block's box."""
RING: Final = 0.4
"""The ring round a block is this many of its lines' thickness wide."""
TYPESET_STROKE: Final = 0.06
"""Typeset lettering's stroke is about this share of its lines' thickness (the median over
the 305 blocks of dialogue read on the development pages; half of them lie within 0.044 to
0.076); drawn lettering and art stray from it."""


def without_art(blocks: Sequence[Block], grey: NDArray[np.uint8], max_art: float) -> list[Block]:
    """`blocks` without the short ones whose `art_score` is at least `max_art`."""
    if not blocks:
        return []
    median = statistics.median(line.thickness for block in blocks for line in block.lines)
    return [
        block
        for block in blocks
        if not judged(block.text) or art_score(block, grey, median) < max_art
    ]


def judged(text: str) -> bool:
    """Whether a block reading `text` is judged: one to `SHORT_MAX_LETTERS` letters and
    digits (marks and punctuation do not count), or one kanji repeated."""
    letters = [char for char in text if unicodedata.category(char)[0] in "LN"]
    return 1 <= len(letters) <= SHORT_MAX_LETTERS or _repeated_ideograph(letters)


def _is_ideograph(char: str) -> bool:
    return unicodedata.name(char, "").startswith("CJK UNIFIED")


def _repeated_ideograph(letters: Sequence[str]) -> bool:
    return len(letters) >= 3 and len(set(letters)) == 1 and _is_ideograph(letters[0])


def art_score(block: Block, grey: NDArray[np.uint8], median_thickness: float) -> float:
    """0 (typeset lettering in a balloon) to 1 (art): the mean of the signals below."""
    thickness = statistics.median(line.thickness for line in block.lines)
    signals = (
        oversize(thickness, median_thickness),
        1.0 - paper_around(block, grey, thickness),
        1.0 - block.score,
        stroke_oddness(block, grey, thickness),
        lone_ideograph(block.text),
    )
    return sum(signals) / len(signals)


def oversize(thickness: float, median_thickness: float) -> float:
    """0 at the page's median line thickness or below, 1 at twice it or more: dialogue is
    set in one size, art read as a character is as large as the drawing."""
    return min(1.0, max(0.0, math.log2(thickness / max(1.0, median_thickness))))


def paper_around(block: Block, grey: NDArray[np.uint8], thickness: float) -> float:
    """The share of paper in a ring round the block (`RING` thicknesses wide): a balloon or
    a caption's box is paper round its lettering, art is not."""
    height, width = grey.shape
    margin = max(1, round(RING * thickness))
    x0, y0 = max(0, int(block.x0)), max(0, int(block.y0))
    x1, y1 = min(width, math.ceil(block.x1)), min(height, math.ceil(block.y1))
    ox0, oy0 = max(0, x0 - margin), max(0, y0 - margin)
    ox1, oy1 = min(width, x1 + margin), min(height, y1 + margin)
    outer = grey[oy0:oy1, ox0:ox1] >= PAPER_LEVEL
    inner = grey[y0:y1, x0:x1] >= PAPER_LEVEL
    ring_pixels = outer.size - inner.size
    if ring_pixels <= 0:
        return 1.0  # the block fills the image: a crop of one balloon
    return float(outer.sum() - inner.sum()) / ring_pixels


def stroke_oddness(block: Block, grey: NDArray[np.uint8], thickness: float) -> float:
    """0 when the ink's strokes are as wide as typeset lettering's (`TYPESET_STROKE` of the
    character size), 1 when twice as wide or as narrow or more: a brush-drawn effect's
    strokes are heavy, a drawing's outline thin. The stroke width is twice the distance to
    paper that a tenth of the ink lies deeper than (the distance transform's 90th
    percentile: the middles of the strokes, not the specks between), less the pixel of
    paper that distance counts to."""
    height, width = grey.shape
    x0, y0 = max(0, int(block.x0)), max(0, int(block.y0))
    x1, y1 = min(width, math.ceil(block.x1)), min(height, math.ceil(block.y1))
    ink = (grey[y0:y1, x0:x1] < INK_LEVEL).astype(np.uint8)
    if not ink.any():
        return 0.0
    distance = cv2.distanceTransform(ink, cv2.DIST_L2, 3)
    stroke = (2.0 * float(np.percentile(distance[ink > 0], 90)) - 1.0) / thickness
    return min(1.0, abs(math.log2(max(stroke, 1e-3) / TYPESET_STROKE)))


def lone_ideograph(text: str) -> float:
    """1 when the block is one kanji and nothing else, or a kanji repeated (才才才): a word
    said alone is rarely a bare kanji without a mark or a kana (何！？, 嘘っ), while the
    recogniser reads strokes of art as kanji."""
    compact = [char for char in text if not char.isspace()]
    lone = len(compact) == 1 and _is_ideograph(compact[0])
    return 1.0 if lone or _repeated_ideograph(compact) else 0.0
