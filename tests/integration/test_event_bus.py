"""The event bus's NOTIFY delivery: on the publishing thread, or batched on a
notifier thread (what the analysis runner uses), in order, best effort."""

from __future__ import annotations

import json
import logging
import threading
import uuid

import psycopg
import pytest
from sqlalchemy import create_engine, event

from manga_page_analysis.worker.reports.events import EventBus, JobEvent


def _event(n: int) -> JobEvent:
    return JobEvent("completed", uuid.uuid4(), {"page_id": uuid.uuid4()}, {"n": n})


def _listen(database_url: str, channel: str) -> psycopg.Connection:
    conn = psycopg.connect(
        database_url.replace("postgresql+psycopg", "postgresql"), autocommit=True
    )
    conn.execute(f"LISTEN {channel}")
    return conn


def _received(conn: psycopg.Connection, count: int) -> list[dict]:
    got = [json.loads(n.payload) for n in conn.notifies(timeout=10, stop_after=count)]
    assert len(got) == count, f"received {len(got)} of {count} notifications"
    return got


@pytest.mark.parametrize("background", [False, True])
def test_every_event_reaches_listeners_in_publishing_order(engine, database_url, background):
    listener = _listen(database_url, "bus_test")
    bus = EventBus(engine, "bus_test", background=background)
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    try:
        for n in range(40):
            bus.publish(_event(n))
        bus.close()
        got = _received(listener, 40)
    finally:
        listener.close()
    assert [item["n"] for item in got] == list(range(40))
    assert all(item["type"] == "completed" for item in got)
    notifies = [s for s in statements if "pg_notify" in s]
    if background:
        assert 1 <= len(notifies) <= 40  # batched as they gather; never more than one each
    else:
        assert len(notifies) == 40


def test_a_background_publish_does_not_wait_for_the_database_and_a_failure_is_dropped(
    caplog,
):
    # Every connection attempt blocks until `database_answers` is set, then fails:
    # publishing must finish while the database has not answered at all.
    database_answers = threading.Event()
    connecting = threading.Event()

    def connect() -> psycopg.Connection:
        connecting.set()
        database_answers.wait(30)
        raise psycopg.OperationalError("the test's database never answers")

    unreachable = create_engine("postgresql+psycopg://", creator=connect)
    bus = EventBus(unreachable, "bus_test", background=True)
    received: list[JobEvent] = []
    bus.subscribe(received.append)
    with caplog.at_level(logging.WARNING, logger="manga_page_analysis.worker.reports.events"):
        publisher = threading.Thread(
            target=lambda: [bus.publish(_event(n)) for n in range(3)], daemon=True
        )
        publisher.start()
        assert connecting.wait(10)  # the notifier is stuck connecting...
        publisher.join(10)
        assert not publisher.is_alive()  # ...and publishing finished all the same
        assert not database_answers.is_set()
        assert [e.details["n"] for e in received] == [0, 1, 2]  # subscribers ran in-line
        database_answers.set()
        assert bus.flush(15)
        bus.close()
    assert any("could not NOTIFY bus_test" in r.getMessage() for r in caplog.records)
    unreachable.dispose()


def test_close_stops_the_notifier_and_later_events_reach_only_subscribers(engine):
    bus = EventBus(engine, "bus_test", background=True)
    bus.publish(_event(0))
    bus.close()
    assert bus._notifier is not None and not bus._notifier.is_alive()
    seen: list[JobEvent] = []
    bus.subscribe(seen.append)
    bus.publish(_event(1))  # after close: subscribers still hear it, nothing is queued
    assert len(seen) == 1 and bus.flush(1)
