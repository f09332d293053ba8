"""Django's `manage.py migrate` brings the page-analysis schema to head, and
`manage.py check` refuses a database that is not PostgreSQL."""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError

from manga_page_analysis.migrations import SchemaConflict, upgrade_head
from manga_page_analysis.web.django.conf import (
    check_postgresql,
    page_analysis_settings,
    sqlalchemy_url,
)

CHECK_ID = "page_analysis.E001"


def migrate_after_django(
    sender: Any, using: str = "default", verbosity: int = 1, stdout: Any = None, **_: Any
) -> None:
    """`post_migrate` handler: alembic `upgrade head` on the database the app
    uses, after Django's own migrations on it (idempotent; other aliases are
    left alone). A table in the way stops `migrate` with one line. `sender`: the app's
    config (`apps.PageAnalysisConfig`, which connects this handler)."""
    settings = sender.settings
    if using != settings.database_alias:
        return
    url = sqlalchemy_url(using).render_as_string(hide_password=False)
    try:
        upgrade_head(url, settings.database_schema)
    except SchemaConflict as exc:
        raise CommandError(f"page analysis: {exc}") from None
    if verbosity >= 1 and stdout is not None:
        stdout.write(f"  page analysis schema ({settings.database_schema}) is at head")


def check_database(app_configs: Any = None, **_: Any) -> list[checks.CheckMessage]:
    """A system check: the app's database must be PostgreSQL on psycopg 3."""
    try:
        check_postgresql(page_analysis_settings().database_alias)
    except ImproperlyConfigured as exc:
        return [
            checks.Error(
                str(exc),
                hint="set DATABASES to django.db.backends.postgresql (psycopg 3)",
                id=CHECK_ID,
            )
        ]
    return []
