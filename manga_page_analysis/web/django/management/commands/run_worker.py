"""`python manage.py run_worker`: `make run-worker` on Django's database."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, ClassVar

from django.core.management.base import BaseCommand
from django.db import connections
from pydantic import ValidationError

from manga_page_analysis.cli import commands as cli
from manga_page_analysis.cli.shutdown import EXIT_USAGE, exit_process
from manga_page_analysis.cli.worker_command import EXIT_MIGRATIONS_PENDING
from manga_page_analysis.config import Settings
from manga_page_analysis.web.django.apps import page_analysis_app
from manga_page_analysis.web.django.conf import sqlalchemy_url


class Command(BaseCommand):
    help = (
        "Run the page-analysis workers (the same runner as `make run-worker`) on the "
        "database Django is configured with (PAGE_ANALYSIS['DATABASE_ALIAS']). The "
        "rest of the configuration (VISION_URL, STORAGE_ROOT, ...) comes from the "
        "environment, as for `python -m manga_page_analysis run-worker`."
    )
    # The worker checks the schema revision itself; Django's checks add nothing.
    requires_system_checks: ClassVar[list[str]] = []

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--migrate",
            action=argparse.BooleanOptionalAction,
            default=False,
            help="apply pending migrations first (default: refuse to start on an old schema)",
        )
        parser.add_argument(
            "--log-level",
            default=os.environ.get("LOG_LEVEL", "INFO"),
            help="log level of the worker (default: $LOG_LEVEL or INFO)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        app = page_analysis_app()
        url = sqlalchemy_url(app.settings.database_alias).render_as_string(hide_password=False)
        # The runner's threads run no Django code: they use the worker's own
        # SQLAlchemy engine. Close anything Django opened while starting, so
        # no Django connection sits idle for the worker's lifetime.
        connections.close_all()
        # The environment's settings, with Django's database in place of DATABASE_URL.
        schema, listen_url = app.settings.database_schema, app.settings.listen_database_url
        try:
            if listen_url:
                settings = Settings(
                    database_url=url, database_schema=schema, listen_database_url=listen_url
                )
            else:
                settings = Settings(database_url=url, database_schema=schema)
        except ValidationError as exc:
            print(f"error: {cli.settings_problem(exc)}", file=sys.stderr)
            exit_process(EXIT_USAGE)
        argv = ["--log-level", options["log_level"], "run-worker"]
        argv.append("--migrate" if options["migrate"] else "--no-migrate")
        # The CLI installs the signal handlers (manga_page_analysis.cli.shutdown).
        code = cli.main(argv, settings)
        if code == EXIT_MIGRATIONS_PENDING:
            logging.getLogger("manga_page_analysis.cli").error(
                "bring the schema to head with `python manage.py migrate`"
            )
        # This process is the worker's: end it here, as `python -m manga_page_analysis` does.
        exit_process(code)
