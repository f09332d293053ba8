"""Maintenance on one elected leader: of several runners on one database only the
leader reclaims expired leases (and reaps), and when it goes away another one
takes over, at once when it resigned, within a lease when it was killed."""

from __future__ import annotations

import signal
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, text

from manga_page_analysis.observability.metrics import WorkerMetrics
from manga_page_analysis.queue import KIND_SYNC_MANGA, SyncManga, enqueue, lease
from manga_page_analysis.worker import NoopHandler, Runner
from manga_page_analysis.worker.dbsession import DatabaseUnavailable
from manga_page_analysis.worker.maintenance import Maintainer
from manga_page_analysis.worker.reports.outage import DatabaseOutage
from testbed.vision_server import ScriptedVisionServer
from tests.helpers import expire_lease, job_row, wait_until
from tests.integration.test_cli import _env, start_worker, stop_worker

LEADER_LEASE = timedelta(seconds=3)


def _orphan(engine: Engine) -> uuid.UUID:
    """A running job whose worker died: its lease has run out."""
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM crawler_jobs"))  # the next lease takes this one
        job_id = enqueue(conn, SyncManga(source_id="s", source_manga_key=uuid.uuid4().hex))
        assert job_id is not None
        (held,) = lease(conn, KIND_SYNC_MANGA, 1, timedelta(minutes=1))
        expire_lease(conn, held.id)
    return job_id


def _reclaimed(engine: Engine, job_id: uuid.UUID) -> bool:
    with engine.connect() as conn:
        return bool(job_row(conn, job_id).reclaim_count == 1)


def _leader(engine: Engine) -> Any:
    with engine.connect() as conn:
        return conn.execute(text("SELECT * FROM queue_leader")).one_or_none()


def _runner(engine: Engine, name: str, metrics: WorkerMetrics) -> Runner:
    # A kind nobody enqueues: these runners do nothing but maintenance.
    return Runner(
        engine,
        [NoopHandler("analyze_page")],
        workers=1,
        name=name,
        leader_lease=LEADER_LEASE,
        reclaim_interval=0.1,
        observer=metrics,
    )


def test_only_the_leader_reclaims_and_a_resigning_leader_hands_over_at_once(
    engine: Engine,
) -> None:
    metrics = [WorkerMetrics(CollectorRegistry()) for _ in range(2)]
    runners = [_runner(engine, name, each) for name, each in zip("ab", metrics, strict=True)]

    def _gauge(runner: Runner) -> float | None:
        """The runner's `queue_leader` metric."""
        return metrics[runners.index(runner)].registry.get_sample_value("queue_leader")

    for runner in runners:
        runner.start()
    try:
        leader = wait_until(
            lambda: next((r for r in runners if r.maintainer.leading), None), timeout=10
        )
        (follower,) = [runner for runner in runners if runner is not leader]
        job_id = _orphan(engine)
        wait_until(lambda: _reclaimed(engine, job_id), timeout=10)
        # Several reclaim rounds later, still one leader, and only it reclaimed.
        rounds = leader.maintainer.reclaims
        wait_until(lambda: leader.maintainer.reclaims >= rounds + 3, timeout=10)
        assert leader.maintainer.leading and not follower.maintainer.leading
        assert (_gauge(leader), _gauge(follower)) == (1, 0)
        assert follower.maintainer.reclaims == 0
        assert _leader(engine).leader_id == leader.maintainer.leader_id

        leader.stop()
        assert leader.join(10)
        assert not leader.maintainer.leading and _gauge(leader) == 0
        # Resigned: the row is gone, and the follower takes it at its next renewal
        # (a third of a lease), not after a whole lease.
        wait_until(lambda: follower.maintainer.leading, timeout=10)
        job_id = _orphan(engine)
        wait_until(lambda: _reclaimed(engine, job_id), timeout=10)
        assert follower.maintainer.reclaims > 0 and _gauge(follower) == 1
        assert _leader(engine).leader_id == follower.maintainer.leader_id
    finally:
        for runner in runners:
            runner.stop()
        for runner in runners:
            assert runner.join(10)
    assert _leader(engine) is None  # the last leader resigned as it stopped


def test_a_killed_leader_process_is_replaced_within_a_lease(
    database_url: str, engine: Engine, vision_server: ScriptedVisionServer, tmp_path: Path
) -> None:
    env = _env(
        database_url,
        vision_server.url,
        tmp_path / "storage",
        LEADER_LEASE_SECONDS=str(LEADER_LEASE.total_seconds()),
        RECLAIM_INTERVAL_SECONDS="1",
    )
    processes = [start_worker(env, tmp_path) for _ in range(2)]
    try:
        first = wait_until(lambda: _leader(engine), timeout=60)
        by_pid = {process.pid: process for process in processes}
        leader_pid = int(first.leader_id.split(":")[1])
        (other,) = [process for pid, process in by_pid.items() if pid != leader_pid]
        # A worker that never ends its lease: SIGKILL, so nothing is resigned.
        by_pid[leader_pid].send_signal(signal.SIGKILL)
        by_pid[leader_pid].communicate(timeout=30)
        killed_at = time.monotonic()
        job_id = _orphan(engine)
        second = wait_until(
            lambda: (
                (row := _leader(engine)) is not None and f":{other.pid}:" in row.leader_id and row
            ),
            timeout=60,
        )
        took_over = time.monotonic() - killed_at
        # The new term began only once the killed leader's lease had run out.
        assert second.elected_at >= first.expires_at
        wait_until(lambda: _reclaimed(engine, job_id), timeout=30)
        print(f"takeover {took_over:.1f} s after the kill (lease {LEADER_LEASE})")
        code, output = stop_worker(other, signal.SIGTERM, timeout=60)
        assert code == 0, output
        assert "leads the queue's maintenance" in output
        assert _leader(engine) is None
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()


class _FlakyReclaimer:
    """A reclaim that fails the first time (the database blinked) and works after."""

    def __init__(self) -> None:
        self.asked = 0

    def reclaim(self, session: Any, *, within: float | None = None) -> int:
        self.asked += 1
        if self.asked == 1:
            raise DatabaseUnavailable("the database blinked")
        return 0


def test_a_reclaim_that_failed_is_tried_again_at_the_next_renewal(
    engine: Engine,
) -> None:
    """Not a whole reclaim interval later: with the default 30 s interval, a job
    whose lease expired would wait 30 s more."""
    reclaimer = _FlakyReclaimer()
    maintainer = Maintainer(
        engine,
        reclaimer,  # type: ignore[arg-type]  # only its reclaim is used
        DatabaseOutage(1.0),
        leader_lease=timedelta(seconds=1.5),  # renewed every 0.5 s
        reclaim_interval=3600.0,
        reap_interval=3600.0,
        reap_retention_days=0,
        leader_id="test:flaky-reclaim",
    )
    maintainer.first_round()
    maintainer.start()
    try:
        wait_until(lambda: maintainer.reclaims == 1, timeout=10)
        assert maintainer.leading and reclaimer.asked == 2
    finally:
        maintainer.stop()
        assert maintainer.join(10)
    assert _leader(engine) is None
