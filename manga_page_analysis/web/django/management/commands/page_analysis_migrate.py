"""`python manage.py page_analysis_migrate`: the schema to head on Django's database."""

from __future__ import annotations

import argparse
from typing import Any, ClassVar

from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from manga_page_analysis.migrations import upgrade_head
from manga_page_analysis.web.django.apps import page_analysis_app
from manga_page_analysis.web.django.conf import sqlalchemy_url


class Command(BaseCommand):
    help = (
        "Bring the page-analysis schema (crawler_jobs, page_analysis, ...) to head: "
        "alembic `upgrade head` on Django's database. Django's own `migrate` does not "
        "touch these tables; run both."
    )
    requires_system_checks: ClassVar[list[str]] = []

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--database",
            default=None,
            help="Django database alias (default: PAGE_ANALYSIS['DATABASE_ALIAS'])",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = options["database"] or page_analysis_app().settings.database_alias
        if alias not in connections:
            raise CommandError(f"no database {alias!r} in DATABASES")
        url = sqlalchemy_url(alias)
        self.stdout.write(f"page analysis: alembic upgrade head on {url!r}")
        upgrade_head(url.render_as_string(hide_password=False))
        self.stdout.write(self.style.SUCCESS("page analysis schema is at head"))
