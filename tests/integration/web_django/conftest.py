"""Django configured once per test session, on a real Postgres database.

The database is a copy of the migrated template (our schema) plus Django's
own tables (auth, sessions); every test starts with empty tables. Django is
configured lazily, by the first test that asks, so the rest of the suite
never sees it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_postgresql.executors import PostgreSQLExecutor
from pytest_postgresql.janitor import DatabaseJanitor
from sqlalchemy import Engine, text

from manga_page_analysis.db import make_engine

ADMIN_TOKEN = "django-test-token"

OUR_TABLES = "crawler_jobs, page_analysis, pages, chapters, mangas"


def django_settings(database_url: str) -> dict[str, Any]:
    from manga_page_analysis.web.django import database_from_url

    return {
        "DEBUG": False,
        "SECRET_KEY": "tests-only",
        "ALLOWED_HOSTS": ["testserver", "127.0.0.1", "localhost"],
        "INSTALLED_APPS": [
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "manga_page_analysis.web.django",
        ],
        "MIDDLEWARE": [
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
        ],
        "ROOT_URLCONF": "tests.integration.web_django.urls",
        "LOGIN_URL": "login",  # a URL name: the admin page must resolve it
        "DATABASES": {
            "default": database_from_url(database_url),
            # Never connected to by Django; the admin views are pointed at it
            # to see a database outage answered with a JSON 503.
            "unreachable": database_from_url(database_url.rsplit("/", 1)[0] + "/no_such_database"),
        },
        "PAGE_ANALYSIS": {"ADMIN_TOKEN": ADMIN_TOKEN, "MAX_EVENT_STREAMS": 2},
        "USE_TZ": True,
        "DEFAULT_AUTO_FIELD": "django.db.models.AutoField",
        "PASSWORD_HASHERS": ["django.contrib.auth.hashers.MD5PasswordHasher"],
    }


@pytest.fixture(scope="session")
def django_database_url(postgresql_proc: PostgreSQLExecutor) -> Iterator[str]:
    """One database for every Django test: the schema at head, Django's tables added."""
    dbname = f"dj_{uuid.uuid4().hex[:16]}"
    executor = postgresql_proc
    janitor = DatabaseJanitor(
        user=executor.user,
        host=executor.host,
        port=executor.port,
        dbname=dbname,
        template_dbname=executor.template_dbname,
        password=executor.password,
    )
    with janitor:
        credentials = executor.user + (f":{executor.password}" if executor.password else "")
        yield f"postgresql+psycopg://{credentials}@{executor.host}:{executor.port}/{dbname}"


@pytest.fixture(scope="session")
def django_setup(django_database_url: str) -> Iterator[str]:
    """Configure Django for the session's database and create Django's tables."""
    import django
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

    settings.configure(**django_settings(django_database_url))
    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    yield django_database_url
    from manga_page_analysis.web.django.apps import page_analysis_app

    page_analysis_app().reload()
    connections.close_all()


@pytest.fixture(scope="session")
def django_engine(django_setup: str) -> Iterator[Engine]:
    """A connection pool of the tests' own: 'another connection' than Django's."""
    engine = make_engine(django_setup, pool_size=4, max_overflow=2)
    yield engine
    engine.dispose()


@pytest.fixture
def django_db(django_setup: str, django_engine: Engine) -> Iterator[str]:
    """Empty tables before each test; the database URL."""
    from django.db import connections

    with django_engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {OUR_TABLES}, auth_user, django_session CASCADE"))
    yield django_setup
    # A test that failed inside atomic() must not leave the next one a broken connection.
    connections.close_all()
