"""Which runner holds a job, or ran it last: the runner writes its one id into
`crawler_jobs.leased_by` as it leases, the admin API's job view shows it, and
the same id names the runner in `queue_leader` while it leads."""

from __future__ import annotations

import os
import socket
import uuid
from typing import Any

from flask import Flask
from sqlalchemy import Engine, text

from manga_page_analysis.queue import KIND_SYNC_MANGA, SyncManga, enqueue
from manga_page_analysis.web.flask import admin_blueprint
from manga_page_analysis.worker import NoopHandler, Runner
from tests.helpers import job_row, wait_until
from tests.integration.test_runner_batched import HoldingHandler, running

TOKEN = "holder-token"
PREFIX = "/admin/analysis"


def _job_view(client: Any, job_id: uuid.UUID) -> dict[str, Any]:
    response = client.get(
        f"{PREFIX}/api/jobs/{job_id}", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    body: dict[str, Any] = response.get_json()
    return body


def test_a_job_names_the_runner_that_holds_it_and_then_the_one_that_ran_it(
    engine: Engine,
) -> None:
    app = Flask(__name__)
    app.register_blueprint(admin_blueprint(engine, token=TOKEN), url_prefix=PREFIX)
    client = app.test_client()
    with engine.begin() as conn:
        job_id = enqueue(conn, SyncManga(source_id="s", source_manga_key="held"))
    assert job_id is not None
    assert _job_view(client, job_id)["leased_by"] is None  # never leased yet

    handler = HoldingHandler()
    with running(engine, handler, workers=1, name="holder-test") as (runner, _):
        runner_id = runner.runner_id
        host, pid, name, suffix = runner_id.rsplit(":", 3)
        assert (host, pid, name) == (socket.gethostname(), str(os.getpid()), "holder-test")
        assert len(suffix) == 8

        wait_until(lambda: job_id in handler.started)
        view = _job_view(client, job_id)
        assert (view["state"], view["leased_by"]) == ("running", runner_id)
        with engine.connect() as conn:
            assert job_row(conn, job_id).leased_by == runner_id
        # The one id: the maintenance lead is held under it too.
        wait_until(lambda: runner.maintainer.leading)
        with engine.connect() as conn:
            leader_id = conn.execute(text("SELECT leader_id FROM queue_leader")).scalar_one()
        assert leader_id == runner_id == runner.maintainer.leader_id

        handler.release.set()
        wait_until(lambda: _job_view(client, job_id)["state"] == "done")
    # Done, and the runner gone: the job still names who ran it.
    assert _job_view(client, job_id)["leased_by"] == runner_id
    with engine.connect() as conn:
        assert job_row(conn, job_id).leased_by == runner_id


def test_two_runners_in_one_process_have_different_ids(engine: Engine) -> None:
    first, second = (Runner(engine, [NoopHandler(KIND_SYNC_MANGA)]) for _ in range(2))
    assert first.runner_id != second.runner_id
    assert first.maintainer.leader_id == first.runner_id
