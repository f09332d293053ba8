"""`manga_page_analysis.web.django.request_analysis` runs on Django's own connection, in its
transaction: visible through Django's cursor inside `atomic()`, invisible to
any other connection until commit, gone on rollback, and no connection added."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import Engine, text

from tests.helpers import count, make_page

pytestmark = pytest.mark.usefixtures("django_db")


class Rollback(Exception):
    pass


def _page(engine: Engine, number: int = 1) -> uuid.UUID:
    """A committed page, made on another connection than Django's."""
    with engine.begin() as conn:
        return make_page(conn, page_number=number)


def _django_sees(job_id: uuid.UUID) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM crawler_jobs WHERE id = %s", [job_id])
        return int(cursor.fetchone()[0])


def _others_see(engine: Engine, job_id: uuid.UUID) -> int:
    return count(engine, "SELECT count(*) FROM crawler_jobs WHERE id = :id", id=job_id)


def _backends() -> int:
    """Server connections to this database, counted through Django's cursor."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def test_enqueue_commits_with_the_hosts_atomic_block(django_engine: Engine) -> None:
    from django.db import connection, transaction

    from manga_page_analysis.web.django import request_analysis

    page_id = _page(django_engine)
    with transaction.atomic():
        backends_before = _backends()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            django_pid = cursor.fetchone()[0]
        job_id = request_analysis(page_id)
        assert job_id is not None
        assert _django_sees(job_id) == 1
        assert _others_see(django_engine, job_id) == 0
        assert _backends() == backends_before  # no second connection was opened
        with connection.cursor() as cursor:
            # The job's row was written by Django's backend, in its open transaction.
            cursor.execute(
                "SELECT xmin::text = pg_current_xact_id()::text, pg_backend_pid() "
                "FROM crawler_jobs WHERE id = %s",
                [job_id],
            )
            written_here, pid = cursor.fetchone()
        assert written_here and pid == django_pid
    assert _others_see(django_engine, job_id) == 1
    with django_engine.connect() as conn:
        payload = conn.execute(
            text("SELECT payload FROM crawler_jobs WHERE id = :id"), {"id": job_id}
        ).scalar_one()
    assert payload == {"kind": "analyze_page", "page_id": str(page_id), "force": False}


def test_rollback_of_the_hosts_atomic_block_leaves_no_job(django_engine: Engine) -> None:
    from django.db import transaction

    from manga_page_analysis.web.django import request_analysis

    page_id = _page(django_engine)
    with pytest.raises(Rollback), transaction.atomic():
        job_id = request_analysis(page_id)
        assert job_id is not None and _django_sees(job_id) == 1
        raise Rollback
    assert _others_see(django_engine, job_id) == 0
    assert count(django_engine, "SELECT count(*) FROM crawler_jobs") == 0


def test_a_rolled_back_savepoint_takes_only_its_own_job(django_engine: Engine) -> None:
    from django.db import transaction

    from manga_page_analysis.web.django import request_analysis

    kept_page, dropped_page = _page(django_engine), _page(django_engine)
    with transaction.atomic():
        kept = request_analysis(kept_page)
        with pytest.raises(Rollback), transaction.atomic():
            dropped = request_analysis(dropped_page)
            raise Rollback
    assert _others_see(django_engine, kept) == 1
    assert _others_see(django_engine, dropped) == 0


def test_outside_atomic_it_commits_on_its_own(django_engine: Engine) -> None:
    from manga_page_analysis.web.django import request_analysis

    job_id = request_analysis(str(_page(django_engine)))
    assert job_id is not None and _others_see(django_engine, job_id) == 1


def test_force_reads_the_existing_jobs_payload_through_djangos_connection(
    django_engine: Engine,
) -> None:
    """Django loads jsonb as text on its connection; the library's dedup path
    reads `payload` as a dict. Both must keep working side by side."""
    from django.db import connection, transaction

    from manga_page_analysis.web.django import request_analysis

    page_id = _page(django_engine)
    with transaction.atomic():
        job_id = request_analysis(page_id)
        assert request_analysis(page_id) == job_id
        assert request_analysis(page_id, force=True) == job_id
    with django_engine.connect() as conn:
        row = conn.execute(
            text("SELECT payload, state FROM crawler_jobs WHERE id = :id"), {"id": job_id}
        ).one()
    assert row.payload["force"] is True and row.state == "pending"
    assert count(django_engine, "SELECT count(*) FROM crawler_jobs") == 1
    with connection.cursor() as cursor:  # Django's own adapters are untouched
        cursor.execute("""SELECT '{"a": 1}'::jsonb""")
        assert cursor.fetchone()[0] == '{"a": 1}'


def test_an_atomic_block_stays_usable_after_enqueueing(django_engine: Engine) -> None:
    """SQLAlchemy neither commits nor rolls back Django's transaction."""
    from django.contrib.auth.models import User
    from django.db import transaction

    from manga_page_analysis.web.django import request_analysis

    page_id = _page(django_engine)
    with pytest.raises(Rollback), transaction.atomic():
        User.objects.create(username="before")
        request_analysis(page_id)
        User.objects.create(username="after")
        assert User.objects.count() == 2
        raise Rollback
    assert User.objects.count() == 0
    assert count(django_engine, "SELECT count(*) FROM crawler_jobs") == 0


def test_an_unknown_alias_is_refused() -> None:
    from django.core.exceptions import ImproperlyConfigured

    from manga_page_analysis.web.django import request_analysis
    from manga_page_analysis.web.django.conf import sqlalchemy_url

    with pytest.raises(ImproperlyConfigured, match="no database"):
        sqlalchemy_url("missing")
    with pytest.raises(ImproperlyConfigured, match="no database"):
        request_analysis(uuid.uuid4(), using="missing")


def test_a_failed_enqueue_dooms_the_hosts_atomic_block(django_engine: Engine) -> None:
    """An error from the library's statements reaches Django's bookkeeping:
    the block can no longer be used or committed, and nothing of it remains."""
    from django.contrib.auth.models import User
    from django.db import DatabaseError, connection, transaction
    from django.db.transaction import TransactionManagementError
    from sqlalchemy.exc import OperationalError

    from manga_page_analysis.web.django import request_analysis

    page_id = _page(django_engine)
    with django_engine.connect() as locker:
        locker.execute(text("LOCK TABLE crawler_jobs IN ACCESS EXCLUSIVE MODE"))
        with pytest.raises(OperationalError), transaction.atomic():
            User.objects.create(username="host-write")
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '50ms'")
            try:
                request_analysis(page_id)
            finally:
                with pytest.raises((TransactionManagementError, DatabaseError)):
                    User.objects.count()
        locker.rollback()
    assert User.objects.count() == 0
    assert count(django_engine, "SELECT count(*) FROM crawler_jobs") == 0


def test_an_id_that_is_no_page_is_refused_and_the_block_stays_usable(
    django_engine: Engine,
) -> None:
    from django.contrib.auth.models import User
    from django.db import transaction

    from manga_page_analysis.queue import NoSuchPage
    from manga_page_analysis.web.django import request_analysis

    page_id = _page(django_engine)
    unknown = uuid.uuid4()
    with transaction.atomic():
        User.objects.create(username="host-write")
        with pytest.raises(NoSuchPage, match=str(unknown)):
            request_analysis(unknown)
        job_id = request_analysis(page_id)
        User.objects.create(username="after")
    assert User.objects.count() == 2
    assert _others_see(django_engine, job_id) == 1
    assert count(django_engine, "SELECT count(*) FROM crawler_jobs") == 1
    with pytest.raises(NoSuchPage):  # outside atomic() too
        request_analysis(unknown)
    assert count(django_engine, "SELECT count(*) FROM crawler_jobs") == 1
