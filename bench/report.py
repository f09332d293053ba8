"""Plain-text output: percentiles, aligned tables, section headings.

Everything is printed as soon as it is measured (and flushed), so a long run
shows progress and an interrupted run still leaves the sections it finished.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Final

from bench.interrupt import checkpoint

WIDTH: Final = 96
"""Width of section rules."""


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of `samples` (`fraction` in 0..1); NaN when empty."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def ms(seconds: float) -> str:
    """Seconds as milliseconds with sensible precision."""
    if math.isnan(seconds):
        return "-"
    value = seconds * 1000
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def rate(count: int, seconds: float) -> str:
    """`count / seconds`, rounded to a readable figure."""
    if seconds <= 0:
        return "-"
    per_second = count / seconds
    return f"{per_second:,.0f}" if per_second >= 100 else f"{per_second:,.1f}"


def emit(line: str = "") -> None:
    print(line, flush=True)


def heading(title: str) -> None:
    emit()
    emit("=" * WIDTH)
    emit(title)
    emit("=" * WIDTH)


def note(text: str) -> None:
    """An indented remark under a table."""
    for line in text.splitlines():
        emit(f"  {line}")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print rows under headers; the first column left-aligned, the rest right-aligned."""
    widths = [
        max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)
    ]

    def line(cells: Sequence[str]) -> str:
        parts = [
            str(cell).ljust(width) if index == 0 else str(cell).rjust(width)
            for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  " + "  ".join(parts).rstrip()

    emit(line(headers))
    emit("  " + "  ".join("-" * width for width in widths))
    for row in rows:
        emit(line(row))


def progress(message: str) -> None:
    """A progress line on stderr, kept out of the report. Called between cases, so
    it is also where a stop request that was swallowed takes effect."""
    checkpoint()
    print(f"[bench] {message}", file=sys.stderr, flush=True)
