"""The runner's batched paths through a real Postgres, with handlers that do
nothing (`NoopHandler`) or hold their dispatch until told: batched acks,
renewals and shutdown releases with a stale lease inside the batch, the
fixed pool, the wake-up listener, and exactly-once across runners."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from psycopg.pq import TransactionStatus
from sqlalchemy import Engine, event, text

from manga_page_analysis.queue import (
    KIND_SYNC_MANGA,
    Lease,
    SyncManga,
    enqueue,
    enqueue_many,
    lease,
    release_unowned,
)
from manga_page_analysis.worker import JobContext, NoopHandler, Runner
from manga_page_analysis.worker.reports.events import EventBus, JobEvent
from tests.helpers import count, job_row, wait_until

LONG = timedelta(minutes=5)


class Recorder:
    """Observer and event subscriber in one."""

    def __init__(self) -> None:
        self.finished: list[tuple[str, str]] = []
        self.lost: list[str] = []
        self.events: list[JobEvent] = []
        self.lock = threading.Lock()

    def job_finished(self, kind: str, outcome: str, duration_seconds: float) -> None:
        with self.lock:
            self.finished.append((kind, outcome))

    def lease_lost(self, kind: str) -> None:
        with self.lock:
            self.lost.append(kind)

    def __call__(self, event: JobEvent) -> None:
        with self.lock:
            self.events.append(event)

    def outcomes(self) -> Counter[str]:
        with self.lock:
            return Counter(outcome for _, outcome in self.finished)


class HoldingHandler(NoopHandler):
    """Holds every dispatch until `release` is set (or its job is cancelled);
    `before_return(lease)` runs as a dispatch ends. Writes nothing."""

    def __init__(self) -> None:
        super().__init__(KIND_SYNC_MANGA)
        self.release = threading.Event()
        self.started: dict[uuid.UUID, JobContext] = {}
        self.threads: set[threading.Thread] = set()
        self.max_threads = 0
        self.lock = threading.Lock()
        self.before_return: Any = None

    def breadcrumb(self, item: Lease) -> Mapping[str, Any] | None:
        return {"source_manga_key": item.payload.source_manga_key}  # type: ignore[union-attr]

    def execute(self, item: Lease, ctx: JobContext) -> None:
        with self.lock:
            self.started[item.id] = ctx
            self.threads.add(threading.current_thread())
            self.max_threads = max(self.max_threads, threading.active_count())
        while not self.release.is_set() and not ctx.stop.is_set():
            self.release.wait(0.02)
        if self.before_return is not None:
            self.before_return(item)


@contextmanager
def running(engine: Engine, handler: Any, **options: Any) -> Iterator[tuple[Runner, Recorder]]:
    recorder = Recorder()
    bus = EventBus()
    bus.subscribe(recorder)
    options.setdefault("idle_poll", 0.05)
    runner = Runner(engine, [handler], events=bus, observer=recorder, **options)
    runner.start()
    try:
        yield runner, recorder
    finally:
        runner.stop()
        assert runner.join(10), "runner did not stop within 10 s"


def fill(engine: Engine, n: int, prefix: str = "") -> list[uuid.UUID]:
    with engine.begin() as conn:
        ids = enqueue_many(
            conn, [SyncManga(source_id="s", source_manga_key=f"{prefix}{i}") for i in range(n)]
        )
    return [job_id for job_id in ids if job_id is not None]


def steal(engine: Engine, job_id: uuid.UUID) -> Lease:
    """Another worker takes the job over (as after an expired lease)."""
    with engine.begin() as conn:
        assert release_unowned(conn, job_id)
        (thief,) = lease(conn, KIND_SYNC_MANGA, 1, LONG)
    assert thief.id == job_id
    return thief


@contextmanager
def statements_like(engine: Engine, fragment: str) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if fragment in statement:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


class CountingHandler(NoopHandler):
    """Counts each job's `execute` calls, under a lock (pool threads run in parallel)."""

    def __init__(self) -> None:
        super().__init__(KIND_SYNC_MANGA)
        self.runs: Counter[uuid.UUID] = Counter()
        self.runs_lock = threading.Lock()

    def execute(self, item: Lease, ctx: JobContext) -> None:
        super().execute(item, ctx)
        with self.runs_lock:
            self.runs[item.id] += 1


def test_noop_jobs_are_acked_in_batches_exactly_once(engine):
    ids = fill(engine, 300)
    handler = CountingHandler()
    with running(engine, handler, workers=4, prefetch=20) as (runner, recorder):
        wait_until(lambda: recorder.outcomes()["done"] == 300, timeout=30)
        assert runner.acker.batches < 300  # acks shared statements
    with handler.runs_lock:
        assert handler.runs == Counter({job_id: 1 for job_id in ids})
    assert handler.calls == 300
    assert count(engine, "SELECT count(*) FROM crawler_jobs WHERE state = 'done'") == 300
    assert count(engine, "SELECT max(attempts) FROM crawler_jobs") == 1
    assert len(ids) == 300


def test_a_stale_lease_inside_an_ack_batch_changes_only_its_own_row(engine):
    ids = fill(engine, 3)
    handler = HoldingHandler()
    thieves: dict[uuid.UUID, Lease] = {}

    def steal_the_middle_one(item: Lease) -> None:
        if item.id == ids[1]:
            thieves[item.id] = steal(engine, item.id)

    handler.before_return = steal_the_middle_one
    with (
        statements_like(engine, "state = 'done'") as acks,
        running(engine, handler, workers=3, ack_linger=1.0) as (runner, recorder),
    ):
        wait_until(lambda: len(handler.started) == 3)
        handler.release.set()
        wait_until(lambda: runner.in_flight == 0)
    assert len(acks) == 1, "the three acks were not one statement"
    with engine.connect() as conn:
        assert job_row(conn, ids[0]).state == "done"
        assert job_row(conn, ids[2]).state == "done"
        stolen = job_row(conn, ids[1])
    assert stolen.state == "running" and stolen.lease_generation == thieves[ids[1]].lease_generation
    assert recorder.outcomes() == Counter({"done": 2})
    completed = {event.job_id for event in recorder.events if event.type == "completed"}
    assert completed == {ids[0], ids[2]}


def test_one_heartbeat_renews_every_lease_and_a_lost_one_cancels_only_its_job(engine):
    ids = fill(engine, 3)
    handler = HoldingHandler()
    short = timedelta(seconds=2.0)  # renewed every 0.67 s
    with (
        statements_like(engine, "leased_until = now() +") as renewals,
        running(engine, handler, workers=3, lease_duration=short) as (runner, recorder),
    ):
        wait_until(lambda: len(handler.started) == 3)
        with engine.connect() as conn:
            first = {job_id: job_row(conn, job_id).leased_until for job_id in ids}
        thief = steal(engine, ids[1])
        wait_until(lambda: recorder.lost == [KIND_SYNC_MANGA], timeout=5)
        assert handler.started[ids[1]].stop.is_set()
        assert not handler.started[ids[0]].stop.is_set()
        assert not handler.started[ids[2]].stop.is_set()
        with engine.connect() as conn:
            for job_id in (ids[0], ids[2]):
                wait_until(lambda j=job_id: job_row(conn, j).leased_until > first[j])
        handler.release.set()
        wait_until(lambda: runner.in_flight == 0)
    renews = [s for s in renewals if "unnest" in s]
    assert renews, "no batched renew"
    # One statement per beat for all leases: never one per job.
    assert all("lease_generation = v.generation" in s for s in renews)
    with engine.connect() as conn:
        stolen = job_row(conn, ids[1])
        assert job_row(conn, ids[0]).state == "done" and job_row(conn, ids[2]).state == "done"
    assert stolen.state == "running" and stolen.lease_generation == thief.lease_generation
    assert recorder.outcomes() == Counter({"done": 2})


def test_shutdown_releases_all_in_one_statement_and_skips_a_stale_lease(engine):
    ids = fill(engine, 3)
    handler = HoldingHandler()
    with (
        statements_like(
            engine, "lease_generation + 1, leased_until = NULL, updated_at = now() FROM unnest"
        ) as releases,
        running(engine, handler, workers=3) as (runner, recorder),
    ):
        wait_until(lambda: len(handler.started) == 3)
        thief = steal(engine, ids[1])
        started = time.monotonic()
        runner.stop()
        assert runner.join(5), "in-flight jobs were waited for"
        assert time.monotonic() - started < 5
    assert len(releases) == 1
    with engine.connect() as conn:
        for job_id in (ids[0], ids[2]):
            row = job_row(conn, job_id)
            assert row.state == "pending" and row.attempts == 0 and row.lease_generation == 2
        stolen = job_row(conn, ids[1])
    assert stolen.state == "running" and stolen.lease_generation == thief.lease_generation
    assert recorder.outcomes() == Counter({"released": 2})
    cancelled = {event.job_id for event in recorder.events if event.type == "cancelled"}
    assert cancelled == {ids[0], ids[2]}
    assert all(ctx.stop.is_set() for ctx in handler.started.values())


def test_the_pool_has_a_fixed_number_of_threads(engine):
    fill(engine, 200)
    baseline = threading.active_count()
    handler = HoldingHandler()
    handler.release.set()  # jobs end at once: 200 go through 4 threads
    with running(engine, handler, workers=4, prefetch=8) as (_runner, recorder):
        wait_until(lambda: recorder.outcomes()["done"] == 200, timeout=30)
    assert len(handler.started) == 200
    # At most the 4 pool threads ran jobs (a loaded machine may leave one idle);
    # a thread per job would show up to 200 here.
    assert 1 <= len(handler.threads) <= 4
    # 4 pool threads + lease loop, heartbeat, acker, listener, maintenance:
    # nothing per job.
    assert handler.max_threads <= baseline + 4 + 5


def test_a_dispatch_past_its_deadline_fails_and_its_thread_is_replaced(engine):
    (stuck,) = fill(engine, 1, "stuck")
    handler = HoldingHandler()
    gate = threading.Event()

    def ignore_cancel(item: Lease, ctx: JobContext) -> None:
        # A call that does not listen to the cancel event (a network read).
        with handler.lock:
            handler.started[item.id] = ctx
            handler.threads.add(threading.current_thread())
        if item.id == stuck:
            gate.wait(10)

    handler.execute = ignore_cancel  # type: ignore[method-assign]
    try:
        with running(engine, handler, workers=1, job_timeout=0.5) as (_runner, recorder):
            wait_until(lambda: recorder.outcomes()["failed"] == 1, timeout=10)
            (after,) = fill(engine, 1, "after")
            wait_until(lambda: recorder.outcomes()["done"] == 1, timeout=10)
    finally:
        gate.set()
    with engine.connect() as conn:
        row = job_row(conn, stuck)
    assert row.state == "pending" and row.last_error == handler.timeout_message
    assert after in handler.started
    assert len(handler.threads) == 2  # the stuck one and its replacement


def test_an_idle_runner_wakes_on_commit_long_before_its_poll(engine):
    handler = HoldingHandler()
    handler.release.set()
    with running(engine, handler, workers=2, idle_poll=30.0) as (runner, _):
        assert runner.listener.listening.wait(10)
        wait_until(lambda: runner.lease_rounds >= 1)  # it has found the queue empty
        with engine.begin() as conn:
            job_id = enqueue(conn, SyncManga(source_id="s", source_manga_key="now"))
        committed = time.monotonic()
        wait_until(lambda: job_id in handler.started, timeout=10, interval=0.005)
        assert handler.started[job_id].started_at - committed < 5.0  # the poll: 30 s


def test_with_listen_off_the_runner_polls(engine):
    handler = HoldingHandler()
    handler.release.set()
    with running(engine, handler, workers=1, idle_poll=0.1, listen=False) as (runner, _):
        wait_until(lambda: runner.lease_rounds >= 1)
        with engine.begin() as conn:
            job_id = enqueue(conn, SyncManga(source_id="s", source_manga_key="poll"))
        wait_until(lambda: job_id in handler.started, timeout=10)
        assert runner.listener.connections == 0
    assert count(engine, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'") == 0


def test_the_listener_survives_its_backend_being_terminated(engine):
    handler = HoldingHandler()
    handler.release.set()
    with running(engine, handler, workers=1, idle_poll=30.0) as (runner, _):
        assert runner.listener.listening.wait(10)
        with engine.connect() as conn:
            terminated = conn.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
                )
            ).scalar_one()
        assert terminated == 1
        wait_until(lambda: runner.listener.connections >= 2 and runner.listener.listening.is_set())
        with engine.begin() as conn:
            job_id = enqueue(conn, SyncManga(source_id="s", source_manga_key="after"))
        committed = time.monotonic()
        wait_until(lambda: job_id in handler.started, timeout=10, interval=0.005)
        assert handler.started[job_id].started_at - committed < 5.0


def test_two_runners_run_every_job_exactly_once(engine):
    ids = fill(engine, 1000)
    seen: Counter[uuid.UUID] = Counter()
    lock = threading.Lock()

    class Counting(NoopHandler):
        def execute(self, item: Lease, ctx: JobContext) -> None:
            with lock:
                seen[item.id] += 1

    with (
        running(engine, Counting(KIND_SYNC_MANGA), workers=4, prefetch=16) as (_, first),
        running(engine, Counting(KIND_SYNC_MANGA), workers=4, prefetch=16) as (_, second),
    ):
        wait_until(lambda: first.outcomes()["done"] + second.outcomes()["done"] == 1000, 60)
    assert set(seen) == set(ids) and max(seen.values()) == 1
    assert count(engine, "SELECT count(*) FROM crawler_jobs WHERE state = 'done'") == 1000


def test_a_load_that_breaks_the_transaction_fails_only_its_own_job(engine, caplog):
    ids = fill(engine, 5)
    bad = ids[2]

    class Loading(NoopHandler):
        def load(self, conn: Any, lease: Lease) -> Lease:
            if lease.id == bad:
                conn.execute(text("SELECT 1 / 0"))  # a database error mid-batch
            conn.execute(text("SELECT 1"))
            return lease

    with running(engine, Loading(KIND_SYNC_MANGA), workers=2, prefetch=8) as (_, recorder):
        wait_until(lambda: recorder.outcomes() == Counter({"done": 4, "failed": 1}), timeout=15)
    with engine.connect() as conn:
        row = job_row(conn, bad)
        assert row.state == "pending" and row.attempts == 1
        assert "could not load job" in row.last_error and "division by zero" in row.last_error
        assert all(job_row(conn, job_id).state == "done" for job_id in ids if job_id != bad)
    assert "each load in its own savepoint" in caplog.text


def test_a_database_outage_is_logged_once_and_work_resumes_after_it(database_url, caplog):
    """Every connection dropped, and new ones refused for a while (as while
    Postgres restarts): the runner's threads back off quietly, one line says
    the outage began and one that it ended, and no job is lost."""
    import logging

    import psycopg

    from manga_page_analysis.db import make_engine

    down = threading.Event()
    attempts = Counter[str]()

    def connect() -> psycopg.Connection[Any]:
        attempts["all"] += 1
        if down.is_set():
            attempts["refused"] += 1
            raise psycopg.OperationalError("connection refused (the test's outage)")
        url = database_url.replace("postgresql+psycopg://", "postgresql://")
        return psycopg.connect(url)

    engine = make_engine(database_url, creator=connect, pool_size=10)
    try:
        fill(engine, 50)
        handler = NoopHandler(KIND_SYNC_MANGA)
        caplog.set_level(logging.INFO)
        with running(engine, handler, workers=2, idle_poll=0.2) as (runner, recorder):
            wait_until(lambda: recorder.outcomes()["done"] == 50)
            assert runner.listener.listening.wait(5)
            down.set()
            with make_engine(database_url).connect() as admin:
                admin.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                )
            wait_until(lambda: attempts["refused"] >= 4)
            time.sleep(1.0)  # how long the outage lasts (not a synchronisation)
            refused = attempts["refused"]
            down.clear()
            wait_until(lambda: "database reachable again" in caplog.text, timeout=15)
            with engine.begin() as conn:
                enqueue_many(
                    conn, [SyncManga(source_id="s", source_manga_key=f"b{i}") for i in range(20)]
                )
            wait_until(lambda: recorder.outcomes()["done"] == 70, timeout=15)
        # Backoff, not a spin: a handful of attempts per thread in a second or so.
        assert refused < 60, attempts
        assert caplog.text.count("database unreachable") == 1
        assert caplog.text.count("database reachable again") == 1
    finally:
        engine.dispose()


def test_runner_connections_never_prepare_statements(engine):
    """A prepared batch statement would get a generic plan that trusts stale
    statistics (no running rows) and loops over every running row per id:
    the runner's connections plan each batch for what it is."""
    from manga_page_analysis.queue import ack_done_many
    from manga_page_analysis.worker.dbsession import DbSession, runner_outage

    fill(engine, 3)
    with engine.begin() as conn:
        leases = lease(conn, None, 3, timedelta(seconds=30))
    session = DbSession(engine, runner_outage(), threading.Event(), autocommit=True)
    try:
        for _ in range(8):  # psycopg prepares a statement on its 5th run by default
            session.run(lambda conn: ack_done_many(conn, leases))
        prepared = session.run(
            lambda conn: conn.execute(text("SELECT count(*) FROM pg_prepared_statements")).scalar()
        )
    finally:
        session.close()
    assert prepared == 0


class SavingHandler(HoldingHandler):
    """Writes a result: `save` inserts the job's id into a scratch table in the
    acker's transaction, and raises for the ids in `broken`."""

    writes_result = True

    def __init__(self) -> None:
        super().__init__()
        self.broken: set[uuid.UUID] = set()

    def save(self, conn: Any, item: Lease, result: None, ctx: JobContext) -> None:
        conn.execute(text("INSERT INTO saved_results (job_id) VALUES (:id)"), {"id": item.id})
        if item.id in self.broken:
            raise RuntimeError("the result does not fit")


def test_results_are_saved_with_their_acks_only_for_current_leases(engine):
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS saved_results (job_id uuid PRIMARY KEY)"))
        conn.execute(text("TRUNCATE saved_results"))
    ids = fill(engine, 4)
    handler = SavingHandler()
    handler.broken = {ids[3]}
    thieves: dict[uuid.UUID, Lease] = {}

    def steal_the_second(item: Lease) -> None:
        if item.id == ids[1]:
            thieves[item.id] = steal(engine, item.id)

    handler.before_return = steal_the_second
    try:
        with running(engine, handler, workers=4, ack_linger=1.0) as (runner, recorder):
            wait_until(lambda: len(handler.started) == 4)
            handler.release.set()
            wait_until(lambda: runner.in_flight == 0)
        with engine.connect() as conn:
            saved = {row[0] for row in conn.execute(text("SELECT job_id FROM saved_results"))}
            rows = {job_id: job_row(conn, job_id) for job_id in ids}
    finally:
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE saved_results"))
    # The batch whose save failed was rolled back whole and written job by job:
    # the good results landed, the stolen job's result was never saved, and
    # the job whose save raised failed its attempt (pending again, no result).
    assert saved == {ids[0], ids[2]}
    assert rows[ids[0]].state == rows[ids[2]].state == "done"
    assert rows[ids[1]].state == "running"
    assert rows[ids[1]].lease_generation == thieves[ids[1]].lease_generation
    assert rows[ids[3]].state == "pending" and "does not fit" in rows[ids[3]].last_error
    assert recorder.outcomes() == Counter({"done": 2, "failed": 1})


def test_jobs_leased_ahead_are_given_back_unrun_when_the_gate_closes(engine):
    from manga_page_analysis.worker.gates.readiness import ReadinessGate

    ids = fill(engine, 3)
    ready = threading.Event()
    ready.set()
    gate = ReadinessGate(ready.is_set, name="test", poll_seconds=0.05, fresh_seconds=0.0)
    handler = HoldingHandler()
    with running(engine, handler, workers=1, prefetch=2, readiness=gate) as (runner, recorder):
        wait_until(lambda: len(handler.started) == 1 and runner.in_flight == 3)
        ready.clear()  # the model server went away while two jobs waited
        handler.release.set()
        # Given-up jobs leave the registry before their release is written.
        wait_until(lambda: recorder.outcomes() == Counter({"done": 1, "released": 2}))
        assert runner.in_flight == 0
    (ran,) = handler.started
    with engine.connect() as conn:
        rows = {job_id: job_row(conn, job_id) for job_id in ids}
    assert rows[ran].state == "done"
    waited = [rows[job_id] for job_id in ids if job_id != ran]
    assert [(row.state, row.attempts) for row in waited] == [("pending", 0), ("pending", 0)]


def test_a_runner_stopped_before_it_starts_leases_nothing_and_joins(engine):
    (job_id,) = fill(engine, 1)
    handler = NoopHandler(KIND_SYNC_MANGA)
    runner = Runner(engine, [handler], workers=2, idle_poll=0.05)
    runner.stop()  # e.g. a model that failed to load before the host called start()
    runner.start()
    assert runner.join(5)
    assert runner.lease_rounds == 0 and handler.calls == 0
    with engine.connect() as conn:
        row = job_row(conn, job_id)
    assert (row.state, row.attempts) == ("pending", 0)


class TransactionProbe(NoopHandler):
    """Notes, for each load, whether a transaction was open on its connection."""

    def __init__(self, reads_database: bool) -> None:
        super().__init__(KIND_SYNC_MANGA)
        self._reads_database = reads_database
        self.in_transaction: list[bool] = []

    @property
    def load_reads_database(self) -> bool:
        return self._reads_database

    def load(self, conn: Any, lease: Lease) -> Lease:
        status = conn.connection.driver_connection.info.transaction_status
        self.in_transaction.append(status != TransactionStatus.IDLE)
        return lease


def test_a_kind_whose_load_reads_nothing_is_leased_without_a_transaction(engine):
    """`load_reads_database = False`: the lease is one autocommit statement (no
    BEGIN, no COMMIT of its own), so the load runs after it has committed; by
    default the load runs inside the lease's transaction. Either way every job
    is done once."""
    for reads_database in (False, True):
        fill(engine, 5)
        handler = TransactionProbe(reads_database)
        with running(engine, handler, workers=2) as (_runner, recorder):
            wait_until(lambda: recorder.outcomes()["done"] == 5, timeout=30)
        assert handler.in_transaction == [reads_database] * 5
        assert handler.calls == 5
        with engine.begin() as conn:
            conn.execute(text("TRUNCATE crawler_jobs"))


def test_the_no_op_handler_says_its_load_reads_nothing_unless_a_subclass_overrides_it():
    class Loading(NoopHandler):
        def load(self, conn: Any, lease: Lease) -> Lease:
            return lease

    assert NoopHandler(KIND_SYNC_MANGA).load_reads_database is False
    assert CountingHandler().load_reads_database is False
    assert Loading(KIND_SYNC_MANGA).load_reads_database is True
