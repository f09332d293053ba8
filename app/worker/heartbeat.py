"""Heartbeats: keep a running job's lease alive while its dispatch runs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from app.queue.jobs import Lease, renew

logger = logging.getLogger(__name__)


class Heartbeat:
    """Renews `lease` every `interval` seconds on its own thread.

    `on_change` is called when the lease is found gone (`lost`) or the thread
    dies of an unexpected error (`died`), so the worker waiting on the job
    wakes at once. A database error is not a lost lease: it is logged and
    retried at the next beat, while the lease window (3 beats) lasts.
    """

    def __init__(
        self,
        engine: Engine,
        lease: Lease,
        *,
        lease_duration: timedelta,
        interval: float,
        on_change: Callable[[], None],
        job_label: str = "",
    ) -> None:
        self._engine = engine
        self._lease = lease
        self._lease_duration = lease_duration
        self._interval = interval
        self._on_change = on_change
        self._label = job_label or f"job {lease.id}"
        self._stop = threading.Event()
        self.lost = False
        self.died: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{lease.id}", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating; returns without waiting for an in-flight renew."""
        self._stop.set()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._interval):
                try:
                    with self._engine.begin() as conn:
                        current = renew(conn, self._lease, self._lease_duration)
                except SQLAlchemyError as exc:
                    logger.warning(
                        "heartbeat for %s could not renew its lease (%s); retrying in %.0f s",
                        self._label,
                        exc.__class__.__name__,
                        self._interval,
                    )
                    continue
                if self._stop.is_set():
                    return
                if not current:
                    self.lost = True
                    logger.warning(
                        "%s lost its lease (generation %d); its result will be discarded",
                        self._label,
                        self._lease.lease_generation,
                    )
                    self._on_change()
                    return
        except BaseException as exc:
            self.died = exc
            logger.critical("heartbeat thread for %s died", self._label, exc_info=exc)
            self._on_change()
