"""Voiced marks (dakuten ゛ and handakuten ゜) on kana: the one place that knows them, for the
recogniser's second read (`ocr_pipeline`) and the eval's error classes (`ocr_eval`)."""

from __future__ import annotations

import unicodedata
from typing import Final

VOICING_MARKS: Final = ("\u3099", "\u309a")
"""Combining dakuten and handakuten (NFD): ご is こ + U+3099, ぱ is は + U+309A."""


def unvoiced(text: str) -> str:
    """`text` with its voiced marks taken off: ご→こ, ぱ→は (other characters unchanged)."""
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize(
        "NFC", "".join(mark for mark in decomposed if mark not in VOICING_MARKS)
    )


def differs_in_voicing_only(first: str, second: str) -> bool:
    """True when the two differ, character for character, only in voiced marks: こんな and
    ごんな, ズポン and ズボン, ぶ and ぷ."""
    if first == second or len(first) != len(second):
        return False
    return all(unvoiced(a) == unvoiced(b) for a, b in zip(first, second, strict=True))


def adds_voicing_only(first: str, second: str) -> bool:
    """True when `second` is `first` with one or more voiced marks added and nothing else
    changed: こんな to ごんな, はん to ぱん; not ごんな to こんな, nor ぶ to ぷ."""
    return differs_in_voicing_only(first, second) and all(
        a == b or (unvoiced(a) == a and unvoiced(b) == a)
        for a, b in zip(first, second, strict=True)
    )


def may_be_voiced(text: str) -> bool:
    """True when `text` holds a kana that takes a voiced mark (か, が, は, ぱ...): kanji, Latin
    and punctuation have none to lose."""
    return any(
        len(unicodedata.normalize("NFC", unvoiced(char) + mark)) == 1
        for char in text
        for mark in VOICING_MARKS
    )
