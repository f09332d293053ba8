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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import Engine, text

logger = logging.getLogger(__name__)

NOTIFY_MAX_BYTES: Final = 7900
"""Postgres refuses `NOTIFY` payloads of 8000 bytes or more."""

EVENT_TYPES: Final = ("started", "completed", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class JobEvent:
    """`type` is one of `EVENT_TYPES`; `breadcrumb` labels what the job is about
    (the handler says what: for page analysis page_id, manga_id, manga_title,
    chapter_id, chapter_number, page_number); `details` adds attempt, error,
    duration_ms..."""

    type: str
    job_id: uuid.UUID
    breadcrumb: Mapping[str, Any]
    details: Mapping[str, Any] = field(default_factory=dict)
    at: datetime = field(default_factory=lambda: datetime.now(UTC))

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
    """Fans events out to subscribers and, when given an engine, to `NOTIFY channel`."""

    def __init__(self, engine: Engine | None = None, channel: str = "job_events") -> None:
        self._engine = engine
        self._channel = channel
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call `subscriber` for every event (on the publishing thread); returns an unsubscribe."""
        with self._lock:
            self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            with self._lock:
                if subscriber in self._subscribers:
                    self._subscribers.remove(subscriber)

        return unsubscribe

    def publish(self, event: JobEvent) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            try:
                subscriber(event)
            except Exception:
                logger.exception(
                    "event subscriber failed on %s for job %s", event.type, event.job_id
                )
        if self._engine is not None:
            self._notify(event)

    def _notify(self, event: JobEvent) -> None:
        payload = json.dumps(event.to_json(), ensure_ascii=False)
        if len(payload.encode()) > NOTIFY_MAX_BYTES:
            trimmed = dict(event.details)
            trimmed["error"] = str(trimmed.get("error", ""))[:500]
            payload = json.dumps(
                JobEvent(event.type, event.job_id, event.breadcrumb, trimmed, event.at).to_json(),
                ensure_ascii=False,
            )
        try:
            with self._engine.begin() as conn:  # type: ignore[union-attr]
                conn.execute(
                    text("SELECT pg_notify(:channel, :payload)"),
                    {"channel": self._channel, "payload": payload},
                )
        except Exception as exc:
            logger.warning(
                "could not NOTIFY %s of %s for job %s: %s",
                self._channel,
                event.type,
                event.job_id,
                exc,
            )
