"""From OCR lines to the text a reader reads: dialogue blocks in reading order.

The steps, each in its own module: drop what is not dialogue
(`app.analysis.text_filter`: furigana, sound effects, marks), find the panels
(`app.analysis.panels`), group lines into blocks and order them
(`app.analysis.layout`).

Direction is decided per page: a page with Japanese or Chinese text is read
as manga (right to left); a page whose text is almost all Latin (an English
comic, a webtoon) is read left to right.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Final

import numpy as np
from numpy.typing import NDArray

from app.analysis.layout import Block, TextLine, reading_order
from app.analysis.panels import find_panels
from app.analysis.text_filter import dialogue_blocks, dialogue_lines

MIN_CJK_SHARE_RTL: Final = 0.1
"""A page reads right to left when at least this share of its letters is CJK (kana, kanji)."""


def is_right_to_left(lines: Sequence[TextLine]) -> bool:
    """Manga order unless the page's letters are (almost) all Latin."""
    letters = [char for line in lines for char in line.text if unicodedata.category(char)[0] == "L"]
    if not letters:
        return True
    cjk = sum(1 for char in letters if not char.isascii())
    return cjk >= MIN_CJK_SHARE_RTL * len(letters)


def read_page(lines: Sequence[TextLine], grey: NDArray[np.uint8] | None = None) -> list[Block]:
    """The page's dialogue blocks in reading order. `grey`: the page (for its panels)."""
    kept = dialogue_lines(lines)
    right_to_left = is_right_to_left(kept)
    panels = find_panels(grey, right_to_left=right_to_left) if grey is not None else []
    blocks = reading_order(kept, panels, right_to_left=right_to_left)
    return dialogue_blocks([block for block in blocks if block.text])
