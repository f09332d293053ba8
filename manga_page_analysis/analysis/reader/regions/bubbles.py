"""Which balloon each text line is printed in: the enclosed patch of paper around it.

Two lines in two different balloons are never one block, however close they are (two
bubbles that touch, a bubble beside a caption or a margin note). A line on open paper, or on
art, is in no balloon and is grouped by its neighbours alone (`layout`). Pure numpy and
OpenCV over a greyscale page.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from manga_page_analysis.analysis.reader.order.lines import TextLine
from manga_page_analysis.analysis.reader.regions.panels import LIGHT, paper_level

BUBBLE_MIN_AREA: Final = 2.0
"""A patch of paper is a balloon around a line when it is at least this many times the
line's box (it surrounds the line with a margin); smaller patches are gaps between glyphs."""
BUBBLE_MAX_AREA: Final = 0.2
"""A patch of paper over this share of the page is the open page (gutters, margins), not a
balloon."""
UNCOVERED_SHARE: Final = 0.15
"""A balloon whose ink lies outside the lines found in it by more than this share is read
again on its own, and enlarged when small (a column the page-wide detection missed)."""
COVER_PAD: Final = 0.3
"""A line covers the ink within this many of its thicknesses around its box (voiced marks,
ruby, punctuation beside it)."""
EMPTY_MIN_AREA: Final = 4.0
"""A balloon holding no line is at least this many squares of the page's median line
thickness (two characters with a margin round them)."""
EMPTY_MAX_AREA: Final = 0.05
"""... and at most this share of the page (a larger patch of paper is a panel's sky)."""
EMPTY_MIN_PAPER: Final = 0.6
"""... and at least this share of the area within its outline is paper (a balloon is; the
gaps between strokes of art are mostly holes)."""
EMPTY_INK: Final = (0.03, 0.35)
"""... and this share of it ink: lettering, not a blank balloon or a patch of art."""
OUTLINE_GAP_PX: Final = 1
"""Gaps this wide in a balloon's outline are closed before its paper is told from the page's:
on a small scan the outline is a pixel thin, and where its anti-aliased strokes are lighter
than ink the balloon's paper leaks into the page's (and no line is in a balloon)."""
INSIDE_BUBBLE: Final = 0.6
"""A line whose own patch is no balloon (its glyphs cut the paper around it, or it touches
the outline) is in a balloon when this share of its box lies in the balloon's box."""


BALLOON_MAX_AREA: Final = 0.08
"""A patch of paper holding lines is a balloon proper (one, or several joined), not a panel's
open paper, when it is at most this share of the page, ..."""
BALLOON_MIN_SOLIDITY: Final = 0.7
"""... and about convex: its area is at least this share of its convex hull's (open paper
winds round the figures drawn on it; balloons joined by a neck stay nearly convex)."""
WHITE: Final = 0.96
"""A pixel at least this share as bright as the paper is white: a balloon's paper, not the
light screen tone that `panels.LIGHT` also counts as paper."""
TONE_SHARE: Final = 0.3
"""A patch of paper at least this share of which is light but not white is a panel's light
screen tone (`_in_white`)."""
WHITE_MIN_SOLIDITY: Final = 0.8
"""A white patch inside light tone is a balloon of its own (a glow round a thought, a
balloon drawn without an outline) when about convex (its area at least this share of its
convex hull's) and no larger than a balloon proper (`BALLOON_MAX_AREA`): stricter than
`BALLOON_MIN_SOLIDITY`, for the white between speed lines or strokes of art is a patch too."""


def in_bubbles(lines: Sequence[TextLine], grey: NDArray[np.uint8]) -> list[TextLine]:
    """`lines`, each with the balloon (`TextLine.bubble`) it is printed in, or `None`."""
    if not lines:
        return []
    _, labels, stats = _paper_patches(grey)
    return _placed(lines, labels, stats)


def in_balloons(
    lines: Sequence[TextLine], grey: NDArray[np.uint8]
) -> tuple[list[TextLine], frozenset[int]]:
    """`in_bubbles`, and which of the patches the lines are placed in are balloons proper
    (`BALLOON_MAX_AREA`, `BALLOON_MIN_SOLIDITY`): their blocks are read one after another
    (`order.blocks.reading_order`), as a reader follows a balloon's joined lobes."""
    if not lines:
        return [], frozenset()
    _, labels, stats = _paper_patches(grey)
    placed, toned, white = _in_white(_placed(lines, labels, stats), grey, labels, stats)
    used = {line.bubble for line in placed if line.bubble is not None}
    return placed, frozenset(
        label
        for label in used
        if label in white or (label not in toned and _is_balloon(labels, stats, label))
    )


def _in_white(
    placed: Sequence[TextLine],
    grey: NDArray[np.uint8],
    labels: NDArray[np.int32],
    stats: NDArray[np.int32],
) -> tuple[list[TextLine], set[int], set[int]]:
    """`placed` (lines in the patches `labels`), where a line in a patch of light screen tone
    (`TONE_SHARE` of it light but not `WHITE`) that lies in a white balloon within it
    (`WHITE_MIN_SOLIDITY`) is placed in that balloon: a glow or an outline-less balloon on
    tone is paper to `panels.LIGHT` as the tone round it is, and its lines were one patch
    with the narration set on the tone. Also the toned patches so split (open paper, not
    balloons proper) and the white balloons' labels (numbered after `labels`' own)."""
    white_paper, white_labels, white_stats = _paper_patches(grey, level=WHITE)
    inner = _placed(placed, white_labels, white_stats)
    offset = len(stats)
    toned: dict[int, bool] = {}
    balloon: dict[int, bool] = {}
    split: set[int] = set()
    white_balloons: set[int] = set()
    result = []
    for line, white in zip(placed, inner, strict=True):
        patch, own = line.bubble, white.bubble
        if patch is not None and own is not None and white_stats[own, 4] < stats[patch, 4]:
            if patch not in toned:
                x, y, w, h = stats[patch, :4].tolist()
                area = labels[y : y + h, x : x + w] == patch
                light = int((area & (white_paper[y : y + h, x : x + w] == 0)).sum())
                toned[patch] = light >= TONE_SHARE * int(area.sum())
            if own not in balloon:
                balloon[own] = _is_balloon(
                    white_labels, white_stats, own, min_solidity=WHITE_MIN_SOLIDITY
                )
            if toned[patch] and balloon[own]:
                split.add(patch)
                white_balloons.add(offset + own)
                line = dataclasses.replace(line, bubble=offset + own)
        result.append(line)
    return result, split, white_balloons


def _is_balloon(
    labels: NDArray[np.int32],
    stats: NDArray[np.int32],
    label: int,
    *,
    min_solidity: float = BALLOON_MIN_SOLIDITY,
) -> bool:
    """The patch `label` is small (`BALLOON_MAX_AREA`) and about convex once its holes (the
    lettering) are filled (`min_solidity`)."""
    import cv2

    filled, outline = _filled(labels, stats, label)
    area = float(filled.sum())
    hull = float(cv2.contourArea(cv2.convexHull(np.vstack(outline))))
    return area <= BALLOON_MAX_AREA * labels.size and area >= min_solidity * hull


def _filled(
    labels: NDArray[np.int32], stats: NDArray[np.int32], label: int
) -> tuple[NDArray[np.uint8], Sequence[Any]]:
    """The patch `label` within its box (`stats`), filled within its outline (the lettering's
    holes filled: 1), and that outline."""
    import cv2

    x, y, w, h = stats[label, :4].tolist()
    patch = np.ascontiguousarray(labels[y : y + h, x : x + w] == label, dtype=np.uint8)
    outline, _ = cv2.findContours(patch, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    filled = np.zeros_like(patch)
    cv2.drawContours(filled, outline, -1, 1, thickness=cv2.FILLED)
    return filled, outline


def _placed(
    lines: Sequence[TextLine], labels: NDArray[np.int32], stats: NDArray[np.int32]
) -> list[TextLine]:
    """`lines`, each with the label of the patch of paper (`_paper_patches`) that is its
    balloon, or `None`. A line's own patch (the commonest in its box) is its balloon when its
    paper is `BUBBLE_MIN_AREA` times the line's box to `BUBBLE_MAX_AREA` of the page and its
    box holds `INSIDE_BUBBLE` of the line's (paper a line reaches well out of is art it is
    printed over). A line whose own patch is no balloon is in the innermost (smallest)
    balloon of the other lines whose box holds that share of it: a balloon inside the page's
    open paper, whose box is the whole page, not that paper."""

    areas = stats[:, 4]  # cv2.CC_STAT_AREA
    height, width = labels.shape
    page_area = height * width
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
            if BUBBLE_MIN_AREA * box_area <= areas[label] <= BUBBLE_MAX_AREA * page_area and (
                _share_inside(line, stats[label, :4].tolist()) >= INSIDE_BUBBLE
            ):
                bubble = label
        found.append(bubble)
    balloons = {label: stats[label, :4].tolist() for label in found if label is not None}
    innermost = sorted(balloons.items(), key=lambda item: item[1][2] * item[1][3])
    placed = []
    for line, bubble in zip(lines, found, strict=True):
        if bubble is None:
            bubble = next(
                (label for label, box in innermost if _share_inside(line, box) >= INSIDE_BUBBLE),
                None,
            )
        placed.append(dataclasses.replace(line, bubble=bubble))
    return placed


def uncovered_bubbles(
    lines: Sequence[TextLine], grey: NDArray[np.uint8]
) -> list[tuple[int, int, int, int]]:
    """Boxes `(x0, y0, x1, y1)` of the balloons holding lines whose ink the lines do not
    cover (more than `UNCOVERED_SHARE` of it outside them): a column was missed there."""

    paper, labels, stats = _paper_patches(grey)
    placed = in_bubbles(lines, grey)
    found = []
    for label in sorted({line.bubble for line in placed if line.bubble is not None}):
        x, y, w, h = stats[label, :4].tolist()
        if w * h > BUBBLE_MAX_AREA * grey.size:
            continue  # paper winding round the art (gutters, sky): read once is enough
        filled, _ = _filled(labels, stats, label)
        ink = (filled > 0) & (paper[y : y + h, x : x + w] == 0)
        covered = np.zeros_like(ink)
        for line in placed:
            if line.bubble == label:
                pad = COVER_PAD * line.thickness
                x0, y0 = max(0, round(line.x0 - pad - x)), max(0, round(line.y0 - pad - y))
                covered[
                    y0 : max(y0, round(line.y1 + pad - y)), x0 : max(x0, round(line.x1 + pad - x))
                ] = True
        total = int(ink.sum())
        if total and int((ink & ~covered).sum()) > UNCOVERED_SHARE * total:
            found.append((x, y, x + w, y + h))
    return found


def empty_bubbles(
    lines: Sequence[TextLine], grey: NDArray[np.uint8]
) -> list[tuple[int, int, int, int]]:
    """Boxes `(x0, y0, x1, y1)` of balloons that hold no line but ink enough to be lettering:
    a patch of paper at least `EMPTY_MIN_AREA` lines' thickness squared and at most
    `EMPTY_MAX_AREA` of the page, mostly paper within its outline (`EMPTY_MIN_PAPER`; a
    patch between strokes of art is mostly holes), and `EMPTY_INK` of it ink. The page-wide
    detection misses a whole balloon now and then; at the balloon's scale it is found."""

    if not lines:
        return []
    # The paper as it is: with gaps closed, patches between strokes of art close up and
    # look like balloons (docs/ocr.md).
    paper, labels, stats = _paper_patches(grey, closed=False)
    holding = {line.bubble for line in _placed(lines, labels, stats)}
    thickness = float(np.median([line.thickness for line in lines]))
    low_ink, high_ink = EMPTY_INK
    found = []
    for label in range(1, len(stats)):
        x, y, w, h, area = stats[label].tolist()
        if (
            label in holding
            or area < EMPTY_MIN_AREA * thickness**2
            or area > EMPTY_MAX_AREA * grey.size
            or min(w, h) < 2 * thickness
            or w * h > BUBBLE_MAX_AREA * grey.size
        ):
            continue
        filled, _ = _filled(labels, stats, label)
        inside = int(filled.sum())
        ink = int(((filled > 0) & (paper[y : y + h, x : x + w] == 0)).sum())
        if area >= EMPTY_MIN_PAPER * inside and low_ink * inside <= ink <= high_ink * inside:
            found.append((x, y, x + w, y + h))
    return found


def _paper_patches(
    grey: NDArray[np.uint8], *, closed: bool = True, level: float = LIGHT
) -> tuple[NDArray[np.uint8], NDArray[np.int32], NDArray[np.int32]]:
    """The paper mask (1: paper, at least `level` as bright as the paper), its connected
    patches' labels and their stats. `closed`: the patches are those of the paper with the
    ink grown by `OUTLINE_GAP_PX`, so that a gap that wide in an outline does not join a
    balloon to the page; the mask is the paper as it is either way."""
    import cv2

    paper = np.ascontiguousarray(grey >= level * paper_level(grey), dtype=np.uint8)
    kernel = np.ones((OUTLINE_GAP_PX + 1, OUTLINE_GAP_PX + 1), dtype=np.uint8)
    shut = cv2.erode(paper, kernel) if closed else paper
    _, labels, stats, _ = cv2.connectedComponentsWithStats(shut, connectivity=4)
    return paper, np.asarray(labels, dtype=np.int32), np.asarray(stats, dtype=np.int32)


def _share_inside(line: TextLine, box: list[int]) -> float:
    """The share of the line's box inside `box` (left, top, width, height)."""
    left, top, width, height = box
    w = max(0.0, min(line.x1, left + width) - max(line.x0, left))
    h = max(0.0, min(line.y1, top + height) - max(line.y0, top))
    return w * h / max(1.0, line.width * line.height)
