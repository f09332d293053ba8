"""VisionClient against the real scripted HTTP server in testbed/vision_server.py."""

from __future__ import annotations

import base64
import io
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
import requests
from PIL import Image

from manga_page_analysis.analysis.analyzer.answer import (
    ANALYSIS_SCHEMA,
    ANSWER_TEXT_MAX_CHARS,
    TAGS_MAX_ITEMS,
)
from manga_page_analysis.analysis.analyzer.prepared_image import PreparedImage
from manga_page_analysis.analysis.model_server.client import VisionClient
from manga_page_analysis.analysis.model_server.retry_policy import RetryPolicy
from manga_page_analysis.errors import (
    DispatchTimeout,
    VisionCancelled,
    VisionError,
    VisionModelMissing,
    VisionRefused,
    VisionRejected,
    VisionUnavailable,
)
from testbed.vision_server import (
    Reply,
    ScriptedVisionServer,
    analysis_content,
    error_reply,
    ok_answer,
)

MakeClient = Callable[..., VisionClient]


@pytest.fixture(scope="module")
def page() -> PreparedImage:
    out = io.BytesIO()
    Image.new("L", (8, 12), 200).save(out, format="PNG")
    return PreparedImage("image/png", out.getvalue(), 8, 12, reencoded=False)


FAST_RETRY = RetryPolicy(initial_seconds=0.01, max_seconds=0.02, jitter=0.0)
"""Backoff shrunk to milliseconds."""


@pytest.fixture
def make_client(vision_server: ScriptedVisionServer) -> Iterator[MakeClient]:
    """Clients aimed at the scripted server, with backoff shrunk to milliseconds."""
    clients: list[VisionClient] = []

    def make(**overrides: Any) -> VisionClient:
        options: dict[str, Any] = {
            "base_url": vision_server.url,
            "model": "qwen-vl",
            "max_tokens": 777,
            "retry": FAST_RETRY,
        }
        options.update(overrides)
        client = VisionClient(**options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def soon(seconds: float = 10.0) -> float:
    return time.monotonic() + seconds


def test_request_shape(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    make_client().analyze(page, deadline=soon())

    assert len(vision_server.requests) == 1
    body = vision_server.requests[0]
    assert body is not None
    assert body["model"] == "qwen-vl"
    assert body["temperature"] == 0
    assert body["max_tokens"] == 777
    assert body["stream"] is False
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "page_analysis", "schema": ANALYSIS_SCHEMA, "strict": True},
    }
    system, user = body["messages"]
    assert system["role"] == "system"
    assert "ocr_text" in system["content"]
    assert user["role"] == "user"
    text_part, image_part = user["content"]
    assert text_part["type"] == "text"
    assert image_part["type"] == "image_url"
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.removeprefix("data:image/png;base64,")) == page.data
    headers = vision_server.request_headers[0]
    assert headers["content-type"] == "application/json"
    assert "authorization" not in headers


def test_schema_bounds_every_string_and_list() -> None:
    props = ANALYSIS_SCHEMA["properties"]
    assert ANALYSIS_SCHEMA["additionalProperties"] is False
    assert set(ANALYSIS_SCHEMA["required"]) == {"ocr_text", "tags", "description", "nsfw"}
    assert props["ocr_text"]["maxLength"] == ANSWER_TEXT_MAX_CHARS
    assert props["description"]["maxLength"] > 0
    assert props["tags"]["maxItems"] == TAGS_MAX_ITEMS
    assert props["tags"]["items"]["maxLength"] > 0
    assert props["nsfw"]["properties"]["rating"]["enum"] == ["safe", "suggestive", "explicit"]
    assert props["nsfw"]["additionalProperties"] is False
    # llama.cpp refuses grammar repetitions of 2000 or more with a 400.
    bounds = [
        props["ocr_text"]["maxLength"],
        props["description"]["maxLength"],
        props["tags"]["maxItems"],
        props["tags"]["items"]["maxLength"],
    ]
    assert max(bounds) < 2000


def test_bearer_header_sent_when_api_key_set(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    client = make_client(api_key="sekrit")
    client.analyze(page, deadline=soon())
    assert vision_server.request_headers[0]["authorization"] == "Bearer sekrit"
    assert "sekrit" not in repr(client)


def test_happy_answer_is_parsed(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    vision_server.script(
        ok_answer(analysis_content(tags=["a", " b ", "a", ""]), model="served-model")
    )
    result = make_client().analyze(page, deadline=soon())
    assert result.analysis.ocr_text == "こんにちは"
    assert result.analysis.tags == ("a", "b")
    assert result.analysis.description == "Two girls talk in a classroom after school."
    assert (result.analysis.nsfw_rating, result.analysis.nsfw_score) == ("safe", 0.02)
    assert result.model == "served-model"
    assert result.usage is not None and result.usage["total_tokens"] == 760
    assert result.attempts == 1


def test_configured_model_is_used_when_the_answer_names_none(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    reply = ok_answer(analysis_content())
    assert isinstance(reply.body, dict)
    del reply.body["model"]
    vision_server.script(reply)
    assert make_client().analyze(page, deadline=soon()).model == "qwen-vl"


def test_fenced_answer_is_accepted(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    fenced = "\n```json\n" + json.dumps(analysis_content(description="fenced")) + "\n```\n"
    vision_server.script(ok_answer(fenced))
    assert make_client().analyze(page, deadline=soon()).analysis.description == "fenced"


def test_content_as_text_parts_is_accepted(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    reply = ok_answer("")
    assert isinstance(reply.body, dict)
    text = json.dumps(analysis_content(description="parts"))
    reply.body["choices"][0]["message"]["content"] = [
        {"type": "text", "text": text[:10]},
        {"type": "text", "text": text[10:]},
    ]
    vision_server.script(reply)
    assert make_client().analyze(page, deadline=soon()).analysis.description == "parts"


def test_invalid_json_is_rejected_quoting_its_start_and_not_retried(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    vision_server.script(ok_answer("Sure! Here is the analysis you asked for: {oops"))
    with pytest.raises(VisionError, match="not JSON") as caught:
        make_client().analyze(page, deadline=soon())
    assert "Sure! Here is the analysis" in str(caught.value)
    assert len(vision_server.requests) == 1


@pytest.mark.parametrize("content", ["", "   \n", None])
def test_empty_content_is_reported(
    vision_server: ScriptedVisionServer,
    make_client: MakeClient,
    page: PreparedImage,
    content: str | None,
) -> None:
    reply = ok_answer("")
    assert isinstance(reply.body, dict)
    reply.body["choices"][0]["message"]["content"] = content
    vision_server.script(reply)
    with pytest.raises(VisionError, match="model returned no content"):
        make_client().analyze(page, deadline=soon())


def test_answer_cut_off_at_max_tokens_says_so(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    vision_server.script(ok_answer('{"ocr_text": "ha ha ha ha', finish_reason="length"))
    with pytest.raises(VisionError, match=r"cut off at max_tokens=321"):
        make_client(max_tokens=321).analyze(page, deadline=soon())


@pytest.mark.parametrize(
    "nsfw, problem",
    [
        ({"rating": "safe", "score": 1.5}, "outside"),
        ({"rating": "safe", "score": -0.1}, "outside"),
        ({"rating": "safe", "score": True}, "expected a number"),
        ({"rating": "safe", "score": "0.5"}, "expected a number"),
        ({"rating": "nsfw", "score": 0.5}, "expected one of"),
    ],
)
def test_invalid_nsfw_verdict_is_rejected(
    vision_server: ScriptedVisionServer,
    make_client: MakeClient,
    page: PreparedImage,
    nsfw: dict[str, Any],
    problem: str,
) -> None:
    vision_server.script(ok_answer(analysis_content(nsfw=nsfw)))
    with pytest.raises(VisionError, match=problem):
        make_client().analyze(page, deadline=soon())


@pytest.mark.parametrize(
    "body",
    [{"object": "chat.completion"}, {"choices": []}, {"choices": [{"index": 0}]}, [1, 2], "hi"],
    ids=["no-choices", "empty-choices", "no-message", "list", "not-json"],
)
def test_answer_that_is_not_a_chat_completion_is_rejected(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage, body: Any
) -> None:
    vision_server.script(Reply(body=body))
    with pytest.raises(VisionError, match="not an OpenAI chat completion"):
        make_client().analyze(page, deadline=soon())


@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_transient_status_is_retried(
    vision_server: ScriptedVisionServer,
    make_client: MakeClient,
    page: PreparedImage,
    status: int,
) -> None:
    vision_server.script(error_reply(status, "busy"))
    result = make_client().analyze(page, deadline=soon())
    assert result.analysis.ocr_text == "こんにちは"
    assert result.attempts == 2
    assert len(vision_server.requests) == 2


def test_bad_request_fails_at_once_with_the_servers_message(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    # The default reply after it would succeed: a retry would hide the failure.
    vision_server.script(error_reply(400, "image input is not supported"))
    with pytest.raises(VisionRejected, match="400: image input is not supported") as caught:
        make_client().analyze(page, deadline=soon())
    assert caught.value.status_code == 400
    assert len(vision_server.requests) == 1


@pytest.mark.parametrize(
    ("reply", "error", "said"),
    [
        (error_reply(401, "invalid api key"), VisionRefused, "refused our credentials (401: "),
        (error_reply(403, "forbidden"), VisionRefused, "refused our credentials (403: "),
        (
            error_reply(404, "model 'qwen-vl' not found"),
            VisionModelMissing,
            "has no model 'qwen-vl'",
        ),
        (error_reply(404, "no such route"), VisionModelMissing, "has no chat route there"),
    ],
    ids=["401", "403", "404-model", "404-route"],
)
def test_refusals_that_are_the_workers_configuration_are_not_the_jobs_fault(
    vision_server: ScriptedVisionServer,
    make_client: MakeClient,
    page: PreparedImage,
    reply: Reply,
    error: type[VisionRejected],
    said: str,
) -> None:
    vision_server.script(reply)
    with pytest.raises(error) as caught:
        make_client().analyze(page, deadline=soon())
    assert str(caught.value).startswith(f"model server at {vision_server.url} ")
    assert said in str(caught.value)
    assert caught.value.job_at_fault is False
    assert len(vision_server.requests) == 1  # not retried


def test_check_model_asks_the_listing_first_then_one_tiny_request(
    vision_server: ScriptedVisionServer, make_client: MakeClient
) -> None:
    vision_server.models = ["qwen-vl"]
    assert make_client().check_model() is None
    assert vision_server.requests == []  # listed: nothing sent to the model
    vision_server.models = ["something-else"]  # llama-server lists its own name, serves any
    assert make_client().check_model() is None
    assert vision_server.requests[-1]["max_tokens"] == 1
    assert vision_server.requests[-1]["model"] == "qwen-vl"
    vision_server.default = error_reply(404, "model 'qwen-vl' not found")
    assert make_client().check_model() == (
        f"model server at {vision_server.url} has no model 'qwen-vl' "
        "(404: model 'qwen-vl' not found); check VISION_MODEL and VISION_URL"
    )
    vision_server.default = error_reply(503, "Loading model")
    assert make_client().check_model() is None  # loading is not configuration


@pytest.mark.parametrize(
    "body, expected",
    [
        ({"error": {"code": 503, "message": "Loading model"}}, "503: Loading model"),
        ({"error": "model not loaded"}, "503: model not loaded"),
        ({"detail": "upstream gone"}, "503: upstream gone"),
        ({"detail": [{"msg": "bad"}]}, '503: [{"msg": "bad"}]'),
        ("Service Unavailable\n", "503: Service Unavailable"),
        (b"", "503: Service Unavailable"),
    ],
    ids=["openai-object", "string", "detail", "detail-list", "plain-text", "empty"],
)
def test_exhausted_retries_name_the_last_status_and_message(
    vision_server: ScriptedVisionServer,
    make_client: MakeClient,
    page: PreparedImage,
    body: Any,
    expected: str,
) -> None:
    vision_server.default = Reply(status=503, body=body)
    with pytest.raises(VisionUnavailable) as caught:
        make_client(retry=replace(FAST_RETRY, max_attempts=3)).analyze(page, deadline=soon())
    message = str(caught.value)
    assert expected in message
    assert "after 3 attempt(s)" in message
    assert caught.value.status_code == 503
    assert len(vision_server.requests) == 3


def test_long_error_body_is_truncated(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    vision_server.script(Reply(status=404, body="x" * 5000))
    with pytest.raises(VisionRejected) as caught:
        make_client().analyze(page, deadline=soon())
    assert "x" * 300 in str(caught.value)
    assert "x" * 301 not in str(caught.value)


def test_retries_are_logged_with_attempt_cause_and_delay(
    vision_server: ScriptedVisionServer,
    make_client: MakeClient,
    page: PreparedImage,
    caplog: pytest.LogCaptureFixture,
) -> None:
    vision_server.script(error_reply(502, "bad gateway"))
    with caplog.at_level(
        logging.WARNING, logger="manga_page_analysis.analysis.model_server.client"
    ):
        make_client().analyze(page, deadline=soon(), job_label="job 42 page 7")
    [record] = [
        r for r in caplog.records if r.name == "manga_page_analysis.analysis.model_server.client"
    ]
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "job 42 page 7" in message
    assert "attempt 1 of 5" in message
    assert "502: bad gateway" in message
    assert "retrying in 0.0 s" in message


def test_deadline_while_waiting_for_the_answer_is_a_dispatch_timeout(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    never = threading.Event()  # the model never answers; the server drops it on stop
    vision_server.default = Reply(body=ok_answer(analysis_content()).body, block=never)
    deadline = time.monotonic() + 1.0
    with pytest.raises(DispatchTimeout, match="timed out"):
        make_client(read_timeout=300.0).analyze(page, deadline=deadline)
    gave_up_at = time.monotonic()
    # Not before the deadline; and the deadline, not the 300 s read timeout, ended the
    # wait (the bound is loose: only a stalled machine comes near it).
    assert gave_up_at >= deadline - 0.01
    assert gave_up_at < deadline + 30, f"gave up {gave_up_at - deadline:.1f} s after the deadline"
    assert len(vision_server.requests) == 1


def test_read_timeout_shorter_than_the_deadline_is_retried(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    vision_server.script(Reply(body=ok_answer(analysis_content()).body, delay=30.0))
    result = make_client(read_timeout=0.3).analyze(page, deadline=soon())
    assert result.attempts == 2
    assert len(vision_server.requests) == 2


def test_deadline_already_past_sends_nothing(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    with pytest.raises(DispatchTimeout):
        make_client().analyze(page, deadline=time.monotonic() - 1)
    assert vision_server.requests == []


def test_refused_connection_is_retried_until_the_deadline(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    vision_server.stop()
    client = make_client(
        retry=RetryPolicy(max_attempts=10_000, initial_seconds=0.02, max_seconds=0.05)
    )
    started = time.monotonic()
    deadline = started + 0.6
    with pytest.raises(VisionUnavailable, match="no time left before the deadline") as caught:
        client.analyze(page, deadline=deadline)
    finished = time.monotonic()
    assert f"cannot reach {vision_server.url}/v1/chat/completions: connection refused" in str(
        caught.value
    )
    assert "HTTPConnectionPool" not in str(caught.value) and "Errno" not in str(caught.value)
    assert caught.value.status_code is None
    # Retried several times, and gave up without sleeping past the deadline.
    attempts = int(str(caught.value).split("after ")[1].split(" attempt")[0])
    assert attempts >= 5
    assert finished <= deadline + 0.1


def test_cancel_during_backoff_stops_at_once(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    vision_server.default = error_reply(503, "Loading model")
    client = make_client(retry=RetryPolicy(initial_seconds=30.0, max_seconds=30.0))
    cancel = threading.Event()
    sleeping = threading.Event()

    class SleepWatcher(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "retrying in" in record.getMessage():
                sleeping.set()

    watcher = SleepWatcher()
    logger = logging.getLogger("manga_page_analysis.analysis.model_server.client")
    logger.addHandler(watcher)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            client.analyze(page, deadline=soon(60), cancel=cancel)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    try:
        worker.start()
        assert sleeping.wait(10), "the client never started its backoff"
        cancelled_at = time.monotonic()
        cancel.set()
        worker.join(10)
    finally:
        logger.removeHandler(watcher)
    assert not worker.is_alive()
    assert time.monotonic() - cancelled_at < 2.0  # not the 30 s backoff
    assert len(outcome) == 1 and isinstance(outcome[0], VisionCancelled)
    assert len(vision_server.requests) == 1


def test_cancel_set_before_the_call_sends_nothing(
    vision_server: ScriptedVisionServer, make_client: MakeClient, page: PreparedImage
) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(VisionCancelled):
        make_client().analyze(page, deadline=soon(), cancel=cancel)
    assert vision_server.requests == []


@pytest.mark.parametrize("status, ready", [(200, True), (204, True), (503, False), (500, False)])
def test_is_ready_follows_the_health_status(
    vision_server: ScriptedVisionServer, make_client: MakeClient, status: int, ready: bool
) -> None:
    vision_server.health_status = status
    assert make_client().readiness().ready is ready
    assert vision_server.health_hits == 1


def test_is_ready_is_false_when_nothing_listens(
    vision_server: ScriptedVisionServer, make_client: MakeClient
) -> None:
    client = make_client()
    vision_server.stop()
    assert client.readiness().ready is False


def test_is_ready_uses_the_configured_health_url(
    vision_server: ScriptedVisionServer, make_client: MakeClient
) -> None:
    client = make_client(base_url="http://127.0.0.1:9", health_url=vision_server.health_url)
    assert client.readiness().ready is True
    assert vision_server.health_hits == 1


def test_each_thread_gets_its_own_session_and_close_closes_them_all(
    vision_server: ScriptedVisionServer,
) -> None:
    made: list[TrackedSession] = []

    class TrackedSession(requests.Session):
        closed = False

        def close(self) -> None:
            self.closed = True
            super().close()

    def factory() -> TrackedSession:
        made.append(TrackedSession())
        return made[-1]

    with VisionClient(base_url=vision_server.url, model="m", session_factory=factory) as client:
        assert client.readiness().ready and client.readiness().ready
        other = threading.Thread(target=client.readiness)
        other.start()
        other.join(10)
        assert len(made) == 2  # one per thread, reused by the thread's second probe
        assert not any(session.closed for session in made)
        # The next new session closes that of the thread that has ended.
        third = threading.Thread(target=client.readiness)
        third.start()
        third.join(10)
        assert len(made) == 3
        assert [session.closed for session in made] == [False, True, False]
    assert all(session.closed for session in made)
