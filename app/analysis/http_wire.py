"""Reading OpenAI-style chat completion responses and error bodies, defensively.

Servers that call themselves OpenAI-compatible differ at the edges (content as
a string or a list of parts, error bodies in three shapes), and a proxy in
front of one can answer anything at all; these helpers turn all of that into
plain values or `VisionError`s with readable messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import requests

from app.errors import VisionError, VisionProtocolError

ERROR_BODY_CHARS: Final = 300
"""How much of a server's error message (or odd answer) goes into an exception."""


@dataclass(frozen=True)
class ChatCompletion:
    """The parts of a chat completion the client uses. `model` is "" when the server
    did not name one; `content` is None when the message had none."""

    content: str | None
    model: str
    usage: Mapping[str, Any] | None


def read_chat_completion(payload: Mapping[str, Any], *, max_tokens: int) -> ChatCompletion:
    """Pick `choices[0].message.content`, `model` and `usage` out of a response body.

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
    model = payload.get("model")
    usage = payload.get("usage")
    return ChatCompletion(
        content=_content_text(message.get("content")),
        model=model if isinstance(model, str) else "",
        usage=usage if isinstance(usage, dict) else None,
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


def _content_text(content: object) -> str | None:
    """`message.content` as text: servers send a string, `null`, or a list of text parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
        return "".join(parts)
    raise not_chat_completion(f"message content is a {type(content).__name__}, not text")


def _excerpt_json(payload: object) -> str:
    return json.dumps(payload, ensure_ascii=False)[:ERROR_BODY_CHARS]
