"""Fault tests through the real runner in-process: a flapping model server,
a heartbeat starved of its database, and bad page files, all on a real
Postgres with the scripted vision server."""

from __future__ import annotations

import base64
import collections
import logging
import os
import threading
import time

import pytest
from sqlalchemy import text

from manga_page_analysis.analysis.model_server.client import VisionClient
from manga_page_analysis.analysis.wiring import analysis_runner
from manga_page_analysis.config import Settings
from manga_page_analysis.db import make_engine
from manga_page_analysis.worker.gates.readiness import ReadinessGate
from manga_page_analysis.worker.reports.events import EventBus
from testbed.vision_server import (
    Reply,
    ScriptedVisionServer,
    analysis_content,
    error_reply,
    ok_answer,
)
from tests.helpers import count, wait_until
from tests.tcp_proxy import TcpProxy
from tests.worker_support import EventRecorder, png_bytes


def _figures(name: str, **figures: object) -> None:
    print(f"\n[fault figures] {name}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


def _requested_pages(
    vision_server: ScriptedVisionServer, page_by_image: dict
) -> collections.Counter:
    """How many chat requests the server received (and answered or held) per page."""
    seen: collections.Counter = collections.Counter()
    for body in list(vision_server.requests):
        url = body["messages"][1]["content"][1]["image_url"]["url"]
        seen[page_by_image[base64.b64decode(url.split(",", 1)[1])]] += 1
    return seen


def _row_dict(engine, table: str, key: str, value) -> dict:
    with engine.connect() as conn:
        return dict(
            conn.execute(text(f"SELECT * FROM {table} WHERE {key} = :v"), {"v": value})
            .mappings()
            .one()
        )


# --- a flapping model server ----------------------------------------------------


@pytest.mark.slow
def test_a_flapping_model_server_costs_no_attempt_while_the_gate_is_closed(harness, vision_server):
    jobs = 50
    page_by_image, job_of_page = {}, {}
    for i in range(jobs):
        image = png_bytes(color=f"#{i + 1:06x}")
        page = harness.add_page(image, page_number=i)
        page_by_image[image] = page
        job_of_page[page] = harness.request(page)
    with harness.engine.begin() as conn:
        # Half may fail once and retry, half die at their first failure: both
        # ends ("done" after a retry, "dead" with a failed row) get exercised.
        conn.execute(
            text("UPDATE crawler_jobs SET max_attempts = 1 + (payload ->> 'page_id' < '8')::int")
        )
    done_sql = "SELECT count(*) FROM crawler_jobs WHERE state = 'done'"
    running_sql = "SELECT count(*) FROM crawler_jobs WHERE state = 'running'"
    attempts_sql = "SELECT coalesce(sum(attempts), 0) FROM crawler_jobs"
    engine = harness.engine
    vision_server.default = Reply(body=ok_answer(analysis_content()).body, delay=0.02)

    with harness.running(analysis_workers=4):
        # up
        wait_until(lambda: count(engine, done_sql) >= 10, timeout=30)
        # 503: llama-server loading a model. The gate closes at its next probe.
        hits = vision_server.health_hits
        vision_server.health_status = 503
        vision_server.default = error_reply(503, "Loading model")
        wait_until(
            lambda: vision_server.health_hits >= hits + 5 and count(engine, running_sql) == 0,
            timeout=15,
        )
        # refused: nothing listens on the port any more.
        attempts_closed, requests_closed = count(engine, attempts_sql), len(vision_server.requests)
        vision_server.stop()
        time.sleep(1.0)  # the outage window itself: the workers must lease nothing in it
        assert count(engine, attempts_sql) == attempts_closed
        assert count(engine, running_sql) == 0
        # slow: back on the same port, answering slowly.
        vision_server.default = Reply(body=ok_answer(analysis_content()).body, delay=0.3)
        vision_server.health_status = 200
        vision_server.start()
        assert len(vision_server.requests) == requests_closed
        done_before = count(engine, done_sql)
        wait_until(lambda: count(engine, done_sql) >= done_before + 8, timeout=30)
        # up again; attempts failed by the 503s wait out their backoff: make them due now.
        vision_server.default = ok_answer(analysis_content())

        def settled() -> bool:
            with engine.begin() as conn:
                conn.execute(
                    text("UPDATE crawler_jobs SET scheduled_at = now() WHERE state = 'pending'")
                )
            return (
                count(engine, "SELECT count(*) FROM crawler_jobs WHERE state IN ('done', 'dead')")
                == jobs
            )

        wait_until(settled, timeout=60, interval=0.2)

    requested = _requested_pages(vision_server, page_by_image)
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT j.id, j.state, j.attempts, j.max_attempts, a.status, a.error "
                "FROM crawler_jobs j "
                "LEFT JOIN page_analysis a ON a.page_id = (j.payload ->> 'page_id')::uuid"
            )
        ).all()
    states = collections.Counter(row.state for row in rows)
    for row in rows:
        page = next(p for p, j in job_of_page.items() if j == row.id)
        # Every counted attempt reached a server that answered it.
        assert 1 <= row.attempts <= requested[page], (row, requested[page])
        if row.state == "done":
            assert row.status == "done"
        else:
            assert row.state == "dead" and row.attempts == row.max_attempts
            assert row.status == "failed" and "503" in row.error
    assert states["done"] + states["dead"] == jobs
    _figures(
        "flapping model server",
        jobs=jobs,
        phases="up,503,refused,slow,up",
        done=states["done"],
        dead=states["dead"],
        attempts=sum(row.attempts for row in rows),
        retried_jobs=sum(1 for row in rows if row.attempts > 1),
        chat_requests=sum(requested.values()),
        server_restarts=1,
    )


# --- heartbeat starvation -------------------------------------------------------


@pytest.mark.slow
def test_a_starved_heartbeat_loses_the_job_to_another_worker_and_writes_nothing_late(
    harness, vision_server, postgresql_proc, caplog
):
    caplog.set_level(logging.WARNING, logger="manga_page_analysis.worker")
    page_id = harness.add_page(png_bytes())
    job_id = harness.request(page_id)
    hold = threading.Event()
    vision_server.script(Reply(body=ok_answer(analysis_content(ocr_text="late")).body, block=hold))
    url = harness.engine.url.render_as_string(hide_password=False)
    port = str(postgresql_proc.port)
    second_server = ScriptedVisionServer().start()
    second_server.health_status = 503  # keeps the second worker idle until the takeover
    second_server.default = ok_answer(analysis_content(ocr_text="on time"))

    with TcpProxy(postgresql_proc.port) as proxy:
        starved_engine = make_engine(url.replace(f":{port}/", f":{proxy.port}/"))
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            database_url=url,
            vision_url=vision_server.url,
            vision_model="test-model",
            storage_root=harness.storage_root,
            analysis_workers=1,
            lease_seconds=1.5,
            idle_poll_seconds=0.05,
            readiness_poll_seconds=0.05,
            reap_retention_days=0,
        )
        first_events = EventRecorder()
        bus = EventBus(None)
        bus.subscribe(first_events)
        client = VisionClient(base_url=vision_server.url, model="test-model")
        try:
            with (
                harness.running(vision_url=second_server.url, lease_seconds=30),
                analysis_runner(
                    settings, engine=starved_engine, vision=client, events=bus
                ) as first,
            ):
                first.start()
                try:
                    vision_server.wait_for_requests(1, timeout=15)
                    # The first worker's database connection stalls: its heartbeat cannot renew.
                    proxy.pause()
                    second_server.health_status = 200
                    harness.events.wait_for("completed", page_id, timeout=20)
                    job_after_takeover = _row_dict(harness.engine, "crawler_jobs", "id", job_id)
                    analysis_after_takeover = _row_dict(
                        harness.engine, "page_analysis", "page_id", page_id
                    )
                    # The first worker's model answers late, then its connection flows again.
                    hold.set()
                    vision_server.wait_idle()
                    proxy.resume()
                    # Either its fenced write finds the lease gone, or (if the renew
                    # gets through first) its heartbeat does; both discard the result.
                    wait_until(lambda: "discarded" in caplog.text, timeout=15)
                finally:
                    hold.set()
                    proxy.resume()
                    first.stop()
                    assert first.join(10)
        finally:
            client.close()
            second_server.stop()
            starved_engine.dispose()

    assert job_after_takeover["state"] == "done"
    # Taken over through the lease itself (an expired lease), so it cost an attempt.
    assert (job_after_takeover["attempts"], job_after_takeover["lease_generation"]) == (2, 2)
    assert analysis_after_takeover["ocr_text"] == "on time"
    assert _row_dict(harness.engine, "crawler_jobs", "id", job_id) == job_after_takeover
    assert _row_dict(harness.engine, "page_analysis", "page_id", page_id) == (
        analysis_after_takeover
    )
    assert first_events.of("completed") == []
    assert len(vision_server.requests) == 1 and len(second_server.requests) == 1
    _figures(
        "heartbeat starvation",
        jobs=1,
        takeovers=1,
        late_results_written=0,
        discarded_by="fenced write" if "no longer current" in caplog.text else "heartbeat",
        proxy_connections=proxy.connections,
    )


# --- bad input on disk ---------------------------------------------------------


def test_bad_page_files_fail_clearly_while_the_worker_serves_the_rest(
    harness, vision_server, tmp_path
):
    truncated = png_bytes(size=(300, 400))
    (tmp_path / "outside.png").write_bytes(png_bytes())
    pages = {
        "missing": harness.add_page(key="missing.png"),
        "empty": harness.add_page(b"", key="empty.png"),
        "truncated": harness.add_page(truncated[: len(truncated) // 2], key="truncated.png"),
        "huge": harness.add_page(b"", key="huge.png"),
        "escaping": harness.add_page(key="../outside.png"),
    }
    os.truncate(harness.storage_root / "huge.png", 200 * 1024 * 1024)  # sparse: no disk used
    jobs = {name: harness.request(page) for name, page in pages.items()}
    with harness.running(analysis_workers=2):
        for page in pages.values():
            harness.events.wait_for("failed", page)
        good = harness.add_page(png_bytes(color="black"))
        harness.request(good)
        harness.events.wait_for("completed", good)

    expected = {
        "missing": "no object stored under key 'missing.png'",
        "empty": "the file is empty (0 bytes)",
        "truncated": "image file is truncated",
        "huge": f"({200 * 1024 * 1024} bytes) exceeds the cap",
        "escaping": "'../outside.png' contains a '..' component",
    }
    for name, phrase in expected.items():
        job = harness.job(jobs[name])
        analysis = harness.analysis(pages[name])
        assert (job.state, job.attempts) == ("dead", 1), name
        assert phrase in job.last_error, (name, job.last_error)
        assert analysis.status == "failed" and analysis.error == job.last_error, name
    assert harness.analysis(good).status == "done"
    assert len(vision_server.requests) == 1  # none of the bad files reached the model


def test_recheck_makes_the_gate_probe_again_despite_a_fresh_answer():
    probes: list[bool] = []

    def probe() -> bool:
        probes.append(True)
        return len(probes) == 1  # ready once, then down

    gate = ReadinessGate(probe, name="model server", fresh_seconds=60)
    assert gate.check() and gate.check()
    assert len(probes) == 1  # the fresh answer was reused
    gate.recheck()
    assert gate.check() is False and len(probes) == 2
