"""The Flask admin blueprint through Flask's test client, on real Postgres."""

from __future__ import annotations

import uuid

import pytest
from flask import Flask, request
from sqlalchemy import text

from manga_page_analysis.queue import AnalyzePage, enqueue, request_analysis
from manga_page_analysis.web.flask import admin_blueprint
from tests.helpers import count, insert_raw_job, job_row, make_page
from tests.integration.web_contract import (
    BAD_ANALYSIS_BODIES,
    BAD_LISTING_QUERIES,
    check_error,
    insert_done_analysis,
    nasty_requests,
)

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PREFIX = "/admin/analysis"


def _app(engine, **options) -> Flask:
    app = Flask(__name__)
    options.setdefault("token", TOKEN)
    app.register_blueprint(admin_blueprint(engine, **options), url_prefix=PREFIX)
    return app


@pytest.fixture
def client(engine):
    return _app(engine).test_client()


def _error(response, status, code=None):
    body = response.get_json(silent=True) or response.get_data(as_text=True)
    return check_error(response.status_code, response.mimetype, body, status, code)


def test_neither_token_nor_authorize_is_refused(engine):
    with pytest.raises(ValueError, match="never serves openly"):
        admin_blueprint(engine)
    with pytest.raises(ValueError):
        admin_blueprint(engine, token="")


def test_the_page_is_served_without_auth_and_holds_no_data(client, engine):
    with engine.begin() as conn:
        enqueue(conn, AnalyzePage(page_id=uuid.uuid4()))
    response = client.get(f"{PREFIX}/")
    assert response.status_code == 200 and response.mimetype == "text/html"
    assert "<html" in response.get_data(as_text=True)
    assert client.get(PREFIX).status_code in (301, 308)  # to the slash, so api/ resolves
    _error(client.post(f"{PREFIX}/"), 405, "method_not_allowed")


API_ROUTES = [
    ("GET", "api/stats"),
    ("GET", "api/jobs"),
    ("POST", f"api/jobs/{uuid.UUID(int=1)}/retry"),
    ("POST", f"api/jobs/{uuid.UUID(int=1)}/discard"),
    ("GET", f"api/jobs/{uuid.UUID(int=1)}"),
    ("GET", "api/mangas"),
    ("GET", f"api/mangas/{uuid.UUID(int=4)}"),
    ("GET", f"api/chapters/{uuid.UUID(int=5)}"),
    ("GET", f"api/pages/{uuid.UUID(int=2)}"),
    ("GET", f"api/pages/{uuid.UUID(int=2)}/image"),
    ("GET", f"api/pages/{uuid.UUID(int=2)}/analysis"),
    ("POST", f"api/pages/{uuid.UUID(int=3)}/analysis"),
    ("GET", "api/events"),
    ("GET", "api/nope"),
]


@pytest.mark.parametrize(("method", "route"), API_ROUTES)
def test_every_api_route_refuses_without_a_valid_token(client, method, route):
    url = f"{PREFIX}/{route}"
    missing = client.open(url, method=method)
    _error(missing, 401, "unauthorized")
    assert missing.headers["WWW-Authenticate"] == "Bearer"
    for header in (f"Bearer {TOKEN}x", "Bearer ", f"Basic {TOKEN}", TOKEN, "Bearer s3cret"):
        wrong = client.open(url, method=method, headers={"Authorization": header})
        _error(wrong, 401, "unauthorized")
        assert wrong.headers["WWW-Authenticate"].startswith("Bearer")


def test_authorize_callable_lets_in_or_answers_403(engine):
    calls = []

    def authorize(req) -> bool:
        calls.append(req)
        return req.headers.get("X-Admin") == "yes"

    client = _app(engine, token=None, authorize=authorize).test_client()
    assert client.get(f"{PREFIX}/api/stats", headers={"X-Admin": "yes"}).status_code == 200
    refused = client.get(f"{PREFIX}/api/stats")
    _error(refused, 403, "forbidden")
    assert "WWW-Authenticate" not in refused.headers  # no token would help
    assert calls and calls[0] is not None and hasattr(calls[0], "headers")
    # A token is not a way in when none is configured.
    _error(client.get(f"{PREFIX}/api/stats", headers=AUTH), 403)


def test_with_both_either_lets_in(engine):
    client = _app(
        engine, token=TOKEN, authorize=lambda req: req.headers.get("X-Admin") == "yes"
    ).test_client()
    assert client.get(f"{PREFIX}/api/stats", headers=AUTH).status_code == 200
    assert client.get(f"{PREFIX}/api/stats", headers={"X-Admin": "yes"}).status_code == 200
    assert (
        client.get(
            f"{PREFIX}/api/stats", headers={"X-Admin": "yes", "Authorization": "Bearer wrong"}
        ).status_code
        == 200
    )
    refused = client.get(f"{PREFIX}/api/stats")
    _error(refused, 403, "forbidden")
    assert refused.headers["WWW-Authenticate"] == "Bearer"  # a token would do
    _error(client.get(f"{PREFIX}/api/stats", headers={"Authorization": "Bearer wrong"}), 401)


def test_a_cross_site_post_let_in_by_authorize_alone_is_refused(engine):
    with engine.begin() as conn:
        page_id = make_page(conn)
    client = _app(engine, authorize=lambda req: True).test_client()
    url = f"{PREFIX}/api/pages/{page_id}/analysis"
    for headers in ({"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}):
        _error(client.post(url, headers=headers), 403, "cross_site")
    assert count(engine, "SELECT count(*) FROM crawler_jobs") == 0
    # Reads are not guarded; the same origin and non-browser clients may write.
    assert (
        client.get(f"{PREFIX}/api/stats", headers={"Sec-Fetch-Site": "cross-site"}).status_code
        == 200
    )
    assert client.post(url, headers={"Sec-Fetch-Site": "same-origin"}).status_code == 202
    assert client.post(url, headers={"Origin": "http://localhost"}).status_code == 202
    assert client.post(url).status_code == 202
    # A bearer token is no ambient credential: it passes from anywhere.
    assert client.post(url, headers={**AUTH, "Sec-Fetch-Site": "cross-site"}).status_code == 202


def test_an_authorize_that_raises_is_a_no(engine):
    def authorize(req) -> bool:
        raise RuntimeError("session store down")

    client = _app(engine, token=None, authorize=authorize).test_client()
    _error(client.get(f"{PREFIX}/api/stats"), 403)


def test_stats_and_listing_routes(client, engine):
    with engine.begin() as conn:
        page_id = make_page(conn, manga_title="Akira", chapter_number="3", page_number=7)
        job_id = enqueue(conn, AnalyzePage(page_id=page_id))
        for _ in range(3):
            insert_raw_job(
                conn,
                {"kind": "analyze_page", "page_id": str(uuid.uuid4())},
                state="dead",
                last_error="x",
            )
    stats = client.get(f"{PREFIX}/api/stats", headers=AUTH)
    assert stats.status_code == 200
    assert stats.get_json()["jobs"]["analyze_page"]["pending"] == 1
    assert stats.get_json()["jobs"]["analyze_page"]["dead"] == 3

    listing = client.get(f"{PREFIX}/api/jobs?state=pending", headers=AUTH).get_json()
    assert [job["id"] for job in listing["jobs"]] == [str(job_id)]
    assert listing["jobs"][0]["label"] == "Akira ch. 3 p. 7"

    first = client.get(f"{PREFIX}/api/jobs?state=dead&kind=analyze_page&limit=2", headers=AUTH)
    body = first.get_json()
    assert len(body["jobs"]) == 2 and body["next_cursor"]
    rest = client.get(
        f"{PREFIX}/api/jobs",
        query_string={"state": "dead", "cursor": body["next_cursor"]},
        headers=AUTH,
    ).get_json()
    assert len(rest["jobs"]) == 1 and rest["next_cursor"] is None


@pytest.mark.parametrize("query", BAD_LISTING_QUERIES)
def test_bad_listing_input_is_a_400(client, query):
    _error(client.get(f"{PREFIX}/api/jobs?{query}", headers=AUTH), 400, "bad_request")


def test_retry_route(client, engine):
    with engine.begin() as conn:
        dead = insert_raw_job(
            conn, AnalyzePage(page_id=uuid.uuid4()).to_json(), state="dead", attempts=5
        )
        pending = enqueue(conn, AnalyzePage(page_id=uuid.uuid4()))
    ok = client.post(f"{PREFIX}/api/jobs/{dead}/retry", headers=AUTH)
    assert ok.status_code == 200 and ok.get_json() == {"id": str(dead), "state": "pending"}
    with engine.connect() as conn:
        row = job_row(conn, dead)
    assert row.state == "pending" and row.attempts == 0  # committed
    _error(client.post(f"{PREFIX}/api/jobs/{dead}/retry", headers=AUTH), 409, "conflict")
    _error(client.post(f"{PREFIX}/api/jobs/{pending}/retry", headers=AUTH), 409, "conflict")
    _error(client.post(f"{PREFIX}/api/jobs/{uuid.uuid4()}/retry", headers=AUTH), 404, "not_found")
    _error(client.post(f"{PREFIX}/api/jobs/not-a-uuid/retry", headers=AUTH), 400, "bad_request")
    wrong_method = client.get(f"{PREFIX}/api/jobs/{dead}/retry", headers=AUTH)
    _error(wrong_method, 405, "method_not_allowed")
    assert wrong_method.headers["Allow"] == "POST"


def test_retry_clash_is_a_409_that_changes_nothing(client, engine):
    page_id = uuid.uuid4()
    with engine.begin() as conn:
        dead = insert_raw_job(conn, AnalyzePage(page_id=page_id).to_json(), state="dead")
        enqueue(conn, AnalyzePage(page_id=page_id))
    _error(client.post(f"{PREFIX}/api/jobs/{dead}/retry", headers=AUTH), 409, "conflict")
    with engine.connect() as conn:
        assert job_row(conn, dead).state == "dead"


def test_page_analysis_routes(client, engine):
    with engine.begin() as conn:
        page_id = make_page(conn)
        insert_done_analysis(conn, page_id)
        bare_page = make_page(conn, page_number=2)
    got = client.get(f"{PREFIX}/api/pages/{page_id}/analysis", headers=AUTH)
    assert got.status_code == 200 and got.get_json()["nsfw"] == {"rating": "safe", "score": 0.1}
    _error(client.get(f"{PREFIX}/api/pages/{bare_page}/analysis", headers=AUTH), 404)
    _error(client.get(f"{PREFIX}/api/pages/xyz/analysis", headers=AUTH), 400)

    posted = client.post(f"{PREFIX}/api/pages/{bare_page}/analysis", headers=AUTH)
    assert posted.status_code == 202
    job_id = uuid.UUID(posted.get_json()["job_id"])
    forced = client.post(
        f"{PREFIX}/api/pages/{bare_page}/analysis", json={"force": True}, headers=AUTH
    )
    assert forced.status_code == 202 and forced.get_json() == {"job_id": str(job_id)}
    with engine.connect() as conn:
        assert job_row(conn, job_id).payload["force"] is True
    _error(client.post(f"{PREFIX}/api/pages/{uuid.uuid4()}/analysis", headers=AUTH), 404)
    _error(client.delete(f"{PREFIX}/api/pages/{page_id}/analysis", headers=AUTH), 405)


@pytest.mark.parametrize("body", BAD_ANALYSIS_BODIES)
def test_bad_analysis_request_bodies_are_400s(client, engine, body):
    with engine.begin() as conn:
        page_id = make_page(conn)
    response = client.post(
        f"{PREFIX}/api/pages/{page_id}/analysis",
        data=body,
        headers=AUTH,
        content_type="application/json",
    )
    _error(response, 400, "bad_request")
    assert count(engine, "SELECT count(*) FROM crawler_jobs") == 0


def test_unknown_api_routes_are_json_404s(client):
    _error(client.get(f"{PREFIX}/api/nope", headers=AUTH), 404, "not_found")
    _error(client.get(f"{PREFIX}/api/", headers=AUTH), 404, "not_found")
    _error(client.put(f"{PREFIX}/api/stats", headers=AUTH), 405)


def test_options_is_the_apis_own_405_with_the_routes_allow_even_without_a_token(client):
    # Not Flask's automatic answer (200, empty, every method in Allow).
    response = client.options(f"{PREFIX}/api/stats")
    _error(response, 405, "method_not_allowed")
    assert response.headers["Allow"] == "GET"
    retry = client.options(f"{PREFIX}/api/jobs/{uuid.uuid4()}/retry", headers=AUTH)
    _error(retry, 405, "method_not_allowed")
    assert retry.headers["Allow"] == "POST"


def test_a_404_names_a_bounded_escaped_part_of_the_path(client):
    long = "a" * 60_000
    response = client.get(f"{PREFIX}/api/{long}", headers=AUTH)
    message = _error(response, 404, "not_found")["message"]
    assert len(response.get_data()) < 400 and len(message) < 200
    assert "…[truncated]" in message
    bidi = client.get(f"{PREFIX}/api/x%E2%80%AEgnp.exe", headers=AUTH)
    assert "x\\u202egnp.exe" in _error(bidi, 404, "not_found")["message"]


def test_an_unreachable_database_is_a_json_503(postgresql_proc):
    from manga_page_analysis.db import make_engine

    dead_engine = make_engine(
        f"postgresql+psycopg://nobody@127.0.0.1:{postgresql_proc.port}/no_such_database"
    )
    try:
        client = _app(dead_engine).test_client()
        _error(client.get(f"{PREFIX}/api/stats", headers=AUTH), 503, "unavailable")
    finally:
        dead_engine.dispose()


# --- Flask-SQLAlchemy: the host's session and engine ---------------------------


def test_flask_sqlalchemy_host_enqueues_in_its_own_transaction(database_url):
    from flask_sqlalchemy import SQLAlchemy

    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = database_url
    db = SQLAlchemy(app)

    @app.post("/pages/<page_id>/analyse")
    def analyse(page_id: str):
        job_id = request_analysis(db.session, uuid.UUID(page_id))
        db.session.execute(text("SELECT 1"))  # the host's own work, same transaction
        if request.args.get("fail"):
            db.session.rollback()
            return {"rolled_back": True}, 500
        db.session.commit()
        return {"job_id": str(job_id)}

    app.register_blueprint(admin_blueprint(lambda: db.engine, token=TOKEN), url_prefix=PREFIX)
    client = app.test_client()
    with app.app_context():
        engine = db.engine
        pool = engine.pool
        with engine.begin() as conn:
            page_id = make_page(conn)

    assert client.post(f"/pages/{page_id}/analyse?fail=1").status_code == 500
    with app.app_context():
        assert count(db.engine, "SELECT count(*) FROM crawler_jobs") == 0

    committed = client.post(f"/pages/{page_id}/analyse")
    job_id = committed.get_json()["job_id"]
    listing = client.get(f"{PREFIX}/api/jobs", headers=AUTH).get_json()
    assert [job["id"] for job in listing["jobs"]] == [job_id]
    assert client.get(f"{PREFIX}/api/stats", headers=AUTH).status_code == 200
    with app.app_context():
        assert db.engine is engine and engine.pool is pool  # the blueprint disposed nothing
        db.engine.dispose()


def test_a_plain_engine_is_never_disposed_by_the_blueprint(engine):
    pool = engine.pool
    client = _app(engine).test_client()
    assert client.get(f"{PREFIX}/api/stats", headers=AUTH).status_code == 200
    assert engine.pool is pool and pool.checkedout() == 0


def test_nasty_input_anywhere_never_yields_a_500(client, engine):
    with engine.begin() as conn:
        make_page(conn)
    for method, url, value in nasty_requests(PREFIX):
        response = client.open(url, method=method, headers=AUTH, data=value)
        assert response.status_code < 500, (method, url, response.get_data(as_text=True))
        if response.status_code >= 400:
            _error(response, response.status_code)
