"""Live analysis events as Server-Sent Events, from Postgres `LISTEN analysis_events`.

The worker publishes in another process, so a web process streams what
Postgres delivers: each stream holds its own psycopg connection in
autocommit (never one from the host's pool: a LISTENing connection must
stay out of it), waits with `notifies(timeout=...)`, and writes

    event: <type>
    data: <the NOTIFY JSON>

per event, and a comment line when idle for `keepalive_seconds`.

What a client reads, in order: `retry: 3000` (EventSource's reconnect
delay), `: listening` (LISTEN is active), then events and `: keep-alive`
comments. Comment lines are for humans and tests; an SSE client ignores them.

The database going away:

- before the stream starts: `EventStreams.open()` makes the first LISTEN
  connection itself, so an unreachable database is `EventsUnavailable`
  (answer 503), never a 200 that then says nothing;
- mid-stream (a restart, a terminated backend): the stream says
  `: database connection lost; reconnecting`, then
  `: database unreachable; retrying in N s` after each failed try (capped
  exponential backoff, keep-alives meanwhile), and
  `: reconnected; events may have been missed` once LISTEN is active again
  (NOTIFY is not durable: a client should re-read what it shows).
- The log says it once per outage (`DatabaseOutage`, shared by the streams
  of one `EventStreams`): a warning when the first stream or open fails, an
  info line when one connects again; every retry in between is DEBUG.

A stream is an iterable of `str` chunks that runs on the server's request
thread and starts no thread of its own. The server calls `close()` when the
client goes away (a WSGI server does once a write fails, which the
keep-alive guarantees within two intervals); `close()` closes the
connection and frees the stream's slot, also for a stream never iterated.
`EventStreams` caps how many run at once; beyond the cap `open()` raises
`TooManyStreams` (answer 503).
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

from app.analysis.events import ANALYSIS_CHANNEL
from app.errors import ServiceError
from app.worker.outage import DatabaseOutage

logger = logging.getLogger(__name__)

DEFAULT_KEEPALIVE_SECONDS: Final = 15.0
"""DESIGN: a comment line at least every 15 s while idle (proxies drop silent streams)."""

DEFAULT_MAX_STREAMS: Final = 10
"""Concurrent streams per `EventStreams` (one per mount, so per process): each
holds a Postgres connection and a server thread."""

DEFAULT_MAX_BACKOFF_SECONDS: Final = 10.0
"""Reconnect attempts back off from 0.25 s, doubling, up to this."""

FIRST_BACKOFF_SECONDS: Final = 0.25

APPLICATION_NAME: Final = "page-analysis-events"
"""`application_name` of the listening connections, to find them in `pg_stat_activity`."""

CONNECT_TIMEOUT_SECONDS: Final = 5

RETRY_MILLISECONDS: Final = 3000
"""Sent as SSE `retry:`: how long an `EventSource` waits before reconnecting."""

_EVENT_TYPE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


class TooManyStreams(ServiceError):
    """Every event-stream slot of this process is taken; answer 503."""

    status = 503
    code = "too_many_streams"


class EventsUnavailable(ServiceError):
    """The stream's first `LISTEN` connection could not be made; answer 503."""

    status = 503
    code = "unavailable"


ConnectKwargs = dict[str, Any] | Callable[[], dict[str, Any]]
"""psycopg `connect()` keywords of the listening connections, or a callable
returning them (called once per stream, so it may follow a changing setting)."""


class EventStreams:
    """Opens event streams to one database, at most `max_streams` at a time."""

    def __init__(
        self,
        connect_kwargs: ConnectKwargs,
        *,
        channel: str = ANALYSIS_CHANNEL,
        max_streams: int = DEFAULT_MAX_STREAMS,
        keepalive_seconds: float = DEFAULT_KEEPALIVE_SECONDS,
        max_backoff_seconds: float = DEFAULT_MAX_BACKOFF_SECONDS,
        application_name: str = APPLICATION_NAME,
    ) -> None:
        if max_streams < 1:
            raise ValueError("max_streams must be at least 1")
        if keepalive_seconds <= 0:
            raise ValueError("keepalive_seconds must be positive")
        self._connect_kwargs = connect_kwargs
        self.channel = channel
        self.max_streams = max_streams
        self.keepalive_seconds = keepalive_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.application_name = application_name
        # Shared by the streams of this mount: the log says an outage once.
        self.outage = DatabaseOutage(
            max_backoff_seconds, base_delay=FIRST_BACKOFF_SECONDS / 2, activity="live events"
        )
        self._lock = threading.Lock()
        self._open = 0

    @property
    def open_streams(self) -> int:
        with self._lock:
            return self._open

    def open(self) -> EventStream:
        """Take a slot, LISTEN, and return the stream.

        `TooManyStreams` when no slot is free; `EventsUnavailable` when the
        database cannot be reached (both: answer 503). The slot is freed by
        the stream's `close()`: hand the stream to the server as the response
        body (which closes it), or close it yourself.
        """
        with self._lock:
            if self._open >= self.max_streams:
                raise TooManyStreams(
                    f"too many live event streams ({self.max_streams}); try again later"
                )
            self._open += 1
        try:
            kwargs = self._connect_kwargs
            stream = EventStream(self, dict(kwargs() if callable(kwargs) else kwargs))
            try:
                stream._connect()
            except psycopg.Error as exc:
                self.outage.failed(_one_line(exc), 1)
                raise EventsUnavailable(
                    "the database cannot be reached, so no live events; try again"
                ) from None
        except BaseException:
            self._release()
            raise
        self.outage.recovered()
        return stream

    def _release(self) -> None:
        with self._lock:
            self._open -= 1


class EventStream:
    """One client's SSE stream: iterate for `str` chunks; `close()` when done.

    Made by `EventStreams.open()`, already listening."""

    def __init__(self, streams: EventStreams, connect_kwargs: dict[str, Any]) -> None:
        self._streams = streams
        self._connect_kwargs = connect_kwargs
        self._conn: psycopg.Connection[Any] | None = None
        self._closed = False
        self._chunks = self._run()

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> str:
        if self._closed:
            raise StopIteration
        return next(self._chunks)

    def close(self) -> None:
        """End the stream: close its connection and free its slot. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._chunks.close()  # runs the generator's cleanup if it started
        finally:
            self._drop_connection()
            self._streams._release()

    # --- the loop ------------------------------------------------------------

    def _run(self) -> Generator[str, None, None]:
        streams = self._streams
        yield f"retry: {RETRY_MILLISECONDS}\n\n"
        # The client learns LISTEN is active (a test can publish now).
        yield ": listening\n\n"
        while True:
            conn = self._conn
            assert conn is not None  # open() and _reconnect() leave one
            try:
                while True:
                    # A list, not a lazy loop: the generator is not left
                    # suspended inside psycopg's notifies() while we write.
                    notes = list(conn.notifies(timeout=streams.keepalive_seconds, stop_after=1))
                    if not notes:
                        yield ": keep-alive\n\n"
                    for note in notes:
                        yield format_event(note.payload)
            except psycopg.Error as exc:
                streams.outage.failed(_one_line(exc), 1)
                self._drop_connection()
                yield ": database connection lost; reconnecting\n\n"
            yield from self._reconnect()
            # Events published while disconnected are lost: the client should re-read.
            yield ": reconnected; events may have been missed\n\n"

    def _reconnect(self) -> Iterator[str]:
        """Connect and LISTEN again, backing off while the database refuses;
        each failed try is said on the stream (the log has it once per outage)."""
        outage = self._streams.outage
        backoff = FIRST_BACKOFF_SECONDS
        failures = 1
        while True:
            yield from self._wait(backoff)
            try:
                self._connect()
            except psycopg.Error as exc:
                failures += 1
                backoff = outage.failed(_one_line(exc), failures)
                yield f": database unreachable; retrying in {backoff:.2f} s\n\n"
                continue
            outage.recovered()
            return

    def _connect(self) -> None:
        streams = self._streams
        options = {
            **self._connect_kwargs,
            "autocommit": True,
            "application_name": streams.application_name,
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
            # A database host that vanishes without a reset is noticed in about a minute.
            "keepalives": 1,
            "keepalives_idle": 30,
            "keepalives_interval": 10,
            "keepalives_count": 3,
        }
        conn = psycopg.connect(**options)
        self._conn = conn
        try:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(streams.channel)))
        except BaseException:
            self._drop_connection()
            raise

    def _wait(self, seconds: float) -> Iterator[str]:
        """Sleep `seconds`, still sending keep-alives so a departed client is noticed."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            step = min(remaining, self._streams.keepalive_seconds)
            time.sleep(step)
            if step == self._streams.keepalive_seconds:
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
    event_type = None
    try:
        decoded = json.loads(payload)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict):
        candidate = decoded.get("type")
        if isinstance(candidate, str) and _EVENT_TYPE.match(candidate):
            event_type = candidate
    lines = [f"event: {event_type}"] if event_type else []
    lines.extend(f"data: {line}" for line in payload.replace("\r\n", "\n").split("\n"))
    return "\n".join(lines) + "\n\n"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
