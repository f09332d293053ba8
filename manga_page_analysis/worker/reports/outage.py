"""One log line when the database goes away and one when it is back, however
many worker threads keep retrying meanwhile."""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger(__name__)


class DatabaseOutage:
    """Shared by a runner's threads (thread-safe). `failed` reports a failed
    database call and returns how long that thread should wait (exponential per
    thread, capped at `max_delay`); `unreachable` reports one without choosing
    the wait (the runner's threads wait as `dbsession`'s `DbRetry` says);
    `recovered` reports a call that worked."""

    def __init__(
        self, max_delay: float, *, base_delay: float = 0.5, activity: str = "leasing"
    ) -> None:
        self.max_delay = max_delay
        self.base_delay = base_delay
        self.activity = activity  # what pauses meanwhile, for the log lines
        self._lock = threading.Lock()
        self._down_since: float | None = None

    def failed(self, error: str, failures_in_a_row: int) -> float:
        exponent = min(max(failures_in_a_row, 1), 10)
        delay = min(self.max_delay, self.base_delay * 2.0**exponent)
        self.unreachable(error)
        return delay

    def unreachable(self, error: str) -> None:
        """A database call failed: the first report of an outage is logged, the
        others only at debug level."""
        with self._lock:
            if self._down_since is not None:
                logger.debug("database still unreachable (%s)", error)
                return
            self._down_since = time.monotonic()
        logger.warning(
            "database unreachable or refusing writes (%s); %s paused, retrying with backoff "
            "(at most %.0f s apart) until it is back",
            error,
            self.activity,
            self.max_delay,
        )

    def recovered(self) -> None:
        if self._down_since is None:  # the common case: no lock taken
            return
        with self._lock:
            if self._down_since is None:
                return
            lasted = time.monotonic() - self._down_since
            self._down_since = None
        logger.info("database reachable again after %.1f s; %s resumed", lasted, self.activity)
