"""A column of panels the panel finder missed, put back from the blocks beside the column
it found (the rule: docs/ocr.md, "Blocks").

Two four-panel strips side by side on a grey magazine scan: the frames of one strip are
found, those of the other are not (no clean gutter on the noisy paper, art breaking out of
the frames). The blocks of the strip that was missed lie in no panel, and each is read just
before the found panel level with it, so the two strips are read row by row across, where
a reader reads the right-hand strip to its foot first. The same on the other side: a
tall panel the finder missed on the left of a found stack (art running off the page) is read
after the stack's panels level with it. Pure functions over boxes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

Box = tuple[float, float, float, float]
"""x0, y0, x1, y1 in pixels, y down."""

COLUMN_MIN_PANELS: Final = 2
"""The found panels make a column when there are at least this many, stacked."""
COLUMN_OVERLAP: Final = 0.5
"""Stacked panels overlap across by at least this share of the narrower."""
MISSED_MIN_BLOCKS: Final = 3
"""A column is put back beside the found one when at least this many blocks lie there, in
no panel: one or two are a caption or a title beside the strip."""


def with_missing_column(
    panels: Sequence[Box], blocks: Sequence[Box], *, right_to_left: bool = True
) -> list[Box]:
    """`panels` (in reading order) with a column put back beside them, when the panels found
    stand in one column and at least `MISSED_MIN_BLOCKS` of `blocks` (their boxes) lie in no
    panel, wholly on one side of the column, level with it (their centre not below its foot).

    On the side read first (the right in manga order) the column put back spans those blocks
    across, and from the highest of them to the foot of the found column; it is read before
    the found panels. On the side read later it spans the blocks from the highest to the lowest, and is
    read after the found panels that start above its foot: a stack of panels beside a tall
    panel the finder missed is read to its foot first, then the tall panel, then the row
    under both."""
    if len(panels) < COLUMN_MIN_PANELS or not _one_column(panels):
        return list(panels)
    left = min(panel[0] for panel in panels)
    right = max(panel[2] for panel in panels)
    foot = max(panel[3] for panel in panels)

    def beside(block: Box, first: bool) -> bool:
        on_side = block[0] >= right if first == right_to_left else block[2] <= left
        return on_side and (block[1] + block[3]) / 2 <= foot and not _in_any(block, panels)

    missed = [block for block in blocks if beside(block, first=True)]
    if len(missed) >= MISSED_MIN_BLOCKS:
        column = (
            min(block[0] for block in missed) if not right_to_left else right,
            min(block[1] for block in missed),
            max(block[2] for block in missed) if right_to_left else left,
            foot,
        )
        return [column, *panels]
    missed = [block for block in blocks if beside(block, first=False)]
    if len(missed) < MISSED_MIN_BLOCKS:
        return list(panels)
    bottom = max(block[3] for block in missed)
    column = (
        min(block[0] for block in missed) if right_to_left else right,
        min(block[1] for block in missed),
        left if right_to_left else max(block[2] for block in missed),
        bottom,
    )
    after = sum(1 for panel in panels if panel[1] < bottom)  # a stack: read top down
    return [*panels[:after], column, *panels[after:]]


def _one_column(panels: Sequence[Box]) -> bool:
    """True when every panel overlaps every other across by `COLUMN_OVERLAP` of the
    narrower: a stack, not a row."""
    for index, a in enumerate(panels):
        for b in panels[index + 1 :]:
            across = min(a[2], b[2]) - max(a[0], b[0])
            if across < COLUMN_OVERLAP * min(a[2] - a[0], b[2] - b[0]):
                return False
    return True


def _in_any(block: Box, panels: Sequence[Box]) -> bool:
    cx, cy = (block[0] + block[2]) / 2, (block[1] + block[3]) / 2
    return any(x0 <= cx <= x1 and y0 <= cy <= y1 for x0, y0, x1, y1 in panels)
