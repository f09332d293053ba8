"""`PAGE_ANALYSIS["LISTEN_DATABASE_URL"]`: the event stream LISTENs there, not
on the Django database (which may sit behind PgBouncer in transaction mode)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from manga_page_analysis.analysis.page_events import ANALYSIS_CHANNEL
from manga_page_analysis.db import connect_kwargs
from tests.integration.web_django.conftest import ADMIN_TOKEN

pytestmark = pytest.mark.usefixtures("django_db")

URL = "/admin/analysis/api/events"
AUTH = {"HTTP_AUTHORIZATION": f"Bearer {ADMIN_TOKEN}"}


def _chunks(response: Any) -> Iterator[str]:
    for chunk in response.streaming_content:
        yield chunk.decode() if isinstance(chunk, bytes) else chunk


def test_the_event_stream_listens_on_listen_database_url(django_db: str) -> None:
    from django.test import Client, override_settings

    from manga_page_analysis.web.django.apps import page_analysis_app

    # Another database of the same server: a NOTIFY reaches only its own database's
    # listeners, so an event sent there arrives only if the stream LISTENs there.
    listen_url = make_url(django_db).set(database="postgres").render_as_string(hide_password=False)
    event = {"type": "completed", "page_id": "p-1"}
    settings = {
        "ADMIN_TOKEN": ADMIN_TOKEN,
        "LISTEN_DATABASE_URL": listen_url,
        "EVENT_KEEPALIVE_SECONDS": 0.2,
    }
    with override_settings(PAGE_ANALYSIS=settings):
        page_analysis_app().reload()
        response = Client().get(URL, **AUTH)
        assert response.status_code == 200
        chunks = _chunks(response)
        try:
            assert next(chunks).startswith("retry:")
            assert next(chunks) == ": listening\n\n"
            with psycopg.connect(**connect_kwargs(listen_url), autocommit=True) as conn:
                conn.execute("SELECT pg_notify(%s, %s)", (ANALYSIS_CHANNEL, json.dumps(event)))
            # Keep-alives every 0.2 s: 50 chunks give the event 10 s to arrive.
            messages = []
            for _, message in zip(range(50), chunks, strict=False):
                messages.append(message)
                if not message.startswith(":"):
                    break
        finally:
            response.close()
    page_analysis_app().reload()
    assert message.startswith("event: completed\n") and json.dumps(event) in message, messages


@pytest.mark.parametrize("value", ["", 5])
def test_a_bad_listen_database_url_is_refused(value: object) -> None:
    from django.core.exceptions import ImproperlyConfigured
    from django.test import override_settings

    from manga_page_analysis.web.django.conf import page_analysis_settings

    with (
        override_settings(PAGE_ANALYSIS={"LISTEN_DATABASE_URL": value}),
        pytest.raises(ImproperlyConfigured, match="LISTEN_DATABASE_URL"),
    ):
        page_analysis_settings()
