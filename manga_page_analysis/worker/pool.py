"""The fixed pool: `workers` threads, each running one job's `execute` at a time.

A pool thread runs `execute` with no transaction open, hands its end (done or
failed) to the acker and takes its next job at once.
Threads cannot be killed: when the heartbeat gives up a job still in
`execute`, a replacement thread starts in its slot; the stuck
thread ends when its call returns, and writes nothing.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from manga_page_analysis.errors import DispatchTimeout, ServiceError
from manga_page_analysis.worker.acker import Acker
from manga_page_analysis.worker.gates.breaker import Breaker
from manga_page_analysis.worker.gates.readiness import ReadinessGate
from manga_page_analysis.worker.heartbeat import Heartbeat
from manga_page_analysis.worker.inflight import InFlight, InFlightJobs
from manga_page_analysis.worker.outcomes import describe_error
from manga_page_analysis.worker.reports.logcontext import job_log_context

logger = logging.getLogger(__name__)


class WorkerPool:
    """A service (start / stop / join) of `workers` threads fed by `submit`."""

    def __init__(
        self,
        jobs: InFlightJobs,
        acker: Acker,
        heartbeat: Heartbeat,
        *,
        workers: int,
        job_timeout: float,
        readiness: ReadinessGate | None,
        breaker: Breaker | None = None,
        name: str = "worker",
    ) -> None:
        self._jobs = jobs
        self._breaker = breaker if breaker is not None else Breaker(failures=0)
        self._acker = acker
        self._heartbeat = heartbeat
        self.workers = workers
        self.job_timeout = job_timeout
        self._readiness = readiness
        self._name = name
        self._handoff: queue.SimpleQueue[InFlight | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._stuck: set[threading.Thread] = set()
        self._stopped = threading.Event()
        self.deaths = 0
        """Jobs whose pool thread hit an unexpected error outside `execute` (counted
        like a service thread's death; the thread goes on with its next job)."""
        jobs.on_stuck = self._replace_stuck

    # --- the service -------------------------------------------------------

    def start(self) -> None:
        if not self._threads:
            self._threads = [self._spawn(slot) for slot in range(self.workers)]

    def stop(self) -> None:
        """Each thread ends once the jobs it already took are written."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        for _ in self._threads:
            self._handoff.put(None)

    def join(self, timeout: float) -> bool:
        """Waits for every thread but those stuck in an abandoned dispatch."""
        deadline = time.monotonic() + timeout
        live = [thread for thread in self._threads if thread not in self._stuck]
        for thread in live:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in live)

    # --- jobs ----------------------------------------------------------------

    def submit(self, batch: list[InFlight]) -> None:
        """Leased jobs (already in the registry), run in order by free threads."""
        put = self._handoff.put
        for job in batch:
            put(job)

    def _replace_stuck(self, job: InFlight) -> None:
        self._stuck.add(self._threads[job.slot])
        if not self._stopped.is_set():
            self._threads[job.slot] = self._spawn(job.slot)

    def _spawn(self, slot: int) -> threading.Thread:
        thread = threading.Thread(
            target=self._main, args=(slot,), name=f"dispatch-{self._name}-{slot}", daemon=True
        )
        thread.start()
        return thread

    def _main(self, slot: int) -> None:
        me = threading.current_thread()
        take = self._handoff.get
        while True:
            job = take()
            if job is None:
                return
            try:
                self._run(job, slot)
            except BaseException:
                self.deaths += 1
                logger.critical("pool thread %s: unexpected error", me.name, exc_info=True)
                self._jobs.remove(job)
            if me in self._stuck:
                self._stuck.discard(me)  # its job was given up and it was replaced
                return

    def _run(self, job: InFlight, slot: int) -> None:
        if job.nothing_to_do:
            if self._jobs.finish(job):
                self._acker.done(job)
            return
        if self._readiness is not None and not self._readiness.check():
            # Leased ahead while the gate was open; it has closed since (a
            # failed attempt made it probe again): give the job back unrun.
            if self._jobs.abandon(job):
                self._acker.release([job], "released unrun: the readiness gate closed")
            return
        if not self._breaker.allows(job.lease.payload.kind):
            # Leased ahead just before its kind's breaker opened.
            if self._jobs.abandon(job):
                self._acker.release([job], "released unrun: its breaker is open")
            return
        ctx = self._jobs.start(job, slot, self.job_timeout)
        if ctx is None:
            return  # released on shutdown before it started
        self._heartbeat.watch(ctx.deadline)
        with job_log_context(job.log_fields):
            if job.load_error is not None:
                if self._jobs.finish(job):
                    self._acker.fail(job, job.load_error, permanent=False)
                return
            lease = job.lease
            self._acker.outcomes.publish("started", job, attempt=lease.attempts)
            logger.info("%s started, attempt %d/%d", job.label, lease.attempts, lease.max_attempts)
            error: BaseException | None = None
            result: Any = None
            try:
                result = job.handler.execute(job.item, ctx)
            except BaseException as exc:
                error = exc
            if not self._jobs.finish(job):
                logger.info("%s: dispatch ended after the job was given up; discarded", job.label)
                return
            if error is None:
                self._breaker.succeeded(lease.payload.kind, lease.id)
                self._acker.done(job, result)
            else:
                self._failed(job, error)

    def _failed(self, job: InFlight, error: BaseException) -> None:
        message = (
            job.handler.timeout_message
            if isinstance(error, DispatchTimeout)
            else describe_error(error)
        )
        if not isinstance(error, ServiceError):
            logger.error("%s: unexpected error in dispatch", job.label, exc_info=error)
        kind, job_id = job.lease.payload.kind, job.lease.id
        permanent = getattr(error, "retryable", True) is False  # no retry can fix it
        if getattr(error, "job_at_fault", True) is not False:
            self._acker.fail(job, message, permanent=permanent)
        elif self._breaker.charges(kind, job_id):
            # Released once for this already, and other jobs of its kind have
            # succeeded since: the dependency works for them, so the job is the cause.
            self._acker.fail(job, f"{message} (again, while other jobs succeed)", permanent=False)
        else:
            self._breaker.refunded(kind, job_id)
            self._acker.release([job], f"failed through no fault of its own ({message}); released")
        if self._readiness is not None and not permanent:
            # A failed attempt may mean the model server or the store just went down:
            # ask before the next lease instead of trusting the last ready answer.
            self._readiness.recheck()
        self._breaker.failed(kind, type(error).__name__, message)
