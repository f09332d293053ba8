"""`api/events` under Django's own threaded WSGI server on 127.0.0.1 (the one
`runserver` and LiveServerTestCase use): an event another process published
arrives, the stream survives `pg_terminate_backend` of its listener, and a
client that goes away leaves no LISTEN connection and no stream slot behind."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Engine

from tests.helpers import wait_until
from tests.integration.test_web_events import TOKEN as CLIENT_TOKEN
from tests.integration.test_web_events import (
    SSEClient,
    _listeners,
    _publish_from_another_process,
    _terminate_listeners,
)

pytestmark = pytest.mark.usefixtures("django_db")


@contextmanager
def serve_django(**setting: object) -> Iterator[tuple[str, int]]:
    """Django's WSGI app on its threaded dev server with `PAGE_ANALYSIS = setting`."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
    from django.test import override_settings

    from manga_page_analysis.web.django.apps import page_analysis_app

    with override_settings(PAGE_ANALYSIS=setting):
        page_analysis_app().reload()
        server = ThreadedWSGIServer(("127.0.0.1", 0), WSGIRequestHandler, allow_reuse_address=False)
        server.set_app(WSGIHandler())
        thread = threading.Thread(target=server.serve_forever, name="django-test-server")
        thread.start()
        try:
            yield "127.0.0.1", server.server_address[1]
        finally:
            server.shutdown()
            thread.join(timeout=10)
            server.server_close()
    page_analysis_app().reload()


def test_an_event_from_another_process_survives_a_terminated_listener(
    django_db: str, django_engine: Engine
) -> None:
    from manga_page_analysis.web.django.apps import page_analysis_app

    # The token the shared SSE client sends; a short keep-alive, so a departed
    # client is noticed on the next write.
    with serve_django(ADMIN_TOKEN=CLIENT_TOKEN, EVENT_KEEPALIVE_SECONDS=0.2) as (host, port):
        client = SSEClient(host, port)
        try:
            assert client.response.status == 200
            assert client.response.getheader("Content-Type").startswith("text/event-stream")
            client.read_until(lambda line: line == ": listening")
            first_page = uuid.uuid4()
            job_id = _publish_from_another_process(django_db, first_page)
            event_type, data = client.next_event()
            assert event_type == "completed"
            assert data["job_id"] == str(job_id) and data["page_id"] == str(first_page)

            assert _listeners(django_engine) == 1
            assert _terminate_listeners(django_engine) == 1
            client.read_until(lambda line: line.startswith(": reconnected"))
            second_page = uuid.uuid4()
            _publish_from_another_process(django_db, second_page)
            event_type, data = client.next_event()
            assert event_type == "completed" and data["page_id"] == str(second_page)
            streams = page_analysis_app().event_streams
            assert streams.open_streams == 1
        finally:
            client.close()
        # The server notices the client is gone on a keep-alive write and
        # closes the response: the LISTEN connection and the slot are freed.
        wait_until(lambda: _listeners(django_engine) == 0, timeout=15)
        wait_until(lambda: streams.open_streams == 0, timeout=15)
