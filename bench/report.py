"""Plain-text output: percentiles, one aligned table, progress lines on stderr."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

from bench.interrupt import checkpoint


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of `samples` (`fraction` in 0..1); NaN when empty."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def emit(line: str = "") -> None:
    print(line, flush=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print rows under headers; the first column left-aligned, the rest right-aligned."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]

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
    """A progress line on stderr, kept out of the report. Called between measurements,
    so it is also where a stop request that was swallowed takes effect."""
    checkpoint()
    print(f"[bench] {message}", file=sys.stderr, flush=True)
