"""A handler that does nothing, for any job kind: for benchmarks, and for hosts'
tests that need jobs of a kind to be taken and acked through the real runner."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection

from manga_page_analysis.queue import Lease
from manga_page_analysis.worker.handler import JobContext, JobHandler


class NoopHandler(JobHandler[Lease, None]):
    """Takes jobs of `kind` and acks them done (in batches: it writes nothing)."""

    writes_result = False
    timeout_message = "no-op dispatch timed out"

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._lock = threading.Lock()
        self.calls = 0
        """The `execute` calls so far (exact across pool threads)."""

    @property
    def load_reads_database(self) -> bool:
        """`False`: this `load` runs no SQL (a subclass that overrides `load` may)."""
        return type(self).load is not NoopHandler.load

    def load(self, conn: Connection, lease: Lease) -> Lease:
        return lease

    def describe(self, item: Lease) -> str:
        return self.kind

    def breadcrumb(self, item: Lease) -> Mapping[str, Any] | None:
        return None

    def execute(self, item: Lease, ctx: JobContext) -> None:
        with self._lock:
            self.calls += 1

    def save(self, conn: Connection, item: Lease, result: None, ctx: JobContext) -> None:
        raise AssertionError("writes_result is False: save is never called")

    def save_failure(self, conn: Connection, item: Lease, error: str, ctx: JobContext) -> None:
        return None
