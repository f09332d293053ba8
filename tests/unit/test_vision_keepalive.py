"""VisionClient keeps one HTTP/1.1 connection per thread alive, against a real local server.

The server here speaks HTTP/1.1 and counts the TCP connections it accepts,
so a test can tell a reused connection from a new one. It can also close a
connection behind the client's back, as a model server does when its
keep-alive timeout runs out.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from manga_page_analysis.analysis.analyzer.prepared_image import PreparedImage
from manga_page_analysis.analysis.model_server.client import VisionClient
from manga_page_analysis.analysis.model_server.retry_policy import RetryPolicy
from manga_page_analysis.errors import VisionUnavailable
from testbed.vision_server import analysis_content, ok_answer
from tests.helpers import wait_until

ANSWER = json.dumps(ok_answer(analysis_content()).body).encode()
PAGE = PreparedImage("image/png", b"\x89PNG not decoded by anyone here", 1, 1, reencoded=False)


class CountingServer(ThreadingHTTPServer):
    """HTTP/1.1 with keep-alive. `accepted` counts TCP connections, `open` those not
    yet closed. `answers_per_connection`: after that many answers on one connection,
    the next request on it is read and the connection closed without an answer
    (None: never); `close_after_answer`: close each connection right after its
    answer, without saying so in a `Connection: close` header."""

    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.accepted = 0
        self.open = 0
        self.requests = 0
        self.answers_per_connection: int | None = None
        self.close_after_answer = False
        self.lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            self.accepted += 1
            self.open += 1
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.lock:
            self.open -= 1
        super().shutdown_request(request)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The headers and the body go out in two writes: with Nagle on, the body
    # waits for the client's delayed ACK of the headers (40 ms) on a reused connection.
    disable_nagle_algorithm = True
    server: CountingServer

    def setup(self) -> None:
        super().setup()
        self.answered = 0

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self._answer(b'{"status": "ok"}')

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.requests += 1
        limit = self.server.answers_per_connection
        if limit is not None and self.answered >= limit:
            self.close_connection = True  # read the request, then hang up without a word
            return
        self._answer(ANSWER)

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self.answered += 1
        if self.server.close_after_answer:
            self.close_connection = True


@pytest.fixture
def server() -> Iterator[CountingServer]:
    httpd = CountingServer()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def client_for(server: CountingServer, **options: Any) -> VisionClient:
    return VisionClient(base_url=server.url, model="m", **options)


def soon() -> float:
    return time.monotonic() + 10.0


def test_one_thread_reuses_one_connection(server: CountingServer) -> None:
    with client_for(server) as client:
        for _ in range(4):
            assert client.analyze(PAGE, deadline=soon()).attempts == 1
        assert client.readiness().ready
    assert (server.requests, server.accepted) == (4, 1)


def test_each_thread_keeps_its_own_connection(server: CountingServer) -> None:
    with client_for(server) as client:
        barrier = threading.Barrier(3)
        failures: list[BaseException] = []

        def analyse_three() -> None:
            try:
                barrier.wait(10)
                for _ in range(3):
                    client.analyze(PAGE, deadline=soon())
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=analyse_three) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert failures == []
    assert (server.requests, server.accepted) == (9, 3)


def test_close_closes_the_kept_alive_connections(server: CountingServer) -> None:
    client = client_for(server)
    client.analyze(PAGE, deadline=soon())
    assert server.open == 1  # kept alive after the answer
    client.close()
    wait_until(lambda: server.open == 0)


def test_a_connection_the_server_closed_between_calls_is_replaced(
    server: CountingServer,
) -> None:
    server.close_after_answer = True
    with client_for(server) as client:
        results = [client.analyze(PAGE, deadline=soon()) for _ in range(3)]
    assert [result.analysis.ocr_text for result in results] == ["こんにちは"] * 3
    assert server.accepted == 3


def test_a_request_the_server_hangs_up_on_is_sent_again_at_once(server: CountingServer) -> None:
    # The keep-alive race: the server closes the connection just as the next
    # request goes out on it. With a 30 s backoff and a 10 s deadline, only an
    # immediate retry on a new connection can succeed.
    server.answers_per_connection = 1
    with client_for(server, retry=RetryPolicy(initial_seconds=30.0, max_seconds=30.0)) as client:
        assert client.analyze(PAGE, deadline=soon()).attempts == 1
        second = client.analyze(PAGE, deadline=soon())
    assert second.attempts == 2
    assert second.analysis.ocr_text == "こんにちは"
    assert (server.requests, server.accepted) == (3, 2)


def test_a_server_that_always_hangs_up_is_retried_with_backoff_and_named(
    server: CountingServer,
) -> None:
    server.answers_per_connection = 0
    client = client_for(server, retry=RetryPolicy(max_attempts=3, initial_seconds=0.01))
    with client, pytest.raises(VisionUnavailable) as caught:
        client.analyze(PAGE, deadline=soon())
    message = str(caught.value)
    assert "after 3 attempt(s), retries exhausted" in message
    assert "the server closed the connection without answering" in message
    assert "RemoteDisconnected" not in message and "(" not in message.split("last error:")[1]
    assert server.accepted == 3
