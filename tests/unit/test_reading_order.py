"""Manga reading order of OCR lines: pure logic, boxes given directly (no OCR engine)."""

from __future__ import annotations

from app.analysis.layout import TextLine, join_pieces, page_text, reading_order


def column(x: float, y: float, text: str, size: float = 30) -> TextLine:
    """A vertical column of `text`, one character per `size` pixels, top left at (x, y)."""
    return TextLine(x, y, x + size, y + size * len(text), text)


def row(x: float, y: float, text: str, size: float = 28) -> TextLine:
    """A horizontal line, about half a character wide per Latin letter."""
    return TextLine(x, y, x + size * 0.55 * len(text), y + size, text)


def test_columns_of_one_bubble_read_right_to_left_and_join_without_a_space():
    lines = [column(400, 100, "ございます"), column(440, 100, "おはよう")]
    assert page_text(lines) == "おはようございます"


def test_a_column_split_in_two_boxes_is_read_top_to_bottom_before_the_next_column():
    # The detector sometimes cuts a column; the lone character below is square-ish.
    lines = [
        TextLine(405, 254, 435, 291, "た"),
        column(442, 109, "ありがとう"),
        TextLine(402, 109, 440, 250, "ございまし"),
    ]
    assert page_text(lines) == "ありがとうございました"


def test_english_lines_of_a_bubble_read_top_to_bottom_joined_by_a_space():
    lines = [row(105, 380, "for me!"), row(124, 343, "Wait")]
    assert page_text(lines) == "Wait for me!"


def test_bubbles_read_right_to_left_then_top_to_bottom():
    caption = row(333, 52, "翌朝、東京駅にて", size=33)
    right = [column(440, 346, "電車が"), column(400, 346, "来たぞ")]
    left = [row(124, 343, "Wait"), row(105, 380, "for me!")]
    bottom_right = column(434, 621, "間に合った")
    bottom_left = row(113, 640, "Made it!")
    lines = [bottom_left, *left, bottom_right, *right, caption]
    assert page_text(lines).splitlines() == [
        "翌朝、東京駅にて",
        "電車が来たぞ",
        "Wait for me!",
        "間に合った",
        "Made it!",
    ]


def test_a_bubble_starting_below_the_middle_of_its_neighbour_starts_a_new_row():
    high_left = column(100, 100, "うえ")  # y 100..160, middle 130
    low_right = column(500, 140, "した")  # starts below that middle
    assert page_text([low_right, high_left]).splitlines() == ["うえ", "した"]


def test_a_vertical_and_a_horizontal_bubble_side_by_side_stay_apart():
    vertical = column(300, 100, "はい")
    english = row(250, 100, "Yes")  # its right edge 4 px from the column
    blocks = reading_order([english, vertical])
    assert [block.text for block in blocks] == ["はい", "Yes"]
    assert [block.vertical for block in blocks] == [True, False]


def test_no_lines_no_text():
    assert page_text([]) == ""


def test_join_pieces_puts_spaces_only_where_a_script_needs_them():
    assert join_pieces(["東京", "です"]) == "東京です"
    assert join_pieces(["Good morning,", "Tokyo!"]) == "Good morning, Tokyo!"
    assert join_pieces(["ラーメン", "OK"]) == "ラーメン OK"
    assert join_pieces(["  ", "来たぞ！", ""]) == "来たぞ！"


def test_from_quad_takes_the_bounding_box_of_a_skewed_quadrilateral():
    line = TextLine.from_quad([[200, 507], [397, 512], [396, 545], [199, 540]], "x")
    assert (line.x0, line.y0, line.x1, line.y1) == (199, 507, 397, 545)
