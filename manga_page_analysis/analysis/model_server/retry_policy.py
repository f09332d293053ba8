"""How one vision request is retried: tenacity, bounded by attempts, a deadline and a cancel event.

`VisionUnavailable` (connection errors, timeouts shorter than the deadline, 429, 5xx) is
retried with exponential backoff and jitter; a first `ConnectionDropped` at once.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Generic, NoReturn, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential

from manga_page_analysis.errors import VisionCancelled, VisionUnavailable

log = logging.getLogger("manga_page_analysis.analysis.model_server.client")

T = TypeVar("T")


class ConnectionDropped(VisionUnavailable):
    """An open connection died before the answer came: a kept-alive connection the server
    had just closed (a new connection will do), or a server that went away mid-request."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """At most `max_attempts` requests; the wait before retry n is
    `min(initial_seconds × 2^(n−1), max_seconds)`, shortened by up to `jitter`
    (a fraction in [0, 1]) at random."""

    max_attempts: int = 5
    initial_seconds: float = 0.5
    max_seconds: float = 10.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be between 0 and 1, got {self.jitter}")


DEFAULT_RETRY: Final = RetryPolicy()


class RetryingCall(Generic[T]):
    """Runs `attempt` until it succeeds, raises something not worth retrying, or
    the policy, the deadline (a `time.monotonic()`) or `cancel` stops it.

    No backoff sleep starts that would end past the deadline; `cancel` wakes a
    sleep at once. When retries stop, raises `VisionCancelled` (cancel was
    set) or `VisionUnavailable` naming why and the last error. `attempts`
    counts the calls of `attempt`; `label` names the job in log lines.
    """

    def __init__(
        self,
        attempt: Callable[[], T],
        policy: RetryPolicy,
        *,
        deadline: float,
        cancel: threading.Event | None,
        label: str,
    ) -> None:
        self.attempts = 0
        self._attempt = attempt
        self._policy = policy
        self._deadline = deadline
        self._cancel = cancel if cancel is not None else threading.Event()
        self._label = label
        self._last_failure: BaseException | None = None
        self._exponential = wait_exponential(
            multiplier=policy.initial_seconds, max=policy.max_seconds
        )

    def run(self) -> T:
        retrying = Retrying(
            sleep=self._pause,
            stop=self._stop,
            wait=self._backoff,
            retry=retry_if_exception_type(VisionUnavailable),
            before_sleep=self._log_retry,
            retry_error_callback=self._give_up,
        )
        return retrying(self._counted)

    def _counted(self) -> T:
        self.attempts += 1
        return self._attempt()

    def _stop(self, state: RetryCallState) -> bool:
        return (
            self._cancel.is_set()
            or state.attempt_number >= self._policy.max_attempts
            # Never start a sleep whose end is already past the deadline.
            or time.monotonic() + state.upcoming_sleep >= self._deadline
        )

    def _backoff(self, state: RetryCallState) -> float:
        if state.attempt_number == 1 and isinstance(_failure(state), ConnectionDropped):
            return 0.0
        shortened = 1.0 - self._policy.jitter * random.random()
        return float(self._exponential(state)) * shortened

    def _pause(self, seconds: float) -> None:
        # cancel.wait returns as soon as the event is set, so a shutdown
        # does not wait out a backoff; the stop check then sees the event.
        self._cancel.wait(seconds)
        if time.monotonic() >= self._deadline:
            # A sleep that was to end in time overran it (a busy machine): give up as
            # the stop check would have, naming the last real failure. Tenacity lets
            # an exception from `sleep` through.
            cause = self._last_failure
            raise self._unavailable(cause, "no time left before the deadline") from cause

    def _log_retry(self, state: RetryCallState) -> None:
        self._last_failure = _failure(state)
        # A dropped kept-alive connection retried at once is routine, not a warning.
        level = logging.INFO if state.upcoming_sleep == 0 else logging.WARNING
        log.log(
            level,
            "vision request%s failed (attempt %d of %d): %s; retrying in %.1f s",
            self._label,
            state.attempt_number,
            self._policy.max_attempts,
            self._last_failure,
            state.upcoming_sleep,
        )

    def _give_up(self, state: RetryCallState) -> NoReturn:
        cause = _failure(state)
        if self._cancel.is_set():
            raise VisionCancelled(
                f"analysis{self._label} cancelled after {self.attempts} attempt(s)"
            ) from cause
        why = (
            "retries exhausted"
            if state.attempt_number >= self._policy.max_attempts
            else "no time left before the deadline"
        )
        raise self._unavailable(cause, why) from cause

    def _unavailable(self, cause: BaseException | None, why: str) -> VisionUnavailable:
        status = cause.status_code if isinstance(cause, VisionUnavailable) else None
        return VisionUnavailable(
            f"vision request{self._label} failed after {self.attempts} attempt(s), "
            f"{why}; last error: {cause}",
            status_code=status,
        )


def _failure(state: RetryCallState) -> BaseException | None:
    return state.outcome.exception() if state.outcome is not None else None
