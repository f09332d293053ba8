"""Panels of a comic page, found from its gutters, in reading order.

A gutter is a band of light pixels crossing a whole region. The page is cut recursively (an
XY cut): rows of panels at full-width gutters, then each row into panels, and so on a few
levels deep. Where no gutter is clean, the panels are the framed pieces of ink; where art
runs off the page round panels that share their frame lines, the page is cut the same way
at its frame lines (`frame_lines`), on a copy turned to undo the scan's skew. A page with
none of these is one panel. Numpy (and OpenCV) over a greyscale array.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Final

import numpy as np
from numpy.typing import NDArray

from manga_page_analysis.analysis.reader.regions.frame_lines import skew, steps, turn, turning

LIGHT: Final = 200 / 255
"""A pixel at least this share as bright as the paper (`paper_level`) counts as paper (200 of
255 on white paper; a grey magazine scan's paper is at 220-230, not 255)."""
GUTTER_LIGHT_SHARE: Final = 0.995
"""A row (or column) is part of a gutter when at least this share of its pixels is light."""
MIN_GUTTER: Final = 0.008
"""A gutter is at least this share of the page's short side wide (thinner light bands are
the gaps between the columns of a bubble, not between panels)."""
MIN_PANEL: Final = 0.06
"""Pieces thinner than this share of the page's short side are not cut further."""
MAX_DEPTH: Final = 4
"""Cuts nest at most this deep (rows, panels, sub-rows, sub-panels)."""
PANEL_MIN_AREA: Final = 0.015
"""A framed panel (a connected piece of ink: its frame and what it holds) covers at least this
share of the page; smaller pieces are lettering and marks."""
PANEL_MAX_AREA: Final = 0.9
"""A piece of ink covering more of the page than this is art to the edges, not a panel."""
FRAMED: Final = 0.9
"""A piece of ink is a framed panel when its box's edges are at least this share ink (a
drawn frame); a blob of art is not."""
NESTED: Final = 0.8
"""A panel lying this much inside another is part of it (an inset, a balloon over a frame)."""
ROW_OVERLAP: Final = 0.15
"""Panels of a slightly skewed scan overlap their neighbours' boxes: up to this share of the
smaller one's height (or width) still leaves them in separate rows (or columns)."""

MIN_FRAMED_SPLIT: Final = 2
"""A panel cut at gutters that holds at least this many framed panels is replaced by them."""
MIN_FRAMED_COVER: Final = 0.7
"""... and when they cover at least this share of its area (a part of it left out would be
read apart from the rest)."""
MIN_OWN_CUTS: Final = 2
"""Framed panels that split both into rows and into columns are read column by column when
they make at least this many cuts between rows and none of those runs across every column
(`_own_stacks`); one such cut may be a short last row."""

LINE_SIDE: Final = 800
"""Frame lines are looked for on a copy of the page at most this many pixels on its long side
(a frame line stays a line; the cost stays small)."""
LINE_SHARE: Final = 0.8
"""A row (or column) of a region is a frame line crossing it when the grey level steps across
it (`frame_lines.steps`) along at least this share of the region (art inside a panel is
rarely straight across all of it)."""
LINE_MIN_LENGTH: Final = 0.25
"""A frame line is at least this share of the page's short side long: a short straight edge
in a small piece of the page is art or lettering."""

Box = tuple[float, float, float, float]


def find_panels(grey: NDArray[np.uint8], *, right_to_left: bool = True) -> list[Box]:
    """Panel boxes `(x0, y0, x1, y1)` in reading order; at least one (the whole page)."""
    height, width = grey.shape
    paper = paper_level(grey)
    light = grey >= LIGHT * paper
    short_side = min(height, width)
    min_gutter = max(3, round(MIN_GUTTER * short_side))
    min_panel = max(8, round(MIN_PANEL * short_side))
    panels: list[Box] = []

    # A page wider than tall is a spread: its two pages are read in turn (the right-hand
    # one first in manga order), cut at the middle, where the binding's shadow may hide the
    # gutter; then the rows of each.
    pages = [(0, 0, width, height)]
    if width > height:
        pages = [(width // 2, 0, width, height), (0, 0, width // 2, height)]
        if not right_to_left:
            pages.reverse()
    for one_page in pages:
        depth = 1 if len(pages) > 1 else 0
        found = _xy_cut(light, None, one_page, depth, min_gutter, min_panel, right_to_left)
        if len(found) > 1:
            found = _split_framed(found, light, one_page, min_panel, right_to_left)
        if len(found) <= 1:
            # No clean gutters (a skewed or noisy scan): framed panels found as the pieces
            # of ink edged all round by their frame.
            found = _framed_panels(light, one_page, min_panel, right_to_left) or found
        if len(found) == 1 and _bleeds(found[0], one_page, min_gutter):
            # Art runs off the page, round panels that share frame lines (or a scan too
            # skewed for its gutters to be straight): cut at the frame lines. A panel with
            # paper all round it is the page's only panel.
            x0, y0, x1, y1 = one_page
            found = _line_panels(grey[y0:y1, x0:x1], paper, depth, right_to_left)
            found = [(a + x0, b + y0, c + x0, d + y0) for a, b, c, d in found]
        panels += found
    return panels or [(0.0, 0.0, float(width), float(height))]


def _bleeds(panel: Box, page: tuple[int, int, int, int], min_gutter: int) -> bool:
    """True when the panel reaches an edge of the page (no gutter of paper between)."""
    margins = (panel[0] - page[0], panel[1] - page[1], page[2] - panel[2], page[3] - panel[3])
    return min(margins) < min_gutter


def _xy_cut(
    light: NDArray[np.bool_],
    lines: tuple[NDArray[np.bool_], NDArray[np.bool_]] | None,
    box: tuple[int, int, int, int],
    depth: int,
    min_gutter: int,
    min_panel: int,
    right_to_left: bool,
) -> list[Box]:
    """The panels of `box` in reading order, cut recursively at gutters or, given `lines`
    (where the grey level steps across a row, and across a column), at frame lines."""
    panels: list[Box] = []
    min_line = LINE_MIN_LENGTH * min(light.shape)

    def pieces(region: tuple[int, int, int, int], across: bool) -> list[tuple[int, int]]:
        x0, y0, x1, y1 = region
        if lines is None:
            return _pieces(light[y0:y1, x0:x1], None, across, min_gutter, min_panel)
        if (x1 - x0 if across else y1 - y0) < min_line:
            return [(0, y1 - y0 if across else x1 - x0)]  # too short for a frame line
        # Between frame lines the cut is inside a panel's frame, where a band of its art
        # left blank is no gutter: only the lines cut.
        steps = lines[0 if across else 1][y0:y1, x0:x1]
        return _pieces(light[y0:y1, x0:x1], steps, across, min_gutter, min_panel)

    def cut(region: tuple[int, int, int, int], across: bool, depth: int) -> None:
        x0, y0, x1, y1 = region
        if light[y0:y1, x0:x1].size == 0 or light[y0:y1, x0:x1].all():
            return  # blank paper: no panel here
        found = pieces(region, across)
        if len(found) <= 1:
            other = pieces(region, not across)
            if len(other) <= 1 or depth >= MAX_DEPTH:
                panels.append(_trim(light[y0:y1, x0:x1], region))
                return
            across, found = not across, other
        if not across and right_to_left:
            found.reverse()
        for start, end in found:
            child = (x0, y0 + start, x1, y0 + end) if across else (x0 + start, y0, x0 + end, y1)
            if depth >= MAX_DEPTH:
                panels.append(_trim(light[child[1] : child[3], child[0] : child[2]], child))
            else:
                cut(child, not across, depth + 1)

    cut(box, True, depth)
    return panels


def _line_panels(grey: NDArray[np.uint8], paper: int, depth: int, right_to_left: bool) -> list[Box]:
    """The panels of a page cut at its frame lines, found on a copy of the page turned to
    undo the scan's skew (and shrunk to `LINE_SIDE`); boxes in `grey`'s pixels."""
    import cv2  # rapidocr's dependency, as in ocr_pipeline

    height, width = grey.shape
    scale = min(1.0, LINE_SIDE / max(height, width))
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    small = grey
    if scale < 1:
        small = np.asarray(cv2.resize(grey, size, interpolation=cv2.INTER_AREA), dtype=np.uint8)
    angle = skew(small, paper)
    turned = turn(small, angle, paper)
    short_side = min(size)
    panels = _xy_cut(
        turned >= LIGHT * paper,
        steps(turned, paper),
        (0, 0, size[0], size[1]),
        depth,
        max(3, round(MIN_GUTTER * short_side)),
        max(8, round(MIN_PANEL * short_side)),
        right_to_left,
    )
    back = cv2.invertAffineTransform(turning(size, angle))
    found: list[Box] = []
    for x0, y0, x1, y1 in panels:
        corners = np.array([[x0, y0, 1], [x1, y0, 1], [x0, y1, 1], [x1, y1, 1]]) @ back.T
        xs, ys = corners[:, 0] / scale, corners[:, 1] / scale
        found.append(
            (
                float(max(0.0, xs.min())),
                float(max(0.0, ys.min())),
                float(min(width, xs.max())),
                float(min(height, ys.max())),
            )
        )
    return found


def _framed_panels(
    light: NDArray[np.bool_], box: tuple[int, int, int, int], min_panel: int, right_to_left: bool
) -> list[Box]:
    """The framed panels of `box` in reading order; none when there are fewer than two."""
    import cv2  # rapidocr's dependency, as in ocr_pipeline

    x0, y0, x1, y1 = box
    ink = np.ascontiguousarray(~light[y0:y1, x0:x1], dtype=np.uint8)
    count, labels, stats, _ = cv2.connectedComponentsWithStats(ink, connectivity=8)
    found: list[Box] = []
    for label, (left, top, w, h, _) in enumerate(stats[1:count].tolist(), 1):
        large = PANEL_MIN_AREA * ink.size <= w * h <= PANEL_MAX_AREA * ink.size
        if not large or min(w, h) < min_panel:
            continue
        if _framed(labels[top : top + h, left : left + w] == label):
            found.append((x0 + left, y0 + top, x0 + left + w, y0 + top + h))
    found = [a for a in found if not any(b != a and _inside_share(a, b) >= NESTED for b in found)]
    if len(found) < 2:
        return []
    return _order_boxes(found, right_to_left, rows_first=True)


def _split_framed(
    found: list[Box],
    light: NDArray[np.bool_],
    box: tuple[int, int, int, int],
    min_panel: int,
    right_to_left: bool,
) -> list[Box]:
    """`found` (cut at gutters) with each panel that holds `MIN_FRAMED_SPLIT` framed panels or
    more, covering `MIN_FRAMED_COVER` of it, replaced by them in reading order: a row whose
    gutters art or a balloon crosses is still drawn as framed panels side by side."""
    framed = _framed_panels(light, box, min_panel, right_to_left)
    if len(framed) < MIN_FRAMED_SPLIT:
        return found
    split: list[Box] = []
    for panel in found:
        inside = [piece for piece in framed if _inside_share(piece, panel) >= NESTED]
        area = max(1.0, (panel[2] - panel[0]) * (panel[3] - panel[1]))
        cover = sum((a[2] - a[0]) * (a[3] - a[1]) for a in inside) / area
        if len(inside) >= MIN_FRAMED_SPLIT and cover >= MIN_FRAMED_COVER:
            split += _order_boxes(inside, right_to_left, rows_first=True)
        else:
            split.append(panel)
    return split


def _framed(piece: NDArray[np.bool_]) -> bool:
    """True when the piece's box is edged with its ink (a frame; a skewed scan's frame may
    lean a few pixels, so the outer 2 % of each side counts)."""
    band = max(2, round(0.02 * min(piece.shape)))
    edges = (
        piece[:band].any(axis=0),
        piece[-band:].any(axis=0),
        piece[:, :band].any(axis=1),
        piece[:, -band:].any(axis=1),
    )
    return all(edge.mean() >= FRAMED for edge in edges)


def _inside_share(a: Box, b: Box) -> float:
    """The share of `a`'s area that lies inside `b`."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    return w * h / max(1.0, (a[2] - a[0]) * (a[3] - a[1]))


def _order_boxes(boxes: list[Box], right_to_left: bool, rows_first: bool) -> list[Box]:
    """Boxes in reading order: split into rows (top to bottom) where no box crosses, each
    row into columns (right to left), recursively; a tall panel beside a stack is a column."""
    if len(boxes) <= 1:
        return boxes
    if rows_first and _own_stacks(boxes):
        rows_first = False
    for rows in (rows_first, not rows_first):
        bands = _bands(boxes, 1 if rows else 0)
        if len(bands) > 1:
            if not rows and right_to_left:
                bands.reverse()
            return [box for band in bands for box in _order_boxes(band, right_to_left, not rows)]
    return sorted(boxes, key=lambda b: (b[1], -b[2] if right_to_left else b[0]))


def _own_stacks(boxes: list[Box]) -> bool:
    """True when the boxes stand in columns that are each a stack of their own: they split
    into columns, and into `MIN_OWN_CUTS` rows or more, but no cut between the rows has a
    panel above and below it in every column (a four-panel strip beside a column of
    something else, whose gutters the strip's do not continue). Rows whose cuts run across
    every column (a grid) are read first."""
    columns = _bands(boxes, 0)
    rows = _bands(boxes, 1)
    if len(columns) < 2 or len(rows) <= MIN_OWN_CUTS:
        return False
    for above, below in pairwise(rows):
        cut = (max(box[3] for box in above) + min(box[1] for box in below)) / 2
        if all(
            any(box[3] <= cut for box in column) and any(box[1] >= cut for box in column)
            for column in columns
        ):
            return False
    return True


def _bands(boxes: list[Box], axis: int) -> list[list[Box]]:
    """Boxes grouped into bands along `axis` (1: rows by y, 0: columns by x) that no box
    crosses, allowing `ROW_OVERLAP` of overlap between neighbours."""
    bands: list[list[Box]] = []
    end = -1.0
    for box in sorted(boxes, key=lambda b: b[axis]):
        start, stop = box[axis], box[axis + 2]
        if bands and start < end - ROW_OVERLAP * min(stop - start, end - start):
            bands[-1].append(box)
            end = max(end, stop)
        else:
            bands.append([box])
            end = stop
    return bands


def paper_level(grey: NDArray[np.uint8]) -> int:
    """The paper's grey level: the commonest level among the light half (255 when none)."""
    counts = np.bincount(grey.ravel(), minlength=256)[128:]
    return 128 + int(counts.argmax()) if counts.any() else 255


def _pieces(
    region: NDArray[np.bool_],
    steps: NDArray[np.bool_] | None,
    across: bool,
    min_gutter: int,
    min_panel: int,
) -> list[tuple[int, int]]:
    """Spans between gutters, or between frame lines where `steps` is given (`across`:
    gutters and lines are rows, spans are ranges of rows)."""
    if steps is not None:
        cut = steps.mean(axis=1 if across else 0) >= LINE_SHARE
    else:
        share = region.mean(axis=1 if across else 0)
        cut = np.zeros(share.shape, dtype=bool)
        for start, end in runs(share >= GUTTER_LIGHT_SHARE):
            if end - start >= min_gutter:
                cut[start:end] = True
    pieces = runs(~cut)
    # A sliver (a caption line, a stray mark) is not a panel: it joins its neighbour.
    merged: list[tuple[int, int]] = []
    for piece in pieces:
        if merged and (
            piece[1] - piece[0] < min_panel or merged[-1][1] - merged[-1][0] < min_panel
        ):
            merged[-1] = (merged[-1][0], piece[1])
        else:
            merged.append(piece)
    return merged


def runs(mask: NDArray[np.bool_]) -> list[tuple[int, int]]:
    """Maximal runs of True as (start, end) index pairs, end exclusive."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return [(int(start), int(end)) for start, end in zip(edges[::2], edges[1::2], strict=True)]


def _trim(region: NDArray[np.bool_], box: tuple[int, int, int, int]) -> Box:
    """The box shrunk to what is not paper."""
    x0, y0, _, _ = box
    rows = np.flatnonzero(~region.all(axis=1))
    cols = np.flatnonzero(~region.all(axis=0))
    if rows.size == 0:
        return (float(box[0]), float(box[1]), float(box[2]), float(box[3]))
    return (
        float(x0 + cols[0]),
        float(y0 + rows[0]),
        float(x0 + cols[-1] + 1),
        float(y0 + rows[-1] + 1),
    )
