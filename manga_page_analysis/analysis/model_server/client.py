"""The `http` analyzer: a client for an OpenAI-compatible server (llama-server, vLLM, Ollama).

Raises only `manga_page_analysis.errors` exceptions, with messages in words, never a library exception's repr.
A 2xx answer that is not a valid analysis (`VisionError`) is not retried here: at temperature 0
the same image gives the same answer, so the job's own backoff handles it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

import requests

from manga_page_analysis.analysis.analyzer.answer import (
    ANALYSIS_SCHEMA,
    SYSTEM_PROMPT,
    USER_PROMPT,
    parse_analysis,
)
from manga_page_analysis.analysis.analyzer.prepared_image import PreparedImage, data_url
from manga_page_analysis.analysis.analyzer.protocol import READY, Readiness, VisionResult
from manga_page_analysis.analysis.model_server.retry_policy import (
    DEFAULT_RETRY,
    ConnectionDropped,
    RetryingCall,
    RetryPolicy,
)
from manga_page_analysis.analysis.model_server.wire import (
    chat_completion_content,
    completion_payload,
    error_message,
    is_dropped_connection,
    rejection,
    transport_reason,
)
from manga_page_analysis.config import (
    DEFAULT_VISION_CONNECT_TIMEOUT_SECONDS,
    DEFAULT_VISION_MAX_TOKENS,
    DEFAULT_VISION_READ_TIMEOUT_SECONDS,
)
from manga_page_analysis.errors import (
    DispatchTimeout,
    ServiceError,
    VisionCancelled,
    VisionError,
    VisionProtocolError,
    VisionUnavailable,
)

log = logging.getLogger(__name__)

SCHEMA_NAME: Final = "page_analysis"
"""`response_format.json_schema.name` sent with every request."""
HEALTH_TIMEOUT_SECONDS: Final = 2.0
"""Connect and read timeout of one readiness probe."""
MODEL_CHECK_TIMEOUT_SECONDS: Final = 30.0
"""Read timeout of the start-up check's one-token request (a model may answer slowly)."""


class VisionObserver(Protocol):
    """What a `VisionClient` reports, for metrics. Called on the caller's thread:
    must be quick and thread-safe; whatever it raises is logged and ignored."""

    def vision_request(self, duration_seconds: float, status: str) -> None:
        """One HTTP request (each retry is one) ended. `status` is the HTTP status
        (`"200"`, `"503"`), or `"timeout"`, `"connection_error"`, `"error"` when no
        answer came, or `"bad_body"` for a 2xx whose body is not a JSON object."""
        ...


class ThreadSessions:
    """One `requests.Session` per thread, made by `factory`, for HTTP/1.1 keep-alive to the
    server (`requests` does not promise that a session is safe to share between threads).

    The session of a thread that has ended is closed when the next session is
    made (a runner replaces a stuck worker thread: its connection must not stay
    open for good). A thread that asks again after `close` gets a new session,
    closed by the next `close`.
    """

    def __init__(self, factory: Callable[[], requests.Session]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._open: dict[threading.Thread, requests.Session] = {}

    def get(self) -> requests.Session:
        """The calling thread's session."""
        thread = threading.current_thread()
        with self._lock:
            session = self._open.get(thread)
            if session is not None:
                return session
            ended = [other for other in self._open if not other.is_alive()]
            orphans = [self._open.pop(other) for other in ended]
            session = self._open[thread] = self._factory()
        for orphan in orphans:
            orphan.close()
        return session

    def close(self) -> None:
        """Close every session handed out so far (their pooled connections with them)."""
        with self._lock:
            sessions = list(self._open.values())
            self._open.clear()
        for session in sessions:
            session.close()


class VisionClient:
    """The `http` analyzer: talks to one OpenAI-compatible server. Thread-safe: a call keeps
    its state on its own stack, and each thread has its own session (from `session_factory`).
    `retry` says how often and how long a failed request is retried."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        health_url: str | None = None,
        max_tokens: int = DEFAULT_VISION_MAX_TOKENS,
        connect_timeout: float = DEFAULT_VISION_CONNECT_TIMEOUT_SECONDS,
        read_timeout: float = DEFAULT_VISION_READ_TIMEOUT_SECONDS,
        session_factory: Callable[[], requests.Session] = requests.Session,
        retry: RetryPolicy = DEFAULT_RETRY,
        observer: VisionObserver | None = None,
    ) -> None:
        self.retry = retry
        self.base_url = base_url.rstrip("/")
        self.chat_url = f"{self.base_url}/v1/chat/completions"
        self.health_url = health_url or f"{self.base_url}/health"
        self.name = f"vision server at {self.health_url}"
        self.server_name = f"model server at {self.base_url}"
        """What errors about the model server itself call it (its base URL)."""
        self.model = model
        self.max_tokens = max_tokens
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._headers = {"Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._observer = observer
        self._sessions = ThreadSessions(session_factory)

    def __repr__(self) -> str:
        # No api_key here: reprs end up in logs.
        return f"VisionClient(base_url={self.base_url!r}, model={self.model!r})"

    def __enter__(self) -> VisionClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self, on_failure: Callable[[ServiceError], None]) -> None:
        """Nothing to load: the server loads its own model (and says so in `readiness`)."""

    def close(self) -> None:
        """Close every thread's HTTP session and its kept-alive connections."""
        self._sessions.close()

    def readiness(self) -> Readiness:
        """Ready iff the health URL answers 2xx within ~2 s; never raises. llama-server answers
        503 while it loads its model: not ready, with the server's own words as the reason."""
        timeout = (min(self.connect_timeout, HEALTH_TIMEOUT_SECONDS), HEALTH_TIMEOUT_SECONDS)
        try:
            with self._sessions.get().get(
                self.health_url, timeout=timeout, headers=self._headers, allow_redirects=False
            ) as response:
                if 200 <= response.status_code < 300:
                    return READY
                return Readiness(
                    False, f"answered {response.status_code}: {error_message(response)}"
                )
        except requests.Timeout:
            return Readiness(False, f"did not answer within {HEALTH_TIMEOUT_SECONDS:g} s")
        except Exception as exc:
            # Any failure (refused, bad URL) means the same thing to a caller
            # deciding whether to lease work: not ready.
            return Readiness(False, transport_reason(exc))

    def check_model(self) -> str | None:
        """A configuration problem, in one line, found by asking the server for the
        configured model: our credentials refused (401/403), or no such model or chat
        route (404). `None` when the model answers, or when the server could not tell
        (down, loading, a 5xx: the readiness gate waits for that). Never raises.

        Asks `GET /v1/models` first; only when that does not list the model (llama-server
        lists its own name and serves any) does it send one tiny chat request
        (`max_tokens` 1, no image)."""
        timeout = (min(self.connect_timeout, HEALTH_TIMEOUT_SECONDS), MODEL_CHECK_TIMEOUT_SECONDS)
        session = self._sessions.get()
        try:
            with session.get(
                f"{self.base_url}/v1/models",
                timeout=timeout,
                headers=self._headers,
                allow_redirects=False,
            ) as listing:
                if listing.status_code in (401, 403):
                    return str(rejection(listing, server=self.server_name, model=self.model))
                if self.model in _listed_models(listing):
                    return None
            with session.post(
                self.chat_url,
                json={
                    "model": self.model,
                    "messages": [{"role": "user", "content": "Say OK."}],
                    "max_tokens": 1,
                    "temperature": 0,
                    "stream": False,
                },
                timeout=timeout,
                headers=self._headers,
                allow_redirects=False,
            ) as answer:
                if answer.status_code in (401, 403, 404):
                    return str(rejection(answer, server=self.server_name, model=self.model))
        except requests.RequestException:
            return None  # not answering is not configuration: the gate waits for it
        return None

    def request_body(self, image: PreparedImage) -> dict[str, Any]:
        """The JSON body `analyze` posts for `image`."""
        return {
            "model": self.model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": USER_PROMPT},
                        {"type": "image_url", "image_url": {"url": data_url(image)}},
                    ],
                },
            ],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": SCHEMA_NAME, "schema": ANALYSIS_SCHEMA, "strict": True},
            },
            "temperature": 0,
            "max_tokens": self.max_tokens,
            "stream": False,
        }

    def analyze(
        self,
        image: PreparedImage,
        *,
        deadline: float,
        cancel: threading.Event | None = None,
        job_label: str = "",
    ) -> VisionResult:
        """`Analyzer.analyze`, retried as `RetryingCall` says; each attempt's timeouts are cut
        to the time left, and a request in flight runs until it answers or times out."""
        # Serialised once: the body carries the whole image, and retries reuse it.
        body = json.dumps(self.request_body(image), ensure_ascii=False).encode("utf-8")
        label = f" for {job_label}" if job_label else ""
        call = RetryingCall(
            lambda: self._attempt(body, deadline=deadline, cancel=cancel, label=label),
            self.retry,
            deadline=deadline,
            cancel=cancel,
            label=label,
        )
        payload = call.run()
        content = chat_completion_content(payload, max_tokens=self.max_tokens)
        model, usage = payload.get("model"), payload.get("usage")
        return VisionResult(
            analysis=parse_analysis(content),
            model=model if isinstance(model, str) and model else self.model,
            usage=usage if isinstance(usage, dict) else None,
            attempts=call.attempts,
        )

    def _attempt(
        self, body: bytes, *, deadline: float, cancel: threading.Event | None, label: str
    ) -> dict[str, Any]:
        """One POST of `body`; its chat completion as a dict. Raises `VisionUnavailable`
        for what is worth retrying, and reports the request to the observer."""
        if cancel is not None and cancel.is_set():
            raise VisionCancelled(f"analysis{label} cancelled")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DispatchTimeout(f"analysis dispatch{label} timed out before the request")
        started = time.monotonic()
        outcome = "error"
        try:
            with self._send(body, remaining, label) as response:
                outcome = str(response.status_code)
                return completion_payload(response, server=self.server_name, model=self.model)
        except VisionProtocolError:
            outcome = "bad_body"  # raised only for a 2xx answer
            raise
        except ServiceError as exc:
            if outcome == "error":
                outcome = _transport_outcome(exc.__cause__)
            raise
        finally:
            if self._observer is not None:
                try:
                    self._observer.vision_request(time.monotonic() - started, outcome)
                except Exception:
                    log.exception("vision observer failed in vision_request")

    def _send(self, body: bytes, remaining: float, label: str) -> requests.Response:
        """POST with `(connect, read)` timeouts cut to `remaining`; transport failures
        become `DispatchTimeout` (the deadline's), `VisionUnavailable` or `VisionError`."""
        connect_timeout = min(self.connect_timeout, remaining)
        read_timeout = min(self.read_timeout, remaining)
        try:
            return self._sessions.get().post(
                self.chat_url,
                data=body,
                headers={**self._headers, "Content-Type": "application/json"},
                timeout=(connect_timeout, read_timeout),
                allow_redirects=False,
            )
        except requests.ConnectTimeout as exc:
            # Subclass of both ConnectionError and Timeout: must come first.
            if connect_timeout < self.connect_timeout:
                raise DispatchTimeout(
                    f"analysis dispatch{label} timed out connecting to {self.chat_url}"
                ) from exc
            raise VisionUnavailable(
                f"cannot connect to {self.chat_url} within {connect_timeout:g} s"
            ) from exc
        except requests.Timeout as exc:
            if read_timeout < self.read_timeout:
                raise DispatchTimeout(
                    f"analysis dispatch{label} timed out waiting {read_timeout:.1f} s "
                    "for the model's answer"
                ) from exc
            raise VisionUnavailable(
                f"no answer within the {read_timeout:g} s read timeout"
            ) from exc
        except requests.exceptions.ChunkedEncodingError as exc:
            raise VisionUnavailable(
                f"lost the connection to {self.chat_url}: {transport_reason(exc)}"
            ) from exc
        except requests.ConnectionError as exc:
            if is_dropped_connection(exc):
                raise ConnectionDropped(
                    f"lost the connection to {self.chat_url}: {transport_reason(exc)}"
                ) from exc
            raise VisionUnavailable(
                f"cannot reach {self.chat_url}: {transport_reason(exc)}"
            ) from exc
        except requests.RequestException as exc:
            raise VisionError(
                f"vision request to {self.chat_url} failed: {transport_reason(exc)}"
            ) from exc


def _listed_models(listing: requests.Response) -> set[str]:
    """The model ids of a 2xx `GET /v1/models` answer (OpenAI's `{"data": [{"id"}]}`),
    else none."""
    if not 200 <= listing.status_code < 300:
        return set()
    try:
        data = listing.json().get("data")
    except (ValueError, AttributeError):
        return set()
    if not isinstance(data, list):
        return set()
    return {str(item["id"]) for item in data if isinstance(item, dict) and "id" in item}


def _transport_outcome(cause: BaseException | None) -> str:
    """The observer's status for a request that got no answer."""
    if isinstance(cause, requests.Timeout):
        return "timeout"
    if isinstance(cause, requests.ConnectionError | requests.exceptions.ChunkedEncodingError):
        return "connection_error"
    return "error"
