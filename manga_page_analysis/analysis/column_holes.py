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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from PIL import Image

from manga_page_analysis.analysis.layout import TextLine, reading_order

HOLE_PITCHES: Final = 1.7
"""Two neighbouring columns at least this many pitches apart (the block's median distance
between neighbouring columns' middles) have a column missing between them."""
HOLE_MIN_COLUMNS: Final = 3
"""The pitch is measured on a block of at least this many columns."""
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

    @property
    def centre(self) -> float:
        return (self.x0 + self.x1) / 2

    def holds(self, line: TextLine) -> bool:
        """True when `line` is a column whose middle lies in the middle of the hole."""
        middle = (line.x0 + line.x1) / 2
        return line.orientation != "h" and abs(middle - self.centre) <= HOLE_CENTRE_SHARE * (
            self.pitch
        )


def column_holes(lines: Sequence[TextLine]) -> list[Hole]:
    """The holes between the columns of each vertical block of `lines` (`HOLE_PITCHES`)."""
    holes = []
    for block in reading_order(lines):
        if not block.vertical:
            continue
        columns = _columns(block.lines)
        if len(columns) < HOLE_MIN_COLUMNS:
            continue
        middles = [_middle(column) for column in columns]
        steps = [right - left for left, right in itertools.pairwise(middles)]
        pitch = statistics.median(steps)
        for index, step in enumerate(steps):
            if step >= HOLE_PITCHES * pitch:
                pair = columns[index] + columns[index + 1]
                holes.append(
                    Hole(
                        middles[index],
                        min(line.y0 for line in pair),
                        middles[index + 1],
                        max(line.y1 for line in pair),
                        pitch,
                    )
                )
    return holes


def read_holes(engine: Any, page: Image.Image, lines: Sequence[TextLine]) -> list[TextLine]:
    """The columns found in the holes between `lines`' columns (page pixels), each detected
    again in the strip of page the hole spans."""
    from manga_page_analysis.analysis.ocr_pipeline import read_lines

    found = []
    for hole in column_holes(lines):
        x0, y0 = int(hole.x0), int(hole.y0)
        strip = page.crop((x0, y0, int(hole.x1) + 1, int(hole.y1) + 1))
        again = [line.moved(x0, y0) for line in read_lines(engine, strip, look_twice=False)]
        found += [line for line in again if hole.holds(line)]
    return found


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
