"""The readiness gate: workers lease nothing while what the jobs need is not ready."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

logger = logging.getLogger(__name__)

DEFAULT_REMIND_SECONDS = 60.0
"""While the gate stays closed, it says so again this often."""


class ProbeAnswer(Protocol):
    """What a probe may answer instead of a plain `bool`.

    `reason` says, for people, why it is not ready (`"refused the connection"`,
    `"answered 503: Loading model"`); `starting` is True while that is expected
    (a model still loading), which is logged at INFO rather than WARNING. An answer
    may also carry `part` (a `str`): the part that is down (`"page store s3://…"`),
    named in the log line instead of the gate's own name.
    """

    @property
    def ready(self) -> bool: ...

    @property
    def reason(self) -> str: ...

    @property
    def starting(self) -> bool: ...


Probe = Callable[[], "bool | ProbeAnswer"]
"""Quick, never raises: any failure is a not-ready answer."""


class ReadinessGate:
    """Shared by all worker threads of a runner (thread-safe).

    `wait_ready` returns `True` once the probe says ready, or `False` when
    `stop` is set first; it re-probes every `poll_seconds`. A ready answer is
    reused for `fresh_seconds`, so N workers do not probe N times. Log lines
    name the gate by `name` (what the jobs wait for): closing is logged with the
    probe's reason, again when the reason changes and every `remind_seconds`
    while it stays closed; opening is logged once.
    """

    def __init__(
        self,
        probe: Probe,
        *,
        name: str,
        poll_seconds: float = 2.0,
        fresh_seconds: float = 1.0,
        remind_seconds: float = DEFAULT_REMIND_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe = probe
        self.name = name
        self.poll_seconds = poll_seconds
        self.fresh_seconds = fresh_seconds
        self.remind_seconds = remind_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self.ready: bool | None = None
        """The last probe's answer; `None` before the first probe."""
        self.reason = ""
        """Why the last probe said not ready (empty when ready, or when the probe gave none)."""
        self.part = ""
        """What the last probe found down (its answer's `part`, else `name`); empty when ready."""
        self._checked_at = float("-inf")
        self._closed_since = 0.0
        self._reported_at = 0.0

    def check(self) -> bool:
        """Probe now unless a ready answer is still fresh."""
        with self._lock:
            now = self._clock()
            if self.ready and now - self._checked_at < self.fresh_seconds:
                return True
            answer = self._probe()
            if isinstance(answer, bool):
                ready, reason, starting, part = answer, "", False, ""
            else:
                ready, reason, starting = answer.ready, answer.reason, answer.starting
                part = str(getattr(answer, "part", "") or "")
            now = self._checked_at = self._clock()
            if ready:
                if self.ready is not True:
                    logger.info("%s is ready; leasing jobs", self.name)
            elif self.ready is not False:
                self._closed_since = self._reported_at = now
                self._log_closed(part, reason, starting, since=None)
            elif reason != self.reason or now - self._reported_at >= self.remind_seconds:
                self._reported_at = now
                self._log_closed(part, reason, starting, since=now - self._closed_since)
            self.ready, self.reason = ready, ("" if ready else reason)
            self.part = "" if ready else (part or self.name)
            return ready

    def _log_closed(self, part: str, reason: str, starting: bool, *, since: float | None) -> None:
        level = logging.INFO if starting else logging.WARNING
        why = f": {reason}" if reason else ""
        still = "" if since is None else f" (for {since:.0f} s)"
        logger.log(
            level,
            "%s is not ready%s%s; leasing nothing, retrying every %g s",
            part or self.name,
            why,
            still,
            self.poll_seconds,
        )

    def recheck(self) -> None:
        """Forget a fresh ready answer, so the next `check` probes again."""
        with self._lock:
            self._checked_at = float("-inf")

    def wait_ready(self, stop: threading.Event) -> bool:
        while not stop.is_set():
            if self.check():
                return True
            stop.wait(self.poll_seconds)
        return False
