"""Messages read by people (`last_error`, events, the admin page) carry no Python reprs."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import requests

from manga_page_analysis.analysis.analyzer.prepared_image import PreparedImage
from manga_page_analysis.analysis.model_server.client import VisionClient
from manga_page_analysis.analysis.model_server.retry_policy import RetryPolicy
from manga_page_analysis.analysis.model_server.wire import is_dropped_connection, transport_reason
from manga_page_analysis.errors import VisionUnavailable, truncated, without_reprs
from manga_page_analysis.worker.outcomes import describe_error
from testbed.vision_server import ScriptedVisionServer


def test_without_reprs_takes_object_reprs_out() -> None:
    message = "cannot identify image file <_io.BytesIO object at 0x7f3a2b1c0d90>"
    assert without_reprs(message) == "cannot identify image file"
    assert without_reprs("plain <b>words</b> stay") == "plain <b>words</b> stay"
    assert without_reprs("a <x.Y object at 0xABC> b\nline two") == "a b\nline two"


def test_long_error_text_keeps_its_start_and_says_it_was_cut() -> None:
    assert truncated("short", 2000) == "short"
    cut = truncated("x" * 5000, 2000)
    assert len(cut) == 2000 and cut == "x" * 1987 + " …[truncated]"


def test_a_library_error_reaching_the_runner_loses_its_repr() -> None:
    error = OSError("cannot identify image file <_io.BytesIO object at 0x7f3a2b1c0d90>")
    assert describe_error(error) == "OSError: cannot identify image file"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def read_request(connection: socket.socket) -> None:
    """Read one whole request: closing with unread bytes would reset the connection."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += connection.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += connection.recv(65536)


def raw_server(answer: bytes) -> Iterator[str]:
    """A TCP server that reads a request, sends `answer` and closes the connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                read_request(connection)
                connection.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@pytest.fixture
def hang_up_server() -> Iterator[str]:
    yield from raw_server(b"")


@pytest.fixture
def cut_off_server() -> Iterator[str]:
    yield from raw_server(b'HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{"choices": [')


def failure_of(url: str) -> requests.RequestException:
    with pytest.raises(requests.RequestException) as caught:
        requests.post(url, data=b"{}", timeout=(2, 2))
    return caught.value


def test_a_refused_connection_is_named_plainly() -> None:
    error = failure_of(f"http://127.0.0.1:{free_port()}/v1/chat/completions")
    assert "HTTPConnectionPool" in str(error)  # what requests itself says
    assert transport_reason(error) == "connection refused"
    assert not is_dropped_connection(error)


def test_a_hang_up_is_named_plainly_and_counts_as_dropped(hang_up_server: str) -> None:
    error = failure_of(hang_up_server)
    assert "RemoteDisconnected" in repr(error)
    assert transport_reason(error) == "the server closed the connection without answering"
    assert is_dropped_connection(error)


def test_an_invalid_url_is_named_plainly() -> None:
    assert transport_reason(failure_of("http://127.0.0.1:99999/x")) == "the URL is not valid"


def test_readiness_says_why_not(vision_server: ScriptedVisionServer) -> None:
    with VisionClient(base_url=vision_server.url, model="m") as client:
        vision_server.health_status = 503
        assert client.readiness().reason == "answered 503: Loading model"
        vision_server.stop()
        refused = client.readiness()
    assert (refused.ready, refused.reason, refused.starting) == (False, "connection refused", False)


def test_an_answer_cut_off_mid_body_is_named_plainly_and_retried(cut_off_server: str) -> None:
    page = PreparedImage("image/png", b"png", 1, 1, reencoded=False)
    client = VisionClient(base_url=cut_off_server, model="m", retry=RetryPolicy(max_attempts=2))
    with client, pytest.raises(VisionUnavailable) as caught:
        client.analyze(page, deadline=time.monotonic() + 10)
    message = str(caught.value)
    assert "failed after 2 attempt(s), retries exhausted" in message
    assert (
        f"lost the connection to {cut_off_server}/v1/chat/completions: "
        "the answer was cut off: the server closed the connection mid-answer"
    ) in message
    assert "IncompleteRead" not in message
