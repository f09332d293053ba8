"""Client for an OpenAI-compatible vision server: llama.cpp's llama-server, vLLM, Ollama.

One call to `VisionClient.analyze` is one `POST {base_url}/v1/chat/completions`
with the page as a base64 data URL and the answer schema as
`response_format = {"type": "json_schema", ...}`, retried on transient
failures (connection errors, timeouts, 429, 5xx) within the caller's deadline.

Errors (all from `app.errors`):

- `VisionRejected`: a 4xx other than 429; not retried.
- `VisionUnavailable`: retries ran out, or the next retry would pass the
  deadline; names the last cause.
- `DispatchTimeout`: the deadline ran out while a request was waiting.
- `VisionCancelled`: the caller's cancel event was set.
- `VisionProtocolError`: a 2xx answer that is not a chat completion.
- `VisionError`: anything else, e.g. an answer that is cut off, not JSON, or
  not the promised shape. These are not retried here: at temperature 0 the
  same image gives the same answer, so the job's own backoff handles them.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NoReturn, Protocol

import requests
from tenacity import RetryCallState, Retrying, retry_if_exception_type

from app.analysis.answer import (
    ANALYSIS_SCHEMA,
    SYSTEM_PROMPT,
    USER_PROMPT,
    Analysis,
    parse_analysis,
)
from app.analysis.http_wire import (
    ERROR_BODY_CHARS,
    error_message,
    not_chat_completion,
    read_chat_completion,
)
from app.analysis.images import PreparedImage, data_url
from app.errors import (
    DispatchTimeout,
    VisionCancelled,
    VisionError,
    VisionRejected,
    VisionUnavailable,
)

if TYPE_CHECKING:
    from app.config import Settings

__all__ = [
    "ANALYSIS_SCHEMA",
    "SYSTEM_PROMPT",
    "USER_PROMPT",
    "Analysis",
    "VisionClient",
    "VisionObserver",
    "VisionResult",
    "parse_analysis",
]

log = logging.getLogger(__name__)

SCHEMA_NAME: Final = "page_analysis"
"""`response_format.json_schema.name` sent with every request."""
HEALTH_TIMEOUT_SECONDS: Final = 2.0
"""Connect and read timeout of one readiness probe."""


class VisionObserver(Protocol):
    """What a `VisionClient` reports, for metrics. Called on the caller's thread:
    must be quick and thread-safe; whatever it raises is logged and ignored."""

    def vision_request(self, duration_seconds: float, status: str) -> None:
        """One HTTP request (each retry is one) ended. `status` is the HTTP status
        (`"200"`, `"503"`), or `"timeout"`, `"connection_error"`, `"error"` when no
        answer came, or `"bad_body"` for a 2xx whose body is not a JSON object."""
        ...


@dataclass(frozen=True)
class VisionResult:
    """A successful analysis. `model` is the model the server says answered
    (the configured name if it did not say); `usage` is its token count, if any."""

    analysis: Analysis
    model: str
    usage: Mapping[str, Any] | None = None
    attempts: int = 1


class VisionClient:
    """Talks to one OpenAI-compatible server. Worker threads may share one client:
    a call keeps its state on its own stack, and the session serves as a connection pool.

    Only a `requests.Session` the client created is closed by `close()`; a
    session passed in belongs to the caller. Backoff between retries is
    `min(retry_initial_seconds × 2^(n−1), retry_max_seconds)`, shortened by up
    to `retry_jitter` (a fraction) at random.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        health_url: str | None = None,
        max_tokens: int = 2048,
        connect_timeout: float = 5.0,
        read_timeout: float = 300.0,
        session: requests.Session | None = None,
        max_attempts: int = 5,
        retry_initial_seconds: float = 0.5,
        retry_max_seconds: float = 10.0,
        retry_jitter: float = 0.5,
        observer: VisionObserver | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.base_url = base_url.rstrip("/")
        self.chat_url = f"{self.base_url}/v1/chat/completions"
        self.health_url = health_url or f"{self.base_url}/health"
        self.model = model
        self.max_tokens = max_tokens
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_attempts = max_attempts
        self.retry_initial_seconds = retry_initial_seconds
        self.retry_max_seconds = retry_max_seconds
        self.retry_jitter = min(max(retry_jitter, 0.0), 1.0)
        self._api_key = api_key
        self._observer = observer
        self._owns_session = session is None
        self._session = session if session is not None else requests.Session()

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        session: requests.Session | None = None,
        observer: VisionObserver | None = None,
    ) -> VisionClient:
        """A client configured from the `VISION_*` settings; `ValueError` without `VISION_URL`."""
        if not settings.vision_url:
            raise ValueError("VISION_URL is not set: the http backend needs a model server")
        return cls(
            base_url=settings.vision_url,
            model=settings.vision_model,
            api_key=settings.vision_api_key,
            health_url=settings.health_url,
            max_tokens=settings.vision_max_tokens,
            connect_timeout=settings.vision_connect_timeout_seconds,
            read_timeout=settings.vision_read_timeout_seconds,
            session=session,
            observer=observer,
        )

    def __repr__(self) -> str:
        # No api_key here: reprs end up in logs.
        return f"VisionClient(base_url={self.base_url!r}, model={self.model!r})"

    def __enter__(self) -> VisionClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP session if this client created it."""
        if self._owns_session:
            self._session.close()

    def is_ready(self) -> bool:
        """True iff the health URL answers 2xx within ~2 s. Never raises.

        llama-server answers 503 while it loads its model, so "up but loading"
        reads as not ready.
        """
        timeout = (min(self.connect_timeout, HEALTH_TIMEOUT_SECONDS), HEALTH_TIMEOUT_SECONDS)
        try:
            with self._session.get(
                self.health_url, timeout=timeout, headers=self._headers(), allow_redirects=False
            ) as response:
                return 200 <= response.status_code < 300
        except Exception as exc:
            # Any failure (refused, timeout, bad URL) means the same thing to a
            # caller deciding whether to lease work: not ready.
            log.debug("vision readiness probe %s failed: %s", self.health_url, exc)
            return False

    def _notify(self, method: str, *args: Any) -> None:
        if self._observer is None:
            return
        try:
            getattr(self._observer, method)(*args)
        except Exception:
            log.exception("vision observer failed in %s", method)

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
        """Analyse `image`, retrying transient failures until `deadline` (a `time.monotonic()`).

        No attempt and no backoff sleep is started that would end past the
        deadline, and each attempt's timeouts are cut to the time left. Setting
        `cancel` wakes a backoff sleep at once and prevents further attempts;
        a request already in flight runs until it answers or times out.
        `job_label` names the job in log lines.
        """
        # Serialised once: the body carries the whole image, and retries reuse it.
        body = json.dumps(self.request_body(image), ensure_ascii=False).encode("utf-8")
        label = f" for {job_label}" if job_label else ""
        attempts = 0

        def attempt() -> dict[str, Any]:
            nonlocal attempts
            attempts += 1
            return self._attempt(body, deadline=deadline, cancel=cancel, label=label)

        def stop(state: RetryCallState) -> bool:
            if cancel is not None and cancel.is_set():
                return True
            if state.attempt_number >= self.max_attempts:
                return True
            # Never start a sleep whose end is already past the deadline.
            return time.monotonic() + state.upcoming_sleep >= deadline

        def give_up(state: RetryCallState) -> NoReturn:
            assert state.outcome is not None
            cause = state.outcome.exception()
            if cancel is not None and cancel.is_set():
                raise VisionCancelled(
                    f"analysis{label} cancelled after {state.attempt_number} attempt(s)"
                ) from cause
            status = cause.status_code if isinstance(cause, VisionUnavailable) else None
            why = (
                "retries exhausted"
                if state.attempt_number >= self.max_attempts
                else "no time left before the deadline"
            )
            raise VisionUnavailable(
                f"vision request{label} failed after {state.attempt_number} attempt(s), "
                f"{why}; last error: {cause}",
                status_code=status,
            ) from cause

        def before_sleep(state: RetryCallState) -> None:
            cause = state.outcome.exception() if state.outcome is not None else None
            log.warning(
                "vision request%s failed (attempt %d of %d): %s; retrying in %.1f s",
                label,
                state.attempt_number,
                self.max_attempts,
                cause,
                state.upcoming_sleep,
            )

        def pause(seconds: float) -> None:
            # cancel.wait returns as soon as the event is set, so a shutdown
            # does not wait out a backoff; the next attempt then sees the event.
            if cancel is not None:
                cancel.wait(seconds)
            else:
                time.sleep(seconds)

        retrying = Retrying(
            sleep=pause,
            stop=stop,
            wait=self._backoff,
            retry=retry_if_exception_type(VisionUnavailable),
            before_sleep=before_sleep,
            retry_error_callback=give_up,
        )
        payload = retrying(attempt)
        return self._result(payload, attempts)

    def _backoff(self, state: RetryCallState) -> float:
        exponent = max(state.attempt_number - 1, 0)
        base = min(self.retry_initial_seconds * 2.0**exponent, self.retry_max_seconds)
        return base * (1.0 - self.retry_jitter * random.random())

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _attempt(
        self, body: bytes, *, deadline: float, cancel: threading.Event | None, label: str
    ) -> dict[str, Any]:
        """One POST. Raises `VisionUnavailable` for what is worth retrying."""
        if cancel is not None and cancel.is_set():
            raise VisionCancelled(f"analysis{label} cancelled")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DispatchTimeout(f"analysis dispatch{label} timed out before the request")
        started = time.monotonic()
        outcome = ["error"]
        try:
            return self._post(body, remaining=remaining, label=label, outcome=outcome)
        finally:
            self._notify("vision_request", time.monotonic() - started, outcome[0])

    def _post(
        self, body: bytes, *, remaining: float, label: str, outcome: list[str]
    ) -> dict[str, Any]:
        """The request of `_attempt`; sets `outcome[0]` to the status it reports."""
        connect_timeout = min(self.connect_timeout, remaining)
        read_timeout = min(self.read_timeout, remaining)
        headers = self._headers()
        headers["Content-Type"] = "application/json"
        try:
            response = self._session.post(
                self.chat_url,
                data=body,
                headers=headers,
                timeout=(connect_timeout, read_timeout),
                allow_redirects=False,
            )
        except requests.ConnectTimeout as exc:
            # Subclass of both ConnectionError and Timeout: must come first.
            outcome[0] = "timeout"
            if connect_timeout < self.connect_timeout:
                raise DispatchTimeout(
                    f"analysis dispatch{label} timed out connecting to {self.chat_url}"
                ) from exc
            raise VisionUnavailable(
                f"cannot connect to {self.chat_url} within {connect_timeout:g} s"
            ) from exc
        except requests.Timeout as exc:
            outcome[0] = "timeout"
            if read_timeout < self.read_timeout:
                raise DispatchTimeout(
                    f"analysis dispatch{label} timed out waiting {read_timeout:.1f} s "
                    "for the model's answer"
                ) from exc
            raise VisionUnavailable(
                f"no answer within the {read_timeout:g} s read timeout"
            ) from exc
        except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
            outcome[0] = "connection_error"
            raise VisionUnavailable(f"cannot reach {self.chat_url}: {exc}") from exc
        except requests.RequestException as exc:
            raise VisionError(f"vision request to {self.chat_url} failed: {exc}") from exc

        with response:
            status = response.status_code
            outcome[0] = str(status)
            if status == 429 or status >= 500:
                raise VisionUnavailable(
                    f"vision server answered {status}: {error_message(response)}",
                    status_code=status,
                )
            if status >= 400:
                raise VisionRejected(
                    f"vision server rejected the request with {status}: {error_message(response)}",
                    status_code=status,
                )
            if not 200 <= status < 300:
                raise VisionError(f"vision server answered unexpected status {status}")
            try:
                payload = response.json()
            except ValueError:
                outcome[0] = "bad_body"
                excerpt = response.text[:ERROR_BODY_CHARS]
                raise not_chat_completion(f"a body that is not JSON: {excerpt!r}") from None
        if not isinstance(payload, dict):
            outcome[0] = "bad_body"
            raise not_chat_completion(f"JSON that is not an object: {type(payload).__name__}")
        return payload

    def _result(self, payload: dict[str, Any], attempts: int) -> VisionResult:
        completion = read_chat_completion(payload, max_tokens=self.max_tokens)
        return VisionResult(
            analysis=parse_analysis(completion.content),
            model=completion.model or self.model,
            usage=completion.usage,
            attempts=attempts,
        )
