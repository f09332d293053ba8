"""Rows of lettering held apart by a rule drawn between them (diagram labels underlined by
their leader lines), on pages drawn with numpy."""

from __future__ import annotations

import numpy as np

from manga_page_analysis.analysis.reader.order.blocks import reading_order
from manga_page_analysis.analysis.reader.order.lines import TextLine
from manga_page_analysis.analysis.reader.regions.ruled_lines import ruled_apart
from manga_page_analysis.analysis.reader.text.text_filter import read_page

PAPER = 250
INK = 30


def letter_row(grey: np.ndarray, x0: int, y0: int, count: int, size: int = 20) -> None:
    """`count` glyphs `size` px square, set 3 px apart: each a box of strokes (the page's
    glyphs leave paper between them, as print does)."""
    for index in range(count):
        left = x0 + index * (size + 3)
        grey[y0 : y0 + size, left : left + size] = INK
        grey[y0 + 3 : y0 + size - 3, left + 3 : left + size - 3] = PAPER


def two_labels(*, rule: bool) -> tuple[np.ndarray, TextLine, TextLine]:
    """Two rows stacked 5 px apart (a quarter of a character, as tight as a caption's rows),
    the upper one underlined by a leader line a pixel thin, anti-aliased into two light grey
    rows of pixels, running on to the left where it points."""
    grey = np.full((200, 400), PAPER, dtype=np.uint8)
    letter_row(grey, 200, 50, 7)
    letter_row(grey, 205, 75, 6)
    if rule:
        grey[71, 120:365] = 190
        grey[72, 120:365] = 200
    upper = TextLine(198, 48, 362, 72, "マグロの照り焼き")
    lower = TextLine(203, 74, 344, 96, "タケノコの煮物")
    return grey, upper, lower


def test_a_rule_between_two_rows_holds_them_apart():
    grey, upper, lower = two_labels(rule=True)
    apart = ruled_apart(grey)
    assert apart(upper, lower)
    assert apart(lower, upper)
    blocks = reading_order([upper, lower], apart=apart)
    assert [block.text for block in blocks] == ["マグロの照り焼き", "タケノコの煮物"]


def test_rows_without_a_rule_stay_one_block():
    grey, upper, lower = two_labels(rule=False)
    apart = ruled_apart(grey)
    assert not apart(upper, lower)
    (block,) = reading_order([upper, lower], apart=apart)
    assert block.text == "マグロの照り焼きタケノコの煮物"


def test_the_page_reader_holds_underlined_labels_apart():
    grey, upper, lower = two_labels(rule=True)
    texts = [block.text for block in read_page([upper, lower], grey)]
    assert texts == ["マグロの照り焼き", "タケノコの煮物"]


def test_white_lettering_on_a_dark_ground_has_no_rule_between_its_rows():
    """Every row of pixels between the rows is dark and unbroken: not a rule."""
    grey, upper, lower = two_labels(rule=False)
    grey = (255 - grey).astype(np.uint8)
    grey[:10, :] = PAPER  # some paper elsewhere on the page, to set its level
    assert not ruled_apart(grey)(upper, lower)


def test_a_band_of_dark_art_between_rows_is_not_a_rule():
    grey, upper, lower = two_labels(rule=False)
    grey[60:68, 120:365] = INK  # as thick as a third of a character, over the glyphs' foot
    assert not ruled_apart(grey)(upper, lower)


def test_a_rule_between_two_columns_is_not_sought():
    """Rows only: a rule between columns is most often the outline between two balloons."""
    grey = np.full((300, 200), PAPER, dtype=np.uint8)
    grey[40:260, 99:101] = INK
    right = TextLine(104, 40, 124, 250, "それにしても")
    left = TextLine(76, 40, 96, 250, "私はほんとうに")
    assert not ruled_apart(grey)(right, left)
