"""The readiness gate: workers lease nothing while the model server is not ready."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)


class ReadinessGate:
    """Shared by all worker threads of a runner.

    `wait_ready` returns `True` once the probe says ready, or `False` when
    `stop` is set first. A ready answer is reused for `fresh_seconds` so N
    workers do not probe N times; while not ready, it re-probes every
    `poll_seconds`. Only transitions are logged, naming the URL.
    """

    def __init__(
        self,
        probe: Callable[[], bool],
        *,
        url: str,
        poll_seconds: float = 2.0,
        fresh_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe = probe
        self.url = url
        self.poll_seconds = poll_seconds
        self.fresh_seconds = fresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._ready: bool | None = None
        self._checked_at = float("-inf")

    @property
    def ready(self) -> bool | None:
        """The last probe's answer; `None` before the first probe."""
        return self._ready

    def check(self) -> bool:
        """Probe now unless a ready answer is still fresh."""
        with self._lock:
            if self._ready and self._clock() - self._checked_at < self.fresh_seconds:
                return True
            ready = self._probe()
            self._checked_at = self._clock()
            if ready != self._ready:
                if ready:
                    logger.info("vision server %s is ready; leasing jobs", self.url)
                else:
                    logger.warning(
                        "vision server %s is not ready; leasing nothing, re-probing every %.0f s",
                        self.url,
                        self.poll_seconds,
                    )
            self._ready = ready
            return ready

    def recheck(self) -> None:
        """Forget a fresh ready answer, so the next `check` probes again: after a
        failed attempt, the server may have gone down within the freshness window."""
        with self._lock:
            self._checked_at = float("-inf")

    def wait_ready(self, stop: threading.Event) -> bool:
        while not stop.is_set():
            if self.check():
                return True
            stop.wait(self.poll_seconds)
        return False
