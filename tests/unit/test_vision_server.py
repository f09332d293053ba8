"""The scripted vision server itself: other tests rely on its scripting and shutdown."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from testbed.vision_server import Reply, ScriptedVisionServer, error_reply, ok_answer

CHAT = "/v1/chat/completions"


def post(server: ScriptedVisionServer, body: object, timeout: float = 5.0) -> requests.Response:
    return requests.post(f"{server.url}{CHAT}", json=body, timeout=timeout)


def test_replies_are_consumed_in_order_then_the_default(
    vision_server: ScriptedVisionServer,
) -> None:
    vision_server.script(error_reply(503, "loading"), Reply(status=418, body="teapot"))
    assert post(vision_server, {"n": 1}).status_code == 503
    teapot = post(vision_server, {"n": 2})
    assert (teapot.status_code, teapot.text) == (418, "teapot")
    default = post(vision_server, {"n": 3})
    assert default.status_code == 200
    assert default.json()["choices"][0]["message"]["content"].startswith("{")
    assert vision_server.requests == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert vision_server.request_headers[0]["content-type"] == "application/json"


def test_other_paths_are_404_and_not_recorded(vision_server: ScriptedVisionServer) -> None:
    assert (
        requests.post(f"{vision_server.url}/v1/completions", json={}, timeout=5).status_code == 404
    )
    assert vision_server.requests == []


def test_health_status_and_hits(vision_server: ScriptedVisionServer) -> None:
    assert requests.get(vision_server.health_url, timeout=5).status_code == 200
    vision_server.health_status = 503
    assert requests.get(vision_server.health_url, timeout=5).status_code == 503
    assert vision_server.health_hits == 2


def test_blocked_request_is_recorded_on_arrival_and_answered_on_release(
    vision_server: ScriptedVisionServer,
) -> None:
    release = threading.Event()
    vision_server.script(Reply(body=ok_answer("held").body, block=release))
    answers: list[requests.Response] = []
    client = threading.Thread(target=lambda: answers.append(post(vision_server, {"held": True})))
    client.start()
    vision_server.wait_for_requests(1)
    assert vision_server.requests == [{"held": True}]
    assert answers == []  # still held
    release.set()
    client.join(5)
    assert answers[0].json()["choices"][0]["message"]["content"] == "held"


def test_wait_for_requests_times_out_with_an_assertion(
    vision_server: ScriptedVisionServer,
) -> None:
    with pytest.raises(AssertionError, match="expected 1 chat request"):
        vision_server.wait_for_requests(1, timeout=0.05)


def test_stop_releases_held_requests_without_answering() -> None:
    server = ScriptedVisionServer().start()
    server.script(Reply(block=threading.Event()), Reply(delay=60))
    failures: list[BaseException] = []

    def call() -> None:
        try:
            post(server, {})
        except requests.RequestException as exc:
            failures.append(exc)

    clients = [threading.Thread(target=call) for _ in range(2)]
    for client in clients:
        client.start()
    server.wait_for_requests(2)
    started = time.monotonic()
    server.stop()
    for client in clients:
        client.join(5)
    assert time.monotonic() - started < 2.0
    assert len(failures) == 2  # dropped, not answered
    with pytest.raises(requests.ConnectionError):
        requests.get(server.health_url, timeout=2)


def test_client_that_gives_up_does_not_break_the_server(
    vision_server: ScriptedVisionServer, capfd: pytest.CaptureFixture[str]
) -> None:
    release = threading.Event()
    vision_server.script(Reply(body="x" * 1_000_000, block=release))
    with pytest.raises(requests.Timeout):
        post(vision_server, {}, timeout=0.2)
    release.set()  # the handler now writes to a socket nobody reads
    vision_server.wait_idle()
    assert post(vision_server, {}).status_code == 200
    assert "Traceback" not in capfd.readouterr().err
