"""The admin API's views of the work: a job, the listing by any state and kind,
cancel, mangas -> chapters -> pages with progress, a page's view and its image.
Through the Flask blueprint (Django serves the same route table), on real Postgres."""

from __future__ import annotations

import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import Engine, insert, text

from manga_page_analysis.admin import DISCARDED_ERROR, list_jobs
from manga_page_analysis.models import Chapter, Manga, Page
from manga_page_analysis.queue import AnalyzePage, SyncManga, enqueue
from manga_page_analysis.storage import LocalStorage
from manga_page_analysis.web.flask import admin_blueprint
from tests.helpers import insert_raw_job, job_row
from tests.integration.web_contract import check_error, insert_done_analysis

TOKEN = "views-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PREFIX = "/admin/analysis"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 40


@pytest.fixture
def store(tmp_path: Path) -> LocalStorage:
    return LocalStorage(tmp_path / "storage")


@pytest.fixture
def client(engine: Engine, store: LocalStorage) -> Any:
    app = Flask(__name__)
    blueprint = admin_blueprint(engine, token=TOKEN, storage=store, max_image_bytes=1000)
    app.register_blueprint(blueprint, url_prefix=PREFIX)
    return app.test_client()


def _get(client: Any, route: str) -> Any:
    response = client.get(f"{PREFIX}/api/{route}", headers=AUTH)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def _error(response: Any, status: int, code: str | None = None) -> Any:
    return check_error(response.status_code, response.mimetype, response.get_json(), status, code)


def _chapter(engine: Engine, pages: int, *, title: str = "Frieren") -> dict[str, Any]:
    """A manga with chapters 1 and 10.5; chapter 1 has `pages` pages."""
    with engine.begin() as conn:
        manga_id = conn.execute(insert(Manga).values(title=title).returning(Manga.id)).scalar_one()
        chapter_id, other_chapter = (
            conn.execute(
                insert(Chapter)
                .values(manga_id=manga_id, number=Decimal(number), title=f"ch{number}")
                .returning(Chapter.id)
            ).scalar_one()
            for number in ("1", "10.5")
        )
        page_ids = [
            conn.execute(
                insert(Page)
                .values(chapter_id=chapter_id, number=n, storage_key=f"{title}/{n}.png")
                .returning(Page.id)
            ).scalar_one()
            for n in range(1, pages + 1)
        ]
    return {"manga": manga_id, "chapter": chapter_id, "other": other_chapter, "pages": page_ids}


def test_a_job_s_view_and_its_errors(client: Any, engine: Engine) -> None:
    seeded = _chapter(engine, 1)
    page_id = seeded["pages"][0]
    with engine.begin() as conn:
        job_id = enqueue(conn, AnalyzePage(page_id=page_id))
        sync_id = enqueue(conn, SyncManga(source_id="s", source_manga_key="k", title="Dandadan"))
        odd_id = insert_raw_job(conn, {"kind": "analyze_page", "page_id": "not-a-uuid"})
    job = _get(client, f"jobs/{job_id}")
    assert job["id"] == str(job_id) and job["kind"] == "analyze_page"
    assert job["state"] == "pending" and (job["attempts"], job["max_attempts"]) == (0, 5)
    assert job["payload"] == {"kind": "analyze_page", "page_id": str(page_id), "force": False}
    assert job["page_id"] == str(page_id) and job["label"] == "Frieren ch. 1 p. 1"
    assert job["leased_until"] is None and job["created_at"] and job["scheduled_at"]
    assert job["last_error"] is None
    assert _get(client, f"jobs/{sync_id}")["page_id"] is None
    assert _get(client, f"jobs/{sync_id}")["label"] == "Dandadan"
    assert _get(client, f"jobs/{odd_id}")["page_id"] is None

    _error(client.get(f"{PREFIX}/api/jobs/{uuid.uuid4()}", headers=AUTH), 404, "not_found")
    _error(client.get(f"{PREFIX}/api/jobs/12345", headers=AUTH), 400, "bad_request")


def test_discard_moves_a_pending_job_to_dead_records_its_page_and_retry_brings_it_back(
    client: Any, engine: Engine
) -> None:
    page_id = _chapter(engine, 1)["pages"][0]
    with engine.begin() as conn:
        job_id = enqueue(conn, AnalyzePage(page_id=page_id))
        running = insert_raw_job(conn, {"kind": "sync_manga", "source_id": "s"}, state="running")
    response = client.post(f"{PREFIX}/api/jobs/{job_id}/discard", headers=AUTH)
    assert response.status_code == 200 and response.get_json() == {
        "id": str(job_id),
        "state": "dead",
    }
    with engine.connect() as conn:
        row = job_row(conn, job_id)
    assert row.state == "dead" and row.last_error == DISCARDED_ERROR
    with engine.connect() as conn:
        analysis = conn.execute(
            text("SELECT status, error FROM page_analysis WHERE page_id = :id"), {"id": page_id}
        ).one()
    assert tuple(analysis) == ("failed", DISCARDED_ERROR)  # as a worker's failure records it
    # Not pending any more: 409, nothing changes.
    again = _error(client.post(f"{PREFIX}/api/jobs/{job_id}/discard", headers=AUTH), 409)
    assert "not pending" in again["message"]
    _error(client.post(f"{PREFIX}/api/jobs/{running}/discard", headers=AUTH), 409, "conflict")
    with engine.connect() as conn:
        assert job_row(conn, running).state == "running"
    _error(client.post(f"{PREFIX}/api/jobs/{uuid.uuid4()}/discard", headers=AUTH), 404)
    _error(client.post(f"{PREFIX}/api/jobs/x/discard", headers=AUTH), 400)
    # The page's slot is free again, and the discard can be undone.
    assert client.post(f"{PREFIX}/api/jobs/{job_id}/retry", headers=AUTH).status_code == 200
    assert _get(client, f"jobs/{job_id}")["state"] == "pending"


def test_the_listing_filters_by_any_state_and_kind_and_pages_through_all(
    client: Any, engine: Engine
) -> None:
    states = ["pending", "running", "done", "failed", "dead"]
    made: dict[tuple[str, str], set[str]] = {}
    with engine.begin() as conn:
        for n in range(30):
            state, kind = states[n % 5], ("sync_manga", "host_kind")[n % 2]
            job_id = insert_raw_job(
                conn,
                {"kind": kind, "source_id": "s", "source_manga_key": str(n)},
                state=state,
                updated_at=text(f"now() - interval '{n} seconds'"),
            )
            made.setdefault((state, kind), set()).add(str(job_id))

    def walk(query: str) -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        cursor = ""
        while True:
            body = _get(client, f"jobs?limit=4&{query}{cursor}")
            seen.extend(body["jobs"])
            if body["next_cursor"] is None:
                return seen
            cursor = f"&cursor={body['next_cursor']}"

    every = walk("")
    assert len(every) == 30 and len({job["id"] for job in every}) == 30
    stamps = [job["updated_at"] for job in every]
    assert stamps == sorted(stamps, reverse=True)
    for state in states:
        listed = walk(f"state={state}")
        assert {job["state"] for job in listed} == {state} and len(listed) == 6
        for kind in ("sync_manga", "host_kind"):
            both = {job["id"] for job in walk(f"state={state}&kind={kind}")}
            assert both == made[(state, kind)]
    only_host = walk("kind=host_kind")
    assert len(only_host) == 15 and {job["kind"] for job in only_host} == {"host_kind"}


def test_every_listing_filter_reads_an_index_not_the_table(engine: Engine) -> None:
    """Guards migrations 0008 and 0010: each filter walks an index range and stops,
    even on a table that is mostly done rows (a rare kind among done rows included)."""
    from sqlalchemy import event

    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO crawler_jobs (payload, state, updated_at) "
                "SELECT jsonb_build_object('kind', CASE WHEN n % 97 = 0 THEN 'sync_manga' "
                "ELSE 'analyze_page' END, 'page_id', gen_random_uuid()::text), "
                "CASE WHEN n % 50 = 0 THEN 'dead' WHEN n % 71 = 0 THEN 'pending' "
                "ELSE 'done' END, "
                "now() - make_interval(secs => n) FROM generate_series(1, 20000) AS n"
            )
        )
        conn.execute(text("ANALYZE crawler_jobs"))
    filters: list[dict[str, Any]] = [
        {},
        {"state": "dead"},
        {"state": "done"},
        {"state": "pending"},
        {"kind": "sync_manga"},
        {"state": "done", "kind": "sync_manga"},
    ]
    with engine.connect() as conn:
        for options in filters:
            seen: list[tuple[str, Any]] = []

            def capture(*args: Any, into: list[tuple[str, Any]] = seen) -> None:
                into.append((args[2], args[3]))

            event.listen(conn, "before_cursor_execute", capture)
            first = list_jobs(conn, limit=20, **options)
            list_jobs(conn, limit=20, cursor=first["next_cursor"], **options)
            event.remove(conn, "before_cursor_execute", capture)
            assert first["next_cursor"], options
            for statement, parameters in seen:
                plan = "\n".join(conn.exec_driver_sql("EXPLAIN " + statement, parameters).scalars())
                assert "Seq Scan on crawler_jobs" not in plan, (options, plan)
                # Read in order from the index (the only sort is of the page's rows).
                assert "Index Scan Backward using ix_crawler_jobs_listed_updated_at" in plan or (
                    "Index Scan Backward using ix_crawler_jobs_dead_kind_updated_at" in plan
                ), (options, plan)


def test_mangas_chapters_and_pages_with_progress(client: Any, engine: Engine) -> None:
    seeded = _chapter(engine, 6)
    analysed, failed, queued, forced, _never, died = seeded["pages"]
    with engine.begin() as conn:
        insert_done_analysis(conn, analysed)
        insert_done_analysis(conn, forced)
        conn.execute(
            text(
                "INSERT INTO page_analysis (page_id, status, error) VALUES (:p, 'failed', 'boom')"
            ),
            {"p": failed},
        )
        enqueue(conn, AnalyzePage(page_id=queued))
        enqueue(conn, AnalyzePage(page_id=forced, force=True))  # being analysed again
        # Its job died without an analysis (from before ends were recorded, say): failed.
        insert_raw_job(conn, {"kind": "analyze_page", "page_id": str(died)}, state="dead")
    expected = {"analysed": 1, "failed": 2, "queued": 2, "never_requested": 1}

    mangas = _get(client, "mangas")
    assert mangas["next_cursor"] is None
    (manga,) = mangas["mangas"]
    assert manga == {
        "id": str(seeded["manga"]),
        "title": "Frieren",
        "chapters": 2,
        "pages": 6,
        "progress": expected,
    }
    chapters = _get(client, f"mangas/{seeded['manga']}")["chapters"]
    assert [(c["number"], c["pages"]) for c in chapters] == [("1", 6), ("10.5", 0)]
    assert chapters[0]["progress"] == expected
    assert chapters[1]["progress"] == dict.fromkeys(expected, 0)

    chapter = _get(client, f"chapters/{seeded['chapter']}")
    assert chapter["manga"] == {"id": str(seeded["manga"]), "title": "Frieren"}
    assert chapter["progress"] == expected
    statuses = [(p["number"], p["status"]) for p in chapter["pages"]]
    assert statuses == [
        (1, "analysed"),
        (2, "failed"),
        (3, "queued"),
        (4, "queued"),
        (5, "never_requested"),
        (6, "failed"),
    ]
    for route in ("mangas", "chapters"):
        _error(client.get(f"{PREFIX}/api/{route}/{uuid.uuid4()}", headers=AUTH), 404)
        _error(client.get(f"{PREFIX}/api/{route}/nope", headers=AUTH), 400)


def test_mangas_page_by_title(client: Any, engine: Engine) -> None:
    for title in ("C", "A", "B"):
        _chapter(engine, 1, title=title)
    first = _get(client, "mangas?limit=2")
    assert [m["title"] for m in first["mangas"]] == ["A", "B"]
    rest = _get(client, f"mangas?limit=2&cursor={first['next_cursor']}")
    assert [m["title"] for m in rest["mangas"]] == ["C"] and rest["next_cursor"] is None
    _error(client.get(f"{PREFIX}/api/mangas?cursor=forged", headers=AUTH), 400)
    _error(client.get(f"{PREFIX}/api/mangas?limit=0", headers=AUTH), 400)


def test_a_page_s_view_has_its_analysis_neighbours_and_job_history(
    client: Any, engine: Engine
) -> None:
    seeded = _chapter(engine, 3)
    first, middle, last = seeded["pages"]
    with engine.begin() as conn:
        insert_done_analysis(conn, middle, ocr_text="こんにちは")
        old = insert_raw_job(
            conn,
            {"kind": "analyze_page", "page_id": str(middle), "force": False},
            state="dead",
            last_error="vision server answered 500",
            created_at=text("now() - interval '1 hour'"),
        )
        new = enqueue(conn, AnalyzePage(page_id=middle, force=True))
        enqueue(conn, AnalyzePage(page_id=first))  # another page's job: not listed
    page = _get(client, f"pages/{middle}")
    assert page["number"] == 2 and page["status"] == "queued"
    assert page["chapter"]["id"] == str(seeded["chapter"]) and page["chapter"]["number"] == "1"
    assert page["manga"]["title"] == "Frieren"
    assert (page["previous_page_id"], page["next_page_id"]) == (str(first), str(last))
    assert page["analysis"]["ocr_text"] == "こんにちは" and page["analysis"]["status"] == "done"
    assert [job["id"] for job in page["jobs"]] == [str(new), str(old)]
    assert page["jobs"][1]["last_error"] == "vision server answered 500"
    assert page["jobs"][0]["label"] == "Frieren ch. 1 p. 2"

    edge = _get(client, f"pages/{first}")
    assert edge["previous_page_id"] is None and edge["analysis"] is None
    assert edge["status"] == "queued"
    _error(client.get(f"{PREFIX}/api/pages/{uuid.uuid4()}", headers=AUTH), 404)


def test_a_page_s_image_is_served_with_its_type_capped_and_never_by_path(
    client: Any, engine: Engine, store: LocalStorage
) -> None:
    seeded = _chapter(engine, 3)
    png_page, html_page, big_page = seeded["pages"]
    store.write_bytes("Frieren/1.png", PNG, content_type="image/png")
    store.write_bytes("Frieren/2.png", b"<html><script>x()</script>", content_type="text/html")
    store.write_bytes("Frieren/3.png", PNG + b"\x00" * 2000, content_type="image/png")

    image = client.get(f"{PREFIX}/api/pages/{png_page}/image", headers=AUTH)
    assert image.status_code == 200 and image.data == PNG
    assert image.mimetype == "image/png"
    assert image.headers["X-Content-Type-Options"] == "nosniff"
    # Not an image a browser shows: not served at all, never as what it claims to be.
    other = _error(client.get(f"{PREFIX}/api/pages/{html_page}/image", headers=AUTH), 415)
    assert other["code"] == "unsupported_media_type"
    # Over the cap (1000 bytes here), or missing: 404, and the key is not told.
    too_big = _error(client.get(f"{PREFIX}/api/pages/{big_page}/image", headers=AUTH), 404)
    assert "Frieren/3.png" not in too_big["message"]
    store.delete("Frieren/1.png")
    _error(client.get(f"{PREFIX}/api/pages/{png_page}/image", headers=AUTH), 404, "not_found")
    _error(client.get(f"{PREFIX}/api/pages/{uuid.uuid4()}/image", headers=AUTH), 404)
    _error(client.get(f"{PREFIX}/api/pages/..%2Fetc/image", headers=AUTH), 404)
    _error(client.get(f"{PREFIX}/api/pages/page.png/image", headers=AUTH), 400)
    _error(client.get(f"{PREFIX}/api/pages/{png_page}/image"), 401)
