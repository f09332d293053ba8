"""The reader's tunable thresholds, one frozen object passed in (`ReaderThresholds`).

Only the few thresholds that decide what of the lines read is kept as text live here: they
are applied after detection and recognition, so the eval can try several settings on one
reading of a page and choose them leaving each manga out (docs/ocr.md, "Leave one manga
out"). The reader's other rules keep their constants beside the code they govern.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReaderThresholds:
    """What a block must be to be kept as text. The defaults are the product's."""

    min_block_score: float = 0.65
    """Blocks the recogniser scores below this are dropped (garbage read from drawn
    lettering)."""
    oversized_ratio: float = 2.0
    """A block this many times thicker than the page's median block is display lettering."""
    oversized_min_score: float = 0.9
    """Oversized lettering is kept only when read this confidently (a title, not an effect),
    or when it is mostly kanji (`text_filter.SHOUT_MIN_KANJI`)."""
    max_art: float = 0.4
    """A block of one or two letters whose art score (`lettering.art_score`, 0 lettering
    to 1 art) is at least this is art read as characters, and dropped; above 1, none is."""


DEFAULT_THRESHOLDS = ReaderThresholds()
"""The settings the product reads with."""
