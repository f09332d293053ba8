"""Live analysis events as Server-Sent Events, from Postgres `LISTEN analysis_events`.

What a client reads, and how a database outage shows on the stream and in
the log: docs/admin-api.md, "The event stream". Each stream holds a psycopg
connection of its own, in autocommit (a LISTENing connection must stay out of
the host's pool), and runs on the server's request thread, starting no thread.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any, Final

import psycopg
from psycopg import sql

from manga_page_analysis.analysis.page_events import ANALYSIS_CHANNEL
from manga_page_analysis.errors import ServiceError
from manga_page_analysis.worker.reports.outage import DatabaseOutage

logger = logging.getLogger(__name__)

DEFAULT_KEEPALIVE_SECONDS: Final = 15.0
"""A comment line at least every 15 s while idle (proxies drop silent streams)."""

DEFAULT_MAX_STREAMS: Final = 10
"""Concurrent streams per mount: each holds a Postgres connection and a server thread."""

FIRST_BACKOFF_SECONDS: Final = 0.25
MAX_BACKOFF_SECONDS: Final = 10.0
"""Reconnect attempts back off from 0.25 s, doubling, up to 10 s."""

APPLICATION_NAME: Final = "page-analysis-events"
"""`application_name` of the listening connections, to find them in `pg_stat_activity`."""

CONNECT_TIMEOUT_SECONDS: Final = 5

RETRY_MILLISECONDS: Final = 3000
"""Sent as SSE `retry:`: how long an `EventSource` waits before reconnecting."""

_EVENT_TYPE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


class EventsUnavailable(ServiceError):
    """No stream now: every slot is taken, or the first `LISTEN` connection
    could not be made. Answer 503 with `code`."""

    status = 503

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class EventStreams:
    """Opens event streams to one database, at most `max_streams` at a time.

    `connect_kwargs()` returns the psycopg `connect()` keywords; it is called
    once per stream, so it may follow a changing setting.
    """

    def __init__(
        self,
        connect_kwargs: Callable[[], dict[str, Any]],
        *,
        max_streams: int = DEFAULT_MAX_STREAMS,
        keepalive_seconds: float = DEFAULT_KEEPALIVE_SECONDS,
        channel: Callable[[], str] = lambda: ANALYSIS_CHANNEL,
    ) -> None:
        if max_streams < 1:
            raise ValueError("max_streams must be at least 1")
        if keepalive_seconds <= 0:
            raise ValueError("keepalive_seconds must be positive")
        self._connect_kwargs = connect_kwargs
        self.channel = channel
        """The channel to LISTEN on (`manga_page_analysis.analysis.page_events.analysis_channel`)."""
        self.max_streams = max_streams
        self.keepalive_seconds = keepalive_seconds
        # Shared by the streams of this mount: the log says an outage once.
        self.outage = DatabaseOutage(
            MAX_BACKOFF_SECONDS, base_delay=FIRST_BACKOFF_SECONDS / 2, activity="live events"
        )
        self._lock = threading.Lock()
        self._open = 0

    @property
    def open_streams(self) -> int:
        with self._lock:
            return self._open

    def open(self) -> EventStream:
        """Take a slot, LISTEN, and return the stream; `EventsUnavailable` when
        no slot is free or the database cannot be reached (never a 200 that then
        says nothing). The stream's `close()` frees the slot."""
        with self._lock:
            if self._open >= self.max_streams:
                raise EventsUnavailable(
                    "too_many_streams",
                    f"too many live event streams ({self.max_streams}); try again later",
                )
            self._open += 1
        try:
            stream = EventStream(self, self._connect_kwargs())
        except BaseException as exc:
            self._release()
            if not isinstance(exc, psycopg.Error):
                raise
            self.outage.failed(_one_line(exc), 1)
            raise EventsUnavailable(
                "unavailable", "the database cannot be reached, so no live events; try again"
            ) from None
        self.outage.recovered()
        return stream

    def _release(self) -> None:
        with self._lock:
            self._open -= 1


class EventStream:
    """One client's SSE stream, made by `EventStreams.open()` already listening:
    iterate for `str` chunks.

    The server calls `close()` when the client goes away (a WSGI server does
    once a write fails, which the keep-alives ensure within two intervals);
    it closes the connection and frees the slot, also for a stream never iterated.
    """

    def __init__(self, streams: EventStreams, connect_kwargs: dict[str, Any]) -> None:
        self._streams = streams
        self._connect_kwargs = connect_kwargs
        self._conn: psycopg.Connection[Any] | None = None
        self._closed = False
        self._chunks = self._run()
        self._connect()

    def __iter__(self) -> Iterator[str]:
        return self._chunks

    def close(self) -> None:
        """Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._chunks.close()  # runs the generator's cleanup if it started
        finally:
            self._drop_connection()
            self._streams._release()

    def _run(self) -> Generator[str, None, None]:
        yield f"retry: {RETRY_MILLISECONDS}\n\n"
        # The client learns LISTEN is active (a test can publish now).
        yield ": listening\n\n"
        outage = self._streams.outage
        failures = 0
        backoff = FIRST_BACKOFF_SECONDS
        while True:
            if self._conn is None:
                # Connection lost: connect and LISTEN again, backing off while the
                # database refuses; each failed try is said on the stream.
                yield from self._wait(backoff)
                try:
                    self._connect()
                except psycopg.Error as exc:
                    failures += 1
                    backoff = outage.failed(_one_line(exc), failures)
                    yield f": database unreachable; retrying in {backoff:.2f} s\n\n"
                    continue
                outage.recovered()
                # NOTIFY is not durable: the client should re-read what it shows.
                yield ": reconnected; events may have been missed\n\n"
            conn = self._conn
            assert conn is not None  # __init__() and the reconnect above leave one
            try:
                # A list, not a lazy loop: the generator is not left
                # suspended inside psycopg's notifies() while we write.
                notes = list(conn.notifies(timeout=self._streams.keepalive_seconds, stop_after=1))
            except psycopg.Error as exc:
                failures = 1
                backoff = outage.failed(_one_line(exc), failures)
                self._drop_connection()
                yield ": database connection lost; reconnecting\n\n"
                continue
            if not notes:
                yield ": keep-alive\n\n"
            for note in notes:
                yield format_event(note.payload)

    def _connect(self) -> None:
        options = {
            **self._connect_kwargs,
            "autocommit": True,
            "application_name": APPLICATION_NAME,
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
            # A database host that vanishes without a reset is noticed in about a minute.
            "keepalives": 1,
            "keepalives_idle": 30,
            "keepalives_interval": 10,
            "keepalives_count": 3,
        }
        self._conn = conn = psycopg.connect(**options)
        try:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._streams.channel())))
        except BaseException:
            self._drop_connection()
            raise

    def _wait(self, seconds: float) -> Iterator[str]:
        """Sleep `seconds`, still sending keep-alives so a departed client is noticed."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            time.sleep(min(remaining, self._streams.keepalive_seconds))
            if remaining >= self._streams.keepalive_seconds:
                yield ": keep-alive\n\n"

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception as exc:  # closing a broken connection must not mask the cause
                logger.debug("closing the event stream's connection failed: %s", exc)


def format_event(payload: str) -> str:
    """One SSE message for a NOTIFY payload: `event:` from its JSON `type`, then `data:`.

    A payload that is not a JSON object with a plain `type` is still sent,
    as the default `message` event. A multi-line payload becomes several
    `data:` lines, which a client joins back with newlines.
    """
    try:
        decoded = json.loads(payload)
    except ValueError:
        decoded = None
    event_type = decoded.get("type") if isinstance(decoded, dict) else None
    lines = []
    if isinstance(event_type, str) and _EVENT_TYPE.match(event_type):
        lines.append(f"event: {event_type}")
    lines.extend(f"data: {line}" for line in payload.replace("\r\n", "\n").split("\n"))
    return "\n".join(lines) + "\n\n"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
