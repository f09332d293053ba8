"""Marks the recogniser loses: two marks set upright in the last cell of a column are read
upright and added, and an image that is one piece of lettering is read (columns drawn with
PIL; a recogniser that answers as told)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from manga_page_analysis.analysis.reader.order.lines import TextLine
from manga_page_analysis.analysis.reader.recognition.column_marks import (
    as_dots,
    counted_dots,
    dash_beyond,
    dot_runs,
    dots_and_dashes,
    middle_dot,
)
from manga_page_analysis.analysis.reader.recognition.marks import (
    ellipsis,
    lone_marks,
    read_marks,
    tail_pair,
    upright_pair,
)
from manga_page_analysis.analysis.reader.recognition.wave_dashes import wave_at_ends
from manga_page_analysis.analysis.reader.text.text_filter import read_page

CELL = 24
"""A character's cell, in pixels: the column is this thick."""


def column(last: str, cells: int = 4) -> np.ndarray:
    """A column of `cells` cells of wide strokes (a kana's ink spans its cell) and a last cell
    drawn as `last`: "pair" (！！ upright: two bars, each with its dot below), "one" (a single
    bar and dot) or "wide" (a kana). BGR, white paper, 8 px of paper around the column."""
    height = 16 + CELL * (cells + 1)
    image = Image.new("RGB", (CELL + 16, height), "white")
    draw = ImageDraw.Draw(image)
    for index in range(cells + 1):
        top = 8 + CELL * index + 2
        if index < cells or last == "wide":
            draw.rectangle((11, top, 8 + CELL - 3, top + 3), fill="black")
            draw.rectangle((11, top + 8, 8 + CELL - 3, top + 11), fill="black")
            draw.rectangle((18, top, 21, top + CELL - 6), fill="black")
            continue
        bars = (14, 24) if last == "pair" else (19,)
        for left in bars:
            draw.rectangle((left, top, left + 3, top + 12), fill="black")
            draw.rectangle((left, top + 15, left + 3, top + 18), fill="black")
    return np.asarray(image)[:, :, ::-1].copy()


def box_of(image: np.ndarray) -> np.ndarray:
    """The column's box, as the detector gives it: a little paper around the ink."""
    height = image.shape[0]
    return np.array([[6, 6], [6 + CELL + 4, 6], [6 + CELL + 4, height - 6], [6, height - 6]], float)


def test_the_last_cell_of_a_column_holding_two_upright_marks_is_found():
    image = column("pair")
    cell = tail_pair(image.mean(axis=2), box_of(image))
    assert cell is not None
    x0, y0, x1, y1 = cell
    last_cell_top = 8 + CELL * 4
    assert last_cell_top <= y0 <= last_cell_top + 2  # the dots' own gap did not end the cell
    assert last_cell_top + 18 < y1 <= image.shape[0] - 6
    assert (x0, x1) == (6, 6 + CELL + 4)


def test_a_column_ending_in_a_kana_or_a_single_mark_has_no_pair():
    for last in ("wide", "one"):
        image = column(last)
        assert tail_pair(image.mean(axis=2), box_of(image)) is None


def test_a_confident_pair_of_marks_read_upright_is_added_full_width():
    assert upright_pair("!!", 0.99) == "！！"
    assert upright_pair("!?", 0.95) == "！？"
    assert upright_pair("！！", 0.95) == "！！"


def test_a_doubtful_reading_a_single_mark_or_a_letter_adds_nothing():
    assert upright_pair("!!", 0.77) == "！！"  # a shout's bold pair
    assert upright_pair("!!", 0.6) == ""
    assert upright_pair("!", 0.99) == ""  # set as one full-width glyph: read in the column
    assert upright_pair("い", 0.99) == ""
    assert upright_pair("11", 0.99) == ""
    assert upright_pair("", 0.0) == ""


@dataclass
class Read:
    txts: tuple[str, ...]
    scores: tuple[float, ...]


class Recogniser:
    """Reads every crop as one reading, and records the crops' sizes."""

    def __init__(self, reading: str, score: float) -> None:
        self.reading, self.score = reading, score
        self.sizes: list[tuple[int, int]] = []

    def __call__(self, request: Any) -> Read:
        self.sizes += [crop.shape[:2] for crop in request.img]
        count = len(request.img)
        return Read((self.reading,) * count, (self.score,) * count)


def test_a_column_that_lost_its_upright_pair_gets_it_back():
    image = column("pair")
    recogniser = Recogniser("!!", 0.99)
    assert read_marks(recogniser, image, [box_of(image)], ["ないわよ"]) == ["ないわよ！！"]
    assert len(recogniser.sizes) == 1
    height, width = recogniser.sizes[0]
    assert height < CELL < width + 8  # the last cell alone, upright (not laid on its side)


def test_a_column_read_with_its_mark_or_ending_in_a_kana_is_not_read_again():
    recogniser = Recogniser("!!", 0.99)
    pair, kana = column("pair"), column("wide")
    assert read_marks(recogniser, pair, [box_of(pair)], ["ないわよ！"]) == ["ないわよ！"]
    assert read_marks(recogniser, kana, [box_of(kana)], ["ないわよ"]) == ["ないわよ"]
    assert recogniser.sizes == []


def test_no_lines_no_reads():
    assert read_marks(Recogniser("", 0.0), column("wide"), [], []) == []


def test_an_image_that_is_one_piece_of_lettering_is_read_however_doubtful():
    grey = np.full((313, 69), 255, dtype=np.uint8)
    effect = TextLine(0, 0, 69, 313, "ピンポーーン", 0.49)
    assert [block.text for block in read_page([effect], grey)] == ["ピンポーーン"]


def test_doubtful_lettering_on_a_page_is_still_dropped():
    grey = np.full((1170, 827), 255, dtype=np.uint8)
    effect = TextLine(400, 300, 469, 613, "ピンポーーン", 0.49)
    assert read_page([effect], grey) == []


class Engine:
    """rapidocr's engine, as `lone_marks` uses it: its recogniser."""

    def __init__(self, recogniser: Recogniser) -> None:
        self.recogniser = recogniser

    def _load_rec_model(self) -> Recogniser:
        return self.recogniser


def page_with_balloon(draw_inside: str) -> tuple[Image.Image, list[TextLine]]:
    """A page with a bubble of two columns (the page's lines, 24 px thick) and a small round
    balloon holding `draw_inside`: "dots" (six dots down a column), "bang" (！: a bar and its
    dot), "grid" (a screentone's grid of dots) or "word" (a character's worth of strokes)."""
    page = Image.new("RGB", (600, 400), "white")
    draw = ImageDraw.Draw(page)
    draw.ellipse((20, 20, 200, 300), outline="black", width=3)
    for left in (80, 120):
        draw.rectangle((left, 60, left + 20, 250), fill="black")
    lines = [
        TextLine(78, 58, 102, 252, "ないわよ", 0.99),
        TextLine(118, 58, 142, 252, "何よ", 0.99),
    ]
    draw.ellipse((300, 100, 380, 220), outline="black", width=3)
    if draw_inside == "dots":
        for top in range(130, 190, 10):
            draw.rectangle((338, top, 341, top + 3), fill="black")
    elif draw_inside == "bang":
        draw.rectangle((338, 145, 341, 160), fill="black")
        draw.rectangle((338, 164, 341, 167), fill="black")
    elif draw_inside == "grid":
        for top in range(130, 190, 10):
            for left in (325, 338, 351):
                draw.rectangle((left, top, left + 3, top + 3), fill="black")
    else:
        draw.rectangle((328, 150, 352, 153), fill="black")
        draw.rectangle((338, 140, 341, 170), fill="black")
    return page, lines


def grey_of(page: Image.Image) -> np.ndarray:
    return np.asarray(page.convert("L"))


def test_a_balloon_of_dots_alone_is_an_ellipsis_of_as_many_dots():
    page, lines = page_with_balloon("dots")
    recogniser = Recogniser("", 0.0)
    found = lone_marks(Engine(recogniser), page, lines, grey_of(page))
    assert [line.text for line in found] == ["……"]
    (line,) = found
    assert (line.x0, line.x1) == (338, 342)
    assert 125 <= line.y0 <= 130 and 180 <= line.y1 <= 190
    assert recogniser.sizes == []  # counted, not recognised


def test_a_lone_mark_in_a_balloon_is_read_upright():
    page, lines = page_with_balloon("bang")
    recogniser = Recogniser("!", 0.9)
    assert [line.text for line in lone_marks(Engine(recogniser), page, lines, grey_of(page))] == [
        "！"
    ]
    (size,) = recogniser.sizes
    assert size[0] == size[1]  # a square cell: not laid on its side


def test_a_lone_mark_read_plainly_but_unsurely_is_kept_on_the_page():
    # The recogniser reads a "！" alone in its cell at 0.55: its place is the evidence, and it
    # is scored as a counted ellipsis, so that the block bar (0.65) does not drop it.
    page, lines = page_with_balloon("bang")
    [mark] = lone_marks(Engine(Recogniser("!", 0.55)), page, lines, grey_of(page))
    assert mark.text == "！" and mark.score >= 0.9
    assert "！" in [block.text for block in read_page([*lines, mark], grey_of(page))]


def test_a_lone_cell_read_as_a_letter_or_doubtfully_is_not_a_mark():
    for reading, score in (("l", 0.95), ("!", 0.3)):
        page, lines = page_with_balloon("bang")
        assert lone_marks(Engine(Recogniser(reading, score)), page, lines, grey_of(page)) == []


def test_a_screentone_a_character_or_a_balloon_with_lines_is_not_a_lone_mark():
    for inside in ("grid", "word"):
        page, lines = page_with_balloon(inside)
        recogniser = Recogniser("!", 0.99)
        assert lone_marks(Engine(recogniser), page, lines, grey_of(page)) == []
    page, lines = page_with_balloon("dots")
    in_the_balloon = TextLine(330, 125, 350, 195, "……", 0.9)
    found = lone_marks(Engine(Recogniser("", 0.0)), page, [*lines, in_the_balloon], grey_of(page))
    assert found == []


def test_dots_are_written_as_the_print_groups_them():
    assert ellipsis(6) == "……"
    assert ellipsis(8) == "‥‥‥‥"
    assert ellipsis(2) == "‥"
    assert ellipsis(5) == "…‥"
    assert ellipsis(7) == "…‥‥"


# Leader dots and long dashes down a column (column_marks): columns drawn with PIL, 30 px
# thick, on a page of paper; a kana is a cross of strokes across its cell.
PITCH = 30


def page_with(marks: Any, size: tuple[int, int] = (120, 400)) -> np.ndarray:
    """A grey page (0-255) with `marks(draw)` drawn on it in black."""
    image = Image.new("L", size, 255)
    marks(ImageDraw.Draw(image))
    return np.asarray(image).astype(np.float64)


def kana(draw: ImageDraw.ImageDraw, top: int, left: int = 40) -> None:
    draw.rectangle((left + 4, top + 6, left + PITCH - 4, top + 9), fill=0)
    draw.rectangle((left + 13, top + 2, left + 16, top + PITCH - 3), fill=0)


def dots(draw: ImageDraw.ImageDraw, top: int, count: int, left: int = 40) -> None:
    for index in range(count):
        y = top + 4 + 7 * index
        draw.ellipse((left + 13, y, left + 17, y + 4), fill=0)


def quad(x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype=np.float32)


def test_leader_dots_down_a_column_are_counted_and_written_as_the_print_groups_them():
    def marks(draw: ImageDraw.ImageDraw) -> None:
        kana(draw, 20)
        dots(draw, 50, 4)
        kana(draw, 82)

    grey = page_with(marks)
    box = quad(40, 18, 70, 114)
    assert dot_runs(grey, box) == [4]
    assert counted_dots(grey, box, "う……ん") == "う‥‥ん"  # six dots read, four printed
    assert counted_dots(grey, box, "う・ん") == "う‥‥ん"


def test_nine_dots_are_three_ellipses_and_a_box_that_cuts_the_run_is_followed_past_its_end():
    grey = page_with(lambda draw: dots(draw, 40, 9))
    assert counted_dots(grey, quad(40, 40, 70, 104), "……") == "………"
    assert counted_dots(grey, quad(40, 40, 70, 80), "……") == "………"  # ends mid-run


def test_dots_are_rewritten_only_where_the_text_has_as_many_runs():
    def marks(draw: ImageDraw.ImageDraw) -> None:
        kana(draw, 20)
        dots(draw, 50, 2)
        kana(draw, 70)

    grey = page_with(marks)
    box = quad(40, 18, 70, 102)
    assert counted_dots(grey, box, "あいう") == "あいう"  # no run read: none added
    assert counted_dots(grey, box, "あ…い…") == "あ…い…"  # two read, one printed


def test_leaders_at_a_columns_end_cut_by_its_box_are_added_when_the_text_lacks_them():
    def marks(draw: ImageDraw.ImageDraw) -> None:
        kana(draw, 20)
        kana(draw, 50)
        dots(draw, 80, 3)  # dots at 84 to 102

    grey = page_with(marks)
    assert counted_dots(grey, quad(40, 18, 70, 92), "もし") == "もし…"  # the box cuts the run
    assert counted_dots(grey, quad(40, 18, 70, 110), "もし") == "もし"  # the box holds it: read
    assert counted_dots(grey, quad(40, 18, 70, 92), "もし…") == "もし…"


def test_specks_beside_the_axis_and_marks_at_a_cells_corner_are_not_dots():
    def marks(draw: ImageDraw.ImageDraw) -> None:
        kana(draw, 20)
        for y in (24, 31, 38):  # voiced marks at the cell's top right
            draw.ellipse((64, y, 67, y + 3), fill=0)
        dots(draw, 50, 3)
        draw.rectangle((44, 62, 46, 64), fill=0)  # a speck of art beside the dots
        # A second column ending in the dot of "？", with a speck of dust on its axis.
        draw.rectangle((104, 54, 105, 54), fill=0)
        draw.ellipse((103, 58, 106, 61), fill=0)

    grey = page_with(marks)
    assert dot_runs(grey, quad(40, 18, 70, 80)) == [3]
    assert dot_runs(grey, quad(90, 18, 120, 64)) == []  # a dot and a speck are no run


def test_dots_are_not_counted_on_a_dark_ground():
    def marks(draw: ImageDraw.ImageDraw) -> None:
        draw.rectangle((40, 0, 70, 120), fill=60)
        dots(draw, 20, 4)

    assert dot_runs(page_with(marks), quad(40, 10, 70, 60)) == []


def test_a_long_dash_below_a_column_is_taken_in_one_per_cell():
    def marks(draw: ImageDraw.ImageDraw) -> None:
        for cell in range(3):
            kana(draw, 20 + PITCH * cell)
        draw.rectangle((54, 112, 55, 166), fill=0)  # two cells of a thin stroke

    grey = page_with(marks)
    box = quad(40, 18, 70, 110)
    grown, text = dash_beyond(grey, box, "ある人と")
    assert text == "ある人と――"
    assert grown[:, 1].min() == 18 and 166 <= grown[:, 1].max() <= 168
    # The part inside the box read as a long vowel: it stays one, drawn out.
    assert dash_beyond(grey, box, "きもちいー")[1] == "きもちいーー"
    assert dash_beyond(grey, box, "ある人と一")[1] == "ある人と――"


def test_a_dash_that_runs_into_art_below_it_is_still_a_dash_but_not_one_with_art_beside_it():
    def column_over(art_top: int) -> np.ndarray:
        def marks(draw: ImageDraw.ImageDraw) -> None:
            for cell in range(3):
                kana(draw, 20 + PITCH * cell)
            draw.rectangle((54, 112, 55, 160), fill=0)
            draw.line((58, art_top, 118, art_top - 12), fill=0, width=2)  # a head's outline

        return page_with(marks)

    box = quad(40, 18, 70, 110)
    assert dash_beyond(column_over(156), box, "柱")[1] == "柱――"  # touches its end
    assert dash_beyond(column_over(128), box, "柱")[1] == "柱"  # beside its middle


def test_a_long_dash_above_a_column_is_taken_in_before_it():
    def marks(draw: ImageDraw.ImageDraw) -> None:
        draw.rectangle((54, 20, 55, 74), fill=0)
        for cell in range(2):
            kana(draw, 80 + PITCH * cell)

    grey = page_with(marks)
    grown, text = dash_beyond(grey, quad(40, 78, 70, 140), "あれ")
    assert text == "――あれ"
    assert grown[:, 1].min() <= 20


def test_a_frame_line_speed_lines_art_or_another_line_below_a_column_are_no_dash():
    def column_and(extra: Any) -> np.ndarray:
        def marks(draw: ImageDraw.ImageDraw) -> None:
            for cell in range(3):
                kana(draw, 20 + PITCH * cell)
            extra(draw)

        return page_with(marks)

    box = quad(40, 18, 70, 110)
    frame_line = column_and(lambda draw: draw.rectangle((54, 112, 55, 399), fill=0))
    speed_lines = column_and(
        lambda draw: [draw.rectangle((x, 112, x + 1, 166), fill=0) for x in (38, 54, 70)]
    )
    filled = column_and(lambda draw: draw.rectangle((48, 112, 62, 166), fill=0))
    curve = column_and(lambda draw: draw.arc((30, 100, 80, 180), 0, 90, fill=0, width=2))
    short = column_and(lambda draw: draw.rectangle((54, 112, 55, 128), fill=0))  # い's stroke
    for grey in (frame_line, speed_lines, filled, curve, short):
        assert dash_beyond(grey, box, "あいう") == (box, "あいう")
    stroke = column_and(lambda draw: draw.rectangle((54, 112, 55, 166), fill=0))
    other = quad(40, 112, 70, 170)  # the stroke lies in another line's box: it is that one's
    grown, text = dash_beyond(stroke, box, "あいう", [other])
    assert text == "あいう" and (grown == box).all()


def test_columns_get_dots_counted_and_dashes_taken_in_and_rows_are_left_alone():
    def marks(draw: ImageDraw.ImageDraw) -> None:
        kana(draw, 20)
        dots(draw, 50, 4)
        draw.rectangle((54, 84, 55, 140), fill=0)

    grey = page_with(marks)
    source = np.repeat(grey.astype(np.uint8)[:, :, np.newaxis], 3, axis=2)
    column_box, row_box = quad(40, 18, 70, 82), quad(0, 300, 110, 330)
    boxes, texts = dots_and_dashes(source, [column_box, row_box], ["あ……", "あ……"])
    assert texts == ["あ‥‥――", "あ……"]
    assert boxes[0][:, 1].max() >= 140 and (boxes[1] == row_box).all()


def wave(draw: ImageDraw.ImageDraw, top: int, length: int, swing: float = 3.0) -> None:
    """A wave dash stretched down the column's axis: a line swinging `swing` px either side,
    a period every 18 px."""
    points = [(55 + swing * np.sin(2 * np.pi * y / 18), top + y) for y in range(length)]
    draw.line(points, fill=0, width=3)


def test_a_wave_dash_stretched_over_a_columns_first_cells_is_read_one_per_cell():
    def marks(draw: ImageDraw.ImageDraw) -> None:
        wave(draw, 22, 70)  # the wave over the first cells, then a kana
        kana(draw, 100)

    grey = page_with(marks)
    box = quad(40, 18, 70, 134)
    assert wave_at_ends(grey, box, "っ") == "〜〜〜っ"
    assert wave_at_ends(grey, box, "〜っ") == "〜っ"  # read already


def test_a_wave_dash_over_a_columns_last_cells_is_added_after_it():
    def marks(draw: ImageDraw.ImageDraw) -> None:
        kana(draw, 20)
        wave(draw, 56, 50)

    assert wave_at_ends(page_with(marks), quad(40, 18, 70, 110), "よ") == "よ〜〜"


def test_a_straight_dash_a_short_curl_or_a_wave_beside_other_ink_is_no_wave_dash():
    def column_with(extra: Any) -> np.ndarray:
        def marks(draw: ImageDraw.ImageDraw) -> None:
            extra(draw)
            kana(draw, 100)

        return page_with(marks)

    box = quad(40, 18, 70, 134)
    straight = column_with(lambda draw: draw.rectangle((54, 22, 56, 92), fill=0))
    curl = column_with(lambda draw: wave(draw, 22, 30))  # a cell's length: read, not looked for
    lazy = column_with(lambda draw: wave(draw, 22, 70, swing=0.4))  # no real swing
    flanked = column_with(
        lambda draw: (wave(draw, 22, 70), draw.rectangle((44, 40, 50, 46), fill=0))
    )
    for grey in (straight, curl, lazy, flanked):
        assert wave_at_ends(grey, box, "っ") == "っ"


def test_a_lone_full_stop_read_down_a_column_is_the_middle_dot():
    assert middle_dot("あと２.３回かァ…") == "あと２・３回かァ…"
    assert middle_dot("ジョン．スミス") == "ジョン・スミス"
    assert middle_dot("あ..い") == "あ..い"  # a run of dots: counted, not a middle dot
    assert middle_dot("終わり.") == "終わり."  # not between two characters


def test_a_column_read_as_round_glyphs_alone_is_leader_dots():
    assert as_dots("000000000") == "………"  # nine bold dots, one "0" each
    assert as_dots("cccccc") == "……"
    assert as_dots("o。o。") == "‥‥"


def test_a_word_or_a_short_reading_is_not_taken_for_dots():
    for text in ("00", "o", "100", "cool", "ここ", "0時"):
        assert as_dots(text) == text
