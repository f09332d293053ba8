"""`manga_page_analysis.admin` on real Postgres: stats, keyset listing with labels, retry, page analysis."""

from __future__ import annotations

import base64
import json
import logging
import threading
import uuid
from datetime import datetime
from decimal import Decimal

import pytest
from sqlalchemy import insert, text, update

from manga_page_analysis.admin import (
    BadRequest,
    Conflict,
    NotFound,
    encode_cursor,
    get_page_analysis,
    list_jobs,
    parse_limit,
    parse_uuid,
    queue_stats,
    request_page_analysis,
    retry_dead_jobs,
    retry_job,
)
from manga_page_analysis.models import Chapter, Job, Manga, PageAnalysis
from manga_page_analysis.queue import (
    AnalyzePage,
    SyncChapterContent,
    SyncChapterList,
    SyncManga,
    enqueue,
)
from tests.helpers import count, insert_raw_job, job_row, make_page, wait_until


def _dead(conn, payload, error="boom") -> uuid.UUID:
    return insert_raw_job(
        conn, payload.to_json(), state="dead", attempts=5, last_error=error, reclaim_count=2
    )


def test_parse_uuid_and_limit():
    value = uuid.uuid4()
    assert parse_uuid(str(value)) == value
    for bad in ("", "nope", "123", str(value) + "0"):
        with pytest.raises(BadRequest, match="page_id"):
            parse_uuid(bad, "page_id")
    assert parse_limit(None) == 50 and parse_limit("") == 50
    assert parse_limit("1") == 1 and parse_limit(500) == 500
    for bad in ("0", "501", "-3", "ten", "1.5", 0, 10**9, True):
        with pytest.raises(BadRequest, match="limit"):
            parse_limit(bad)


def test_stats_count_by_kind_and_state_with_the_oldest_due_pending_age(engine):
    with engine.begin() as conn:
        empty = queue_stats(conn)
        assert empty["oldest_pending_age_seconds"] is None
        assert empty["jobs"]["analyze_page"] == {
            "pending": 0,
            "running": 0,
            "done": 0,
            "failed": 0,
            "dead": 0,
        }
        enqueue(conn, AnalyzePage(page_id=uuid.uuid4()))
        old = enqueue(conn, AnalyzePage(page_id=uuid.uuid4()))
        # Waiting out a backoff is not being late: a future job is not counted in the age.
        enqueue(
            conn,
            SyncManga(source_id="s", source_manga_key="k"),
            scheduled_at=datetime(2999, 1, 1).astimezone(),
        )
        _dead(conn, AnalyzePage(page_id=uuid.uuid4()))
        insert_raw_job(conn, {"kind": "host_kind"}, state="done")
        insert_raw_job(conn, {"no": "kind"}, state="failed")
        conn.execute(
            text(
                "UPDATE crawler_jobs SET scheduled_at = now() - interval '90 seconds' "
                "WHERE id = :id"
            ),
            {"id": old},
        )
        stats = queue_stats(conn)
    assert stats["jobs"]["analyze_page"]["pending"] == 2
    assert stats["jobs"]["analyze_page"]["dead"] == 1
    assert stats["jobs"]["sync_manga"]["pending"] == 1
    assert stats["jobs"]["sync_chapter_list"]["pending"] == 0
    assert stats["jobs"]["host_kind"]["done"] == 1
    assert stats["jobs"]["unknown"]["failed"] == 1
    assert 90 <= stats["oldest_pending_age_seconds"] < 150
    json.dumps(stats)


def _content(conn):
    manga_id = conn.execute(insert(Manga).values(title="Berserk").returning(Manga.id)).scalar_one()
    chapter_id = conn.execute(
        insert(Chapter).values(manga_id=manga_id, number=Decimal("10.5")).returning(Chapter.id)
    ).scalar_one()
    return manga_id, chapter_id


def test_listing_labels_every_kind_in_one_query(engine):
    executed = []
    with engine.begin() as conn:
        page_id = make_page(conn, manga_title="Yotsuba&!", chapter_number="12.0", page_number=3)
        manga_id, chapter_id = _content(conn)
        gone = uuid.uuid4()
        ids = {
            "page": enqueue(conn, AnalyzePage(page_id=page_id)),
            "gone": enqueue(conn, AnalyzePage(page_id=gone)),
            "content": enqueue(
                conn,
                SyncChapterContent(source_id="s", chapter_id=chapter_id, source_chapter_key="k"),
            ),
            "list": enqueue(
                conn, SyncChapterList(source_id="s", manga_id=manga_id, source_manga_key="k")
            ),
            "manga": enqueue(conn, SyncManga(source_id="src", source_manga_key="key")),
            "titled": enqueue(conn, SyncManga(source_id="s", source_manga_key="k2", title="Akira")),
            "garbled": insert_raw_job(conn, {"kind": "analyze_page", "page_id": "not-a-uuid"}),
            "foreign": insert_raw_job(conn, {"kind": "host_kind"}),
        }

        from sqlalchemy import event

        def count_statement(*args):
            executed.append(args[2])

        event.listen(engine, "before_cursor_execute", count_statement)
        try:
            listing = list_jobs(conn, limit=500)
        finally:
            event.remove(engine, "before_cursor_execute", count_statement)
    assert len(executed) == 1
    labels = {job["id"]: job["label"] for job in listing["jobs"]}
    assert labels[str(ids["page"])] == "Yotsuba&! ch. 12 p. 3"
    assert labels[str(ids["gone"])] == f"page {gone}"
    assert labels[str(ids["content"])] == "Berserk ch. 10.5"
    assert labels[str(ids["list"])] == "Berserk"
    assert labels[str(ids["manga"])] == "src:key"
    assert labels[str(ids["titled"])] == "Akira"
    assert labels[str(ids["garbled"])] == "page not-a-uuid"
    assert labels[str(ids["foreign"])] is None
    first = listing["jobs"][0]
    assert set(first) == {
        "id",
        "kind",
        "state",
        "attempts",
        "max_attempts",
        "last_error",
        "scheduled_at",
        "updated_at",
        "label",
    }
    assert datetime.fromisoformat(first["updated_at"]).tzinfo is not None
    assert listing["next_cursor"] is None
    json.dumps(listing)


def test_keyset_pages_cover_every_job_once_newest_first_ties_by_id(engine):
    with engine.begin() as conn:
        ids = [enqueue(conn, AnalyzePage(page_id=uuid.uuid4())) for _ in range(23)]
        # Many ties on updated_at: only the id tie-break keeps pages apart.
        conn.execute(text("UPDATE crawler_jobs SET updated_at = '2026-01-01T00:00:00Z'"))
        conn.execute(update(Job).where(Job.id.in_(ids[:3])).values(updated_at=text("now()")))
    seen = []
    cursor = None
    with engine.connect() as conn:
        while True:
            listing = list_jobs(conn, limit=5, cursor=cursor)
            assert len(listing["jobs"]) <= 5
            seen.extend(listing["jobs"])
            cursor = listing["next_cursor"]
            if cursor is None:
                break
    assert len(seen) == 23 and len({job["id"] for job in seen}) == 23
    keys = [(datetime.fromisoformat(job["updated_at"]), uuid.UUID(job["id"])) for job in seen]
    assert keys == sorted(keys, reverse=True)
    assert {job["id"] for job in seen[:3]} == {str(i) for i in ids[:3]}


def test_listing_filters_by_state_and_kind(engine):
    with engine.begin() as conn:
        dead_page = _dead(conn, AnalyzePage(page_id=uuid.uuid4()))
        dead_manga = _dead(conn, SyncManga(source_id="s", source_manga_key="k"))
        enqueue(conn, AnalyzePage(page_id=uuid.uuid4()))
        dead = list_jobs(conn, state="dead")
        assert {job["id"] for job in dead["jobs"]} == {str(dead_page), str(dead_manga)}
        assert dead["jobs"][0]["last_error"] == "boom"
        only = list_jobs(conn, state="dead", kind="analyze_page")
        assert [job["id"] for job in only["jobs"]] == [str(dead_page)]
        assert list_jobs(conn, kind="no_such_kind")["jobs"] == []


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage!",
        "e30",  # {}
        base64.urlsafe_b64encode(b"not json").decode(),
        base64.urlsafe_b64encode(b'{"u": "yesterday", "i": "x"}').decode(),
        base64.urlsafe_b64encode(
            b'{"u": "2026-01-01T00:00:00", "i": "%s"}' % str(uuid.UUID(int=1)).encode()
        ).decode(),  # no offset
        base64.urlsafe_b64encode(b"[1, 2]").decode(),
        "\u00e9t\u00e9",
    ],
)
def test_forged_cursors_and_bad_filters_are_bad_requests(engine, cursor):
    with engine.connect() as conn:
        with pytest.raises(BadRequest, match="cursor"):
            list_jobs(conn, cursor=cursor)
        with pytest.raises(BadRequest, match="state"):
            list_jobs(conn, state="zombie")
        with pytest.raises(BadRequest, match="limit"):
            list_jobs(conn, limit=0)
        with pytest.raises(BadRequest, match="kind"):
            list_jobs(conn, kind="a\x00b")
        with pytest.raises(BadRequest, match="kind"):
            retry_dead_jobs(conn, kind="")


def test_a_cursor_from_encode_cursor_round_trips(engine):
    with engine.begin() as conn:
        job_id = enqueue(conn, AnalyzePage(page_id=uuid.uuid4()))
        row = job_row(conn, job_id)
        after = list_jobs(conn, cursor=encode_cursor(row.updated_at, row.id))
    assert after == {"jobs": [], "next_cursor": None}


def test_retry_moves_a_dead_job_to_pending_due_now_attempts_reset(engine):
    with engine.begin() as conn:
        job_id = _dead(conn, AnalyzePage(page_id=uuid.uuid4()), error="model exploded")
        conn.execute(text("UPDATE crawler_jobs SET scheduled_at = now() - interval '1 day'"))
    with engine.begin() as conn:
        assert retry_job(conn, job_id) == {"id": str(job_id), "state": "pending"}
        row = job_row(conn, job_id)
    assert row.state == "pending" and row.attempts == 0 and row.reclaim_count == 0
    assert row.scheduled_at == row.db_now == row.updated_at
    assert row.last_error == "model exploded"  # kept: why it died, until the next attempt


def test_retry_refuses_unknown_and_not_dead_jobs(engine):
    with engine.begin() as conn:
        pending = enqueue(conn, AnalyzePage(page_id=uuid.uuid4()))
        with pytest.raises(NotFound):
            retry_job(conn, uuid.uuid4())
        with pytest.raises(Conflict, match="pending, not dead"):
            retry_job(conn, pending)
        assert job_row(conn, pending).state == "pending"


def test_retry_clashing_with_an_inflight_job_for_the_page_changes_nothing(engine):
    page_id = uuid.uuid4()
    with engine.begin() as conn:
        dead = _dead(conn, AnalyzePage(page_id=page_id))
        live = enqueue(conn, AnalyzePage(page_id=page_id))
    with engine.begin() as conn:
        with pytest.raises(Conflict, match="already pending or running"):
            retry_job(conn, dead)
        # The savepoint kept the caller's transaction usable.
        assert job_row(conn, dead).state == "dead"
        conn.execute(text("UPDATE crawler_jobs SET state = 'done' WHERE id = :id"), {"id": live})
        assert retry_job(conn, dead)["state"] == "pending"


def test_retry_clash_leaves_a_host_session_usable(engine):
    from sqlalchemy.orm import Session

    chapter_id = uuid.uuid4()
    payload = SyncChapterContent(source_id="s", chapter_id=chapter_id, source_chapter_key="k")
    with engine.begin() as conn:
        dead = _dead(conn, payload)
        enqueue(conn, payload)
    with Session(engine) as session:
        with pytest.raises(Conflict):
            retry_job(session, dead)
        assert session.execute(text("SELECT 1")).scalar_one() == 1
        session.commit()


def test_retry_is_fenced_against_a_concurrent_change_of_state(engine):
    with engine.begin() as conn:
        job_id = _dead(conn, AnalyzePage(page_id=uuid.uuid4()))
    outcome = {}
    with engine.connect() as other:
        other.begin()
        other.execute(text("UPDATE crawler_jobs SET state = 'done' WHERE id = :id"), {"id": job_id})

        def retry():
            with engine.begin() as conn:
                try:
                    outcome["result"] = retry_job(conn, job_id)
                except Conflict as exc:
                    outcome["result"] = exc

        thread = threading.Thread(target=retry)
        thread.start()
        # The retry's UPDATE waits on the row lock of the uncommitted change.
        # (Polled from fresh transactions: pg_stat_activity is a per-transaction snapshot.)
        wait_until(
            lambda: (
                count(
                    engine,
                    (
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE wait_event_type = 'Lock' AND datname = current_database()"
                    ),
                )
                == 1
            )
        )
        other.commit()
        thread.join(timeout=10)
    assert isinstance(outcome["result"], Conflict)
    with engine.connect() as conn:
        assert job_row(conn, job_id).state == "done"


def test_retry_dead_jobs_retries_all_skipping_taken_slots(engine):
    taken, twice = uuid.uuid4(), uuid.uuid4()
    with engine.begin() as conn:
        free = _dead(conn, AnalyzePage(page_id=uuid.uuid4()))
        clash = _dead(conn, AnalyzePage(page_id=taken))
        enqueue(conn, AnalyzePage(page_id=taken))
        older = _dead(conn, AnalyzePage(page_id=twice))
        newer = _dead(conn, AnalyzePage(page_id=twice))
        conn.execute(
            text("UPDATE crawler_jobs SET updated_at = now() - interval '1 hour' WHERE id = :id"),
            {"id": older},
        )
        manga = _dead(conn, SyncManga(source_id="s", source_manga_key="k"))
    with engine.begin() as conn:
        assert retry_dead_jobs(conn, kind="sync_manga").retried == [manga]
        report = retry_dead_jobs(conn)
    assert set(report.retried) == {free, newer}
    assert {job_id for job_id, _reason in report.left_dead} == {clash, older}
    with engine.connect() as conn:
        assert job_row(conn, clash).state == "dead"
        assert job_row(conn, older).state == "dead"
        assert retry_dead_jobs(conn).retried == []


def test_retry_dead_jobs_falls_back_when_a_slot_is_taken_during_the_batch(engine, caplog):
    caplog.set_level(logging.INFO, logger="manga_page_analysis.admin.retry")
    raced = uuid.uuid4()
    with engine.begin() as conn:
        clash = _dead(conn, AnalyzePage(page_id=raced))
        free = _dead(conn, AnalyzePage(page_id=uuid.uuid4()))
    outcome = {}
    with engine.connect() as other:
        other.begin()
        # Enqueued but not yet committed: invisible to the batch's in-flight check.
        enqueue(other, AnalyzePage(page_id=raced))

        def retry_all():
            with engine.begin() as conn:
                outcome["retried"] = retry_dead_jobs(conn)

        thread = threading.Thread(target=retry_all)
        thread.start()
        # The batch UPDATE waits on the unique index entry of the uncommitted enqueue.
        wait_until(
            lambda: (
                count(
                    engine,
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock' AND datname = current_database()",
                )
                == 1
            )
        )
        other.commit()
        thread.join(timeout=10)
    assert outcome["retried"].retried == [free]
    assert [job_id for job_id, _reason in outcome["retried"].left_dead] == [clash]
    assert any("one by one" in record.getMessage() for record in caplog.records)
    with engine.connect() as conn:
        assert job_row(conn, clash).state == "dead"
        assert job_row(conn, free).state == "pending"


def test_page_analysis_read(engine):
    with engine.begin() as conn:
        page_id = make_page(conn)
        with pytest.raises(NotFound):
            get_page_analysis(conn, page_id)
        conn.execute(
            insert(PageAnalysis).values(
                page_id=page_id,
                status="done",
                ocr_text="よつばと",
                tags=["kid", "summer"],
                description="a girl",
                nsfw_rating="safe",
                nsfw_score=0.02,
                model="m",
                duration_ms=1234,
            )
        )
        body = get_page_analysis(conn, page_id)
        failed_page = make_page(conn, page_number=2)
        conn.execute(
            insert(PageAnalysis).values(
                page_id=failed_page, status="failed", error="bad image", model="m", duration_ms=5
            )
        )
        failed = get_page_analysis(conn, failed_page)
    assert body == {
        "page_id": str(page_id),
        "status": "done",
        "ocr_text": "よつばと",
        "ocr_blocks": None,
        "tags": ["kid", "summer"],
        "description": "a girl",
        "nsfw": {"rating": "safe", "score": 0.02},
        "model": "m",
        "duration_ms": 1234,
        "error": None,
        "updated_at": body["updated_at"],
    }
    assert datetime.fromisoformat(body["updated_at"]).tzinfo is not None
    assert failed["nsfw"] is None and failed["status"] == "failed"
    assert failed["error"] == "bad image" and failed["tags"] == []


def test_request_page_analysis(engine):
    with engine.begin() as conn:
        with pytest.raises(NotFound):
            request_page_analysis(conn, uuid.uuid4())
        page_id = make_page(conn)
        first = request_page_analysis(conn, page_id)
        again = request_page_analysis(conn, page_id, force=True)
        row = job_row(conn, uuid.UUID(first["job_id"]))
    assert again == first and row.payload["force"] is True


def test_the_dead_job_listing_reads_its_index_not_the_table(engine):
    """Guards migrations 0004, 0008 and 0010: the admin page's dead-job listing must
    stay cheap on a table that is mostly done rows."""
    from sqlalchemy import event

    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO crawler_jobs (payload, state, updated_at) "
                "SELECT jsonb_build_object('kind', 'sync_manga', 'source_id', 's', "
                "'source_manga_key', n::text), "
                "CASE WHEN n % 50 = 0 THEN 'dead' ELSE 'done' END, "
                "now() - make_interval(secs => n) FROM generate_series(1, 20000) AS n"
            )
        )
        conn.execute(text("ANALYZE crawler_jobs"))

    with engine.connect() as conn:
        seen: list[tuple[str, object]] = []

        def capture(_conn, _cursor, statement, parameters, _context, _many):
            seen.append((statement, parameters))

        event.listen(conn, "before_cursor_execute", capture)
        first = list_jobs(conn, state="dead", limit=50)
        list_jobs(conn, state="dead", limit=50, cursor=first["next_cursor"])
        event.remove(conn, "before_cursor_execute", capture)
        assert len(first["jobs"]) == 50 and first["next_cursor"]
        for statement, parameters in seen:
            plan = "\n".join(
                conn.exec_driver_sql("EXPLAIN " + statement, parameters).scalars()  # type: ignore[arg-type]
            )
            assert "Index Scan Backward using ix_crawler_jobs_listed_updated_at" in plan, plan
            assert "Seq Scan on crawler_jobs" not in plan, plan
