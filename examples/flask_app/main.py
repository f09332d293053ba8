"""A small Flask host that embeds page analysis: the admin page and API at
/admin/analysis, and one host route that requests analysis inside its own
transaction.

Run from the repository root (after `make install`):

    ADMIN_TOKEN=s3cret .venv/bin/python examples/flask_app/main.py

Without `DATABASE_URL` it uses the embedded Postgres under `.dev/` (the same
one `make run-worker` and `python -m manga_page_analysis import-pages` use) and brings its
schema to head first. See README.md beside this file.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import uuid

from flask import Flask, jsonify, redirect
from flask.typing import ResponseReturnValue
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from manga_page_analysis.config import Settings
from manga_page_analysis.db import make_engine
from manga_page_analysis.queue import NoSuchPage, request_analysis
from manga_page_analysis.web.flask import admin_blueprint

ADMIN_MOUNT = "/admin/analysis"


def create_app(engine: Engine, *, token: str) -> Flask:
    """The host app; `engine` is the host's own and is never disposed here."""
    flask_app = Flask(__name__)
    flask_app.register_blueprint(admin_blueprint(engine, token=token), url_prefix=ADMIN_MOUNT)

    @flask_app.get("/")
    def index() -> ResponseReturnValue:
        return redirect(ADMIN_MOUNT + "/")

    @flask_app.post("/pages/<page_id>/reanalyse")
    def reanalyse(page_id: str) -> ResponseReturnValue:
        # A host's own route: the job is committed with the host's transaction,
        # or not at all (an exception inside `begin()` rolls both back).
        try:
            parsed = uuid.UUID(page_id)
        except ValueError:
            return jsonify(error={"code": "bad_request", "message": "not a page id"}), 400
        try:
            with Session(engine) as session, session.begin():
                job_id = request_analysis(session, parsed, force=True)
        except NoSuchPage:
            return jsonify(error={"code": "not_found", "message": "no such page"}), 404
        return jsonify(job_id=str(job_id) if job_id else None), 202

    return flask_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5000)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s %(message)s"
    )

    settings = Settings()
    engine = make_engine(settings)
    if not settings.database_url:
        # Like `make run-worker`, the embedded dev database is migrated on start.
        from manga_page_analysis.migrations import upgrade_head

        upgrade_head(engine.url.render_as_string(hide_password=False), settings.database_schema)
    token = os.environ.get("ADMIN_TOKEN") or secrets.token_urlsafe(18)
    if "ADMIN_TOKEN" not in os.environ:
        print(f"ADMIN_TOKEN not set; this run's admin token is: {token}")
    print(f"admin page: http://{args.host}:{args.port}{ADMIN_MOUNT}/")
    try:
        # threaded: each live-events stream holds a request thread open.
        create_app(engine, token=token).run(host=args.host, port=args.port, threaded=True)
    finally:
        engine.dispose()


if __name__ == "__main__":
    main()
