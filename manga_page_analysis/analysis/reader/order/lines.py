"""A recognised line (`TextLine`) and a block of lines read together (`Block`): the boxes
and texts the reader's stages pass down to the reading order (`blocks`). Pure data.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

VERTICAL_RATIO: Final = 1.5
"""A line at least this many times taller than wide is a vertical column (rapidocr uses 1.5 too)."""
Box = tuple[float, float, float, float]
"""x0, y0, x1, y1 in pixels, y down."""


def is_column(quad: NDArray[np.float32]) -> bool:
    """A detected box (a 4x2 quadrilateral) that is a column: `VERTICAL_RATIO` times as tall
    as it is wide."""
    width, height = quad.max(axis=0) - quad.min(axis=0)
    return float(height) >= VERTICAL_RATIO * float(width)


def quad_thickness(quad: NDArray[np.float32]) -> float:
    """A detected box's short side (about one character's size), as `TextLine.thickness`
    is a line's."""
    width, height = quad.max(axis=0) - quad.min(axis=0)
    return float(min(width, height))


@dataclass(frozen=True, slots=True)
class TextLine:
    """One recognised line: its axis-aligned box (pixels, y down) and text."""

    x0: float
    y0: float
    x1: float
    y1: float
    text: str
    score: float = 1.0
    """The recogniser's confidence in `text`, 0..1."""
    bubble: int | None = None
    """The balloon (an enclosed patch of paper) the line is printed in, when it is in one
    (`manga_page_analysis.analysis.reader.regions.bubbles`): a line shares a block only with lines of its own
    balloon, or, in none, with lines in none."""
    cut_from: Box | None = None
    """The box of the detected line this line is a piece of, when one line was cut in two
    at a wide gap (`manga_page_analysis.analysis.reader.order.line_cut`): its pieces are read one after
    the other, left to right."""

    @property
    def width(self) -> float:
        return self.x1 - self.x0

    @property
    def height(self) -> float:
        return self.y1 - self.y0

    @property
    def thickness(self) -> float:
        """About one character's size: the short side of the box."""
        return max(1.0, min(self.width, self.height))

    @property
    def orientation(self) -> str | None:
        """`"v"` for a column, `"h"` for a line, `None` when square-ish (a lone character)."""
        if self.height >= VERTICAL_RATIO * self.width:
            return "v"
        if self.width >= VERTICAL_RATIO * self.height:
            return "h"
        return None

    def moved(self, dx: float, dy: float) -> TextLine:
        """The same line, its box moved by (dx, dy) (from a crop back to the page)."""
        cut_from = self.cut_from
        if cut_from is not None:
            x0, y0, x1, y1 = cut_from
            cut_from = (x0 + dx, y0 + dy, x1 + dx, y1 + dy)
        return dataclasses.replace(
            self,
            x0=self.x0 + dx,
            y0=self.y0 + dy,
            x1=self.x1 + dx,
            y1=self.y1 + dy,
            cut_from=cut_from,
        )

    @classmethod
    def from_quad(cls, quad: Iterable[Sequence[float]], text: str, score: float = 1.0) -> TextLine:
        """From the four corner points an OCR engine gives (any order, possibly skewed)."""
        points = list(quad)
        xs = [float(point[0]) for point in points]
        ys = [float(point[1]) for point in points]
        return cls(min(xs), min(ys), max(xs), max(ys), text, float(score))


@dataclass(frozen=True, slots=True)
class Block:
    """Lines read together, already in reading order."""

    lines: tuple[TextLine, ...]
    vertical: bool

    @property
    def x0(self) -> float:
        return min(line.x0 for line in self.lines)

    @property
    def y0(self) -> float:
        return min(line.y0 for line in self.lines)

    @property
    def x1(self) -> float:
        return max(line.x1 for line in self.lines)

    @property
    def y1(self) -> float:
        return max(line.y1 for line in self.lines)

    @property
    def text(self) -> str:
        return join_pieces(line.text for line in self.lines)

    @property
    def score(self) -> float:
        """The recogniser's confidence over the block, weighted by characters."""
        weights = [max(1, len(line.text)) for line in self.lines]
        weighted = sum(w * line.score for w, line in zip(weights, self.lines, strict=True))
        return weighted / sum(weights)

    def as_json(
        self, scale_x: float = 1.0, scale_y: float = 1.0, *, size: tuple[int, int] | None = None
    ) -> dict[str, Any]:
        """`{"text", "box", "vertical", "score"}` as stored in `page_analysis.ocr_blocks`;
        the box is multiplied by the scales (back to the original image's pixels) and, given
        the image's `size` (width, height), lies inside it."""
        box = [self.x0 * scale_x, self.y0 * scale_y, self.x1 * scale_x, self.y1 * scale_y]
        if size is not None:
            # (width, height, width, height): each edge inside the image.
            box = [min(max(edge, 0.0), limit) for edge, limit in zip(box, size * 2, strict=True)]
        return {
            "text": self.text,
            "box": [round(edge) for edge in box],
            "vertical": self.vertical,
            "score": round(self.score, 3),
        }


def join_pieces(pieces: Iterable[str]) -> str:
    """Join the parts of one sentence: nothing between two CJK characters, else a space."""
    text = ""
    for piece in (piece.strip() for piece in pieces):
        if not piece:
            continue
        if text and not (_is_cjk(text[-1]) and _is_cjk(piece[0])):
            text += " "
        text += piece
    return text


def _is_cjk(char: str) -> bool:
    # Kana, kanji, CJK punctuation and full-width forms: scripts written without spaces; and
    # the leaders and dash Japanese sets among them (誰なのかも……, ――あれ？).
    name = unicodedata.name(char, "")
    return (
        name.startswith(("CJK", "HIRAGANA", "KATAKANA", "FULLWIDTH", "IDEOGRAPHIC"))
        or "\u3000" <= char <= "\u30ff"
        or char in "…‥―"
    )
