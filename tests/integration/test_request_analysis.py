"""`request_analysis`: enqueue, dedup, forcing a job already in flight, and
refusing ids that are no page."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from manga_page_analysis.queue import (
    KIND_ANALYZE_PAGE,
    NoSuchPage,
    ack_done,
    lease,
    release_unowned,
    request_analysis,
    request_analysis_many,
)
from tests.helpers import count, job_row, make_page

MINUTE = timedelta(minutes=1)

# The contract holds through PgBouncer in transaction mode too (testbed/pgbouncer.py).
pytestmark = pytest.mark.pgbouncer


def _pages(engine, how_many=1):
    with engine.begin() as conn:
        return [make_page(conn, storage_key=f"{n}.png") for n in range(how_many)]


def test_request_analysis_enqueues_once_per_page(engine):
    page_id, other_page = _pages(engine, 2)
    with engine.begin() as conn:
        job_id = request_analysis(conn, page_id)
        assert request_analysis(conn, page_id) == job_id
        other = request_analysis(conn, other_page)
    assert job_id is not None and other not in (None, job_id)
    assert count(engine, "SELECT count(*) FROM crawler_jobs") == 2


def test_force_on_a_pending_job_sets_force_on_it(engine):
    (page_id,) = _pages(engine)
    with engine.begin() as conn:
        job_id = request_analysis(conn, page_id)
        assert request_analysis(conn, page_id, force=True) == job_id
        row = job_row(conn, job_id)
    assert row.payload["force"] is True and row.state == "pending"
    assert count(engine, "SELECT count(*) FROM crawler_jobs") == 1


def test_force_on_a_running_job_releases_it_and_fences_the_old_holder(engine):
    (page_id,) = _pages(engine)
    with engine.begin() as conn:
        job_id = request_analysis(conn, page_id)
    with engine.begin() as conn:
        (held,) = lease(conn, KIND_ANALYZE_PAGE, 1, MINUTE)
    with engine.begin() as conn:
        assert request_analysis(conn, page_id, force=True) == job_id
        row = job_row(conn, job_id)
    assert row.state == "pending" and row.attempts == 0
    assert row.payload["force"] is True
    assert row.lease_generation == held.lease_generation + 1
    with engine.begin() as conn:
        assert not ack_done(conn, held)  # the old holder's result is discarded
        (restarted,) = lease(conn, KIND_ANALYZE_PAGE, 1, MINUTE)
    assert restarted.id == job_id and restarted.payload.force is True


def test_unforced_request_leaves_a_running_job_alone(engine):
    (page_id,) = _pages(engine)
    with engine.begin() as conn:
        job_id = request_analysis(conn, page_id)
    with engine.begin() as conn:
        (held,) = lease(conn, KIND_ANALYZE_PAGE, 1, MINUTE)
    with engine.begin() as conn:
        assert request_analysis(conn, page_id) == job_id
        assert ack_done(conn, held)


def test_force_on_an_already_forced_running_job_does_not_restart_it(engine):
    (page_id,) = _pages(engine)
    with engine.begin() as conn:
        request_analysis(conn, page_id, force=True)
    with engine.begin() as conn:
        (held,) = lease(conn, KIND_ANALYZE_PAGE, 1, MINUTE)
    with engine.begin() as conn:
        request_analysis(conn, page_id, force=True)
        assert ack_done(conn, held)


def test_after_the_job_is_done_a_new_request_makes_a_new_job(engine):
    (page_id,) = _pages(engine)
    with engine.begin() as conn:
        first = request_analysis(conn, page_id)
    with engine.begin() as conn:
        (held,) = lease(conn, KIND_ANALYZE_PAGE, 1, MINUTE)
        ack_done(conn, held)
    with engine.begin() as conn:
        second = request_analysis(conn, page_id, force=True)
    assert second not in (None, first)
    with engine.connect() as conn:
        assert job_row(conn, second).payload["force"] is True


def test_a_request_for_many_pages_is_the_single_request_for_each(engine):
    new, pending, running, twice = _pages(engine, 4)
    with engine.begin() as conn:
        pending_job = request_analysis(conn, pending)
        running_job = request_analysis(conn, running)
    with engine.begin() as conn:
        leased = {job.id: job for job in lease(conn, KIND_ANALYZE_PAGE, 2, MINUTE)}
        release_unowned(conn, pending_job)  # only the one job stays running
    held = leased[running_job]
    with engine.begin() as conn:
        requested = request_analysis_many(conn, [new, pending, running, twice, twice], force=True)
    assert (requested.enqueued, requested.in_flight) == (2, 2)
    job_ids = requested.job_ids
    assert job_ids[1:3] == [pending_job, running_job] and job_ids[3] == job_ids[4]
    assert len({job_ids[0], job_ids[3], pending_job, running_job}) == 4
    with engine.connect() as conn:
        forced = [job_row(conn, job_id) for job_id in (pending_job, running_job)]
        fresh = job_row(conn, job_ids[0])
    assert all(row.payload["force"] is True and row.state == "pending" for row in forced)
    assert forced[1].lease_generation == held.lease_generation + 1
    assert fresh.payload["force"] is True
    assert count(engine, "SELECT count(*) FROM crawler_jobs") == 4


def test_an_id_that_is_no_page_is_refused_and_nothing_is_queued(engine):
    (page_id,) = _pages(engine)
    unknown = uuid.uuid4()
    with engine.begin() as conn:
        with pytest.raises(NoSuchPage) as refused:
            request_analysis(conn, unknown)
        assert refused.value.page_ids == [unknown] and str(unknown) in str(refused.value)
        # The transaction is still usable: the refusal was no database error.
        job_id = request_analysis(conn, page_id)
    assert job_id is not None
    assert count(engine, "SELECT count(*) FROM crawler_jobs") == 1


def test_one_unknown_id_among_many_queues_none_of_them(engine):
    known, in_flight = _pages(engine, 2)
    with engine.begin() as conn:
        in_flight_job = request_analysis(conn, in_flight)
    unknown = [uuid.uuid4(), uuid.uuid4()]
    with engine.begin() as conn:
        with pytest.raises(NoSuchPage) as refused:
            request_analysis_many(conn, [unknown[0], known, in_flight, unknown[1]], force=True)
        assert refused.value.page_ids == unknown
        payload = job_row(conn, in_flight_job).payload
    assert payload["force"] is False  # not forced either
    assert count(engine, "SELECT count(*) FROM crawler_jobs") == 1


def test_the_refusal_costs_no_extra_statement(engine):
    """The page check is part of the insert: one statement, whatever the answer."""
    from sqlalchemy import event

    (page_id,) = _pages(engine)
    statements = []
    with engine.begin() as conn:
        event.listen(conn, "before_cursor_execute", lambda *args: statements.append(args[2]))
        request_analysis(conn, page_id)
        assert len(statements) == 1
        with pytest.raises(NoSuchPage):
            request_analysis(conn, uuid.uuid4())
        assert len(statements) == 2
