"""Leave one manga out, for `bench.ocr_eval --lomo`: which manga each page is of, which
pages no figure may hold, the candidate `ReaderThresholds`, and the choice among them made
without the manga measured. docs/ocr.md ("Leave one manga out") says what this measures and
what it does not.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

from manga_page_analysis.analysis.reader.text.thresholds import ReaderThresholds

EXCLUDED: Final = {
    "kocarus_04.jpg": "a page of ワンパンマン, a manga the issue reserves for independent "
    "measurement: read by no figure",
}
"""Images of the development folders left out of every figure, each with the reason."""

MANGA_OF: Final = {
    # `../shared/ocr-dev` (read-only) carries no `manga` field: its README's table says
    # which manga each page is of. Pages of one manga (or one book) share a name here and
    # with `bench/ocr-dev-extra`'s `manga` fields.
    "ctd_aisazu_003.jpg": "AisazuNihaIrarenai",
    "koharu_od_1.jpg": "NAT GAMES / Yostar four-panel comic",
    "koharu_e2e_13.png": "NAT GAMES / Yostar four-panel comic",
    "mtd_dirtest_009.jpg": "かぐや様は告らせたい",
    "mtd_ym31_343.jpg": "空手小公子物語",
    "mtd_ym31_299.jpg": "食べれません",
    "acmyu_onepiece_p16.jpg": "ONE PIECE",
}
"""The manga of images whose ground truth has no `manga` field; any other image is its own."""

GRID: Final = tuple(
    ReaderThresholds(
        min_block_score=min_block_score,
        oversized_ratio=oversized_ratio,
        oversized_min_score=oversized_min_score,
        max_art=max_art,
    )
    for min_block_score, (oversized_ratio, oversized_min_score), max_art in itertools.product(
        (0.65, 0.55, 0.75), ((2.0, 0.9), (1.7, 0.95)), (0.4, 0.3, 0.5, 9.0)
    )
)
"""The settings tried, the product's (`DEFAULT_THRESHOLDS`) first: a tie goes to the
earlier setting."""

S = TypeVar("S")


def manga_of(name: str, entry: Mapping[str, Any]) -> str:
    """The manga image `name` is of: its `manga` field, `MANGA_OF`, or itself."""
    return str(entry.get("manga") or MANGA_OF.get(name, name))


def leave_one_manga_out(
    scores: Mapping[str, Sequence[S]],
    manga: Mapping[str, str],
    *,
    errors: Callable[[S], tuple[int, int]],
    fit_on: Callable[[str], bool] = lambda name: True,
) -> dict[str, int]:
    """For each page, the index of the setting its manga is read with: the setting that,
    pooled over the pages of every other manga (those `fit_on` allows), makes the fewest
    errors. `scores[name][i]` is page `name`'s score with setting `i`; `errors(score)` is
    (character errors, -blocks intact): fewer characters wrong first, then more intact."""
    chosen: dict[str, int] = {}
    settings = len(next(iter(scores.values()), ()))
    for held in sorted(set(manga[name] for name in scores)):
        train = [name for name in scores if manga[name] != held and fit_on(name)]

        def cost(index: int, train: list[str] = train) -> tuple[int, int, int]:
            pooled = [errors(scores[name][index]) for name in train]
            return sum(e for e, _ in pooled), sum(i for _, i in pooled), index

        best = min(range(settings), key=cost)
        chosen.update({name: best for name in scores if manga[name] == held})
    return chosen


def describe(setting: ReaderThresholds) -> str:
    """A setting in a few characters, for the eval's output."""
    return (
        f"score>={setting.min_block_score} oversized {setting.oversized_ratio}x"
        f" unless>={setting.oversized_min_score} art>={setting.max_art}"
    )
