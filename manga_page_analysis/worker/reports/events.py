"""Live job events: in-process subscribers and Postgres `NOTIFY`.

An event is published after the fact it reports was committed. Delivery is
best effort: a failing subscriber or a failed `NOTIFY` is logged and never
affects the job.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import Engine, text

from manga_page_analysis.dberrors import is_outage
from manga_page_analysis.worker.dbsession import short_error

logger = logging.getLogger(__name__)

NOTIFY_MAX_BYTES: Final = 7900
"""Postgres refuses `NOTIFY` payloads of 8000 bytes or more."""

EVENT_TYPES: Final = frozenset({"started", "completed", "skipped", "failed", "cancelled"})
"""The types of job event; `JobEvent` refuses any other."""


@dataclass(frozen=True, slots=True)
class JobEvent:
    """`type` is one of `EVENT_TYPES`; `breadcrumb` (from the handler) labels what
    the job is about; `details` adds attempt, error, duration_ms..."""

    type: str
    job_id: uuid.UUID
    breadcrumb: Mapping[str, Any]
    details: Mapping[str, Any] = field(default_factory=dict)
    at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def __post_init__(self) -> None:
        if self.type not in EVENT_TYPES:
            raise ValueError(f"unknown job event type {self.type!r}")

    def to_json(self) -> dict[str, Any]:
        """The `NOTIFY` payload: a flat JSON object with a `type` key."""
        return {
            "type": self.type,
            "job_id": str(self.job_id),
            **{key: _jsonable(value) for key, value in self.breadcrumb.items()},
            **{key: _jsonable(value) for key, value in self.details.items()},
            "at": self.at.isoformat(),
        }


def _jsonable(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "as_integer_ratio") and not isinstance(value, int | float):
        return float(value)  # Decimal chapter numbers: 10.5 stays 10.5
    return value


Subscriber = Callable[[JobEvent], None]


class EventBus:
    """Fans events out to subscribers and, when given an engine, to `NOTIFY channel`.

    Subscribers, and the `NOTIFY` unless `background=True`, run on the publishing
    thread. With `background=True`, one notifier thread (started on the first
    event) sends whatever has gathered in ONE transaction, in publishing order,
    so a worker thread never waits for a commit.
    """

    def __init__(
        self, engine: Engine | None = None, channel: str = "job_events", *, background: bool = False
    ) -> None:
        self._engine = engine
        self._channel = channel
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()
        self._background = background and engine is not None
        self._pending: list[str] = []
        self._queued = threading.Condition()
        self._sent = 0  # payloads taken by the notifier (sent or dropped)
        self._published = 0
        self._closing = False
        self._notifier: threading.Thread | None = None
        self._dropped = 0  # events dropped since the last NOTIFY that worked, in an outage

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call `subscriber` for every event (on the publishing thread); returns an unsubscribe."""
        with self._lock:
            self._subscribers = [*self._subscribers, subscriber]
        return lambda: self._unsubscribe(subscriber)

    def _unsubscribe(self, subscriber: Subscriber) -> None:
        with self._lock:
            self._subscribers = [s for s in self._subscribers if s is not subscriber]

    def publish(self, event: JobEvent) -> None:
        for subscriber in self._subscribers:  # replaced on subscribe, never changed in place
            try:
                subscriber(event)
            except Exception:
                logger.exception(
                    "event subscriber failed on %s for job %s", event.type, event.job_id
                )
        if self._engine is None:
            return
        payload = _notify_payload(event)
        if not self._background:
            self._send([payload])
            return
        with self._queued:
            if self._closing:
                return
            self._pending.append(payload)
            self._published += 1
            if self._notifier is None:
                self._notifier = threading.Thread(
                    target=self._notify_loop, name=f"notify-{self._channel}", daemon=True
                )
                self._notifier.start()
            self._queued.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every event published so far left the queue; `True` if it did."""
        with self._queued:
            target = self._published
            return self._queued.wait_for(lambda: self._sent >= target, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (waiting up to `timeout`), then stop the notifier thread."""
        self.flush(timeout)
        with self._queued:
            self._closing = True
            self._queued.notify_all()
        if self._notifier is not None:
            self._notifier.join(timeout)

    def _notify_loop(self) -> None:
        while True:
            with self._queued:
                self._queued.wait_for(lambda: bool(self._pending) or self._closing)
                if not self._pending:
                    return  # closing, nothing left
                batch, self._pending = self._pending, []
            try:
                self._send(batch)
            finally:
                with self._queued:
                    self._sent += len(batch)
                    self._queued.notify_all()

    def _send(self, payloads: list[str]) -> None:
        try:
            with self._engine.begin() as conn:  # type: ignore[union-attr]
                # One statement for the batch; Postgres queues them in call order.
                conn.execute(
                    text(
                        "SELECT pg_notify(:channel, payload) "
                        "FROM unnest(CAST(:payloads AS text[])) WITH ORDINALITY AS p(payload, n) "
                        "ORDER BY n"
                    ),
                    {"channel": self._channel, "payloads": payloads},
                )
        except Exception as exc:
            self._dropped += len(payloads)
            # While the database is away or refuses writes (a failover), one line
            # for the whole spell; the count comes with the line that ends it.
            outage = is_outage(exc)
            if outage and self._dropped > len(payloads):
                logger.debug("could not NOTIFY %s (%s)", self._channel, short_error(exc))
                return
            logger.warning(
                "could not NOTIFY %s of %d event(s) (%s); they are dropped%s",
                self._channel,
                len(payloads),
                short_error(exc) if outage else exc,
                ", and the next ones until the database takes writes" if outage else "",
            )
            if not outage:
                self._dropped = 0
            return
        if self._dropped:
            logger.info(
                "NOTIFY %s works again; %d event(s) were dropped meanwhile",
                self._channel,
                self._dropped,
            )
            self._dropped = 0


def _notify_payload(event: JobEvent) -> str:
    """The JSON sent with `NOTIFY`, its error trimmed to fit Postgres' 8000-byte limit."""
    payload = json.dumps(event.to_json(), ensure_ascii=False)
    if len(payload.encode()) <= NOTIFY_MAX_BYTES:
        return payload
    trimmed = {**event.details, "error": str(event.details.get("error", ""))[:500]}
    return json.dumps(replace(event, details=trimmed).to_json(), ensure_ascii=False)
