"""The runner's in-flight jobs: who owns each one, and the slot count.

A job moves `QUEUED` (leased) -> `EXECUTING` (a pool thread runs `execute`)
-> `FINISHING` (its outcome is being written), or the heartbeat moves a queued
or executing job to `ABANDONED` (shutdown, deadline, lease lost). Every move
is a compare-and-set under one lock, so exactly one of the pool thread and the
heartbeat acts on a job: a result that arrives after its job was abandoned is
never written. A slot is held from the lease until the job is finishing or
abandoned.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from manga_page_analysis.queue import Lease
from manga_page_analysis.worker.handler import AnyHandler, JobContext

logger = logging.getLogger(__name__)


class StopEvent(threading.Event):
    """A `threading.Event` whose lock is made on first `set`/`wait`: the runner
    makes one per job, most are only ever asked `is_set()`, and a Condition
    with its Lock costs more than the rest of a no-op job's bookkeeping."""

    _guard = threading.Lock()

    def __init__(self) -> None:  # no super().__init__(): the condition comes later
        self._flag = False

    @property
    def _cond(self) -> threading.Condition:
        cond: threading.Condition | None = self.__dict__.get("_lazy_cond")
        if cond is None:
            with StopEvent._guard:
                cond = self.__dict__.setdefault("_lazy_cond", threading.Condition(threading.Lock()))
        return cond


class JobState(enum.Enum):
    QUEUED = "queued"
    EXECUTING = "executing"
    FINISHING = "finishing"
    ABANDONED = "abandoned"


HOLDING_A_SLOT = frozenset({JobState.QUEUED, JobState.EXECUTING})
_QUEUED = frozenset({JobState.QUEUED})
_EXECUTING = frozenset({JobState.EXECUTING})


@dataclass(eq=False, slots=True)
class InFlight:
    """One leased job. `item` is what `load` returned; `load_error` says why it
    could not be loaded; `nothing_to_do` when `load` returned `None`.

    `label`, `breadcrumb` and `log_fields` are fixed by `new_job`; `state`,
    `ctx` and `slot` are written by `InFlightJobs` only."""

    lease: Lease
    handler: AnyHandler
    label: str
    log_fields: Mapping[str, Any]
    breadcrumb: Mapping[str, Any] | None = None
    item: Any = None
    load_error: str | None = None
    nothing_to_do: bool = False
    stop: threading.Event = field(default_factory=StopEvent)
    state: JobState = JobState.QUEUED
    ctx: JobContext | None = None
    """Set when its dispatch starts."""
    slot: int = -1
    """The pool thread (by index) executing it, while `EXECUTING`."""


def new_job(
    lease: Lease, handler: AnyHandler, item: Any = None, *, load_error: str | None = None
) -> InFlight:
    """A leased job, with its label, breadcrumb and log fields worked out once.

    A handler whose `describe`/`breadcrumb`/`log_fields` raises still gets
    its job run: it is labelled by id only and publishes no events."""
    job_id = str(lease.id)
    fields: dict[str, Any] = {
        "job_id": job_id,
        "kind": lease.payload.kind,
        "attempt": lease.attempts,
    }
    job = InFlight(lease, handler, f"job {job_id}", fields, item=item, load_error=load_error)
    if load_error is not None or item is None:
        job.nothing_to_do = load_error is None
        # Optional (JobHandler): what a `skipped` event of this job says it is about.
        skipped_breadcrumb = getattr(handler, "skipped_breadcrumb", None)
        if job.nothing_to_do and skipped_breadcrumb is not None:
            try:
                job.breadcrumb = skipped_breadcrumb(lease)
            except Exception:
                logger.exception("%s: no breadcrumb; events suppressed for this job", job.label)
        return job
    try:
        job.label = f"{job.label} ({handler.describe(item)})"
        job.breadcrumb = handler.breadcrumb(item)
        log_fields = getattr(handler, "log_fields", None)  # optional (JobHandler)
        if log_fields is not None:
            fields.update(log_fields(item))
    except Exception:
        logger.exception("%s: no breadcrumb; events suppressed for this job", job.label)
        job.breadcrumb = None
    return job


class InFlightJobs:
    """The registry of a runner's in-flight jobs (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[uuid.UUID, InFlight] = {}
        self.holding = 0
        """Jobs that hold a slot (queued or executing)."""
        self.on_slot_freed: Callable[[], None] = lambda: None
        """Called for every slot freed (the lease loop waits for them)."""
        self.on_stuck: Callable[[InFlight], None] = lambda job: None
        """Called for every job given up in `execute` (the pool replaces its thread)."""
        self.job_seconds: float | None = None
        """A moving average of how long a pool thread spends on one job."""

    def add(self, jobs: list[InFlight]) -> None:
        with self._lock:
            for job in jobs:
                self._jobs[job.lease.id] = job
            self.holding += len(jobs)

    def start(self, job: InFlight, slot: int, job_timeout: float) -> JobContext | None:
        """A pool thread takes `job`: its context (deadline from now), or `None`
        when the job was given up before it started."""
        now = time.monotonic()
        ctx = JobContext(job.lease, now + job_timeout, job.stop, now, job.label)
        with self._lock:
            if job.state is not JobState.QUEUED or self._jobs.get(job.lease.id) is not job:
                return None
            job.state, job.ctx, job.slot = JobState.EXECUTING, ctx, slot
        return ctx

    def finish(self, job: InFlight) -> bool:
        """Its outcome is about to be written: `False` if the job was given up
        meanwhile (then nothing may be written). Frees its slot."""
        allowed = _EXECUTING if job.ctx is not None else _QUEUED
        if self._move(job, allowed, JobState.FINISHING) is None:
            return False
        if job.ctx is not None:
            seconds = time.monotonic() - job.ctx.started_at
            average = self.job_seconds
            self.job_seconds = seconds if average is None else 0.95 * average + 0.05 * seconds
        return True

    def abandon(self, job: InFlight) -> bool:
        """Give up a queued or executing job (sets its `stop` flag); `False` if it
        was no longer either."""
        was = self._move(job, HOLDING_A_SLOT, JobState.ABANDONED)
        if was is None:
            return False
        job.stop.set()
        if was is JobState.EXECUTING:
            self.on_stuck(job)
        return True

    def _move(self, job: InFlight, allowed: frozenset[JobState], to: JobState) -> JobState | None:
        """Move `job` from a state in `allowed` to `to`: the state it left (read under
        the lock, so a pool thread starting it meanwhile is seen), or `None`."""
        with self._lock:
            was = job.state
            if was not in allowed or self._jobs.get(job.lease.id) is not job:
                return None
            job.state = to
            if to is JobState.ABANDONED:
                del self._jobs[job.lease.id]
            self.holding -= 1  # every allowed move leaves HOLDING_A_SLOT
        self.on_slot_freed()
        return was

    def remove(self, job: InFlight) -> None:
        """Its outcome was written (or will never be): it leaves the registry."""
        freed = False
        with self._lock:
            if self._jobs.get(job.lease.id) is job:
                del self._jobs[job.lease.id]
                if job.state in HOLDING_A_SLOT:
                    self.holding -= 1
                    freed = True
        if freed:
            self.on_slot_freed()

    def snapshot(self) -> list[InFlight]:
        with self._lock:
            return list(self._jobs.values())

    def earliest_deadline(self) -> float:
        return min(
            (job.ctx.deadline for job in self.snapshot()
             if job.state is JobState.EXECUTING and job.ctx is not None),
            default=float("inf"),
        )  # fmt: skip

    def __len__(self) -> int:
        return len(self._jobs)
