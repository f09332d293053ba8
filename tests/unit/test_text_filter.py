"""Furigana, sound effects and marks told from dialogue: pure logic on boxes and text."""

from __future__ import annotations

from manga_page_analysis.analysis.reader.order.blocks import reading_order
from manga_page_analysis.analysis.reader.order.lines import TextLine
from manga_page_analysis.analysis.reader.text.text_filter import (
    dialogue_blocks,
    dialogue_lines,
    is_furigana,
    is_kana,
    is_mark,
    is_right_to_left,
    read_page,
)


def column(x: float, y: float, text: str, size: float = 30, score: float = 1.0) -> TextLine:
    return TextLine(x, y, x + size, y + size * len(text), text, score)


def test_kana_beside_kanji_at_half_size_is_furigana_and_is_dropped():
    main = column(400, 100, "警察にも")
    ruby = TextLine(431, 100, 446, 160, "けいさつ", 0.95)  # 15 px glyphs beside 警察
    assert is_furigana(ruby, [main, ruby])
    assert dialogue_lines([main, ruby]) == [main]
    assert [block.text for block in read_page([ruby, main])] == ["警察にも"]


def test_a_kana_column_of_full_size_beside_another_is_text():
    # Glyph pitch decides: a narrow box of full-size kana is a column, not ruby.
    main = column(400, 100, "しかしいい")
    narrow = TextLine(376, 100, 394, 220, "なかなか")
    assert not is_furigana(narrow, [main, narrow])


def test_half_size_kana_beside_kanji_in_a_box_a_little_wide_is_furigana():
    # The box of six small glyphs is 0.73 of the column's thickness (over 0.7), but its
    # glyphs are half the column's pitch, and the column beside it holds kanji.
    main = TextLine(830, 769, 863, 871, "1年以上")
    ruby = TextLine(853, 791, 877, 871, "ねんいじょう", 0.79)
    assert is_furigana(ruby, [main, ruby])


def test_a_kana_column_as_wide_beside_kana_alone_is_not_taken_for_ruby():
    # The same box and pitch beside a column of kana only: no kanji for it to annotate.
    main = TextLine(830, 769, 863, 871, "もういい")
    narrow = TextLine(853, 791, 877, 871, "ねんいじょう", 0.79)
    assert not is_furigana(narrow, [main, narrow])


def test_kana_of_the_same_pitch_at_three_quarters_of_the_thickness_is_text():
    # Beside kanji, but its glyphs are the column's size: a column, not ruby.
    main = TextLine(830, 769, 863, 871, "1年以上")
    narrow = TextLine(853, 769, 877, 866, "そうだ")
    assert not is_furigana(narrow, [main, narrow])


def test_kana_ending_in_exclamation_marks_beside_a_wide_box_is_text():
    # A column read in a box that took in its neighbour too (54 px where the balloon's
    # columns are 29) makes the next column look thin and small; "！！" is never ruby.
    wide = TextLine(75, 811, 128, 916, "何か出て", 0.8)
    column_ = TextLine(53, 816, 82, 888, "きた！！", 0.98)
    assert not is_furigana(column_, [wide, column_])
    assert is_furigana(TextLine(53, 816, 82, 888, "きたぞよ", 0.98), [wide])


def test_a_narrow_column_with_another_between_it_and_a_wide_box_is_not_its_ruby():
    # ONE PIECE's balloon: おうおう, then a column read in doubt (そフィ！) whose box
    # overlaps both, then なんだか in a box drawn wide over it. Beside なんだか alone,
    # おうおう would pass for its ruby (thinner, smaller glyphs, 2 px away).
    first = TextLine(768, 176, 782, 216, "おうおう", 0.99)
    middle = TextLine(755, 174, 774, 218, "ルフィ！", 0.59)
    wide = TextLine(744, 169, 766, 224, "なんだか", 0.97)
    assert is_furigana(first, [first, wide])
    assert not is_furigana(first, [first, middle, wide])
    assert dialogue_lines([first, middle, wide]) == [first, middle, wide]


def test_kanji_is_never_furigana():
    main = column(400, 100, "東京です")
    small_kanji = TextLine(431, 100, 446, 130, "東京")
    assert not is_furigana(small_kanji, [main, small_kanji])


def test_horizontal_furigana_above_a_line_is_dropped():
    main = TextLine(100, 120, 220, 150, "明日は")
    ruby = TextLine(100, 104, 145, 119, "あした")
    assert dialogue_lines([main, ruby]) == [main]


def test_is_kana():
    assert is_kana("けいさつ") and is_kana("ハロー") and is_kana("ー")
    assert not is_kana("東京") and not is_kana("abc") and not is_kana("…")


def test_marks_are_stray_latin_or_digits_but_not_punctuation():
    assert is_mark("16") and is_mark("E") and is_mark("０ ０")
    assert not is_mark("…") and not is_mark("！")
    assert not is_mark("１年") and not is_mark("Hi!")


def test_low_confidence_blocks_go_and_one_doubtful_column_in_a_bubble_stays():
    bubble = [column(400, 100, "しかしあたし"), column(370, 100, "なんだって", score=0.55)]
    garbage = column(100, 100, "わいわがが", score=0.5)
    blocks = dialogue_blocks(reading_order([*bubble, garbage]))
    assert [block.text for block in blocks] == ["しかしあたしなんだって"]


def test_oversized_lettering_goes_unless_read_with_confidence():
    dialogue = [column(600 - 80 * i, 100, "せりふです") for i in range(3)]
    effect = TextLine(100, 100, 190, 400, "ドドド", 0.85)  # 90 px glyphs, 3x the dialogue
    title = TextLine(100, 500, 500, 590, "タイトル", 0.99)
    texts = [block.text for block in dialogue_blocks(reading_order([*dialogue, effect, title]))]
    assert "ドドド" not in texts and "タイトル" in texts and texts.count("せりふです") == 3


def test_oversized_lettering_mostly_kanji_is_a_shout_and_stays():
    dialogue = [column(600 - 80 * i, 100, "せりふです") for i in range(3)]
    shout = TextLine(100, 100, 190, 400, "咲夜ッ！", 0.85)  # a shouted name, 3x the dialogue
    effect = TextLine(300, 100, 390, 600, "ぎ多るるるる", 0.85)  # a kanji misread in an effect
    texts = [block.text for block in dialogue_blocks(reading_order([*dialogue, shout, effect]))]
    assert "咲夜ッ！" in texts and "ぎ多るるるる" not in texts


def test_latin_read_down_a_column_is_dropped():
    assert dialogue_lines([column(100, 100, "nvnv")]) == []
    assert dialogue_lines([column(100, 100, "１年")]) != []


def test_on_a_japanese_page_a_lone_latin_letter_cannot_join_two_balloons():
    # Two balloons' columns 17 px apart (more than half a column: two blocks), and a stroke
    # read as "V" in the gap, touching both.
    right = column(328, 48, "ねェか", size=16)
    left = column(291, 48, "一度くらい", size=20)
    stray = TextLine(310, 47, 328, 65, "V", 0.9)
    assert [block.text for block in read_page([right, stray, left])] == ["ねェか", "一度くらい"]
    # A Latin word, and a letter within a line, stay.
    word = TextLine(100, 400, 220, 430, "ONE PIECE", 0.95)
    assert "ONE PIECE" in [block.text for block in read_page([right, left, word])]


def test_pages_with_japanese_read_right_to_left_and_latin_pages_left_to_right():
    assert is_right_to_left([column(0, 0, "おはよう"), TextLine(0, 0, 200, 30, "Good morning")])
    assert not is_right_to_left([TextLine(0, 0, 200, 30, "Good morning, Tokyo!")])
    assert is_right_to_left([])


def test_on_a_japanese_page_a_line_with_an_ideograph_japanese_does_not_use_is_dropped():
    # 严丰: strokes of a drawn sound effect read by the multilingual recogniser.
    dialogue = [column(400, 100, "こんな楽しい"), column(300, 100, "気分久しぶり")]
    drawn = column(100, 100, "严丰", score=0.71)
    assert [block.text for block in read_page([*dialogue, drawn])] == [
        "こんな楽しい",
        "気分久しぶり",
    ]


def test_a_chinese_page_keeps_its_simplified_ideographs():
    lines = [column(400, 100, "这是严重的问题"), column(300, 100, "丰富")]
    assert sorted(block.text for block in read_page(lines)) == ["丰富", "这是严重的问题"]


def test_on_a_japanese_page_a_tilde_is_the_wave_dash():
    lines = [column(400, 100, "どうでしょう～？"), column(300, 100, "わかるかな~？")]
    assert [block.text for block in read_page(lines)] == ["どうでしょう〜？", "わかるかな〜？"]


def test_on_an_english_page_a_tilde_stays_a_tilde():
    line = TextLine(100, 100, 400, 130, "about ~3 days", 1.0)
    assert [block.text for block in read_page([line])] == ["about ~3 days"]
