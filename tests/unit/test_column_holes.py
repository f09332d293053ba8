"""Where a column of a block is missing (pure geometry; no OCR engine)."""

from __future__ import annotations

import numpy as np
import pytest

from manga_page_analysis.analysis.reader.order.lines import TextLine
from manga_page_analysis.analysis.reader.recognition.column_holes import (
    Edge,
    Hole,
    block_edges,
    column_holes,
)


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


def page_with_columns(*lefts: int) -> np.ndarray:
    """Open paper with columns of glyphs (ink squares 24 px, 6 px apart) at `lefts`."""
    grey = np.full((400, 600), 250, dtype=np.uint8)
    for left in lefts:
        for top in range(100, 280, 30):
            grey[top : top + 24, left : left + 24] = 30
    return grey


def lettered(left: int, text: str) -> TextLine:
    return TextLine(left - 3, 97, left + 27, 283, text)


def test_ink_beside_a_blocks_outer_column_is_an_edge_to_read_again():
    """Three columns on open paper, the right-hand one missed by the detection."""
    grey = page_with_columns(300, 330, 360)
    [edge] = block_edges([lettered(300, "いろいろ"), lettered(330, "悩んでた")], grey)
    assert edge.right
    left, top, right, bottom = edge.region
    assert left <= 327 and right >= 387  # the outer column and a column's thickness beside it
    assert (top, bottom) == (97, 284)


def test_paper_beside_a_block_is_no_edge_nor_is_a_lone_column():
    grey = page_with_columns(300, 330)
    assert block_edges([lettered(300, "いろいろ"), lettered(330, "悩んでた")], grey) == []
    assert block_edges([lettered(300, "いろいろ")], page_with_columns(300, 330)) == []


def test_a_column_found_beside_the_edge_belongs_to_the_block():
    edge = Edge((297, 97, 387, 284), outer=342, right=True, thickness=30)
    assert edge.holds(lettered(360, "悦吏子のことで"))
    assert not edge.holds(lettered(330, "悩んでた"))  # the outer column itself, found again
    assert not edge.holds(TextLine(355, 97, 387, 112, "ドキ"))  # a row, not a column
    assert not edge.holds(TextLine(355, 97, 475, 283, "ドキドキ"))  # far thicker: art


def balloon_page(*lefts: int) -> np.ndarray:
    """A page of open paper with one closed balloon (outline 3 px) holding columns of glyphs
    (ink squares 24 px, 6 px apart) at `lefts`."""
    grey = np.full((800, 1000), 250, dtype=np.uint8)
    grey[50:350, 100:103] = grey[50:350, 397:400] = 20
    grey[50:53, 100:400] = grey[347:350, 100:400] = 20
    for left in lefts:
        for top in range(100, 280, 30):
            grey[top : top + 24, left : left + 24] = 30
    return grey


def test_a_column_missing_where_it_parts_its_balloon_into_two_blocks_is_a_hole():
    # Five columns at a 30 px pitch, the middle one missed: the gap parts the balloon's
    # columns into a block of two and a block of three, neither with a hole in its pitch.
    lefts = (170, 200, 260, 290, 320)
    lines = [lettered(left, "あいうえおか") for left in lefts]
    assert column_holes(lines) == []
    [hole] = column_holes(lines, balloon_page(*lefts, 230))
    assert hole.pitch == pytest.approx(30)
    assert hole.centre == pytest.approx(242)  # the missing column's middle
    assert hole.balloon is not None
    left, top, right, bottom = hole.balloon
    assert left <= 167 and right >= 347 and top <= 97 and bottom >= 283  # round every column
    assert hole.holds(lettered(230, "かきくけこさ"))
    assert hole.crosses(lines[1]) and not hole.crosses(lines[0])


def test_columns_of_a_balloon_at_an_even_pitch_leave_no_hole():
    lefts = (170, 200, 230, 260)
    lines = [lettered(left, "あいうえおか") for left in lefts]
    assert column_holes(lines, balloon_page(*lefts)) == []


def test_a_short_column_of_a_balloon_counts_in_its_pitch():
    # "いい", a column two glyphs long, is boxed about square (no orientation): it still
    # stands in the balloon's pitch, and leaves no hole to read again.
    lefts = (140, 170, 200, 230, 260)
    lines = [lettered(left, "あいうえおか") for left in (140, 170, 200, 260)]
    short = TextLine(227, 97, 257, 140, "いい")
    assert short.orientation != "v"
    assert column_holes([*lines, short], balloon_page(*lefts)) == []


def test_ruby_whose_column_was_missed_marks_a_hole_beside_it():
    # Four columns 30 px thick and a 15 px column of kana right of where a fifth, the one it
    # annotates, was missed: the hole is a column wide, left of the ruby.
    lefts = (170, 200, 230, 260)
    lines = [lettered(left, "あいうえおか") for left in lefts]
    ruby = TextLine(320, 97, 335, 160, "さいあく")
    [hole] = column_holes([*lines, ruby], balloon_page(*lefts, 290))
    assert hole.x1 == pytest.approx(320) and hole.x0 == pytest.approx(290)
    assert hole.balloon is not None
    assert hole.holds(lettered(290, "最悪の世代"))


def test_ruby_beside_its_column_or_a_thin_column_of_marks_is_no_hole():
    lefts = (170, 200, 230, 260)
    lines = [lettered(left, "あいうえおか") for left in lefts]
    beside = TextLine(287, 97, 302, 160, "さいあく")  # right of the column at 260
    assert column_holes([*lines, beside], balloon_page(*lefts)) == []
    # A thin column ending in marks with paper on its left is a column, not ruby.
    marks = TextLine(275, 97, 290, 160, "きた！！")
    lines = [lettered(left, "あいうえおか") for left in lefts[:3]]
    assert column_holes([*lines, marks], balloon_page(*lefts[:3])) == []
