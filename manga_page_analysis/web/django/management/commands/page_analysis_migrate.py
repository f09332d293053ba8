"""`python manage.py page_analysis_migrate`: the schema to head on Django's database.

Kept as an alias: `python manage.py migrate` does the same (the app's `post_migrate`)."""

from __future__ import annotations

import argparse
from typing import Any, ClassVar

from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from manga_page_analysis.migrations import SchemaConflict, upgrade_head
from manga_page_analysis.web.django.apps import page_analysis_app
from manga_page_analysis.web.django.conf import sqlalchemy_url


class Command(BaseCommand):
    help = (
        "Bring the page-analysis schema (crawler_jobs, page_analysis, ...) to head: "
        "alembic `upgrade head` on Django's database, in PAGE_ANALYSIS['DATABASE_SCHEMA']. "
        "`manage.py migrate` does it too; this command is kept as an alias."
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
        schema = page_analysis_app().settings.database_schema
        self.stdout.write(f"page analysis: alembic upgrade head on {url!r} (schema {schema})")
        try:
            upgrade_head(url.render_as_string(hide_password=False), schema)
        except SchemaConflict as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS("page analysis schema is at head"))
