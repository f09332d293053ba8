"""Fault tests with real processes: a worker killed with SIGKILL, Postgres
stopped and started under a running worker, and four worker processes on one
queue. Each prints its figures (`-s` shows them) for the issue's record."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pytest_postgresql.executors import PostgreSQLExecutor
from sqlalchemy import text

from manga_page_analysis.db import make_engine
from manga_page_analysis.migrations import upgrade_head
from manga_page_analysis.queue import request_analysis
from testbed.vision_server import Reply, analysis_content, ok_answer
from tests.helpers import count, make_page, queue_outcome, wait_until
from tests.integration.test_cli import _env, start_worker, stop_worker
from tests.postgres_server import private_postgres, wait_accepting
from tests.tcp_proxy import TcpProxy
from tests.worker_support import png_bytes

pytestmark = pytest.mark.slow


def _figures(name: str, **figures: object) -> None:
    print(f"\n[fault figures] {name}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


def _pages(engine, storage: Path, n: int) -> list:
    storage.mkdir(exist_ok=True)
    (storage / "page.png").write_bytes(png_bytes())
    with engine.begin() as conn:
        pages = [make_page(conn, storage_key="page.png", page_number=i) for i in range(n)]
        return [request_analysis(conn, page) for page in pages]


# --- SIGKILL mid-dispatch ----------------------------------------------------


def _killable_env(database_url: str, vision_url: str, storage: Path) -> dict[str, str]:
    """One worker whose leases run out a second after it is killed. The killed
    worker led the maintenance, and its leader row holds for the default 30 s:
    its successor does not lead, and reclaims all the same before it leases."""
    return _env(database_url, vision_url, storage, LEASE_SECONDS="1", ANALYSIS_WORKERS="1")


def test_sigkill_mid_dispatch_costs_no_attempt_and_writes_one_result(
    database_url, engine, vision_server, tmp_path
):
    storage = tmp_path / "storage"
    (job_id,) = _pages(engine, storage, 1)
    hold = threading.Event()
    vision_server.script(Reply(body=ok_answer(analysis_content()).body, block=hold))
    env = _killable_env(database_url, vision_server.url, storage)

    first = start_worker(env, tmp_path)
    try:
        vision_server.wait_for_requests(1, timeout=30)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == -signal.SIGKILL
    with engine.connect() as conn:
        killed = conn.execute(
            text("SELECT state, attempts, lease_generation FROM crawler_jobs WHERE id = :id"),
            {"id": job_id},
        ).one()
    assert tuple(killed) == ("running", 1, 1)
    # Nobody renews the lease any more: wait until it has run out.
    wait_until(
        lambda: count(
            engine,
            "SELECT count(*) FROM crawler_jobs WHERE id = :id AND leased_until < now()",
            id=job_id,
        ),
        timeout=15,
    )

    second = start_worker(env, tmp_path)
    try:
        wait_until(
            lambda: count(
                engine,
                "SELECT count(*) FROM crawler_jobs WHERE state = 'done' AND id = :id",
                id=job_id,
            ),
            timeout=30,
        )
    finally:
        code, output = stop_worker(second)
        hold.set()
    assert code == 0, output
    assert "reclaimed 1 orphaned job" in output
    with engine.connect() as conn:
        job = conn.execute(text("SELECT * FROM crawler_jobs WHERE id = :id"), {"id": job_id}).one()
        rows = conn.execute(text("SELECT status FROM page_analysis")).scalars().all()
    # Leased (1), released by the start-up reclaim with the attempt refunded (2),
    # leased again (3).
    assert (job.state, job.attempts, job.lease_generation, job.reclaim_count) == ("done", 1, 3, 0)
    # Reclaimed at start, before it could lead (the old leader's row held).
    led = output.find("leads the queue's maintenance")
    assert led == -1 or output.find("reclaimed 1 orphaned job") < led
    assert rows == ["done"]
    assert len(vision_server.requests) == 2
    _figures("sigkill", jobs=1, kills=1, restarts=1, attempts=job.attempts, results=len(rows))


def _done(engine, job_id) -> int:
    return count(
        engine, "SELECT count(*) FROM crawler_jobs WHERE state = 'done' AND id = :id", id=job_id
    )


def _held_by(engine, process: subprocess.Popen[str]) -> list:
    with engine.connect() as conn:
        return list(
            conn.execute(
                text("SELECT id FROM crawler_jobs WHERE state = 'running' AND leased_by LIKE :pid"),
                {"pid": f"%:{process.pid}:%"},
            ).scalars()
        )


def test_the_leader_killed_mid_call_costs_no_attempt_beside_another_worker(
    database_url, engine, vision_server, tmp_path
):
    """Two workers, each in a model call with one more job leased ahead (its
    prefetch: no slot free); the leader is killed with SIGKILL. A fresh worker
    started once the leases ran out (the old leader's row still holds: it does
    not lead) takes the leader's jobs back at start, attempts refunded."""
    storage = tmp_path / "storage"
    jobs = _pages(engine, storage, 4)
    hold = threading.Event()
    blocked = Reply(body=ok_answer(analysis_content()).body, block=hold)
    vision_server.script(blocked, blocked)  # the first two calls wait; later ones answer
    env = _killable_env(database_url, vision_server.url, storage)
    leader = start_worker(env, tmp_path)
    processes = [leader]
    try:
        vision_server.wait_for_requests(1, timeout=60)
        wait_until(lambda: len(_held_by(engine, leader)) == 2, timeout=30)
        leads = "SELECT count(*) FROM queue_leader WHERE leader_id LIKE :pid"
        assert count(engine, leads, pid=f"%:{leader.pid}:%") == 1
        killed_jobs = _held_by(engine, leader)
        other = start_worker(env, tmp_path)
        processes.append(other)
        vision_server.wait_for_requests(2, timeout=60)  # a Python start on a loaded machine
        wait_until(lambda: len(_held_by(engine, other)) == 2, timeout=30)
        leader.send_signal(signal.SIGKILL)
        leader.communicate(timeout=10)
        expired = (
            "SELECT count(*) FROM crawler_jobs WHERE state = 'running' AND leased_until < now()"
        )
        wait_until(lambda: count(engine, expired) == 2, timeout=15)
        fresh = start_worker(env, tmp_path)
        processes.append(fresh)
        wait_until(lambda: all(_done(engine, job_id) for job_id in killed_jobs), timeout=60)
        hold.set()  # the other worker's call returns
        wait_until(lambda: all(_done(engine, job_id) for job_id in jobs), timeout=60)
        code, output = stop_worker(fresh)
        assert code == 0, output
        assert stop_worker(other)[0] == 0
    finally:
        hold.set()
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert "reclaimed 2 orphaned job" in output
    with engine.connect() as conn:
        attempts = dict(conn.execute(text("SELECT id, attempts FROM crawler_jobs")).all())
    assert attempts == dict.fromkeys(jobs, 1)
    _figures("leader sigkill", jobs=4, kills=1, attempts=sorted(attempts.values()))


def test_a_page_that_kills_its_worker_three_times_is_dead_lettered(
    database_url, engine, vision_server, tmp_path
):
    """The crash loop for real: each worker takes the page and dies (SIGKILL
    stands in for a decoder segfault); the third reclaim dead-letters it."""
    storage = tmp_path / "storage"
    (job_id,) = _pages(engine, storage, 1)
    hold = threading.Event()  # the model never answers: every worker dies mid-dispatch
    vision_server.default = Reply(body=ok_answer(analysis_content()).body, block=hold)
    env = _killable_env(database_url, vision_server.url, storage)
    expired = "SELECT count(*) FROM crawler_jobs WHERE id = :id AND leased_until < now()"
    try:
        for kill in (1, 2, 3):
            worker = start_worker(env, tmp_path)
            try:
                vision_server.wait_for_requests(kill, timeout=30)
                worker.send_signal(signal.SIGKILL)
                worker.communicate(timeout=10)
            finally:
                if worker.poll() is None:
                    worker.kill()
            wait_until(lambda: count(engine, expired, id=job_id), timeout=15)
        last = start_worker(env, tmp_path)
        try:
            wait_until(
                lambda: count(engine, "SELECT count(*) FROM page_analysis WHERE status = 'failed'"),
                timeout=30,
            )
        finally:
            code, output = stop_worker(last)
    finally:
        hold.set()
    assert code == 0, output
    with engine.connect() as conn:
        job = conn.execute(text("SELECT * FROM crawler_jobs WHERE id = :id"), {"id": job_id}).one()
        analysis = conn.execute(text("SELECT status, error FROM page_analysis")).one()
    # Every restart reclaimed at start (attempt refunded); the end resets the count.
    assert (job.state, job.reclaim_count, job.attempts) == ("dead", 0, 1)
    assert "reclaimed from a dead worker 3 times" in job.last_error
    assert analysis.status == "failed" and analysis.error == job.last_error
    assert "moved to dead" in output and len(vision_server.requests) == 3
    _figures("crash loop", jobs=1, kills=3, restarts=3, reclaims=job.reclaim_count, dead=1)


# --- Postgres restarted under a running worker --------------------------------


@pytest.fixture
def own_postgres() -> Iterator[PostgreSQLExecutor]:
    """A Postgres cluster of this test's own, so stopping it disturbs no other test."""
    with private_postgres(dbname="faults") as executor:
        with psycopg.connect(
            host="127.0.0.1",
            port=executor.port,
            user=executor.user,
            dbname="postgres",
            autocommit=True,
        ) as conn:
            conn.execute("CREATE DATABASE faults")
        yield executor


def test_postgres_restart_under_a_running_worker(own_postgres, vision_server, tmp_path):
    jobs, outage_seconds = 40, 3.0
    direct = f"postgresql+psycopg://{own_postgres.user}@127.0.0.1:{own_postgres.port}/faults"
    upgrade_head(direct)
    engine = make_engine(direct)
    proxy = TcpProxy(own_postgres.port).start()
    vision_server.default = Reply(body=ok_answer(analysis_content()).body, delay=0.1)
    try:
        _pages(engine, tmp_path / "storage", jobs)
        proxied = direct.replace(f":{own_postgres.port}/", f":{proxy.port}/")
        env = _env(proxied, vision_server.url, tmp_path / "storage", LEASE_SECONDS="3")
        worker = start_worker(env, tmp_path)
        try:
            done = "SELECT count(*) FROM crawler_jobs WHERE state = 'done'"
            wait_until(lambda: count(engine, done) >= 8, timeout=30)
            engine.dispose()
            own_postgres.stop()
            down_at, before = time.monotonic(), proxy.connections
            # The outage itself: this long, the worker must wait without spinning.
            time.sleep(outage_seconds)
            during = proxy.connections - before
            assert worker.poll() is None, "the worker died with the database"
            own_postgres.start()
            wait_accepting(own_postgres)
            up_at = time.monotonic()
            wait_until(lambda: count(engine, done) == jobs, timeout=60, interval=0.2)
            recovered_in = time.monotonic() - up_at
        finally:
            code, output = stop_worker(worker)
        with engine.connect() as conn:
            states, results, attempts = queue_outcome(conn)
    finally:
        proxy.stop()
        engine.dispose()

    assert code == 0, output
    assert states == {"done": jobs} and results == jobs
    assert output.count("database unreachable") == 1, output
    assert output.count("database reachable again") == 1, output
    assert "Traceback" not in output, output
    # The outage, a line per job whose result it kept out, and not a line per retry.
    complaints = [line for line in output.splitlines() if " WARNING " in line or " ERROR " in line]
    assert len(complaints) <= 8, "\n".join(complaints)
    # Backoff, not a spin: a few tries per thread (lease loop, heartbeat, each job
    # writing its result...) over the outage; a spin would make thousands.
    assert 1 <= during <= 60, f"{during} connection attempts in {outage_seconds} s"
    _figures(
        "postgres restart",
        jobs=jobs,
        restarts=1,
        outage_s=round(up_at - down_at, 1),
        connection_attempts_during_outage=during,
        refused=proxy.refused,
        warning_lines=len(complaints),
        total_connections=proxy.connections,
        attempts=attempts,
        recovered_in_s=round(recovered_in, 1),
    )


# --- many processes, one queue ------------------------------------------------


def test_four_processes_of_four_threads_run_every_job_exactly_once(database_url, engine, tmp_path):
    jobs, processes, threads = 3000, 4, 4
    logs = [tmp_path / f"worker-{i}.log" for i in range(processes)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.fault_worker", database_url, str(log), str(threads)],
            env=env,
            cwd=Path(__file__).resolve().parents[2],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for log in logs
    ]
    try:
        # All four compete from the first job on (and none is stopped half started).
        wait_until(lambda: all(Path(f"{log}.ready").exists() for log in logs), timeout=60)
    except AssertionError:
        for worker in workers:
            worker.kill()
        raise
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO crawler_jobs (payload) SELECT jsonb_build_object("
                "'kind', 'sync_manga', 'source_id', 'faults', 'source_manga_key', 'm' || n) "
                "FROM generate_series(1, :n) AS n"
            ),
            {"n": jobs},
        )
    started = time.monotonic()
    try:
        wait_until(
            lambda: count(engine, "SELECT count(*) FROM crawler_jobs WHERE state = 'done'") == jobs,
            timeout=90,
            interval=0.2,
        )
        elapsed = time.monotonic() - started
    finally:
        outputs = [stop_worker(worker, signal.SIGTERM) for worker in workers]
    assert all(code == 0 for code, _ in outputs), outputs

    runs = collections.Counter()
    per_process = []
    for log in logs:
        ids = log.read_text().split()
        per_process.append(len(ids))
        runs.update(ids)
    with engine.connect() as conn:
        all_ids = {str(i) for i in conn.execute(text("SELECT id FROM crawler_jobs")).scalars()}
        states = queue_outcome(conn)[0]
    duplicates = sum(n - 1 for n in runs.values() if n > 1)
    lost = all_ids - set(runs)
    assert states == {"done": jobs}
    assert duplicates == 0 and not lost and set(runs) == all_ids
    assert all(n > 0 for n in per_process), per_process  # every process took part
    _figures(
        "many processes",
        jobs=jobs,
        processes=processes,
        threads=threads,
        per_process=per_process,
        duplicates=duplicates,
        lost=len(lost),
        seconds=round(elapsed, 1),
    )
