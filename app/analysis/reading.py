"""From OCR lines to the text a reader reads: dialogue blocks in reading order.

Drops what is not dialogue (`app.analysis.text_filter`), finds the panels
(`app.analysis.panels`), and groups and orders the blocks (`app.analysis.layout`).
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
