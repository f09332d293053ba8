"""A column of panels the panel finder missed, put back from the blocks beside the found one."""

from __future__ import annotations

from manga_page_analysis.analysis.reader.order.blocks import reading_order
from manga_page_analysis.analysis.reader.order.lines import TextLine
from manga_page_analysis.analysis.reader.order.missing_column import with_missing_column

# The left-hand strip of two four-panel strips: its three lower panels were found.
FOUND = [
    (100.0, 560.0, 690.0, 1010.0),
    (100.0, 1020.0, 690.0, 1450.0),
    (100.0, 1460.0, 690.0, 1900.0),
]


def column(x: float, y: float, text: str, size: float = 30) -> TextLine:
    return TextLine(x, y, x + size, y + size * len(text), text)


def test_blocks_beside_a_found_column_are_read_as_a_column_before_it():
    lines = [
        column(300, 40, "だい"),  # the strip title, across the top: not beside the column
        column(1000, 150, "みぎいち"),
        column(1000, 600, "みぎに"),
        column(1000, 1050, "みぎさん"),
        column(1000, 1500, "みぎよん"),
        column(400, 150, "ひだりいち"),  # the left strip's first panel, not found either
        column(400, 600, "ひだりに"),
        column(400, 1050, "ひだりさん"),
        column(400, 1500, "ひだりよん"),
    ]
    texts = [block.text for block in reading_order(lines, FOUND)]
    assert texts == [
        "だい",
        "みぎいち",
        "みぎに",
        "みぎさん",
        "みぎよん",
        "ひだりいち",
        "ひだりに",
        "ひだりさん",
        "ひだりよん",
    ]


def test_one_or_two_blocks_beside_a_column_or_panels_in_a_row_are_left_as_they_are():
    beside = [(1000.0, 150.0, 1030.0, 300.0), (1000.0, 600.0, 1030.0, 700.0)]
    assert with_missing_column(FOUND, beside) == FOUND
    row = [(700.0, 0.0, 1000.0, 500.0), (100.0, 0.0, 690.0, 500.0)]
    three = [*beside, (1000.0, 300.0, 1030.0, 400.0)]
    assert with_missing_column(row, three) == row


def test_the_column_put_back_spans_its_blocks_and_ends_at_the_found_foot():
    blocks = [(1000.0, 150.0, 1030.0, 300.0), (1100.0, 600.0, 1130.0, 700.0)]
    blocks += [(1000.0, 1500.0, 1030.0, 1600.0), (1000.0, 1950.0, 1200.0, 2000.0)]  # a foot caption
    column = with_missing_column(FOUND, blocks)[0]
    assert column == (690.0, 150.0, 1130.0, 1900.0)
    left_to_right = with_missing_column(
        [(700.0, 560.0, 1290.0, 1010.0), (700.0, 1020.0, 1290.0, 1450.0)],
        [
            (100.0, 150.0, 130.0, 300.0),
            (100.0, 600.0, 130.0, 700.0),
            (200.0, 1100.0, 230.0, 1200.0),
        ],
        right_to_left=False,
    )[0]
    assert left_to_right == (100.0, 150.0, 700.0, 1450.0)


def test_a_caption_under_a_panel_that_its_box_merely_touches_is_read_after_it():
    panels = [(100.0, 100.0, 500.0, 600.0)]
    caption = TextLine(600, 595, 800, 640, "しょうかい")  # beside the panel for 5 px of 45
    inside = column(300, 200, "なか")
    texts = [block.text for block in reading_order([caption, inside], panels)]
    assert texts == ["なか", "しょうかい"]


def test_blocks_beside_a_found_stack_on_the_side_read_later_are_read_after_it():
    # A stack of two panels on the right, a tall panel on the left the finder missed (art
    # runs off the page), and a row under both: the stack, then the tall panel, then the row.
    stack = [(340.0, 80.0, 750.0, 425.0), (340.0, 435.0, 750.0, 665.0)]
    foot = (360.0, 675.0, 750.0, 1130.0)
    lines = [
        column(650, 90, "みぎうえ"),
        column(700, 450, "みぎした"),
        column(240, 85, "ひだりいち"),
        column(60, 135, "ひだりに"),
        column(30, 500, "ひだりさん"),
        column(620, 700, "したのだん"),
    ]
    texts = [block.text for block in reading_order(lines, [*stack, foot])]
    assert texts == ["みぎうえ", "みぎした", "ひだりいち", "ひだりに", "ひだりさん", "したのだん"]
    boxes = [(240.0, 85.0, 270.0, 235.0), (60.0, 135.0, 90.0, 255.0), (30.0, 500.0, 60.0, 650.0)]
    put_back = with_missing_column([*stack, foot], boxes)
    assert put_back == [*stack, (30.0, 85.0, 340.0, 650.0), foot]
