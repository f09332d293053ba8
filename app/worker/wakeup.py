"""Instant pickup: one listening connection per runner.

Inserts of due jobs (and jobs moved back to pending) `NOTIFY
crawler_jobs_wakeup` with their kinds, at commit (migration 0003); the
listener wakes the idle lease loop when one names a kind the runner handles.
Polling stays the fallback: a lost notification costs at most one `idle_poll`.
After a reconnect it wakes the lease loop once, for what it may have missed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

import psycopg
from sqlalchemy import Engine

from app.db import connect_kwargs
from app.queue import WAKEUP_CHANNEL
from app.worker.dbsession import short_error
from app.worker.outage import DatabaseOutage
from app.worker.service import ThreadService

logger = logging.getLogger(__name__)

CHECK_STOP_SECONDS = 0.5
"""How long one wait for notifications lasts before the stop flag is checked."""


class WakeupListener(ThreadService):
    """`on_wake()` is called for each notification naming one of `kinds`;
    `listen_url`: see `Runner`."""

    role = "listener"

    def __init__(
        self,
        engine: Engine,
        kinds: Collection[str],
        on_wake: Callable[[], None],
        outage: DatabaseOutage,
        *,
        listen_url: str | None = None,
        name: str = "worker",
    ) -> None:
        super().__init__(name)
        self._connect_kwargs = connect_kwargs(listen_url or engine)
        self._kinds = frozenset(kinds)
        self._on_wake = on_wake
        self._outage = outage
        self.connections = 0
        """Connections made so far (tests watch it to see a reconnect)."""
        self.listening = threading.Event()
        """Set while LISTEN is in effect."""

    def run(self) -> None:
        failures = 0
        while not self.stopped.is_set():
            established = False
            try:
                with psycopg.connect(**{**self._connect_kwargs, "autocommit": True}) as conn:
                    self.connections += 1
                    conn.execute(f'LISTEN "{WAKEUP_CHANNEL}"')
                    self.listening.set()
                    established = True
                    if self.connections > 1:
                        self._on_wake()  # notifications may have been missed meanwhile
                    self._outage.recovered()
                    failures = 0
                    self._listen(conn)
                    return
            except psycopg.Error as exc:
                self.listening.clear()
                if self.stopped.is_set():
                    return
                if established:
                    logger.info("wake-up listener lost its connection (%s); reconnecting", exc)
                    continue
                failures += 1
                self.stopped.wait(self._outage.failed(short_error(exc), failures))

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        kinds = self._kinds
        while not self.stopped.is_set():
            for notify in conn.notifies(timeout=CHECK_STOP_SECONDS):
                payload = notify.payload
                if not payload or not kinds.isdisjoint(payload.split(",")):
                    self._on_wake()
