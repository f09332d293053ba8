"""The page-analysis runner in-process: a real Postgres, a real HTTP vision
server on 127.0.0.1 with scripted answers, real files in a storage root."""

from __future__ import annotations

import base64
import contextlib
import threading
from datetime import timedelta

import pytest
from sqlalchemy import text

from manga_page_analysis.queue import KIND_ANALYZE_PAGE, lease, release_unowned
from manga_page_analysis.worker import lease_loop as leasing_module
from testbed.vision_server import Reply, analysis_content, error_reply, ok_answer
from tests.helpers import fail_first_call, wait_until
from tests.worker_support import png_bytes


def held_answer(hold: threading.Event) -> Reply:
    """A good answer that is sent only once `hold` is set."""
    return Reply(body=ok_answer(analysis_content()).body, block=hold)


@contextlib.contextmanager
def held_page_job(harness, vision_server):
    """A page with a pending analysis job whose answer waits for `hold`; `hold` is
    set on the way out, so a failing test never leaves the model server blocked."""
    page_id = harness.add_page(png_bytes())
    job_id = harness.request(page_id)
    hold = threading.Event()
    vision_server.script(held_answer(hold))
    try:
        yield page_id, job_id, hold
    finally:
        hold.set()


def test_happy_path_writes_the_analysis_acks_and_publishes(harness, vision_server):
    page_id = harness.add_page(
        png_bytes(), manga_title="Yotsuba&!", chapter_number="10.5", page_number=3
    )
    job_id = harness.request(page_id)
    vision_server.script(ok_answer(analysis_content(tags=["Kitchen", "kitchen", " girl "])))
    with harness.running():
        harness.events.wait_for("completed", page_id)

    row = harness.analysis(page_id)
    assert row.status == "done" and row.error is None
    assert row.ocr_text == "こんにちは"
    assert row.tags == ["kitchen", "girl"]
    assert row.nsfw_rating == "safe" and row.nsfw_score == pytest.approx(0.02)
    assert row.model == "test-model"
    assert row.duration_ms is not None and row.duration_ms >= 0
    job = harness.job(job_id)
    assert job.state == "done" and job.attempts == 1

    (started,) = harness.events.of("started", page_id)
    (completed,) = harness.events.of("completed", page_id)
    assert started.breadcrumb["manga_title"] == "Yotsuba&!"
    assert started.breadcrumb["page_number"] == 3
    assert completed.to_json()["chapter_number"] == 10.5
    assert completed.details["duration_ms"] >= 0
    body = vision_server.requests[0]
    image_url = body["messages"][1]["content"][1]["image_url"]["url"]
    assert base64.b64decode(image_url.split(",", 1)[1]) == png_bytes()


def test_vision_down_then_up_costs_no_attempt(harness, vision_server):
    page_id = harness.add_page(png_bytes())
    job_id = harness.request(page_id)
    vision_server.health_status = 503  # llama-server while its model loads
    with harness.running():
        wait_until(lambda: vision_server.health_hits >= 3)
        job = harness.job(job_id)
        assert job.state == "pending" and job.attempts == 0
        assert vision_server.requests == []
        vision_server.health_status = 200
        harness.events.wait_for("completed", page_id)
    assert harness.job(job_id).attempts == 1


def test_vision_server_not_listening_parks_the_workers(harness, vision_server):
    from testbed.vision_server import ScriptedVisionServer

    page_id = harness.add_page(png_bytes())
    job_id = harness.request(page_id)
    late = ScriptedVisionServer()
    late.start()
    port = int(late.url.rsplit(":", 1)[1])
    late.stop()  # the port is now closed: connection refused
    with harness.running(vision_url=f"http://127.0.0.1:{port}") as runner:
        gate = runner._readiness
        wait_until(lambda: gate.ready is False)
        assert harness.job(job_id).attempts == 0
        with ScriptedVisionServer(port=port):
            harness.events.wait_for("completed", page_id)
    assert harness.job(job_id).attempts == 1


def test_a_500_is_retried_inside_the_attempt(harness, vision_server):
    page_id = harness.add_page(png_bytes())
    job_id = harness.request(page_id)
    vision_server.script(error_reply(500, "CUDA out of memory"))
    with harness.running():
        harness.events.wait_for("completed", page_id)
    assert len(vision_server.requests) == 2
    assert harness.job(job_id).attempts == 1


@pytest.mark.parametrize(
    ("reply", "fragment"),
    [
        (ok_answer("Sure! Here is the analysis you asked for."), "not JSON"),
        (ok_answer(""), "model returned no content"),
        (error_reply(400, "image input is not supported by this model"), "not supported"),
        (ok_answer('{"ocr_text": "ab', finish_reason="length"), "max_tokens"),
    ],
    ids=["invalid-json", "empty-content", "http-400", "cut-off"],
)
def test_a_bad_answer_fails_the_attempt_and_schedules_a_retry(
    harness, vision_server, reply, fragment
):
    page_id = harness.add_page(png_bytes())
    job_id = harness.request(page_id)
    vision_server.script(reply)
    with harness.running():
        (failed,) = harness.events.wait_for("failed", page_id)
    job = harness.job(job_id)
    assert job.state == "pending" and job.attempts == 1
    assert fragment in job.last_error
    assert failed.details["will_retry"] is True and fragment in failed.details["error"]
    assert harness.analysis(page_id) is None  # a retry is coming: nothing written yet
    assert len(vision_server.requests) == 1


def test_timeout_fails_the_attempt_with_a_clear_message(harness, vision_server):
    with (
        held_page_job(harness, vision_server) as (page_id, job_id, _hold),
        harness.running(job_timeout_seconds=1.0),
    ):
        harness.events.wait_for("failed", page_id)
    job = harness.job(job_id)
    assert job.state == "pending" and job.attempts == 1
    assert "analysis dispatch timed out" in job.last_error
    assert harness.analysis(page_id) is None


def test_an_exception_in_the_dispatch_fails_that_job_only(harness, vision_server, monkeypatch):
    bad = harness.add_page(png_bytes())
    good = harness.add_page(png_bytes(color="black"))
    bad_job = harness.request(bad)
    from manga_page_analysis.analysis import page_handler as dispatcher

    monkeypatch.setattr(
        dispatcher,
        "prepare_image",
        fail_first_call(dispatcher.prepare_image, RuntimeError("boom in the dispatcher")),
    )
    with harness.running():
        harness.events.wait_for("failed", bad)
        harness.request(good)
        harness.events.wait_for("completed", good)
    assert harness.job(bad_job).last_error == "RuntimeError: boom in the dispatcher"
    assert harness.analysis(good).status == "done"


def test_skip_if_done_and_force_re_analyses(harness, vision_server):
    page_id = harness.add_page(png_bytes())
    harness.request(page_id)
    vision_server.script(ok_answer(analysis_content(description="first")))
    with harness.running():
        harness.events.wait_for("completed", page_id)
        skipped = harness.request(page_id)
        # The skip is an event too (the admin page's counts move on it), after the ack.
        (event,) = harness.events.wait_for("skipped", page_id)
        assert event.job_id == skipped and event.details == {"attempt": 1}
        assert harness.job(skipped).state == "done"
        assert len(vision_server.requests) == 1  # not asked again
        assert harness.analysis(page_id).description == "first"

        vision_server.script(ok_answer(analysis_content(description="second")))
        harness.request(page_id, force=True)
        harness.events.wait_for("completed", page_id, n=2)
    assert len(vision_server.requests) == 2
    assert harness.analysis(page_id).description == "second"


def test_a_deleted_page_is_acked_as_a_no_op(harness, vision_server):
    page_id = harness.add_page(png_bytes())
    job_id = harness.request(page_id)
    with harness.engine.begin() as conn:
        conn.execute(text("DELETE FROM pages WHERE id = :id"), {"id": page_id})
    with harness.running():
        harness.events.wait_for("skipped", page_id)
        assert harness.job(job_id).state == "done"
    assert vision_server.requests == []
    assert [event.type for event in harness.events.events] == ["skipped"]


def test_terminal_failure_goes_dead_and_writes_a_failed_row(harness, vision_server):
    page_id = harness.add_page(png_bytes())
    job_id = harness.request(page_id)
    harness.set_max_attempts(job_id, 1)
    vision_server.script(error_reply(400, "bad image"))
    with harness.running():
        (failed,) = harness.events.wait_for("failed", page_id)
    assert failed.details["will_retry"] is False
    job = harness.job(job_id)
    assert job.state == "dead" and "bad image" in job.last_error
    row = harness.analysis(page_id)
    assert row.status == "failed" and "bad image" in row.error
    assert row.duration_ms is not None and row.model == "test-model"


def test_a_failed_forced_re_analysis_keeps_the_earlier_success(harness, vision_server):
    page_id = harness.add_page(png_bytes())
    harness.request(page_id)
    with harness.running():
        harness.events.wait_for("completed", page_id)
    before = harness.analysis(page_id)

    job_id = harness.request(page_id, force=True)
    harness.set_max_attempts(job_id, 1)
    vision_server.script(error_reply(400, "model swapped out"))
    with harness.running():
        harness.events.wait_for("failed", page_id)
    after = harness.analysis(page_id)
    assert harness.job(job_id).state == "dead"
    assert after.status == "done" and after.ocr_text == before.ocr_text
    assert after.duration_ms == before.duration_ms
    assert "model swapped out" in after.error


def test_shutdown_mid_dispatch_releases_the_job_at_once(harness, vision_server):
    with (
        held_page_job(harness, vision_server) as (page_id, job_id, _hold),
        harness.build() as runner,
    ):
        runner.start()
        vision_server.wait_for_requests(1)
        runner.stop()
        assert runner.join(5), "in-flight job was waited for"
        harness.events.wait_for("cancelled", page_id)
    job = harness.job(job_id)
    assert job.state == "pending" and job.attempts == 0 and job.lease_generation == 2
    assert harness.analysis(page_id) is None
    assert harness.events.of("completed") == [] and harness.events.of("failed") == []


def test_a_lease_stolen_mid_dispatch_never_writes_the_loser_result(harness, vision_server):
    with (
        held_page_job(harness, vision_server) as (page_id, job_id, hold),
        harness.build() as runner,
    ):
        runner.start()
        vision_server.wait_for_requests(1)
        # Another worker takes the job over (as after an expired lease).
        with harness.engine.begin() as conn:
            assert release_unowned(conn, job_id)
            (thief,) = lease(conn, KIND_ANALYZE_PAGE, 1, timedelta(minutes=5))
        hold.set()  # the loser's answer now arrives
        wait_until(lambda: vision_server.requests and runner_idle(runner))
        runner.stop()
        assert runner.join(5)
    assert harness.analysis(page_id) is None
    job = harness.job(job_id)
    assert job.state == "running" and job.lease_generation == thief.lease_generation
    assert harness.events.of("completed") == []


def runner_idle(runner) -> bool:
    return runner.in_flight == 0


def test_heartbeat_renews_the_lease_while_the_model_thinks(harness, vision_server):
    with (
        held_page_job(harness, vision_server) as (page_id, job_id, hold),
        harness.running(lease_seconds=0.9),
    ):
        vision_server.wait_for_requests(1)
        first = harness.job(job_id).leased_until
        wait_until(lambda: harness.job(job_id).leased_until > first, timeout=5)
        hold.set()
        harness.events.wait_for("completed", page_id)
    assert harness.job(job_id).state == "done"


def test_a_database_restart_mid_job_loses_nothing(harness, vision_server):
    with held_page_job(harness, vision_server) as (page_id, job_id, hold), harness.running():
        vision_server.wait_for_requests(1)
        # What clients see of a restart: every connection of theirs dropped.
        with harness.engine.connect() as conn:
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
        hold.set()
        harness.events.wait_for("completed", page_id)
    assert harness.job(job_id).state == "done"
    assert harness.analysis(page_id).status == "done"


def test_a_worker_thread_that_dies_is_replaced(harness, vision_server, monkeypatch, caplog):
    page_id = harness.add_page(png_bytes())
    monkeypatch.setattr(
        leasing_module,
        "lease_with_ends",
        fail_first_call(leasing_module.lease_with_ends, RuntimeError("bug in the lease path")),
    )
    with harness.running() as runner:
        harness.request(page_id)
        harness.events.wait_for("completed", page_id)
        assert runner.worker_deaths == 1
    assert "died unexpectedly" in caplog.text


def test_oversized_image_goes_dead_at_once_with_a_clear_error(harness, vision_server):
    page_id = harness.add_page(png_bytes(size=(400, 400)))
    job_id = harness.request(page_id)
    with harness.running(max_image_bytes=100):
        harness.events.wait_for("failed", page_id)
    job = harness.job(job_id)
    assert job.state == "dead" and job.attempts == 1
    assert "exceeds" in job.last_error and "100" in job.last_error
    assert harness.analysis(page_id).status == "failed"
    assert vision_server.requests == []


def test_a_storage_key_escaping_the_root_is_refused(harness, vision_server, tmp_path):
    secret = tmp_path / "secret.png"
    secret.write_bytes(png_bytes())
    page_id = harness.add_page(key="../secret.png")
    job_id = harness.request(page_id)
    with harness.running():
        harness.events.wait_for("failed", page_id)
    job = harness.job(job_id)
    assert job.state == "dead" and "../secret.png" in job.last_error
    assert vision_server.requests == []


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"\x89PNG\r\n\x1a\n this is not really a png", "not an image Pillow can read"),
        (b"", "the file is empty"),
    ],
    ids=["not-an-image", "empty"],
)
def test_undecodable_image_goes_dead_with_an_error_a_person_can_read(
    harness, vision_server, data, expected
):
    page_id = harness.add_page(data)
    job_id = harness.request(page_id)
    with harness.running():
        (failed,) = harness.events.wait_for("failed", page_id)
    job = harness.job(job_id)
    row = harness.analysis(page_id)
    assert job.state == "dead" and row.status == "failed"
    for message in (job.last_error, row.error, failed.details["error"]):
        assert message.startswith("cannot decode page image: ") and expected in message
        assert "object at 0x" not in message and "BytesIO" not in message
    assert vision_server.requests == []


def test_a_damaged_jpeg_is_named_as_one(harness, vision_server, tmp_path):
    from PIL import Image

    photo = tmp_path / "photo.jpg"
    Image.effect_mandelbrot((900, 700), (-2.0, -1.2, 1.0, 1.2), 60).convert("RGB").save(photo)
    data = photo.read_bytes()
    page_id = harness.add_page(data[: len(data) // 3])
    job_id = harness.request(page_id)
    with harness.running():
        harness.events.wait_for("failed", page_id)
    last_error = harness.job(job_id).last_error
    assert last_error.startswith("cannot decode page image: the JPEG file is damaged or cut short")
    assert vision_server.requests == []


def test_webp_pages_are_re_encoded_for_the_model(harness, vision_server):
    page_id = harness.add_page(png_bytes(fmt="WEBP"), key="page.webp")
    harness.request(page_id)
    with harness.running():
        harness.events.wait_for("completed", page_id)
    url = vision_server.requests[0]["messages"][1]["content"][1]["image_url"]["url"]
    assert url.startswith(("data:image/png;base64,", "data:image/jpeg;base64,"))


def test_a_poison_job_does_not_stop_the_worker(harness, vision_server):
    with harness.engine.begin() as conn:
        poison = conn.execute(
            text(
                "INSERT INTO crawler_jobs (payload) VALUES "
                '(\'{"kind": "analyze_page", "page_id": "nope"}\') RETURNING id'
            )
        ).scalar_one()
    page_id = harness.add_page(png_bytes())
    harness.request(page_id)
    with harness.running():
        harness.events.wait_for("completed", page_id)
    assert harness.job(poison).state == "dead"


def test_workers_never_take_crawl_jobs(harness, vision_server):
    from manga_page_analysis.queue import SyncManga, enqueue

    with harness.engine.begin() as conn:
        crawl = enqueue(conn, SyncManga(source_id="s", source_manga_key="k"))
    page_id = harness.add_page(png_bytes())
    harness.request(page_id)
    with harness.running():
        harness.events.wait_for("completed", page_id)
    job = harness.job(crawl)
    assert job.state == "pending" and job.attempts == 0


def test_events_without_a_breadcrumb_are_suppressed_but_work_goes_on(
    harness, vision_server, monkeypatch
):
    from manga_page_analysis.analysis.page_handler import PageAnalysisHandler

    def broken(self, item):
        raise KeyError("manga_title")

    monkeypatch.setattr(PageAnalysisHandler, "breadcrumb", broken)
    page_id = harness.add_page(png_bytes())
    job_id = harness.request(page_id)
    with harness.running():
        wait_until(lambda: harness.job(job_id).state == "done")
    assert harness.events.events == []
    assert harness.analysis(page_id).status == "done"


def test_two_workers_share_the_queue(harness, vision_server):
    pages = [harness.add_page(png_bytes(color=c)) for c in ("red", "green", "blue", "white")]
    jobs = [harness.request(page) for page in pages]
    hold = threading.Event()
    vision_server.default = held_answer(hold)  # no job can finish until `hold` is set
    try:
        with harness.running(analysis_workers=2):
            # Both workers have a job in flight at once: one worker alone could never
            # start a second job while the model holds the first one's answer back.
            started = harness.events.wait_for("started", n=2)
            vision_server.wait_for_requests(2)
            assert len({event.job_id for event in started}) == 2
            assert harness.events.of("completed") == []
            assert len(vision_server.requests) == 2  # and no more than two at once
            hold.set()
            for page in pages:
                harness.events.wait_for("completed", page)
    finally:
        hold.set()
    assert {harness.job(job).state for job in jobs} == {"done"}
    completed = harness.events.of("completed")
    assert sorted(str(event.job_id) for event in completed) == sorted(str(job) for job in jobs)


def test_start_reclaims_orphans_so_a_crashed_worker_costs_no_attempt(harness, vision_server):
    page_id = harness.add_page(png_bytes())
    job_id = harness.request(page_id)
    with harness.engine.begin() as conn:
        # A previous worker leased the job, then died without a trace.
        lease(conn, KIND_ANALYZE_PAGE, 1, timedelta(minutes=5))
        conn.execute(
            text("UPDATE crawler_jobs SET leased_until = now() - interval '1 s' WHERE id = :id"),
            {"id": job_id},
        )
    with harness.running():
        harness.events.wait_for("completed", page_id)
    job = harness.job(job_id)
    # Reclaimed (refunded) at start, then leased once: one attempt, not two.
    assert job.state == "done" and job.attempts == 1 and job.lease_generation == 3


def test_a_heartbeat_thread_that_dies_is_noticed_and_restarted(
    harness, vision_server, monkeypatch, caplog
):
    from manga_page_analysis.worker import heartbeat as heartbeat_module

    renew = fail_first_call(heartbeat_module.renew_many, RuntimeError("bug in the heartbeat"))
    monkeypatch.setattr(heartbeat_module, "renew_many", renew)
    with (
        held_page_job(harness, vision_server) as (page_id, job_id, hold),
        harness.running(lease_seconds=0.6),
    ):
        vision_server.wait_for_requests(1)
        wait_until(lambda: renew.calls >= 3, timeout=5)  # beats go on after the death
        first = harness.job(job_id).leased_until
        wait_until(lambda: harness.job(job_id).leased_until > first, timeout=5)
        hold.set()
        harness.events.wait_for("completed", page_id)
    assert "heartbeat thread" in caplog.text and "died" in caplog.text
    assert "starting a new one" in caplog.text
    assert harness.job(job_id).state == "done"


def test_a_heartbeat_that_finds_the_lease_gone_abandons_the_job_at_once(
    harness, vision_server, caplog
):
    with (
        held_page_job(harness, vision_server) as (page_id, job_id, _hold),
        harness.build(lease_seconds=0.6) as runner,
    ):
        runner.start()
        vision_server.wait_for_requests(1)
        with harness.engine.begin() as conn:
            assert release_unowned(conn, job_id)
            lease(conn, KIND_ANALYZE_PAGE, 1, timedelta(minutes=5))
        # The model has not answered, yet the worker lets go of the job.
        wait_until(lambda: runner_idle(runner), timeout=5)
        runner.stop()
        assert runner.join(5)
    assert "lost its lease" in caplog.text
    assert harness.analysis(page_id) is None
    assert harness.job(job_id).state == "running"


class RecordingObserver:
    def __init__(self) -> None:
        self.finished: list[tuple[str, str, float]] = []
        self.lost: list[str] = []

    def job_finished(self, kind: str, outcome: str, duration_seconds: float) -> None:
        self.finished.append((kind, outcome, duration_seconds))

    def lease_lost(self, kind: str) -> None:
        self.lost.append(kind)


def test_observer_hears_each_outcome_and_a_failing_observer_changes_nothing(harness, vision_server):
    good, bad = harness.add_page(png_bytes()), harness.add_page(png_bytes())
    harness.request(good)
    bad_job = harness.request(bad)
    harness.set_max_attempts(bad_job, 1)
    vision_server.script(ok_answer(analysis_content()), error_reply(400, "bad request"))
    observer = RecordingObserver()
    with harness.running(observer=observer):
        harness.events.wait_for("completed")
        harness.events.wait_for("failed")
    outcomes = sorted((kind, outcome) for kind, outcome, _ in observer.finished)
    assert outcomes == [(KIND_ANALYZE_PAGE, "dead"), (KIND_ANALYZE_PAGE, "done")]
    assert all(duration >= 0 for _, _, duration in observer.finished)

    class Broken:
        def job_finished(self, *args):
            raise RuntimeError("observer bug")

        def lease_lost(self, *args):
            raise RuntimeError("observer bug")

    third = harness.add_page(png_bytes())
    harness.request(third)
    vision_server.script(ok_answer(analysis_content()))
    with harness.running(observer=Broken()):
        harness.events.wait_for("completed", third)
    assert harness.analysis(third).status == "done"


def test_log_lines_about_a_job_carry_its_fields_even_from_the_dispatch_thread(
    harness, vision_server
):
    import logging

    from manga_page_analysis.worker.reports.logcontext import JobFieldsFilter

    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    collector = Collect(level=logging.INFO)
    collector.addFilter(JobFieldsFilter())
    root = logging.getLogger()
    previous_level = root.level
    root.setLevel(logging.INFO)
    root.addHandler(collector)
    try:
        # Wider than the 1600 px cap: the handler logs a re-encode on the dispatch thread.
        page_id = harness.add_page(png_bytes((2000, 120)))
        job_id = harness.request(page_id)
        vision_server.script(ok_answer(analysis_content()))
        with harness.running():
            harness.events.wait_for("completed", page_id)
    finally:
        root.removeHandler(collector)
        root.setLevel(previous_level)

    about_job = [r for r in records if getattr(r, "job_id", None) == str(job_id)]
    completed = [r for r in about_job if "completed in" in r.getMessage()]
    assert len(completed) == 1
    assert completed[0].page_id == str(page_id)
    assert completed[0].attempt == 1 and completed[0].kind == KIND_ANALYZE_PAGE
    assert completed[0].duration_ms >= 0
    reencoded = [r for r in about_job if "re-encoded" in r.getMessage()]
    assert reencoded and reencoded[0].threadName.startswith("dispatch-")
    assert reencoded[0].page_id == str(page_id)
    outside = [
        r for r in records if "completed in" not in r.getMessage() and r.threadName == "MainThread"
    ]
    assert all(not hasattr(r, "job_id") for r in outside)
