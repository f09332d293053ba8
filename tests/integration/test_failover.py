"""Failover with a real streaming standby (tests/standby.py): `run-worker`
processes on a multi-host URL (docs/scaling.md, "Failover") while the primary
is stopped the hard way (`-m immediate`) and the standby promoted.

- A promotion under two workers (`target_session_attrs=read-write`): no job is
  lost, and none is written over by a stale lease.
- A read-only spell (`target_session_attrs=any`): the primary dies with pages
  at the model, the worker's connections reach the standby before its
  promotion and every write is refused (SQLSTATE 25006). That is an outage:
  logged once, no thread restarts, and the model's answers are written once
  the standby is promoted, with no attempt charged.
Each prints its figures (`-s` shows them)."""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from manga_page_analysis.db import make_engine
from manga_page_analysis.migrations import upgrade_head
from manga_page_analysis.queue import request_analysis
from testbed.vision_server import Reply, analysis_content, ok_answer
from tests.helpers import count, make_page, queue_outcome, wait_until
from tests.integration.test_cli import _env, start_worker, stop_worker
from tests.standby import Pair, primary_with_standby
from tests.worker_support import png_bytes

pytestmark = pytest.mark.slow

DONE = "SELECT count(*) FROM crawler_jobs WHERE state = 'done'"
OUTAGE_LINE = "database unreachable or refusing writes"


def _figures(name: str, **figures: object) -> None:
    print(f"\n[failover figures] {name}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


def _migrated_pair_with_pages(pair: Pair, storage: Path, pages: int) -> list:
    upgrade_head(pair.url())
    engine = make_engine(pair.url())
    storage.mkdir(exist_ok=True)
    (storage / "page.png").write_bytes(png_bytes())
    try:
        with engine.begin() as conn:
            made = [make_page(conn, storage_key="page.png", page_number=i) for i in range(pages)]
            return [request_analysis(conn, page) for page in made]
    finally:
        engine.dispose()


def _final_rows(url: str) -> tuple[collections.Counter, int, int, int]:
    """Job states, done analyses, done jobs whose analysis was written by
    another transaction than the ack that made them done, and total attempts."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            states, analyses, attempts = queue_outcome(conn)
            # The save runs in the ack's transaction, so both rows carry the
            # same now(); a stale holder's late save would stand apart.
            written_over = conn.execute(
                text(
                    "SELECT count(*) FROM crawler_jobs j JOIN page_analysis a "
                    "ON a.page_id = (j.payload ->> 'page_id')::uuid "
                    "WHERE j.state = 'done' AND a.updated_at <> j.updated_at"
                )
            ).scalar_one()
    finally:
        engine.dispose()
    return states, analyses, written_over, attempts


def test_a_promotion_under_two_workers_on_a_multi_host_url_loses_no_job(vision_server, tmp_path):
    jobs = 60
    with primary_with_standby("failover") as pair:
        storage = tmp_path / "storage"
        _migrated_pair_with_pages(pair, storage, jobs)
        pair.wait_replayed()  # the jobs themselves are on both servers
        vision_server.default = Reply(body=ok_answer(analysis_content()).body, delay=0.05)
        # Asynchronous replication may lose the last acks: those jobs still look
        # leased on the new primary, and run again once that lease has run out.
        env = _env(pair.multi_host_url("read-write"), vision_server.url, storage, LEASE_SECONDS="3")
        workers = [start_worker(env, tmp_path) for _ in range(2)]
        standby = make_engine(pair.url(pair.standby_port))
        try:
            wait_until(lambda: count(standby, DONE) >= jobs // 4, timeout=60, interval=0.05)
            pair.stop_primary()
            stopped_at = time.monotonic()
            time.sleep(0.1)  # a failover manager's reaction time
            pair.promote()
            wait_until(lambda: count(standby, DONE) == jobs, timeout=60, interval=0.1)
            drained_in = time.monotonic() - stopped_at
        finally:
            standby.dispose()
            ended = [stop_worker(worker) for worker in workers]
        states, analyses, written_over, attempts = _final_rows(pair.url(pair.standby_port))

    for code, output in ended:
        assert code == 0, output
        assert "Traceback" not in output and "died unexpectedly" not in output, output
    assert states == {"done": jobs}
    assert analyses == jobs and written_over == 0
    _figures(
        "promotion",
        jobs=jobs,
        workers=2,
        drained_after_stop_s=round(drained_in, 1),
        attempts=attempts,
        model_requests=len(vision_server.requests),
    )


def test_a_read_only_spell_is_an_outage_and_the_answers_are_written_after_promotion(
    vision_server, tmp_path
):
    at_the_model, jobs, spell_seconds = 4, 6, 3.0
    with primary_with_standby("readonly") as pair:
        storage = tmp_path / "storage"
        _migrated_pair_with_pages(pair, storage, jobs)
        hold = threading.Event()
        held = Reply(body=ok_answer(analysis_content()).body, block=hold)
        vision_server.script(*[held] * at_the_model)
        env = _env(
            pair.multi_host_url("any"),
            vision_server.url,
            storage,
            ANALYSIS_WORKERS=str(at_the_model),
            LEASE_SECONDS="60",
        )
        worker = start_worker(env, tmp_path)
        standby = pair.connect(pair.standby_port)
        try:
            vision_server.wait_for_requests(at_the_model, timeout=60)
            pair.wait_replayed()  # the leases are on the standby: the answers must be kept
            pair.stop_primary()
            # The worker's threads come back on the standby, which refuses their writes
            # (each refused transaction ends in a rollback there).
            refused = (
                "SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()"
            )
            wait_until(lambda: standby.execute(refused).fetchone()[0] >= 2, timeout=30)
            hold.set()  # the model answers while nothing can be written
            vision_server.wait_idle(timeout=30)
            # The spell itself: this long the worker must keep its answers and not spin.
            time.sleep(spell_seconds)
            assert worker.poll() is None, "the worker died on a read-only server"
            pair.promote()
            promoted_at = time.monotonic()
            wait_until(
                lambda: standby.execute(DONE).fetchone()[0] == jobs, timeout=60, interval=0.1
            )
            recovered_in = time.monotonic() - promoted_at
        finally:
            standby.close()
            code, output = stop_worker(worker)
        states, analyses, written_over, attempts = _final_rows(pair.url(pair.standby_port))

    assert code == 0, output
    assert states == {"done": jobs} and analyses == jobs and written_over == 0
    assert attempts == jobs, "an attempt was charged for the outage"
    assert len(vision_server.requests) == jobs, "a kept answer was asked for again"
    assert output.count(OUTAGE_LINE) == 1, output
    assert output.count("database reachable again") == 1, output
    assert "died unexpectedly" not in output and "Traceback" not in output, output
    complaints = [line for line in output.splitlines() if " WARNING " in line or " ERROR " in line]
    assert len(complaints) <= 6, "\n".join(complaints)
    _figures(
        "read-only spell",
        jobs=jobs,
        at_the_model=at_the_model,
        spell_s=spell_seconds,
        written_after_promotion_s=round(recovered_in, 1),
        warning_lines=len(complaints),
        output_lines=len(output.splitlines()),
    )
