"""Which balloon each text line is printed in: the enclosed patch of paper around it.

Two lines in two different balloons are never one block, however close they are (two
bubbles that touch, a bubble beside a caption or a margin note). A line on open paper, or on
art, is in no balloon and is grouped by its neighbours alone (`layout`). Pure numpy and
OpenCV over a greyscale page.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final

import numpy as np
from numpy.typing import NDArray

from manga_page_analysis.analysis.layout import TextLine
from manga_page_analysis.analysis.panels import LIGHT, paper_level

BUBBLE_MIN_AREA: Final = 2.0
"""A patch of paper is a balloon around a line when it is at least this many times the
line's box (it surrounds the line with a margin); smaller patches are gaps between glyphs."""
BUBBLE_MAX_AREA: Final = 0.2
"""A patch of paper over this share of the page is the open page (gutters, margins), not a
balloon."""
INSIDE_BUBBLE: Final = 0.6
"""A line whose own patch is no balloon (its glyphs cut the paper around it, or it touches
the outline) is in a balloon when this share of its box lies in the balloon's box."""


def in_bubbles(lines: Sequence[TextLine], grey: NDArray[np.uint8]) -> list[TextLine]:
    """`lines`, each with the balloon (`TextLine.bubble`) it is printed in, or `None`."""
    import cv2  # rapidocr's dependency

    if not lines:
        return []
    paper = np.ascontiguousarray(grey >= LIGHT * paper_level(grey), dtype=np.uint8)
    _, labels, stats, _ = cv2.connectedComponentsWithStats(paper, connectivity=4)
    areas = stats[:, cv2.CC_STAT_AREA]
    height, width = grey.shape
    found: list[int | None] = []
    for line in lines:
        x0, y0 = max(0, int(line.x0)), max(0, int(line.y0))
        x1, y1 = min(width, int(line.x1) + 1), min(height, int(line.y1) + 1)
        inside = labels[y0:y1, x0:x1].ravel()
        inside = inside[inside > 0]
        bubble = None
        if inside.size:
            label = int(np.bincount(inside).argmax())
            box_area = max(1, (x1 - x0) * (y1 - y0))
            if BUBBLE_MIN_AREA * box_area <= areas[label] <= BUBBLE_MAX_AREA * grey.size:
                bubble = label
        found.append(bubble)
    balloons = {label: stats[label, :4].tolist() for label in found if label is not None}
    placed = []
    for line, bubble in zip(lines, found, strict=True):
        if bubble is None:
            bubble = next(
                (
                    label
                    for label, box in balloons.items()
                    if _share_inside(line, box) >= INSIDE_BUBBLE
                ),
                None,
            )
        placed.append(dataclasses.replace(line, bubble=bubble))
    return placed


def _share_inside(line: TextLine, box: list[int]) -> float:
    """The share of the line's box inside `box` (left, top, width, height)."""
    left, top, width, height = box
    w = max(0.0, min(line.x1, left + width) - max(line.x0, left))
    h = max(0.0, min(line.y1, top + height) - max(line.y0, top))
    return w * h / max(1.0, line.width * line.height)
