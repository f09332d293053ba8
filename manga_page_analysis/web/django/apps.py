"""The Django app: configuration is read and engines are set up in `ready()`."""

from __future__ import annotations

import threading

from django.apps import AppConfig, apps
from sqlalchemy import Engine

from manga_page_analysis.analysis.page_events import analysis_channel
from manga_page_analysis.config import Settings
from manga_page_analysis.db import connect_kwargs, make_engine
from manga_page_analysis.web.api import AdminApi
from manga_page_analysis.web.django.borrowed import BorrowedEngines
from manga_page_analysis.web.django.conf import (
    PageAnalysisSettings,
    page_analysis_settings,
    sqlalchemy_url,
)
from manga_page_analysis.web.django.migrate import check_database, migrate_after_django
from manga_page_analysis.web.event_stream import EventStreams

ADMIN_POOL_SIZE = 5
"""Connections the admin views may hold at once (the event streams have their own)."""


class PageAnalysisConfig(AppConfig):
    """`INSTALLED_APPS = [..., "manga_page_analysis.web.django"]`. It has no Django
    models: the schema is alembic's, brought to head by `manage.py migrate` (its
    `post_migrate` signal; `page_analysis_migrate` is the same as a command of its own).
    `manage.py check` says so when the database is not PostgreSQL."""

    name = "manga_page_analysis.web.django"
    label = "page_analysis"
    verbose_name = "Page analysis"

    settings: PageAnalysisSettings
    environment_settings: Settings
    """What the worker reads from the environment (`STORAGE_ROOT`, `MAX_IMAGE_BYTES`,
    ...), read once when the app is ready: where the admin and `add_page` find images."""
    borrowed: BorrowedEngines
    event_streams: EventStreams
    api: AdminApi

    def ready(self) -> None:
        from django.core import checks
        from django.db.models.signals import post_migrate

        checks.register(check_database, checks.Tags.database)
        # dispatch_uid: one handler however often ready() runs (test runners).
        post_migrate.connect(migrate_after_django, sender=self, dispatch_uid=self.label)
        self._admin_engine: Engine | None = None
        self._lock = threading.Lock()
        self.borrowed = BorrowedEngines(lambda: self.settings.database_schema)
        self.reload()

    def admin_engine(self) -> Engine:
        """The engine of the admin views, built on first use.

        Rebuilt when Django's settings for the alias changed since (Django's
        test runner renames the database after `ready()`): an admin view must
        never read a database other than the one Django uses.
        """
        url = sqlalchemy_url(self.settings.database_alias)
        with self._lock:
            if self._admin_engine is None or self._admin_engine.url != url:
                if self._admin_engine is not None:
                    self._admin_engine.dispose()
                self._admin_engine = make_engine(
                    url.render_as_string(hide_password=False),
                    schema=self.settings.database_schema,
                    pool_size=ADMIN_POOL_SIZE,
                    max_overflow=2,
                )
            return self._admin_engine

    def reload(self) -> None:
        """Re-read `PAGE_ANALYSIS` and drop the engines (tests use `override_settings`)."""
        with self._lock:
            if self._admin_engine is not None:
                self._admin_engine.dispose()
            self._admin_engine = None
        self.borrowed.dispose()
        self.settings = page_analysis_settings()
        listen_url = self.settings.listen_database_url
        self.event_streams = EventStreams(
            lambda: connect_kwargs(listen_url or self.admin_engine()),
            max_streams=self.settings.max_event_streams,
            keepalive_seconds=self.settings.event_keepalive_seconds,
            channel=lambda: analysis_channel(self.admin_engine()),
        )
        self.environment_settings = Settings()
        self.api = AdminApi(self.admin_engine, self.event_streams, self.environment_settings)


def page_analysis_app() -> PageAnalysisConfig:
    """The installed app's config; `LookupError` when the app is not installed."""
    config = apps.get_app_config(PageAnalysisConfig.label)
    assert isinstance(config, PageAnalysisConfig)
    return config
