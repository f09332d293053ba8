"""`api/events` as a Django StreamingHttpResponse: a NOTIFY from another
connection arrives as an SSE event; closing the response closes the LISTEN
connection and frees the slot; one stream more than the cap is a JSON 503."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text

from manga_page_analysis.analysis.page_events import ANALYSIS_CHANNEL
from tests.helpers import count, wait_until
from tests.integration.web_django.conftest import ADMIN_TOKEN

pytestmark = pytest.mark.usefixtures("django_db")

URL = "/admin/analysis/api/events"
AUTH = {"HTTP_AUTHORIZATION": f"Bearer {ADMIN_TOKEN}"}
LISTENERS = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'page-analysis-events'"


def _chunks(response: Any) -> Iterator[str]:
    for chunk in response.streaming_content:
        yield chunk.decode() if isinstance(chunk, bytes) else chunk


def _next_non_comment(chunks: Iterator[str]) -> str:
    for chunk in chunks:
        if not chunk.startswith(":") and not chunk.startswith("retry:"):
            return chunk
    raise AssertionError("the stream ended")


def test_an_event_published_elsewhere_reaches_the_stream(django_engine: Engine) -> None:
    from django.test import Client

    response = Client().get(URL, **AUTH)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    chunks = _chunks(response)
    try:
        assert next(chunks).startswith("retry:")
        assert next(chunks) == ": listening\n\n"  # LISTEN is active from here on
        event = {"type": "completed", "page_id": "p-1", "duration_ms": 12}
        with django_engine.begin() as conn:
            conn.execute(
                text("SELECT pg_notify(:channel, :payload)"),
                {"channel": ANALYSIS_CHANNEL, "payload": json.dumps(event)},
            )
        message = _next_non_comment(chunks)
        assert message.startswith("event: completed\n")
        data = [line[len("data: ") :] for line in message.splitlines() if line.startswith("data: ")]
        assert json.loads("\n".join(data)) == event
        assert count(django_engine, LISTENERS) == 1
    finally:
        response.close()  # what the server does when the client goes away
    wait_until(lambda: count(django_engine, LISTENERS) == 0, timeout=10)


def test_streams_beyond_the_cap_get_a_json_503(django_engine: Engine) -> None:
    from django.test import Client

    from manga_page_analysis.web.django.apps import page_analysis_app

    client = Client()
    streams = page_analysis_app().event_streams
    assert streams.max_streams == 2  # PAGE_ANALYSIS["MAX_EVENT_STREAMS"] of the tests
    opened = [client.get(URL, **AUTH) for _ in range(2)]
    try:
        assert [response.status_code for response in opened] == [200, 200]
        refused = client.get(URL, **AUTH)
        assert refused.status_code == 503 and refused["Retry-After"] == "5"
        assert refused.json()["error"]["code"] == "too_many_streams"
    finally:
        for response in opened:
            response.close()
    assert streams.open_streams == 0
    again = client.get(URL, **AUTH)
    assert again.status_code == 200
    again.close()
    assert streams.open_streams == 0
