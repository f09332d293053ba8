"""Straight edges of a scanned page, for finding its frame lines: where the grey level steps
across a row or a column, and the scan's skew, judged by how well those steps line up with
the rows and columns. Pure numpy and OpenCV over a greyscale array.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

EDGE_STEP: Final = 0.18
"""A frame line's edge: the grey level steps by at least this share of the paper's level
between the pixels either side (40 of 220 on a grey magazine scan's paper)."""
MAX_SKEW: Final = 1.5
"""A scan is turned by at most this many degrees to line its frames up with the rows."""
SKEW_STEP: Final = 0.25
"""The turns tried, in degrees."""
SKEW_RIM: Final = 0.03
"""The skew is judged without this share of the page along each edge."""
SKEW_GAIN: Final = 0.05
"""A turn is taken only when it lines the frames up better than none by this much (the sum
of the shares of the three best rows and of the three best columns)."""


def turning(size: tuple[int, int], angle: float) -> NDArray[np.float64]:
    """The 2x3 affine matrix that turns an image of `size` (width, height) by `angle`
    degrees (counter-clockwise as seen) about its centre."""
    import cv2  # rapidocr's dependency, as in ocr_pipeline

    return np.asarray(cv2.getRotationMatrix2D((size[0] / 2, size[1] / 2), angle, 1.0))


def turn(grey: NDArray[np.uint8], angle: float, paper: int) -> NDArray[np.uint8]:
    """`grey` turned by `angle` degrees about its centre, the corners filled with paper."""
    import cv2  # rapidocr's dependency, as in ocr_pipeline

    if angle == 0:
        return grey
    size = (grey.shape[1], grey.shape[0])
    turned = cv2.warpAffine(
        grey, turning(size, angle), size, flags=cv2.INTER_LINEAR, borderValue=int(paper)
    )
    return np.asarray(turned, dtype=np.uint8)


def steps(grey: NDArray[np.uint8], paper: int) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """Where the grey level steps by at least `EDGE_STEP` of the paper's level across a row
    (the edge of a horizontal line) and across a column, each widened by a pixel either
    side so that a line leaning by a pixel still lies in one row."""
    level = grey.astype(np.int16)
    step = EDGE_STEP * paper
    across_rows = np.zeros(grey.shape, dtype=bool)
    across_rows[1:-1] = np.abs(level[2:] - level[:-2]) >= step
    across_cols = np.zeros(grey.shape, dtype=bool)
    across_cols[:, 1:-1] = np.abs(level[:, 2:] - level[:, :-2]) >= step
    across_rows[1:] |= across_rows[:-1].copy()
    across_rows[:-1] |= across_rows[1:].copy()
    across_cols[:, 1:] |= across_cols[:, :-1].copy()
    across_cols[:, :-1] |= across_cols[:, 1:].copy()
    return across_rows, across_cols


def skew(grey: NDArray[np.uint8], paper: int) -> float:
    """The scan's skew in degrees: the turn (within `MAX_SKEW`) that lines its frames up
    best with the rows and columns, judged by its longest straight steps; 0 unless a turn
    does better."""
    # The page's own edges, and the paper filled into the corners of a turned copy, are
    # straight steps too: only the middle of the page is looked at.
    height, width = grey.shape
    rim_y, rim_x = round(SKEW_RIM * height) + 1, round(SKEW_RIM * width) + 1
    scores: dict[float, float] = {}
    for angle in np.arange(-MAX_SKEW, MAX_SKEW + SKEW_STEP / 2, SKEW_STEP):
        turned = turn(grey, float(angle), paper)[rim_y:-rim_y, rim_x:-rim_x]
        across_rows, across_cols = steps(turned, paper)
        scores[round(float(angle), 3)] = _top_mean(across_rows.mean(axis=1)) + _top_mean(
            across_cols.mean(axis=0)
        )
    best = max(scores, key=lambda angle: scores[angle])
    return best if scores[best] >= scores.get(0.0, 0.0) + SKEW_GAIN else 0.0


def _top_mean(shares: NDArray[np.float64]) -> float:
    return float(np.sort(shares)[-3:].mean()) if shares.size else 0.0
