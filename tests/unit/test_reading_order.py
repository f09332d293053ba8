"""Manga reading order of OCR lines: pure logic, boxes given directly (no OCR engine)."""

from __future__ import annotations

import dataclasses

from manga_page_analysis.analysis.reader.order.blocks import page_text, reading_order
from manga_page_analysis.analysis.reader.order.lines import TextLine, join_pieces


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


def test_a_bubble_level_with_its_neighbour_along_a_little_of_its_height_is_read_after_it():
    high_left = column(100, 100, "うえ")  # y 100..160
    low_right = column(500, 145, "した")  # level with it along 15 px of 60: a step lower
    assert page_text([low_right, high_left]).splitlines() == ["うえ", "した"]


def test_side_by_side_bubbles_level_along_a_third_of_the_shorter_are_read_right_first():
    """A reader's eye moves left to the bubble beside, though it starts lower (a name caption
    beside a balloon on its right, a stack of two balloons beside a long one)."""
    high_left = column(100, 100, "ひだり")  # y 100..190
    right = column(500, 150, "みぎ")  # level with it along 40 px of 60
    assert page_text([high_left, right]).splitlines() == ["みぎ", "ひだり"]
    long_left = column(100, 100, "ながいながいせりふ")  # y 100..370
    stack = [column(500, 40, "うえです"), column(500, 300, "したです")]  # y 40..160, 300..420
    assert page_text([long_left, *stack]).splitlines() == [
        "うえです",
        "したです",
        "ながいながいせりふ",
    ]


def test_a_margin_column_as_tall_as_the_page_is_read_after_the_blocks_beside_it():
    """A tall column level with every block on its right does not draw them into one row
    read right to left across the page: they are read top to bottom, then the column."""
    margin = column(0, 100, "れんさいちゅうのおしらせです" * 4)  # y 100..1780
    top = column(600, 130, "きょうから")  # y 130..280
    mid = column(150, 330, "すずしい")  # y 330..450, left of `top`, lower
    low = column(550, 580, "おはよう")  # y 580..700
    texts = page_text([margin, low, mid, top]).splitlines()
    assert texts == ["きょうから", "すずしい", "おはよう", "れんさいちゅうのおしらせです" * 4]


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


def test_columns_of_neighbouring_bubbles_are_not_interleaved():
    # Two bubbles side by side, most of a character apart: each reads as a unit.
    right = [column(700, 100, "はなしなさい"), column(670, 100, "ナナ！！")]
    left = [column(610, 100, "ってかいったい"), column(580, 100, "どこから！？")]
    assert page_text([*left, *right]).splitlines() == [
        "はなしなさいナナ！！",
        "ってかいったいどこから！？",
    ]


def test_a_bubble_below_does_not_take_in_the_column_above_it():
    above = column(400, 100, "それは")  # ends at y 190
    below = [column(400, 225, "マズイ！！"), column(365, 225, "ほんとに")]
    assert page_text([*below, above]).splitlines() == ["それは", "マズイ！！ほんとに"]


def test_a_title_beside_a_bubble_is_not_joined_to_it():
    title = TextLine(100, 40, 500, 110, "タイトル")  # lettering 70 px high
    bubble = row(120, 120, "こんにちは", size=30)
    assert len(reading_order([title, bubble])) == 2


def test_blocks_are_read_panel_by_panel():
    # A tall panel on the right beside two stacked on the left (panels in reading order).
    panels = [(300.0, 0.0, 600.0, 800.0), (0.0, 0.0, 290.0, 390.0), (0.0, 400.0, 290.0, 800.0)]
    right_low = column(400, 500, "したの")
    right_high = column(500, 50, "うえの")
    left_high = column(150, 60, "ひだり")
    left_low = column(150, 450, "さいご")
    lines = [left_low, right_low, left_high, right_high]
    # Without panels, rows mix the two sides.
    assert page_text(lines).splitlines() == ["うえの", "ひだり", "したの", "さいご"]
    blocks = reading_order(lines, panels)
    assert [block.text for block in blocks] == ["うえの", "したの", "ひだり", "さいご"]


def test_a_left_to_right_page_reads_each_row_left_to_right():
    lines = [row(400, 100, "second"), row(50, 100, "first"), row(60, 400, "third")]
    blocks = reading_order(lines, right_to_left=False)
    assert [block.text for block in blocks] == ["first", "second", "third"]


def test_a_block_gives_its_box_in_original_pixels_and_a_score_weighted_by_characters():
    lines = [
        TextLine(440, 100, 470, 250, "おはようござ", score=1.0),
        TextLine(400, 100, 430, 130, "す", score=0.4),
    ]
    (block,) = reading_order(lines)
    assert block.as_json(2.0, 0.5) == {
        "text": "おはようござす",
        "box": [800, 50, 940, 125],
        "vertical": True,
        "score": round((6 * 1.0 + 1 * 0.4) / 7, 3),
    }


def test_garbage_touching_the_end_of_a_name_tag_does_not_join_it():
    # A sound effect read as garbage, its box ending just before a name tag on its line.
    effect = TextLine(265, 699, 337, 734, "でP..", score=0.37)
    tag = TextLine(347, 711, 395, 735, "ホシノ", score=0.99)
    assert sorted(block.text for block in reading_order([effect, tag])) == ["でP..", "ホシノ"]
    # Read confidently, the same two pieces are one line cut in two.
    whole = [TextLine(265, 699, 337, 734, "ホシノ", 0.9), TextLine(347, 711, 395, 735, "です")]
    assert [block.text for block in reading_order(whole)] == ["ホシノです"]


def test_a_block_box_lies_inside_its_image():
    """A detector's box grows into the paper added around a tight crop (a 99x178 bubble
    gave [16, -7, 93, 163] before): the stored box is clipped to the image."""
    lines = [TextLine(16, -7, 60, 163, "ここは"), TextLine(62, -3, 103, 185, "どこ")]
    (block,) = reading_order(lines)
    assert block.as_json(size=(99, 178))["box"] == [16, 0, 99, 178]
    # Scaled back to a larger original, the box is clipped to the original's size.
    assert block.as_json(2.0, 2.0, size=(198, 356))["box"] == [32, 0, 198, 356]


def test_text_outside_the_panels_is_read_where_it_stands_among_them():
    """A header above the panels comes first, a note in the gutter above the last panel
    before it, a note down the left margin (beside them all) after everything."""
    panels = [
        (400.0, 100.0, 700.0, 400.0),
        (100.0, 100.0, 390.0, 400.0),
        (100.0, 500.0, 700.0, 800.0),
    ]
    header = row(300, 20, "header", size=40)
    first, second = column(550, 150, "みぎ"), column(250, 150, "ひだり")
    note = column(500, 420, "ちゅう", size=25)  # in the gutter, above the last panel
    last = column(500, 550, "した")
    margin = column(0, 0, "はじのおしらせをここにかく", size=60)
    blocks = reading_order([margin, last, note, second, first, header], panels)
    expected = ["header", "みぎ", "ひだり", "ちゅう", "した", "はじのおしらせをここにかく"]
    assert [block.text for block in blocks] == expected


def test_two_lines_of_a_slanted_caption_are_read_top_to_bottom():
    # A skewed scan: each line's box is as tall as its slant, so the two boxes' centres lie
    # within half a box of each other; the second line also starts further left.
    first = TextLine(162, 324, 517, 420, "時代は大きくさかのぼり、")
    second = TextLine(160, 368, 499, 461, "そこにはある男の姿が")
    assert page_text([second, first]) == "時代は大きくさかのぼり、そこにはある男の姿が"


def test_pieces_of_one_row_that_do_not_overlap_stay_in_one_row():
    # One line cut in two by the detector, the right piece a little lower: one row.
    left = TextLine(100, 100, 300, 130, "おはよう")
    right = TextLine(305, 108, 420, 138, "ございます")
    assert page_text([right, left]) == "おはようございます"


def test_a_box_wider_than_its_lettering_does_not_stretch_the_gap_it_may_bridge():
    # A note set beside a bubble's columns, its box twice as wide as its small lettering
    # (and within the size allowed for one block): the gap to it is measured in the
    # bubble's columns, and it is too wide for them.
    bubble = [column(500, 100, "これ飲んだら", size=60), column(430, 100, "停学になる", size=60)]
    note = TextLine(270, 100, 380, 400, "今も停学中だけど")  # 50 px from the bubble
    assert page_text([note, *bubble]).splitlines() == ["これ飲んだら停学になる", "今も停学中だけど"]


def test_a_column_beside_a_wider_box_of_its_bubble_still_joins_it():
    # The right column's box took in its ruby; the gap is a few pixels.
    lines = [TextLine(440, 100, 490, 250, "ございます"), column(405, 100, "ました")]
    assert len(reading_order(lines)) == 1


def test_a_lone_glyph_much_bigger_than_the_column_beside_it_is_not_of_its_block():
    # A hand-lettered label's big 裏 drawn beside a caption's column (70 px beside 40 px).
    caption = column(100, 100, "夏〜秋は単衣", size=40)
    label = TextLine(145, 130, 215, 200, "裏")
    assert page_text([caption, label]).splitlines() == ["裏", "夏〜秋は単衣"]
    # A lone character of the column's own size still joins it.
    assert page_text([caption, TextLine(150, 100, 192, 142, "と")]) == "と夏〜秋は単衣"


def test_the_blocks_of_one_balloon_are_read_one_after_another():
    # Two lobes of one balloon on the right (one under the other) and a balloon on the left,
    # level with the upper lobe: the lower lobe is read before moving left.
    upper = dataclasses.replace(column(400, 100, "あのね"), bubble=7)
    lower = dataclasses.replace(column(400, 260, "それでね"), bubble=7)
    other = dataclasses.replace(column(100, 100, "うん"), bubble=9)
    lines = [upper, lower, other]
    assert page_text(lines).splitlines() == ["あのね", "うん", "それでね"]
    read = [block.text for block in reading_order(lines, balloons={7, 9})]
    assert read == ["あのね", "それでね", "うん"]
    # Paper that is no balloon proper (a panel's open paper) does not chain its blocks.
    assert [block.text for block in reading_order(lines, balloons={9})] == [
        "あのね",
        "うん",
        "それでね",
    ]


def test_a_small_bubble_set_low_beside_a_tall_one_is_read_in_its_row():
    """A small bubble starts below the middle of each bubble of the row, but lies beside the
    tall one on the side read next: it is read after it, before the row's next bubble."""
    tall = column(500, 100, "ながいながいせりふ")  # y 100..370
    low = column(440, 300, "ねぇ")  # y 300..360, left of the tall one
    far_left = column(200, 280, "つぎ")  # level with the small one, further left
    lines = [far_left, low, tall]
    assert page_text(lines).splitlines() == ["ながいながいせりふ", "ねぇ", "つぎ"]


def test_a_bubble_set_under_one_of_the_row_starts_the_next_row():
    """Beside a tall bubble, but under another bubble of the row (across the same span): it
    is read after the row, and bubbles below it do not join the row through it."""
    tall = column(500, 100, "ながいながいせりふ")  # y 100..370
    upper = column(420, 110, "うえ")  # y 110..170
    under = column(425, 300, "した")  # y 300..360, under `upper`, reaching a little right
    lines = [under, upper, tall]
    assert page_text(lines).splitlines() == ["ながいながいせりふ", "うえ", "した"]


def test_a_sound_effect_drawn_under_a_column_does_not_continue_it():
    """Read with fair confidence and touching the column's foot, but twice as wide as the
    column: lettering of the art, not the rest of the column."""
    name = column(364, 67, "千春ちゃん")  # y 67..217
    effect = TextLine(310, 222, 388, 281, "ドキ", score=0.63)
    assert sorted(block.text for block in reading_order([name, effect])) == ["ドキ", "千春ちゃん"]


def test_a_column_of_dots_alone_joins_the_lettering_of_its_balloon_however_thin():
    # "……" set as a column of its own: its box is as thin as the dots, under half the
    # column's thickness, yet it ends the balloon's sentence. On open paper it stays apart.
    def in_balloon(line: TextLine, bubble: int | None) -> TextLine:
        return dataclasses.replace(line, bubble=bubble)

    words = column(400, 100, "誰なのかも", size=40)
    dots = TextLine(384, 105, 398, 145, "……")
    balloon = reading_order([in_balloon(words, 7), in_balloon(dots, 7)])
    assert [block.text for block in balloon] == ["誰なのかも……"]
    open_paper = reading_order([words, dots])
    assert [block.text for block in open_paper] == ["誰なのかも", "……"]


def test_two_blocks_side_by_side_whose_boxes_overlap_a_little_read_right_first():
    """Two neighbouring balloons' columns whose boxes overlap by a few pixels are still side
    by side: the right one first, though the left one starts two pixels higher."""
    left = TextLine(149, 1473, 198, 1685, "もはやとくぎね", bubble=2)
    right = TextLine(194, 1475, 237, 1712, "ここまでくると", bubble=1)
    assert page_text([left, right]).splitlines() == ["ここまでくると", "もはやとくぎね"]
