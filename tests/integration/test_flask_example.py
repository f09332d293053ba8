"""examples/flask_app runs: its host app serves the admin page and API, and its
own route enqueues inside the host's transaction."""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path
from types import ModuleType

import pytest
from sqlalchemy import Engine

from tests.helpers import count, make_page

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flask_app" / "main.py"
TOKEN = "example-token"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("flask_app_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def client(engine: Engine):  # type: ignore[no-untyped-def]
    return _example().create_app(engine, token=TOKEN).test_client()


def test_example_serves_the_admin_page_and_api(client) -> None:  # type: ignore[no-untyped-def]
    root = client.get("/")
    assert root.status_code == 302
    assert root.headers["Location"].endswith("/admin/analysis/")

    page = client.get("/admin/analysis/")
    assert page.status_code == 200
    assert page.mimetype == "text/html"
    assert "Page analysis" in page.get_data(as_text=True)

    assert client.get("/admin/analysis/api/stats").status_code == 401
    stats = client.get("/admin/analysis/api/stats", headers={"Authorization": f"Bearer {TOKEN}"})
    assert stats.status_code == 200
    assert stats.get_json()["oldest_pending_age_seconds"] is None


def test_example_route_enqueues_in_the_host_transaction(client, engine: Engine) -> None:  # type: ignore[no-untyped-def]
    with engine.begin() as conn:
        page_id = make_page(conn)

    answer = client.post(f"/pages/{page_id}/reanalyse")
    assert answer.status_code == 202
    job_id = answer.get_json()["job_id"]
    # Committed by the host's session: visible from another connection.
    assert count(engine, "SELECT count(*) FROM crawler_jobs WHERE id = :id", id=job_id) == 1
    assert (
        count(
            engine,
            "SELECT count(*) FROM crawler_jobs"
            " WHERE payload->>'page_id' = :page AND state = 'pending'",
            page=str(page_id),
        )
        == 1
    )

    unknown = client.post(f"/pages/{uuid.uuid4()}/reanalyse")
    assert unknown.status_code == 404
    assert count(engine, "SELECT count(*) FROM crawler_jobs") == 1

    bad = client.post("/pages/not-a-uuid/reanalyse")
    assert bad.status_code == 400
    assert bad.get_json()["error"]["code"] == "bad_request"
    assert str(uuid.UUID(job_id)) == job_id
