"""Where a column of a block is missing (pure geometry; no OCR engine)."""

from __future__ import annotations

import pytest

from manga_page_analysis.analysis.column_holes import Hole, column_holes
from manga_page_analysis.analysis.layout import TextLine


def column(x: float, text: str, y: float = 100) -> TextLine:
    """A column as the detector boxes tight lettering: 40 px wide, columns every 24 px (the
    padded boxes of neighbours overlap), 30 px per character."""
    return TextLine(x, y, x + 40, y + 30 * len(text), text)


def test_a_column_missing_between_two_of_a_block_leaves_a_hole_in_its_pitch():
    # The column at x 452 is missing: its neighbours' middles stand two pitches apart.
    lines = [
        column(500, "しかし"),
        column(476, "あたし"),
        column(428, "おかずに"),
        column(404, "して"),
    ]
    [hole] = column_holes(lines)
    assert hole.pitch == pytest.approx(24)
    assert (hole.x0, hole.x1) == pytest.approx((448, 496))  # between the neighbours' middles
    assert (hole.y0, hole.y1) == pytest.approx((100, 220))  # the neighbours' length


def test_columns_at_an_even_pitch_leave_no_hole():
    lines = [
        column(500, "しかし"),
        column(476, "あたし"),
        column(452, "ラーメン"),
        column(428, "を見"),
    ]
    assert column_holes(lines) == []


def test_two_columns_give_no_pitch_to_judge_by():
    assert column_holes([column(500, "しかし"), column(452, "あたし")]) == []


def test_pieces_of_one_column_count_as_one_column():
    # A column cut in two by the detector, then two more at the pitch: no hole.
    lines = [
        column(500, "しか", y=100),
        column(500, "しあ", y=165),
        column(476, "たし"),
        column(452, "なん"),
    ]
    assert column_holes(lines) == []


def test_only_a_column_in_the_middle_of_the_hole_is_the_missing_one():
    hole = Hole(448, 100, 496, 220, pitch=24)
    assert hole.holds(column(452, "ラーメンを"))  # middle 472, the hole's
    assert not hole.holds(TextLine(448, 100, 468, 220, "おかず"))  # a neighbour cut by the strip
    assert not hole.holds(TextLine(440, 100, 500, 120, "ラーメン"))  # a row, not a column
