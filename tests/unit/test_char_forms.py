"""Mainland Chinese forms of kanji written as a Japanese page prints them."""

from __future__ import annotations

import pytest

from manga_page_analysis.analysis.reader.order.lines import TextLine
from manga_page_analysis.analysis.reader.text.char_forms import (
    CHINESE_FORMS,
    japanese_forms,
    vertical_quotes,
)
from manga_page_analysis.analysis.reader.text.text_filter import read_page


def column(x: float, y: float, text: str, size: float = 30) -> TextLine:
    return TextLine(x, y, x + size, y + size * len(text), text, 0.95)


def test_a_mainland_chinese_form_is_written_in_its_japanese_form():
    assert japanese_forms("黑胡麻") == "黒胡麻"
    assert japanese_forms("德川の佛像") == "徳川の仏像"


def test_kanji_japanese_prints_as_they_are_never_change():
    # Everyday kanji, old forms a page prints on purpose (a brand's 當, a name's 澤), and
    # kanji OpenCC's Japanese table rewrites though Japanese uses them as they are.
    text = "国学会当黒横浜駅シウマイ御弁當國學澤邊未曾有凛々しい１年5個Ｃカラー"
    assert japanese_forms(text) == text


def test_on_a_japanese_page_lines_are_written_in_japanese_forms():
    lines = [column(400, 100, "黑胡麻です"), column(300, 100, "おいしい")]
    assert [block.text for block in read_page(lines)] == ["黒胡麻です", "おいしい"]


def test_a_columns_curly_quotes_are_written_as_the_marks_a_column_sets():
    assert vertical_quotes("\u201c藁人形\u201dは部下達の分身だ") == "〝藁人形〟は部下達の分身だ"
    assert vertical_quotes("「ゲーム」を") == "「ゲーム」を"


def test_quotes_change_in_a_column_of_a_japanese_page_and_not_in_a_row():
    row = TextLine(100, 600, 100 + 30 * 9, 630, "\u201cLINK\u201dのメンバー", 0.95)
    lines = [column(400, 100, "\u201c藁人形\u201dは"), column(360, 100, "部下達の分身だ"), row]
    assert [block.text for block in read_page(lines)] == [
        "〝藁人形〟は部下達の分身だ",
        "\u201cLINK\u201dのメンバー",
    ]


def test_a_chinese_page_keeps_its_forms():
    lines = [column(400, 100, "黑色的猫"), column(300, 100, "很可爱")]
    assert sorted(block.text for block in read_page(lines)) == ["很可爱", "黑色的猫"]


def _jis_level_1(char: str) -> bool:
    """In JIS X 0208's everyday kanji (level 1: Shift JIS 0x889F-0x9872)."""
    try:
        code = int.from_bytes(char.encode("cp932"), "big")
    except UnicodeEncodeError:
        return False
    return 0x889F <= code <= 0x9872


def _in(char: str, encoding: str) -> bool:
    try:
        char.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


def test_the_table_is_what_opencc_data_gives():
    opencc = pytest.importorskip("opencc")
    to_japanese, to_simplified = opencc.OpenCC("t2jp"), opencc.OpenCC("t2s")
    derived = {}
    for code in range(0x4E00, 0xA000):  # CJK Unified Ideographs
        char = chr(code)
        if not (_in(char, "gb2312") and _in(char, "cp932")) or _jis_level_1(char):
            continue
        japanese = to_japanese.convert(char)
        if japanese != char and to_simplified.convert(char) == char and _jis_level_1(japanese):
            derived[ord(char)] = ord(japanese)
    assert derived == CHINESE_FORMS
