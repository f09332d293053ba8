"""A column the page-wide detection missed between two columns of a block it found.

The columns of one block are set at one pitch. Where two neighbouring columns stand about two
pitches apart, one between them is missing: the detector, at the page's scale, sometimes
loses one of several tightly set columns and pads its neighbours' boxes over it (so the
balloon's ink looks covered, and a box found there again lies mostly in known boxes). The
strip between the two neighbours' middles is detected again on its own, and a column found
in the middle of the hole is kept (docs/ocr.md, "What it reads").
"""

from __future__ import annotations

import itertools
import statistics
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from PIL import Image

from manga_page_analysis.analysis.reader.order.blocks import SAME_SIZE, reading_order
from manga_page_analysis.analysis.reader.order.lines import TextLine
from manga_page_analysis.analysis.reader.recognition.column_cells import INK_LEVEL
from manga_page_analysis.analysis.reader.recognition.detect_and_read import read_lines
from manga_page_analysis.analysis.reader.regions.bubbles import in_bubbles

HOLE_PITCHES: Final = 1.7
"""Two neighbouring columns at least this many pitches apart (the block's median distance
between neighbouring columns' middles) have a column missing between them."""
HOLE_MIN_COLUMNS: Final = 3
"""The pitch is measured on a block of at least this many columns."""
EDGE_INK_SHARE: Final = 0.5
"""A strip one column thick beside a block's outer column, over the block's height, whose
share of ink is at least this share of the block's own, may hold a column the page-wide
detection missed at the block's edge (lettering on art, a column set apart)."""
EDGE_REACH: Final = 1.5
"""The outer column is detected again with this many of its thicknesses of page beside it
(the page-wide boxes of small lettering lie a little off it)."""
EDGE_MIN_COLUMNS: Final = 2
"""Only a block of at least this many columns is looked at beside its edges (a lone column
beside art would be looked at on every page)."""
RUBY_MAX_RATIO: Final = 0.7
"""A column of kana at most this thick relative to its balloon's median line is ruby; one with
no column beside it marks a column missed (`_ruby_holes`)."""
HOLE_CENTRE_SHARE: Final = 1 / 3
"""A column found again is the missing one when its middle lies within this share of the
pitch of the hole's middle (pieces of the neighbours cut by the strip lie near its edges)."""


@dataclass(frozen=True, slots=True)
class Hole:
    """Where a column is missing: the strip between two columns' middles (page pixels)."""

    x0: float
    y0: float
    x1: float
    y1: float
    pitch: float
    balloon: tuple[int, int, int, int] | None = None
    """The box of the balloon whose columns the hole parts (see `column_holes`): detected
    again whole, the known lines set aside, where the strip alone gives the detector too
    little of the column's context to find it."""

    @property
    def centre(self) -> float:
        return (self.x0 + self.x1) / 2

    def crosses(self, line: TextLine) -> bool:
        """True when `line`'s box reaches into the hole's strip."""
        return line.x0 < self.x1 and line.x1 > self.x0 and line.y0 < self.y1 and line.y1 > self.y0

    def holds(self, line: TextLine) -> bool:
        """True when `line` is a column whose middle lies in the middle of the hole."""
        middle = (line.x0 + line.x1) / 2
        return line.orientation != "h" and abs(middle - self.centre) <= HOLE_CENTRE_SHARE * (
            self.pitch
        )


def column_holes(lines: Sequence[TextLine], grey: NDArray[np.uint8] | None = None) -> list[Hole]:
    """The holes between the columns of each vertical block of `lines` (`HOLE_PITCHES`) and,
    with `grey` (the page), between the columns of each balloon: a column padded over by both
    its neighbours' boxes can leave a gap that parts its balloon's columns into two blocks."""
    groups: list[tuple[list[TextLine], bool]] = [
        (list(block.lines), False) for block in reading_order(lines) if block.vertical
    ]
    holes: list[Hole] = []
    if grey is not None:
        balloons = _balloon_columns(in_bubbles(lines, grey))
        groups += [(group, True) for group in balloons]
        holes += [hole for group in balloons for hole in _ruby_holes(group)]
    for group, in_balloon in groups:
        columns = _columns(group)
        if len(columns) < HOLE_MIN_COLUMNS:
            continue
        middles = [_middle(column) for column in columns]
        steps = [right - left for left, right in itertools.pairwise(middles)]
        pitch = statistics.median(steps)
        for index, step in enumerate(steps):
            if step >= HOLE_PITCHES * pitch:
                pair = columns[index] + columns[index + 1]
                hole = Hole(
                    middles[index],
                    min(line.y0 for line in pair),
                    middles[index + 1],
                    max(line.y1 for line in pair),
                    pitch,
                    _around(group, pitch) if in_balloon else None,
                )
                if not any(abs(hole.centre - other.centre) < pitch for other in holes):
                    holes.append(hole)
    return holes


def _ruby_holes(group: Sequence[TextLine]) -> list[Hole]:
    """Where a balloon's column was missed but its ruby was found: a column of kana at most
    `RUBY_MAX_RATIO` as thick as the balloon's median line with no thicker line within half
    a column of its left (vertical ruby is set right of its column). The hole is a column's
    thickness wide, left of the ruby."""
    size = statistics.median(line.thickness for line in group)
    holes = []
    for ruby in group:
        if ruby.thickness > RUBY_MAX_RATIO * size or not _is_kana(ruby.text):
            continue
        beside = [
            line
            for line in group
            if line.thickness > RUBY_MAX_RATIO * size
            and line.x0 < ruby.x0
            and line.x1 > ruby.x0 - size / 2
            and line.y0 < ruby.y1
            and line.y1 > ruby.y0
        ]
        if not beside:
            x0, x1 = ruby.x0 - size, ruby.x0
            holes.append(Hole(x0, ruby.y0, x1, ruby.y1, size, _around(group, size)))
    return holes


def _is_kana(text: str) -> bool:
    """Kana alone, with no mark that ends or parts a sentence (ruby holds none)."""
    if any(char in "!?！？。、" for char in text):
        return False
    letters = [char for char in text if not unicodedata.category(char).startswith("P")]
    return bool(letters) and all("\u3040" <= char <= "\u30ff" for char in letters)


def _around(lines: Sequence[TextLine], pitch: float) -> tuple[int, int, int, int]:
    """The box of `lines` grown by `pitch` on every side (the balloon round them)."""
    return (
        max(0, int(min(line.x0 for line in lines) - pitch)),
        max(0, int(min(line.y0 for line in lines) - pitch)),
        int(max(line.x1 for line in lines) + pitch) + 1,
        int(max(line.y1 for line in lines) + pitch) + 1,
    )


def _balloon_columns(placed: Sequence[TextLine]) -> list[list[TextLine]]:
    """The columns of each balloon in `placed` set about in the balloon's median size (ruby
    beside them is not a column of the pitch)."""
    groups = []
    for bubble in {line.bubble for line in placed if line.bubble is not None}:
        columns = [line for line in placed if line.bubble == bubble and line.orientation != "h"]
        if len(columns) >= HOLE_MIN_COLUMNS:
            size = statistics.median(line.thickness for line in columns)
            groups.append(
                [line for line in columns if size / SAME_SIZE <= line.thickness <= SAME_SIZE * size]
            )
    return groups


@dataclass(frozen=True, slots=True)
class Edge:
    """Beside a block's outer column: `region` (x0, y0, x1, y1, page pixels) is the block's box
    grown by a column's thickness on that side, and a column found there again belongs to the
    block when it lies beyond `outer` (the outer column's middle) on that side, along most of
    the block's height, in about the block's thickness."""

    region: tuple[int, int, int, int]
    outer: float
    right: bool
    thickness: float

    def holds(self, line: TextLine) -> bool:
        middle = (line.x0 + line.x1) / 2
        beyond = middle > self.outer if self.right else middle < self.outer
        _, y0, _, y1 = self.region
        along = (min(line.y1, y1) - max(line.y0, y0)) / max(1.0, line.height)
        return (
            beyond
            and line.orientation == "v"
            and along >= 0.5
            and self.thickness / SAME_SIZE <= line.thickness <= SAME_SIZE * self.thickness
        )


def block_edges(lines: Sequence[TextLine], grey: NDArray[np.uint8]) -> list[Edge]:
    """The edges of the vertical blocks of `lines` (at least `EDGE_MIN_COLUMNS` columns)
    where the strip beside the outer column holds ink like the block's (`EDGE_INK_SHARE`).
    `grey`: the page."""
    height, width = grey.shape
    edges = []
    # A balloon's missed column is sought by reading the balloon again (`bubbles`).
    for block in reading_order([line for line in in_bubbles(lines, grey) if line.bubble is None]):
        columns = _columns(block.lines)
        if not block.vertical or len(columns) < EDGE_MIN_COLUMNS:
            continue
        thickness = statistics.median(line.thickness for line in block.lines)
        y0, y1 = max(0, int(block.y0)), min(height, int(block.y1) + 1)
        x0, x1 = max(0, int(block.x0)), min(width, int(block.x1) + 1)
        own = _ink_share(grey[y0:y1, x0:x1])
        for right, outer in ((True, columns[-1]), (False, columns[0])):
            near, far = (x1, x1 + int(thickness)) if right else (x0 - int(thickness), x0)
            strip = grey[y0:y1, max(0, near) : min(width, far)]
            if strip.size and _ink_share(strip) >= EDGE_INK_SHARE * own:
                # The outer column and the strip: the column gives the detector its context.
                outer_x0 = int(min(line.x0 for line in outer))
                outer_x1 = int(max(line.x1 for line in outer)) + 1
                reach = int(EDGE_REACH * thickness)
                region = (
                    (max(0, outer_x0), y0, min(width, x1 + reach), y1)
                    if right
                    else (max(0, x0 - reach), y0, min(width, outer_x1), y1)
                )
                edges.append(Edge(region, _middle(outer), right, thickness))
    return edges


def read_holes(
    engine: Any, page: Image.Image, lines: Sequence[TextLine], grey: NDArray[np.uint8]
) -> list[TextLine]:
    """The columns found in the holes between `lines`' columns (page pixels), each detected
    again in the strip of page the hole spans, and beside the blocks' edges (`block_edges`),
    each block detected again with its edge. `grey`: the page in grey, as the caller has it."""
    found = []
    for hole in column_holes(lines, grey):
        if hole.balloon is not None:
            x0, y0, x1, y1 = hole.balloon
            # The neighbours' padded boxes lie over the missing column: they are not known
            # here, or its box, found again, would be taken for theirs.
            known = [line.moved(-x0, -y0) for line in lines if not hole.crosses(line)]
        else:
            x0, y0, x1, y1 = int(hole.x0), int(hole.y0), int(hole.x1) + 1, int(hole.y1) + 1
            known = []
        crop = page.crop((x0, y0, min(page.width, x1), min(page.height, y1)))
        again = read_lines(engine, crop, known, look_twice=False)
        found += [
            line
            for line in (each.moved(x0, y0) for each in again)
            if hole.holds(line) and not any(_found_again(line, other) for other in lines)
        ]
    for edge in block_edges(lines, grey):
        x0, y0, x1, y1 = edge.region
        known = [line.moved(-x0, -y0) for line in lines]
        crop = page.crop((x0, y0, x1, y1))
        again = [line.moved(x0, y0) for line in read_lines(engine, crop, known, look_twice=False)]
        found += [line for line in again if edge.holds(line)]
    return found


def _found_again(line: TextLine, other: TextLine) -> bool:
    """True when `line`'s middle lies in `other`'s box: `other` found again, not a new column
    (a short column may have no orientation, and so stand in no hole's pitch)."""
    middle_x, middle_y = (line.x0 + line.x1) / 2, (line.y0 + line.y1) / 2
    return other.x0 <= middle_x <= other.x1 and other.y0 <= middle_y <= other.y1


def _ink_share(grey: NDArray[np.uint8]) -> float:
    """The share of `grey`'s pixels that are ink (`INK_LEVEL`)."""
    return float((grey < INK_LEVEL).mean()) if grey.size else 0.0


def _columns(lines: Sequence[TextLine]) -> list[list[TextLine]]:
    """`lines` in columns (lines whose middles lie within half the thinner's thickness),
    left to right."""
    columns: list[list[TextLine]] = []
    for line in sorted(lines, key=_middle_of):
        last = columns[-1] if columns else None
        if last is not None and abs(_middle_of(line) - _middle(last)) <= 0.5 * min(
            line.thickness, min(other.thickness for other in last)
        ):
            last.append(line)
        else:
            columns.append([line])
    return columns


def _middle_of(line: TextLine) -> float:
    return (line.x0 + line.x1) / 2


def _middle(column: list[TextLine]) -> float:
    return sum(_middle_of(line) for line in column) / len(column)
