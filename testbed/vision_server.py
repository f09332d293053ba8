"""A scripted, real HTTP stand-in for an OpenAI-compatible vision server.

Loaded as a pytest plugin (`pytest_plugins = ["testbed.vision_server"]` in
tests/conftest.py); usable outside pytest too (end-to-end tests, benchmarks).

Fixture
    `vision_server`: a started `ScriptedVisionServer`, stopped after the test.

`ScriptedVisionServer` (listens on 127.0.0.1, a free port):
    `url`                   base URL, e.g. "http://127.0.0.1:PORT" (no trailing slash)
    `health_url`            f"{url}/health"
    `health_status`         int, default 200; GET /health answers it (set 503 or 500 to fail)
    `health_hits`           int, number of GET /health requests so far
    `models`                list[str]: the ids GET /v1/models lists (run-worker's start-up
                            check asks); default the model names the tests and benches use
    `script(*replies)`      queue `Reply`s; each POST /v1/chat/completions takes the next one
    `default`               `Reply` used when the queue is empty; settable; initially
                            `ok_answer(analysis_content())`
    `requests`              list[dict]: the parsed JSON body of each chat request, in arrival
                            order (`None` when the body is not JSON)
    `request_headers`       list[dict[str, str]]: that request's headers, names lower-cased,
                            same index as `requests`
    `wait_for_requests(n, timeout=10.0)`
                            block until at least n chat requests have arrived (recorded on
                            arrival, before any delay/block); AssertionError on timeout
    `wait_idle(timeout=10.0)`
                            block until no request handler is running (every answer written
                            or abandoned); AssertionError on timeout
    `start()` / `stop()`    also a context manager; `stop()` is idempotent, releases handlers
                            held by `delay`/`block`, and does not wait for them

`Reply(status=200, body=None, delay=0.0, block=None, headers={})`:
    `body`   bytes as is; str as UTF-8 text/plain; dict or list as JSON; None: empty
    `delay`  seconds to wait before answering
    `block`  a `threading.Event`: answer only once it is set. If the server stops first,
             the connection is dropped without an answer.
    `headers` extra response headers

Helpers:
    `ok_answer(content, finish_reason="stop", model="test-model") -> Reply`: a
        chat.completion whose `choices[0].message.content` is `content` (a dict is
        JSON-encoded)
    `analysis_content(**overrides) -> dict`: a valid answer (ocr_text "こんにちは",
        tags, description, nsfw safe 0.02), top-level keys replaced by `overrides`
    `error_reply(status, message) -> Reply`: an OpenAI-style `{"error": {...}}` body

GET /v1/models lists `models`; other paths answer 404 and are not recorded. The server speaks HTTP/1.1 and
keeps connections alive, as model servers do (a client that reuses its
connections shows it in the benchmark); `stop()` closes every open connection,
so no client keeps a pooled connection to a stopped server.
Run `python -m testbed.vision_server --port 8080` to serve default answers by hand.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import pytest

CHAT_PATH = "/v1/chat/completions"
HEALTH_PATH = "/health"
MODELS_PATH = "/v1/models"
KNOWN_MODELS = ("default", "test-model", "bench-model")
"""What GET /v1/models lists unless a test says otherwise."""
_BLOCK_POLL_SECONDS = 0.02
"""A blocked handler waits on the test's event and must also notice a stop; threading
cannot wait on two events at once, so it re-checks the stop flag this often."""


@dataclass
class Reply:
    """One scripted answer to a chat request; see the module docstring."""

    status: int = 200
    body: bytes | str | dict[str, Any] | list[Any] | None = None
    delay: float = 0.0
    block: threading.Event | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def encoded(self) -> tuple[bytes, str]:
        """The body bytes and their content type."""
        if self.body is None:
            return b"", "application/json"
        if isinstance(self.body, bytes):
            return self.body, "application/octet-stream"
        if isinstance(self.body, str):
            return self.body.encode("utf-8"), "text/plain; charset=utf-8"
        return json.dumps(self.body, ensure_ascii=False).encode("utf-8"), "application/json"


def analysis_content(**overrides: Any) -> dict[str, Any]:
    """A valid answer dict; keyword arguments replace top-level keys."""
    content: dict[str, Any] = {
        "ocr_text": "こんにちは",
        "tags": ["school", "two girls", "classroom"],
        "description": "Two girls talk in a classroom after school.",
        "nsfw": {"rating": "safe", "score": 0.02},
    }
    content.update(overrides)
    return content


def ok_answer(
    content: str | dict[str, Any], finish_reason: str = "stop", model: str = "test-model"
) -> Reply:
    """A 200 chat.completion carrying `content` as the assistant message."""
    text = json.dumps(content, ensure_ascii=False) if isinstance(content, dict) else content
    return Reply(
        body={
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish_reason,
                }
            ],
            "usage": {"prompt_tokens": 700, "completion_tokens": 60, "total_tokens": 760},
        }
    )


def error_reply(status: int, message: str) -> Reply:
    """An error in OpenAI's (and llama-server's) shape."""
    return Reply(status=status, body={"error": {"code": status, "message": message}})


class ScriptedVisionServer:
    """See the module docstring. Thread-safe: handlers run on their own threads."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.health_status = 200
        self.health_hits = 0
        self.models: list[str] = list(KNOWN_MODELS)
        self.default: Reply = ok_answer(analysis_content())
        self.requests: list[dict[str, Any] | None] = []
        self.request_headers: list[dict[str, str]] = []
        self._host = host
        self._port = port
        self._replies: collections.deque[Reply] = collections.deque()
        self._arrived = threading.Condition()
        self._active_handlers = 0
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._address()
        return f"http://{host}:{port}"

    @property
    def health_url(self) -> str:
        return f"{self.url}{HEALTH_PATH}"

    def start(self) -> ScriptedVisionServer:
        """Bind and serve in a daemon thread; returns self."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _Server((self._host, self._port), _Handler)
        httpd.scripted = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="scripted-vision-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; held handlers give up without answering."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        httpd.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
        # Keep the port for `url`, so a test can still aim a client at the dead address.
        self._port = httpd.server_address[1]

    def __enter__(self) -> ScriptedVisionServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def script(self, *replies: Reply) -> None:
        """Queue replies for the next chat requests, in order."""
        with self._arrived:
            self._replies.extend(replies)

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> None:
        """Block until at least `n` chat requests have arrived; AssertionError on timeout."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.requests) >= n, timeout=timeout):
                raise AssertionError(
                    f"expected {n} chat request(s) within {timeout} s, got {len(self.requests)}"
                )

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Block until no handler is running; AssertionError on timeout."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: self._active_handlers == 0, timeout=timeout):
                raise AssertionError(
                    f"{self._active_handlers} request handler(s) still running after {timeout} s"
                )

    def _handler_running(self, delta: int) -> None:
        with self._arrived:
            self._active_handlers += delta
            self._arrived.notify_all()

    def _address(self) -> tuple[str, int]:
        if self._httpd is not None:
            host, port = self._httpd.server_address[:2]
            return str(host), int(port)
        if self._port == 0:
            raise RuntimeError("server was never started; call start() first")
        return self._host, self._port

    def _record(self, body: dict[str, Any] | None, headers: dict[str, str]) -> Reply:
        """Record an arrived chat request and take its reply."""
        with self._arrived:
            self.requests.append(body)
            self.request_headers.append(headers)
            reply = self._replies.popleft() if self._replies else self.default
            self._arrived.notify_all()
        return reply

    def _count_health(self) -> int:
        with self._arrived:
            self.health_hits += 1
            return self.health_status

    def _hold(self, reply: Reply) -> bool:
        """Apply the reply's delay and block; False if the server stopped meanwhile."""
        if reply.delay > 0 and self._stopping.wait(reply.delay):
            return False
        if reply.block is not None:
            while not reply.block.wait(_BLOCK_POLL_SECONDS):
                if self._stopping.is_set():
                    return False
        return not self._stopping.is_set()


_CLIENT_GONE = (TimeoutError, BrokenPipeError, ConnectionResetError)
_IDLE_CONNECTION_SECONDS = 30.0
"""How long a kept-alive connection may sit idle before the server closes it."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    # Many worker threads connect at once (HTTP/1.0: one connection per
    # request); the default backlog of 5 resets the surplus.
    request_queue_size = 128
    scripted: ScriptedVisionServer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Drop every kept-alive connection (their handler threads then end)."""
        with self._open_lock:
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that time out or disconnect mid-request are part of the tests;
        # anything else is a bug in this server and gets the default traceback.
        if not isinstance(sys.exc_info()[1], _CLIENT_GONE):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = _IDLE_CONNECTION_SECONDS
    # Headers and body go out in two writes: on a kept-alive connection Nagle's
    # algorithm would hold the body until the client's delayed ACK (~40 ms).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        return

    def handle(self) -> None:
        # A client that timed out or gave up leaves mid-request or mid-answer;
        # an idle kept-alive connection times out between requests.
        with contextlib.suppress(*_CLIENT_GONE, OSError):
            super().handle()

    def do_GET(self) -> None:
        with self._answering():
            self._get()

    def do_POST(self) -> None:
        with self._answering():
            self._post()

    @contextlib.contextmanager
    def _answering(self) -> Iterator[None]:
        # Counted per request, not per connection: `wait_idle` waits for
        # answers, not for clients to hang up their kept-alive connections.
        scripted = self.server.scripted
        scripted._handler_running(+1)
        try:
            yield
        finally:
            scripted._handler_running(-1)

    def _get(self) -> None:
        if self.path.split("?")[0] == MODELS_PATH:
            listed = [{"id": name, "object": "model"} for name in self.server.scripted.models]
            self._send(Reply(body={"object": "list", "data": listed}))
            return
        if self.path.split("?")[0] != HEALTH_PATH:
            self._send(Reply(status=404, body={"error": "not found"}))
            return
        status = self.server.scripted._count_health()
        body = {"status": "ok"} if status < 400 else {"error": {"message": "Loading model"}}
        self._send(Reply(status=status, body=body))

    def _post(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.split("?")[0] != CHAT_PATH:
            self._send(Reply(status=404, body={"error": "not found"}))
            return
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        headers = {name.lower(): value for name, value in self.headers.items()}
        scripted = self.server.scripted
        reply = scripted._record(parsed if isinstance(parsed, dict) else None, headers)
        if scripted._hold(reply):
            self._send(reply)
        else:
            self.close_connection = True

    def _send(self, reply: Reply) -> None:
        body, content_type = reply.encoded()
        self.send_response(reply.status)
        headers = {"Content-Type": content_type, "Content-Length": str(len(body))}
        headers.update(reply.headers)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def vision_server() -> Iterator[ScriptedVisionServer]:
    """A started scripted vision server, stopped after the test."""
    server = ScriptedVisionServer().start()
    try:
        yield server
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve scripted vision answers by hand.")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    args = parser.parse_args()
    server = ScriptedVisionServer(port=args.port)
    server.default = ok_answer(analysis_content())
    server.default.delay = args.delay
    with server:
        print(f"serving on {server.url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
