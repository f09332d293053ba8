"""Terminal output of the operator commands: aligned tables, short cells, a progress bar."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Final, TextIO


def print_json(body: Any) -> None:
    print(json.dumps(body, ensure_ascii=False, indent=2))


def error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)


def shorten(text: str, width: int) -> str:
    """One line, at most `width` characters (an ellipsis marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def time_text(iso: str) -> str:
    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def duration_text(seconds: float) -> str:
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.1f} s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, numeric: Iterable[int] = ()
) -> str:
    """Aligned columns, two spaces apart; `numeric` column indexes are right-aligned."""
    right = set(numeric)
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(padded).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])


class Progress:
    """A one-line progress bar redrawn in place with `\\r`; only used on a terminal."""

    WIDTH: Final = 30

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total = total
        self.done = 0
        self._stream = stream
        self._drawn = False

    def advance(self, pages: int, enqueued: int, skipped: int) -> None:
        self.done += pages
        share = min(self.done / self.total, 1.0) if self.total else 1.0
        filled = int(self.WIDTH * share)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self._stream.write(
            f"\r[{bar}] {self.done}/{self.total} pages, {enqueued} enqueued, {skipped} skipped"
        )
        self._stream.flush()
        self._drawn = True

    def finish(self) -> None:
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()
