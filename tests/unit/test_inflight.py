"""The in-flight registry's moves: exactly one of the pool thread and the
heartbeat acts on a job, and giving up an executing job tells the pool."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from manga_page_analysis.queue import AnalyzePage, Lease
from manga_page_analysis.worker.inflight import InFlight, InFlightJobs, JobState
from manga_page_analysis.worker.noop import NoopHandler


def _job() -> InFlight:
    lease = Lease(uuid.uuid4(), AnalyzePage(page_id=uuid.uuid4()), 1, 5, 1)
    return InFlight(lease, NoopHandler("analyze_page"), "job", {})


def _registry(job: InFlight) -> tuple[InFlightJobs, list[InFlight], list[str]]:
    registry = InFlightJobs()
    stuck: list[InFlight] = []
    freed: list[str] = []
    registry.on_stuck = stuck.append
    registry.on_slot_freed = lambda: freed.append("slot")
    registry.add([job])
    return registry, stuck, freed


def test_giving_up_a_queued_job_frees_its_slot_and_leaves_the_pool_alone() -> None:
    job = _job()
    registry, stuck, freed = _registry(job)

    assert registry.abandon(job) is True
    assert job.state is JobState.ABANDONED and job.stop.is_set()
    assert stuck == [] and freed == ["slot"] and registry.holding == 0
    assert registry.start(job, 0, 60.0) is None  # a pool thread that comes later skips it
    assert registry.abandon(job) is False  # only once


def test_giving_up_an_executing_job_tells_the_pool_and_fences_its_result() -> None:
    job = _job()
    registry, stuck, _ = _registry(job)
    assert registry.start(job, 0, 60.0) is not None

    assert registry.abandon(job) is True
    assert stuck == [job]
    assert registry.finish(job) is False  # its late result is never written


def test_a_job_started_just_before_it_is_given_up_counts_as_executing() -> None:
    """A pool thread may take the job between the heartbeat's decision and its
    move: the state the move left is the one that decides (read under the lock)."""
    job = _job()
    registry, stuck, _ = _registry(job)
    real_lock = registry._lock

    class PoolThreadWinsTheRace:
        """The registry's lock; the first time the heartbeat's move asks for it,
        a pool thread starts the job first."""

        raced = False

        def __enter__(self) -> Any:
            if not self.raced and threading.current_thread().name == "heartbeat":
                self.raced = True
                registry._lock = real_lock
                assert registry.start(job, 0, 60.0) is not None
                registry._lock = self  # type: ignore[assignment]
            return real_lock.__enter__()

        def __exit__(self, *exc: object) -> None:
            real_lock.__exit__(*exc)

    registry._lock = PoolThreadWinsTheRace()  # type: ignore[assignment]
    results: list[bool] = []
    heartbeat = threading.Thread(
        target=lambda: results.append(registry.abandon(job)), name="heartbeat"
    )
    heartbeat.start()
    heartbeat.join(10)

    assert results == [True]
    assert job.state is JobState.ABANDONED
    assert stuck == [job]  # the pool is told to replace the thread running it
