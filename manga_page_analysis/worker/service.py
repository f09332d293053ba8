"""The runner's background pieces share one interface: start, stop, join."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

logger = logging.getLogger(__name__)

RESTART_DELAY_SECONDS = 0.05
"""Pause before a service whose thread died unexpectedly runs again (logged): a bug
in one beat or one lease round does not take the worker down."""


class Service(Protocol):
    """`start()` and `stop()` return at once (`stop()` is idempotent); `join(timeout)`
    waits up to `timeout` seconds, `True` once the work has ended (or never started).
    `deaths` counts the unexpected errors its threads survived."""

    deaths: int

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def join(self, timeout: float) -> bool: ...


class ThreadService:
    """A service on one thread, named `{name}-{role}`. Subclasses define `run()`,
    which returns once `stopped` is set; `stop()` also sets `_wake`, an event
    `run()` may sleep on (a subclass that sleeps on something else overrides
    `_request_stop()`)."""

    role = "service"

    def __init__(self, name: str) -> None:
        self.stopped = threading.Event()
        self._wake = threading.Event()
        self.deaths = 0
        """Times `run()` died of an unexpected error."""
        self._thread: threading.Thread | None = None
        self._thread_name = f"{name}-{self.role}"

    def run(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._guarded, name=self._thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self.stopped.is_set():
            return
        self.stopped.set()
        self._request_stop()

    def _request_stop(self) -> None:
        self._wake.set()

    def join(self, timeout: float) -> bool:
        thread = self._thread
        if thread is None:
            return True
        if thread is not threading.current_thread():
            thread.join(max(0.0, timeout))
        return not thread.is_alive()

    def _guarded(self) -> None:
        while True:
            try:
                self.run()
                return
            except BaseException:
                self.deaths += 1
                logger.critical(
                    "%s thread %s died unexpectedly; starting a new one",
                    self.role,
                    self._thread_name,
                    exc_info=True,
                )
                if self.stopped.is_set():
                    return
                self.stopped.wait(RESTART_DELAY_SECONDS)
