"""The worker's breaker: a worker whose jobs of one kind all fail the same way stops
leasing that kind for a while, instead of failing its way through the queue.

Per kind, it watches the ends of the jobs this runner ran: when the last `failures`
of them all failed with the same error class while none succeeded, the breaker
opens. While it is open the runner leases nothing of that kind (other kinds, and
other workers, go on) and releases what it holds of it. After `pause` seconds
the kind is leased again ("half-open"): a success closes the breaker; one more
failure of the same class opens it again at once.

It also keeps the rule that bounds a refund (`charges`): a job released because
a dependency failed (an error whose `job_at_fault` is `False`) that meets such an
error again after other jobs of its kind succeeded in between is charged after all:
the dependency works for the others, so the job is the cause.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from manga_page_analysis.config import DEFAULT_BREAKER_FAILURES, DEFAULT_BREAKER_PAUSE_SECONDS

logger = logging.getLogger(__name__)

REMEMBERED_REFUNDS: Final = 10_000
"""Refunded jobs remembered for `charges` (the oldest are forgotten first)."""


@dataclass(slots=True)
class _KindState:
    error_class: str = ""
    in_a_row: int = 0
    successes: int = 0
    open_until: float | None = None
    reason: str = ""


BreakerListener = Callable[[str, bool, str], None]
"""`(kind, open, reason)`: called when a kind's breaker opens (`True`) or closes."""


class Breaker:
    """Thread-safe. `failures` of 0 turns it off (it never opens; `charges` still works).

    `on_change(kind, open, reason)` is called outside the lock, on the thread that
    reported the end that changed the state."""

    def __init__(
        self,
        *,
        failures: int = DEFAULT_BREAKER_FAILURES,
        pause: float = DEFAULT_BREAKER_PAUSE_SECONDS,
        on_change: BreakerListener | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failures < 0 or pause < 0:
            raise ValueError("breaker failures and pause must be at least 0")
        self.failures = failures
        self.pause = pause
        self.on_change = on_change
        self._clock = clock
        self._lock = threading.Lock()
        self._kinds: dict[str, _KindState] = {}
        self._refunds: OrderedDict[uuid.UUID, int] = OrderedDict()

    def _state(self, kind: str) -> _KindState:
        state = self._kinds.get(kind)
        if state is None:
            state = self._kinds[kind] = _KindState()
        return state

    # --- what the pool reports ----------------------------------------------------

    def succeeded(self, kind: str, job_id: uuid.UUID) -> None:
        """A job of `kind` ran to a result: the streak ends and an open breaker closes."""
        with self._lock:
            state = self._state(kind)
            state.successes += 1
            state.in_a_row, state.error_class = 0, ""
            self._refunds.pop(job_id, None)
            was_open, state.open_until, state.reason = state.open_until is not None, None, ""
        if was_open:
            logger.info("breaker for %s closed: a job succeeded; leasing as usual", kind)
            self._notify(kind, False, "")

    def failed(self, kind: str, error_class: str, message: str) -> bool:
        """A job of `kind` failed with `error_class` (charged or not); `True` when this
        opened the breaker."""
        with self._lock:
            state = self._state(kind)
            if error_class == state.error_class:
                state.in_a_row += 1
            else:
                state.error_class, state.in_a_row = error_class, 1
            if not self.failures or state.in_a_row < self.failures:
                return False
            now = self._clock()
            if state.open_until is not None and now < state.open_until:
                return False  # already open: a job that was running when it opened
            state.open_until = now + self.pause
            state.reason = (
                f"the last {state.in_a_row} {kind} jobs failed with {error_class} and none "
                f"succeeded; last error: {message}"
            )
            reason = state.reason
        logger.error(
            "breaker for %s opened: %s; leasing no %s job for %g s and releasing the ones "
            "held (other workers go on)",
            kind,
            reason,
            kind,
            self.pause,
        )
        self._notify(kind, True, reason)
        return True

    def refunded(self, kind: str, job_id: uuid.UUID) -> None:
        """`job_id` was released, not charged, for a failure that was not its fault."""
        with self._lock:
            self._refunds[job_id] = self._state(kind).successes
            self._refunds.move_to_end(job_id)
            while len(self._refunds) > REMEMBERED_REFUNDS:
                self._refunds.popitem(last=False)

    def charges(self, kind: str, job_id: uuid.UUID) -> bool:
        """Whether a failure of `job_id` that is not its fault is charged all the same:
        it was refunded before, and jobs of its kind succeeded since."""
        with self._lock:
            before = self._refunds.get(job_id)
            return before is not None and self._state(kind).successes > before

    # --- what the lease loop asks --------------------------------------------------

    def allows(self, kind: str) -> bool:
        """Whether `kind` may be leased: its breaker is closed, or its pause is over."""
        with self._lock:
            state = self._kinds.get(kind)
            return state is None or state.open_until is None or self._clock() >= state.open_until

    def leasable(self, kinds: Iterable[str]) -> list[str]:
        return [kind for kind in kinds if self.allows(kind)]

    def seconds_to_retry(self) -> float | None:
        """How long until the next open breaker's pause ends; `None` when none is paused."""
        with self._lock:
            now = self._clock()
            ends = [
                state.open_until - now
                for state in self._kinds.values()
                if state.open_until is not None and state.open_until > now
            ]
        return max(0.0, min(ends)) if ends else None

    def open_reason(self, kind: str) -> str:
        """Why `kind`'s breaker is open (empty when it is closed)."""
        with self._lock:
            state = self._kinds.get(kind)
            return state.reason if state is not None else ""

    def _notify(self, kind: str, is_open: bool, reason: str) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(kind, is_open, reason)
        except Exception:
            logger.exception("breaker listener failed for %s", kind)
