"""What a reader reads of OCR lines: dialogue blocks in reading order (`read_page`), without
furigana, sound effects and stray marks.

Pure functions over `TextLine`s, so tests feed boxes directly. The rules, and what they cost
in recall, are in docs/ocr.md ("What is not text"); the thresholds are the constants below
and those of `ReaderThresholds`, passed in.
"""

from __future__ import annotations

import dataclasses
import statistics
import unicodedata
from collections.abc import Sequence
from typing import Final

import numpy as np
from numpy.typing import NDArray

from manga_page_analysis.analysis.reader.order.blocks import reading_order
from manga_page_analysis.analysis.reader.order.lines import Block, TextLine
from manga_page_analysis.analysis.reader.recognition.marks import whole_image_lettering
from manga_page_analysis.analysis.reader.regions.bubbles import in_balloons
from manga_page_analysis.analysis.reader.regions.panels import find_panels
from manga_page_analysis.analysis.reader.regions.ruled_lines import ruled_apart
from manga_page_analysis.analysis.reader.text.char_forms import japanese_forms, vertical_quotes
from manga_page_analysis.analysis.reader.text.lettering import without_art
from manga_page_analysis.analysis.reader.text.thresholds import (
    DEFAULT_THRESHOLDS,
    ReaderThresholds,
)

FURIGANA_MAX_RATIO: Final = 0.7
"""Ruby is at most this thick relative to the column it annotates (it is set at half size)."""
FURIGANA_MAX_GAP: Final = 0.6
"""Ruby hugs its column: the gap is at most this many of the ruby's own thicknesses."""
FURIGANA_MIN_ALONGSIDE: Final = 0.7
"""Ruby lies beside its column along at least this share of its own length."""
FURIGANA_MAX_PITCH: Final = 0.75
"""Ruby glyphs are small: the length per character is at most this share of its column's."""
FURIGANA_SMALL_PITCH: Final = 0.6
"""Kana set beside a column holding kanji at most this share of the column's length per
character are half-size glyphs: ruby, ..."""
FURIGANA_SMALL_PITCH_MAX_RATIO: Final = 0.8
"""... though their box is up to this thick relative to the column's (a box round six small
glyphs, read from an enlarged balloon, is a little wider than the glyphs)."""
FURIGANA_MAX_LENGTH: Final = 0.9
"""Ruby annotates a few characters: it is at most this share of its column's length (a
narrow column as long as its neighbour is text set in narrow glyphs, not ruby)."""
SENTENCE_MARKS: Final = frozenset("!?！？。、")
"""Marks that end or part a sentence: set in the column, never in the ruby beside it."""
SHOUT_MIN_KANJI: Final = 0.5
"""Oversized lettering at least this share kanji (of its letters) is a shout, not an effect."""
MIN_KANA_SHARE: Final = 0.1
"""A page is Japanese when at least this share of its CJK letters is kana (a page of
dialogue is mostly kana; a Chinese page has none)."""
MIN_CJK_SHARE_RTL: Final = 0.1
"""A page reads right to left when at least this share of its letters is CJK (kana, kanji)."""


def read_page(
    lines: Sequence[TextLine],
    grey: NDArray[np.uint8] | None = None,
    thresholds: ReaderThresholds = DEFAULT_THRESHOLDS,
) -> list[Block]:
    """The page's dialogue blocks in reading order. `grey`: the page (for its panels);
    `thresholds`: what a block must be to be kept."""
    kept = dialogue_lines(lines)
    if is_japanese(kept):
        kept = [
            # Judged as read: a form outside Japanese is garbage from a drawing; mainland
            # Chinese forms Japanese writes otherwise (黑) are then written as Japanese, and a
            # column's quotes as a column sets them.
            dataclasses.replace(line, text=_as_printed(line))
            for line in kept
            if not has_foreign_ideograph(line.text) and not is_lone_latin_letter(line)
        ]
    balloons: frozenset[int] = frozenset()
    if grey is not None:
        kept, balloons = in_balloons(kept, grey)
    right_to_left = is_right_to_left(kept)
    panels = find_panels(grey, right_to_left=right_to_left) if grey is not None else []
    apart = ruled_apart(grey) if grey is not None else None
    blocks = reading_order(
        kept, panels, right_to_left=right_to_left, apart=apart, balloons=balloons
    )
    read = dialogue_blocks([block for block in blocks if block.text], thresholds)
    if grey is not None:
        read = without_art(read, grey, thresholds.max_art)
    if not read and grey is not None:
        # An image that is one piece of lettering was sent to be read: no page rules.
        read = whole_image_lettering(blocks, (grey.shape[1], grey.shape[0]))
    return read


def _as_printed(line: TextLine) -> str:
    """A line of a Japanese page written as the page prints it (`japanese_forms`,
    `with_wave_dash`, and `vertical_quotes` in a column)."""
    text = japanese_forms(with_wave_dash(line.text))
    return vertical_quotes(text) if line.orientation == "v" else text


def is_right_to_left(lines: Sequence[TextLine]) -> bool:
    """Manga order unless the page's letters are (almost) all Latin."""
    letters = [char for line in lines for char in line.text if unicodedata.category(char)[0] == "L"]
    if not letters:
        return True
    cjk = sum(1 for char in letters if not char.isascii())
    return cjk >= MIN_CJK_SHARE_RTL * len(letters)


def is_japanese(lines: Sequence[TextLine]) -> bool:
    """The page's letters include kana (at least `MIN_KANA_SHARE` of its CJK letters): Japanese,
    not Chinese, which is written in ideographs alone."""
    cjk = [char for line in lines for char in line.text if _is_ideograph(char) or _is_kana(char)]
    kana = sum(1 for char in cjk if _is_kana(char))
    return bool(cjk) and kana >= MIN_KANA_SHARE * len(cjk)


TILDES: Final = str.maketrans({"\uff5e": "\u301c", "~": "\u301c"})
"""Fullwidth and ASCII tilde to the wave dash (U+301C)."""


def with_wave_dash(text: str) -> str:
    """`text` (Japanese) with its tildes written as the wave dash 〜 (どうでしょう〜？). The
    recogniser gives the fullwidth tilde ～ (U+FF5E: the one JIS character, 1-33, as Windows
    code page 932 maps it) or an ASCII ~ for it; in Japanese text it is the wave dash, and a
    tilde is none once NFKC-normalised (～ becomes ~)."""
    return text.translate(TILDES)


def has_foreign_ideograph(text: str) -> bool:
    """`text` holds an ideograph that Japanese text does not use (outside the JIS sets, so not
    in code page 932): a simplified Chinese form (严, 丰, 专) that the multilingual recogniser
    gives for strokes of a drawing or a sound effect."""
    for char in text:
        if _is_ideograph(char):
            try:
                char.encode("cp932")
            except UnicodeEncodeError:
                return True
    return False


def _is_ideograph(char: str) -> bool:
    return unicodedata.name(char, "").startswith("CJK UNIFIED")


def _is_kana(char: str) -> bool:
    return "\u3041" <= char <= "\u30fa"


def is_kana(text: str) -> bool:
    """Only hiragana and katakana (and the long-vowel mark): what ruby is written in."""
    letters = [char for char in text if not unicodedata.category(char).startswith("P")]
    return bool(letters) and all("\u3040" <= char <= "\u30ff" for char in letters)


def _alongside(a: TextLine, b: TextLine, vertical: bool) -> float:
    """How much of `a`'s length lies beside `b` (0..1)."""
    if vertical:
        overlap = min(a.y1, b.y1) - max(a.y0, b.y0)
        return max(0.0, overlap) / max(1.0, a.height)
    overlap = min(a.x1, b.x1) - max(a.x0, b.x0)
    return max(0.0, overlap) / max(1.0, a.width)


def _gap(a: TextLine, b: TextLine, vertical: bool) -> float:
    if vertical:
        return max(a.x0, b.x0) - min(a.x1, b.x1)
    return max(a.y0, b.y0) - min(a.y1, b.y1)


def is_furigana(line: TextLine, others: Sequence[TextLine]) -> bool:
    """True when `line` is ruby beside one of `others`: kana at most `FURIGANA_MAX_RATIO`
    as thick as a column it hugs. A real narrow kana column beside a wider one would be
    lost too; speech bubbles, set in one size, have none."""
    if not is_kana(line.text) or any(char in SENTENCE_MARKS for char in line.text):
        return False  # ruby spells out characters: it holds no "！" nor "、"
    vertical = line.orientation != "h"
    for main in others:
        if main is line or main.thickness * FURIGANA_SMALL_PITCH_MAX_RATIO < line.thickness:
            continue
        if main.orientation not in (None, "v" if vertical else "h"):
            continue
        length, main_length = (line.height, main.height) if vertical else (line.width, main.width)
        pitch = length / max(1, len(line.text))
        main_pitch = main_length / max(1, len(main.text))
        # Thicker than `FURIGANA_MAX_RATIO`: ruby only when its glyphs are half size beside kanji.
        if main.thickness * FURIGANA_MAX_RATIO < line.thickness and not (
            pitch <= FURIGANA_SMALL_PITCH * main_pitch
            and any(_is_ideograph(char) for char in main.text)
        ):
            continue
        if (
            length <= FURIGANA_MAX_LENGTH * main_length
            and pitch <= FURIGANA_MAX_PITCH * main_pitch
            and _gap(line, main, vertical) <= FURIGANA_MAX_GAP * line.thickness
            and _alongside(line, main, vertical) >= FURIGANA_MIN_ALONGSIDE
            and not _between(line, main, others, vertical)
        ):
            return True
    return False


def _between(line: TextLine, main: TextLine, others: Sequence[TextLine], vertical: bool) -> bool:
    """True when another of `others` stands between `line` and `main` (its middle between
    theirs, across the lines, and beside `line` along it): ruby hugs its own column, and a
    narrow column whose neighbour's box was drawn wide over the column between them is not
    that neighbour's ruby."""

    def middle(other: TextLine) -> float:
        return (other.x0 + other.x1) / 2 if vertical else (other.y0 + other.y1) / 2

    low, high = sorted((middle(line), middle(main)))
    return any(
        other is not line
        and other is not main
        and low < middle(other) < high
        and _alongside(line, other, vertical) > 0
        for other in others
    )


def is_mark(text: str) -> bool:
    """A block that is not a word: one or two Latin letters or digits and nothing else
    (a page number, a letter read in a drawing). "Hi!" or "…" is a reply in a bubble."""
    compact = "".join(unicodedata.normalize("NFKC", text).split())
    return 0 < len(compact) <= 2 and compact.isascii() and compact.isalnum()


def is_latin_column(line: TextLine) -> bool:
    """Latin letters read down a column: a drawing misread (Japanese columns hold kana)."""
    letters = [char for char in line.text if unicodedata.category(char)[0] == "L"]
    latin = [char for char in letters if char.isascii()]
    return line.orientation == "v" and len(latin) >= 3 and len(latin) > len(letters) / 2


def is_lone_latin_letter(line: TextLine) -> bool:
    """A line that is one Latin letter and nothing else. On a Japanese page it is a stroke of
    art, a balloon's tail or ruby read as a letter (V, Y): dropped before lines are grouped, so
    that it cannot bridge two balloons' columns. A Latin word or a letter within a line
    stays."""
    text = "".join(line.text.split())
    return len(text) == 1 and text.isascii() and text.isalpha()


def dialogue_lines(lines: Sequence[TextLine]) -> list[TextLine]:
    """`lines` without furigana and Latin read down a column."""
    words = [line for line in lines if not is_latin_column(line)]
    return [line for line in words if not is_furigana(line, words)]


def dialogue_blocks(
    blocks: Sequence[Block], thresholds: ReaderThresholds = DEFAULT_THRESHOLDS
) -> list[Block]:
    """`blocks` without marks and those read with low confidence or oversized (effects).

    Judged per block, not per line: one doubtful column inside a bubble is kept
    with its confident neighbours."""
    confident = [
        block
        for block in blocks
        if block.score >= thresholds.min_block_score and not is_mark(block.text)
    ]
    if len(confident) < 3:
        return confident
    median = statistics.median(_thickness(block) for block in confident)
    return [
        block
        for block in confident
        if _thickness(block) <= thresholds.oversized_ratio * median
        or block.score >= thresholds.oversized_min_score
        or is_mostly_kanji(block.text)
    ]


def is_mostly_kanji(text: str) -> bool:
    """At least `SHOUT_MIN_KANJI` of the letters are kanji: words, not a sound effect
    (sound effects are written in kana; a shouted name or order holds kanji)."""
    letters = [char for char in text if unicodedata.category(char)[0] == "L"]
    kanji = [char for char in letters if unicodedata.name(char, "").startswith("CJK UNIFIED")]
    return bool(letters) and len(kanji) >= SHOUT_MIN_KANJI * len(letters)


def _thickness(block: Block) -> float:
    return statistics.median(line.thickness for line in block.lines)
