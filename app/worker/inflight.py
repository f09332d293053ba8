"""The runner's in-flight jobs: who owns each one, and the slot count.

A job moves `QUEUED` (leased, waiting for a pool thread) -> `EXECUTING`
(a pool thread runs `execute`) -> `FINISHING` (its outcome is being written).
The heartbeat may instead move a queued or executing job to `ABANDONED`
(shutdown, deadline, lease lost). Every move is a compare-and-set under one
lock, so exactly one of the pool thread and the heartbeat acts on a job:
a result that arrives after its job was abandoned is never written.

A slot is held from the lease until the job is finishing or abandoned.
"""

from __future__ import annotations

import enum
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.queue.jobs import Lease
from app.worker.handler import JobContext, JobHandler


class CancelEvent(threading.Event):
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
            with CancelEvent._guard:
                cond = self.__dict__.setdefault("_lazy_cond", threading.Condition(threading.Lock()))
        return cond


class JobState(enum.Enum):
    QUEUED = "queued"
    EXECUTING = "executing"
    FINISHING = "finishing"
    ABANDONED = "abandoned"


HOLDING_A_SLOT = frozenset({JobState.QUEUED, JobState.EXECUTING})


@dataclass(eq=False, slots=True)
class InFlight:
    """One leased job. `item` is what `load` returned; `load_error` says why it
    could not be loaded; `nothing_to_do` when `load` returned `None`."""

    lease: Lease
    handler: JobHandler[Any, Any]
    item: Any = None
    load_error: str | None = None
    nothing_to_do: bool = False
    state: JobState = JobState.QUEUED
    cancel: threading.Event = field(default_factory=CancelEvent)
    ctx: JobContext | None = None
    breadcrumb: Mapping[str, Any] | None = None
    slot: int = -1
    """The pool thread (by index) executing it, while `EXECUTING`."""
    fields: dict[str, Any] | None = None
    """Its log fields, once known (see `outcomes.job_fields`)."""


class InFlightJobs:
    """The registry of a runner's in-flight jobs (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[uuid.UUID, InFlight] = {}
        self._holding = 0

    def add(self, jobs: list[InFlight]) -> None:
        with self._lock:
            for job in jobs:
                self._jobs[job.lease.id] = job
                if job.state in HOLDING_A_SLOT:
                    self._holding += 1

    def move(self, job: InFlight, allowed: frozenset[JobState], to: JobState) -> bool:
        """Move `job` to `to` if it is in one of `allowed`; `False` (and no change) otherwise."""
        with self._lock:
            if job.state not in allowed or self._jobs.get(job.lease.id) is not job:
                return False
            if job.state in HOLDING_A_SLOT and to not in HOLDING_A_SLOT:
                self._holding -= 1
            job.state = to
            if to is JobState.ABANDONED:
                del self._jobs[job.lease.id]
            return True

    def remove(self, job: InFlight) -> None:
        with self._lock:
            if self._jobs.get(job.lease.id) is job:
                del self._jobs[job.lease.id]
                if job.state in HOLDING_A_SLOT:
                    self._holding -= 1

    def holding(self) -> int:
        """Jobs that hold a slot (queued or executing)."""
        return self._holding

    def snapshot(self) -> list[InFlight]:
        with self._lock:
            return list(self._jobs.values())

    def __len__(self) -> int:
        return len(self._jobs)
