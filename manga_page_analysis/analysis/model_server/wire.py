"""Reading OpenAI-style chat completion responses and error bodies, defensively.

Servers that call themselves OpenAI-compatible differ at the edges (content as
a string or a list of parts, error bodies in three shapes), and a proxy in
front of one can answer anything at all; these helpers turn all of that into
plain values or `VisionError`s with readable messages.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Iterator, Mapping
from typing import Any, Final

import requests
import urllib3.exceptions

from manga_page_analysis.errors import (
    VisionError,
    VisionModelMissing,
    VisionProtocolError,
    VisionRefused,
    VisionRejected,
    VisionUnavailable,
    without_reprs,
)

ERROR_BODY_CHARS: Final = 300
"""How much of a server's error message (or odd answer) goes into an exception."""


def chat_completion_content(payload: Mapping[str, Any], *, max_tokens: int) -> str | None:
    """`choices[0].message.content` of a response body, as text (`None` when it has none).

    Raises `VisionProtocolError` when the body is not a chat completion, and
    `VisionError` when the answer was cut off at `max_tokens`.
    """
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise not_chat_completion(f"no choices: {_excerpt_json(payload)}")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise not_chat_completion(f"no message in choices[0]: {_excerpt_json(payload)}")
    if choice.get("finish_reason") == "length":
        raise VisionError(
            f"model answer was cut off at max_tokens={max_tokens} "
            "(finish_reason 'length') before the JSON was complete"
        )
    return _content_text(message.get("content"))


def completion_payload(
    response: requests.Response, *, server: str = "vision server", model: str = ""
) -> dict[str, Any]:
    """The body of a 2xx answer as a JSON object; an error for any other status.
    `server` and `model` name what answered and what was asked for, in the errors
    that are the worker's configuration rather than the page (401/403, 404)."""
    status = response.status_code
    if status == 429 or status >= 500:
        raise VisionUnavailable(
            f"vision server answered {status}: {error_message(response)}", status_code=status
        )
    if status >= 400:
        raise rejection(response, server=server, model=model)
    if not 200 <= status < 300:
        raise VisionError(f"vision server answered unexpected status {status}")
    try:
        payload = response.json()
    except ValueError:
        excerpt = response.text[:ERROR_BODY_CHARS]
        raise not_chat_completion(f"a body that is not JSON: {excerpt!r}") from None
    if not isinstance(payload, dict):
        raise not_chat_completion(f"JSON that is not an object: {type(payload).__name__}")
    return payload


def rejection(response: requests.Response, *, server: str, model: str) -> VisionRejected:
    """The error for a 4xx answer (not 429): refused credentials (401/403) and a
    missing model or route (404) are the worker's; any other is the request's."""
    status = response.status_code
    said = error_message(response)
    if status in (401, 403):
        return VisionRefused(
            f"{server} refused our credentials ({status}: {said}); check VISION_API_KEY",
            status_code=status,
        )
    if status == 404:
        what = f"no model {model!r}" if "model" in said.lower() else "no chat route there"
        return VisionModelMissing(
            f"{server} has {what} ({status}: {said}); check VISION_MODEL and VISION_URL",
            status_code=status,
        )
    return VisionRejected(
        f"vision server rejected the request with {status}: {said}", status_code=status
    )


def not_chat_completion(what: str) -> VisionProtocolError:
    return VisionProtocolError(f"vision server answer is not an OpenAI chat completion: {what}")


def error_message(response: requests.Response) -> str:
    """The server's own words from an error response, at most `ERROR_BODY_CHARS` long.

    Understands OpenAI's and llama-server's `{"error": {"message": ...}}`,
    `{"error": "..."}`, FastAPI's `{"detail": ...}` and plain text.
    """
    message: str | None = None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        detail = body.get("detail")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            message = error["message"]
        elif isinstance(error, str):
            message = error
        elif detail is not None:
            message = detail if isinstance(detail, str) else json.dumps(detail)
        elif isinstance(body.get("message"), str):
            message = body["message"]
    if message is None:
        message = response.text.strip() or response.reason or "(empty body)"
    if len(message) > ERROR_BODY_CHARS:
        message = message[:ERROR_BODY_CHARS] + "…"
    return message


# Exception types (requests, urllib3, http.client) by what they mean for the reader.
_CUT_OFF = (
    http.client.IncompleteRead,
    urllib3.exceptions.IncompleteRead,
    requests.exceptions.ChunkedEncodingError,
)
_BAD_URL = (requests.exceptions.InvalidURL, urllib3.exceptions.LocationParseError)
_DROPPED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


def transport_reason(exc: BaseException) -> str:
    """What went wrong on the wire, in words, from a `requests` exception.

    `str()` of one is urllib3's retry bookkeeping around the reprs of its inner
    exceptions (`HTTPConnectionPool(host=...): Max retries exceeded ... (Caused by
    NewConnectionError(...))`); the cause that matters sits a few levels down.
    """
    causes = list(_causes(exc))
    for cause in causes:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror | urllib3.exceptions.NameResolutionError):
            return "cannot resolve the host name"
    for cause in causes:
        if isinstance(cause, http.client.RemoteDisconnected):
            return "the server closed the connection without answering"
        if isinstance(cause, ConnectionResetError):
            return "the server reset the connection"
        if isinstance(cause, BrokenPipeError):
            return "the server closed the connection while the request was being sent"
        if isinstance(cause, _CUT_OFF):
            return "the answer was cut off: the server closed the connection mid-answer"
        if isinstance(cause, ssl.SSLError):
            return f"TLS failed ({cause.reason or cause.strerror or 'handshake error'})"
        if isinstance(cause, _BAD_URL):
            return "the URL is not valid"
    for cause in causes:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror[0].lower() + cause.strerror[1:]
    return without_reprs(str(exc)) or type(exc).__name__


def is_dropped_connection(exc: BaseException) -> bool:
    """True when an open connection died before the answer came (`ConnectionDropped`)."""
    causes = list(_causes(exc))
    connecting = any(isinstance(cause, urllib3.exceptions.NewConnectionError) for cause in causes)
    return not connecting and any(isinstance(cause, _DROPPED) for cause in causes)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and every exception inside it, outermost first: chained causes, urllib3's
    `reason`, and exceptions passed as arguments (requests and urllib3 nest them so)."""
    pending = [exc]
    seen: set[int] = set()
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        inner = (getattr(current, "reason", None), current.__cause__, current.__context__)
        pending.extend(item for item in (*inner, *current.args) if isinstance(item, BaseException))


def _content_text(content: object) -> str | None:
    """`message.content` as text: servers send a string, `null`, or a list of text parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = (part.get("text") if isinstance(part, dict) else None for part in content)
        return "".join(text for text in texts if isinstance(text, str))
    raise not_chat_completion(f"message content is a {type(content).__name__}, not text")


def _excerpt_json(payload: object) -> str:
    return json.dumps(payload, ensure_ascii=False)[:ERROR_BODY_CHARS]
