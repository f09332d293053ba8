"""Short blocks judged as lettering or art: strokes, paper round them, size, confidence and
a lone kanji (pages drawn with numpy: bars for strokes, hatching for art)."""

from __future__ import annotations

import numpy as np

from manga_page_analysis.analysis.reader.order.lines import Block, TextLine
from manga_page_analysis.analysis.reader.text.lettering import (
    art_score,
    judged,
    lone_ideograph,
    oversize,
    paper_around,
    stroke_oddness,
    without_art,
)
from manga_page_analysis.analysis.reader.text.thresholds import DEFAULT_THRESHOLDS


def page() -> np.ndarray:
    """800x800 paper; its lower half is art (dark hatching, every other pixel column)."""
    grey = np.full((800, 800), 255, np.uint8)
    grey[400:, :][:, ::2] = 40
    return grey


def lettering(grey: np.ndarray, x: int, y: int, size: int, stroke: int, cells: int) -> None:
    """`cells` characters down a column at (x, y): each a box of strokes `stroke` wide."""
    for cell in range(cells):
        top = y + cell * size
        grey[top + 2 : top + 2 + stroke, x + 2 : x + size - 2] = 0
        grey[top + size // 2 : top + size // 2 + stroke, x + 2 : x + size - 2] = 0
        grey[top + 2 : top + size - 2, x + size // 2 : x + size // 2 + stroke] = 0


def block(text: str, x: int, y: int, size: int, cells: int, score: float = 1.0) -> Block:
    line = TextLine(x, y, x + size, y + size * cells, text, score)
    return Block((line,), vertical=True)


def test_a_lone_kanji_drawn_large_over_art_is_dropped_and_dialogue_kept():
    grey = page()
    dialogue = [block("こんにちは", 100, 40, 60, 5), block("あ", 300, 100, 60, 1)]
    for each in dialogue:
        lettering(grey, int(each.x0), int(each.y0), 60, 4, len(each.text))
    art = block("年", 200, 480, 200, 1, score=0.8)  # a drawing's strokes, read as a kanji
    lettering(grey, 200, 480, 200, 60, 1)
    long_read = block("ドドドド", 500, 420, 80, 4, score=0.9)  # four letters: not judged
    kept = without_art([*dialogue, art, long_read], grey, DEFAULT_THRESHOLDS.max_art)
    assert [each.text for each in kept] == ["こんにちは", "あ", "ドドドド"]
    assert art_score(dialogue[1], grey, 60) < 0.1 < 0.6 < art_score(art, grey, 60)
    # Above 1 nothing is art: the eval's setting that turns the stage off.
    assert len(without_art([*dialogue, art], grey, 9.0)) == 3


def test_the_signals_each_measure_one_thing():
    grey = page()
    lettering(grey, 100, 100, 60, 4, 1)  # typeset: strokes a fifteenth of the character
    lettering(grey, 300, 100, 60, 24, 1)  # a brush's strokes, as wide as a third of it
    lettering(grey, 100, 500, 60, 4, 1)  # typeset strokes, over the art
    typeset, heavy, over_art = (
        block("あ", x, y, 60, 1) for x, y in ((100, 100), (300, 100), (100, 500))
    )
    assert stroke_oddness(typeset, grey, 60) < 0.4 and stroke_oddness(heavy, grey, 60) == 1.0
    assert paper_around(typeset, grey, 60) == 1.0 and paper_around(over_art, grey, 60) < 0.6
    assert oversize(30, 30) == 0.0 and oversize(45, 30) > 0.5 and oversize(90, 30) == 1.0
    assert lone_ideograph("年") == lone_ideograph("才才才") == 1.0
    assert lone_ideograph("何！？") == lone_ideograph("あ") == lone_ideograph("青年") == 0.0


def test_only_short_blocks_and_a_repeated_kanji_are_judged():
    assert judged("あ") and judged("え？") and judged("あっ") and judged("才才才")
    assert not judged("いい事") and not judged("ああああ") and not judged("……")
    assert not judged("！")
