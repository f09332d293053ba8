"""Requesting analysis of many pages: a chapter, a manga, or every page that
has no usable analysis yet (`python -m manga_page_analysis analyze`). Dedup and the rule for
forcing a job in flight live in `manga_page_analysis.queue.request_analysis_many`; the caller
commits once per batch.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from manga_page_analysis.db import Conn
from manga_page_analysis.queue.requests import request_analysis_many
from manga_page_analysis.repos.pages import analysed_page_ids


@dataclass
class RequestCounts:
    """What requests for many pages did. `skipped` = `in_flight` + `already_done`."""

    enqueued: int = 0
    in_flight: int = 0
    """A job was already pending or running for the page (dedup); with `force`,
    that job was marked forced instead."""
    already_done: int = 0
    """The page has a done analysis and `force` was not given."""

    @property
    def skipped(self) -> int:
        return self.in_flight + self.already_done

    def add(self, other: RequestCounts) -> None:
        self.enqueued += other.enqueued
        self.in_flight += other.in_flight
        self.already_done += other.already_done


def request_pages(
    conn: Conn, page_ids: Sequence[uuid.UUID], *, force: bool = False
) -> RequestCounts:
    """Request analysis of `page_ids` (existing pages) in one statement.

    Without `force`, pages whose analysis is done are skipped: their job
    would do nothing.
    """
    wanted = list(dict.fromkeys(page_ids))
    done = set() if force or not wanted else analysed_page_ids(conn, wanted)
    requested = request_analysis_many(
        conn, [page_id for page_id in wanted if page_id not in done], force=force
    )
    return RequestCounts(requested.enqueued, requested.in_flight, len(done))
