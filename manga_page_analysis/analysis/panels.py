"""Panels of a comic page, found from its gutters, in reading order.

A gutter is a band of light pixels crossing a whole region. The page is cut recursively (an
XY cut): rows of panels at full-width gutters, then each row into panels, and so on a few
levels deep. A page with no clear gutters is one panel. Pure numpy over a greyscale array.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

LIGHT: Final = 200
"""Grey level (0..255) above which a pixel counts as paper."""
GUTTER_LIGHT_SHARE: Final = 0.995
"""A row (or column) is part of a gutter when at least this share of its pixels is light."""
MIN_GUTTER: Final = 0.008
"""A gutter is at least this share of the page's short side wide (thinner light bands are
the gaps between the columns of a bubble, not between panels)."""
MIN_PANEL: Final = 0.06
"""Pieces thinner than this share of the page's short side are not cut further."""
MAX_DEPTH: Final = 4
"""Cuts nest at most this deep (rows, panels, sub-rows, sub-panels)."""

Box = tuple[float, float, float, float]


def find_panels(grey: NDArray[np.uint8], *, right_to_left: bool = True) -> list[Box]:
    """Panel boxes `(x0, y0, x1, y1)` in reading order; at least one (the whole page)."""
    height, width = grey.shape
    light = grey >= LIGHT
    short_side = min(height, width)
    min_gutter = max(3, round(MIN_GUTTER * short_side))
    min_panel = max(8, round(MIN_PANEL * short_side))
    panels: list[Box] = []

    def cut(box: tuple[int, int, int, int], across: bool, depth: int) -> None:
        x0, y0, x1, y1 = box
        region = light[y0:y1, x0:x1]
        if region.size == 0 or region.all():
            return  # blank paper: no panel here
        pieces = _pieces(region, across, min_gutter, min_panel)
        if len(pieces) <= 1:
            other = _pieces(region, not across, min_gutter, min_panel)
            if len(other) <= 1 or depth >= MAX_DEPTH:
                panels.append(_trim(region, box))
                return
            across, pieces = not across, other
        if not across and right_to_left:
            pieces.reverse()
        for start, end in pieces:
            child = (x0, y0 + start, x1, y0 + end) if across else (x0 + start, y0, x0 + end, y1)
            if depth >= MAX_DEPTH:
                panels.append(_trim(light[child[1] : child[3], child[0] : child[2]], child))
            else:
                cut(child, not across, depth + 1)

    # A page wider than tall is a spread: its pages first (cut down), then their rows.
    cut((0, 0, width, height), width <= height, 0)
    return panels or [(0.0, 0.0, float(width), float(height))]


def _pieces(
    region: NDArray[np.bool_], across: bool, min_gutter: int, min_panel: int
) -> list[tuple[int, int]]:
    """Spans between gutters (`across`: gutters are rows, spans are ranges of rows)."""
    share = region.mean(axis=1 if across else 0)
    cut = np.zeros(share.shape, dtype=bool)
    for start, end in _runs(share >= GUTTER_LIGHT_SHARE):
        if end - start >= min_gutter:
            cut[start:end] = True
    pieces = _runs(~cut)
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


def _runs(mask: NDArray[np.bool_]) -> list[tuple[int, int]]:
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
