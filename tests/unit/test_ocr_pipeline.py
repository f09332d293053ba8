"""The second look at a small image adds only boxes the first look missed (no engine)."""

from __future__ import annotations

import numpy as np

from manga_page_analysis.analysis.ocr_pipeline import _new


def quad(x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype=np.float32)


def test_a_column_found_only_enlarged_is_added_beside_its_furigana():
    furigana = quad(51, 89, 74, 132)
    column = quad(17, 19, 59, 276)  # overlaps the ruby a little, as stylised lettering does
    assert _new(column, [furigana])


def test_a_box_found_again_is_not_added_twice():
    first = quad(100, 10, 130, 200)
    assert not _new(quad(102, 12, 131, 198), [first])  # the same column, a little moved
    assert not _new(quad(95, 5, 135, 260), [first])  # the same column, grown
    assert not _new(quad(100, 10, 130, 120), [first])  # part of it


def test_a_box_elsewhere_is_new():
    assert _new(quad(10, 10, 40, 200), [quad(100, 10, 130, 200)])
    assert _new(quad(10, 10, 40, 200), [])
