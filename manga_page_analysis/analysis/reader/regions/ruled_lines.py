"""Ruled lines between rows of lettering: the labels of a drawn diagram, each underlined by
the leader line that points from it to what it names, are stacked as tightly as the rows of
one caption; the rule between them is what tells them apart (docs/ocr.md, "Labels apart").

Rows only. A rule between two columns is most often the outline between two touching
balloons; told apart, their blocks are then ordered as rows by their tops, which on the
development set cost more than it gained.

A predicate over a greyscale page for `layout.reading_order`: tests draw the page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np
from numpy.typing import NDArray

from manga_page_analysis.analysis.reader.order.lines import TextLine
from manga_page_analysis.analysis.reader.regions.panels import paper_level

RULE_INK: Final = 0.85
"""A pixel darker than this share of the paper's level is ink of a rule. Lenient: a leader
line on a small scan is a pixel thin, anti-aliased to light grey."""
RULE_MIN_LENGTH: Final = 0.8
"""A rule runs unbroken along at least this share of the span the two lines share."""
RULE_PAPER_ROW: Final = 0.1
"""A rule is sought only between lines on paper: some row of pixels between them is at most
this share ink (between lines of white lettering on a dark ground, every row is dark)."""
RULE_MAX_THICKNESS: Final = 0.3
"""A rule is thin: at most this share of the thinner row's thickness in rows of pixels (a
band of dark art between two rows is not a rule) ..."""
RULE_MIN_ROWS: Final = 2
"""... or this many rows (a rule a pixel thin, anti-aliased, shows in two), whichever is more."""


def ruled_apart(grey: NDArray[np.uint8]) -> Callable[[TextLine, TextLine], bool]:
    """A predicate: True when a rule (a straight, thin line of ink, `RULE_MIN_LENGTH` of
    their shared span long) runs between two stacked rows, anywhere between their middles,
    on paper. A row of lettering never makes one: its glyphs leave paper between them."""
    ink_below = RULE_INK * paper_level(grey)

    def apart(a: TextLine, b: TextLine) -> bool:
        if "h" not in (a.orientation, b.orientation) or "v" in (a.orientation, b.orientation):
            return False  # rows only: see the module's docstring
        band = _between(grey, a, b)
        if band is None:
            return False
        ink = band < ink_below
        if ink.mean(axis=1).min() > RULE_PAPER_ROW:
            return False  # no paper between them: lettering on a dark ground or on art
        runs = _longest_runs(ink)
        ruled = int((runs >= RULE_MIN_LENGTH * band.shape[1]).sum())
        thinner = min(a.thickness, b.thickness)
        return 0 < ruled <= max(RULE_MIN_ROWS, RULE_MAX_THICKNESS * thinner)

    return apart


def _between(grey: NDArray[np.uint8], a: TextLine, b: TextLine) -> NDArray[np.uint8] | None:
    """The page between the middles of rows `a` and `b`, over the span they share; None when
    they share none."""
    left, right = max(0, round(max(a.x0, b.x0))), min(grey.shape[1], round(min(a.x1, b.x1)))
    top, bottom = sorted(((a.y0 + a.y1) / 2, (b.y0 + b.y1) / 2))
    upper, lower = max(0, round(top)), min(grey.shape[0], round(bottom) + 1)
    if right - left < 2 or lower - upper < 1:
        return None
    return grey[upper:lower, left:right]


def _longest_runs(ink: NDArray[np.bool_]) -> NDArray[np.int64]:
    """The longest unbroken run of ink along each row of `ink`, each two neighbouring pixel
    rows taken together: a rule a pixel thin falls between two, half in each. No break is
    closed: the glyphs of a line stand a pixel or two apart, and closed up they would run
    as one."""
    paired = ink[:-1] | ink[1:] if len(ink) > 1 else ink
    padded = np.pad(paired, ((0, 0), (1, 1)))
    edges = np.diff(padded.astype(np.int8), axis=1)
    longest = np.zeros(len(paired), dtype=np.int64)
    for index, (starts, ends) in enumerate(zip(edges == 1, edges == -1, strict=True)):
        if starts.any():
            longest[index] = (np.flatnonzero(ends) - np.flatnonzero(starts)).max()
    return longest
