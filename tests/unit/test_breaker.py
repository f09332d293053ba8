"""The worker's breaker: when it opens, when it lets a kind be leased again, and when a
failure that is not the job's fault is charged all the same."""

from __future__ import annotations

import uuid

import pytest

from manga_page_analysis.worker.gates.breaker import Breaker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _breaker(clock: Clock, changes: list[tuple[str, bool, str]], failures: int = 3) -> Breaker:
    return Breaker(
        failures=failures,
        pause=60.0,
        clock=clock,
        on_change=lambda kind, is_open, reason: changes.append((kind, is_open, reason)),
    )


def test_it_opens_after_n_failures_of_one_class_and_only_for_that_kind(clock: Clock) -> None:
    changes: list[tuple[str, bool, str]] = []
    breaker = _breaker(clock, changes)
    assert breaker.failed("a", "VisionModelMissing", "no model 'x'") is False
    assert breaker.failed("a", "VisionModelMissing", "no model 'x'") is False
    assert breaker.failed("b", "VisionModelMissing", "no model 'x'") is False  # another kind
    assert breaker.failed("a", "VisionModelMissing", "no model 'x'") is True
    assert breaker.allows("a") is False and breaker.allows("b") is True
    assert breaker.leasable(["a", "b"]) == ["b"]
    ((kind, is_open, reason),) = changes
    assert (kind, is_open) == ("a", True)
    assert reason == (
        "the last 3 a jobs failed with VisionModelMissing and none succeeded; "
        "last error: no model 'x'"
    )
    assert breaker.open_reason("a") == reason
    assert breaker.seconds_to_retry() == 60.0


def test_different_errors_or_a_success_in_between_keep_it_closed(clock: Clock) -> None:
    changes: list[tuple[str, bool, str]] = []
    breaker = _breaker(clock, changes)
    for error in ("ImageError", "VisionProtocolError", "ImageError", "VisionProtocolError"):
        breaker.failed("a", error, "")
    breaker.failed("a", "ImageError", "")
    breaker.failed("a", "ImageError", "")
    breaker.succeeded("a", uuid.uuid4())
    breaker.failed("a", "ImageError", "")
    assert breaker.allows("a") and changes == []


def test_after_the_pause_one_more_failure_reopens_it_and_a_success_closes_it(
    clock: Clock,
) -> None:
    changes: list[tuple[str, bool, str]] = []
    breaker = _breaker(clock, changes)
    for _ in range(3):
        breaker.failed("a", "StorageUnavailable", "503")
    assert breaker.failed("a", "StorageUnavailable", "503") is False  # a job still running
    clock.now += 60.0
    assert breaker.allows("a") is True and breaker.seconds_to_retry() is None  # half-open
    assert breaker.failed("a", "StorageUnavailable", "503") is True
    assert breaker.allows("a") is False
    clock.now += 60.0
    breaker.succeeded("a", uuid.uuid4())
    assert breaker.allows("a") is True
    assert [(kind, is_open) for kind, is_open, _ in changes] == [
        ("a", True),
        ("a", True),
        ("a", False),
    ]
    assert breaker.open_reason("a") == ""


def test_zero_failures_never_opens(clock: Clock) -> None:
    breaker = Breaker(failures=0, pause=1.0, clock=clock)
    for _ in range(100):
        assert breaker.failed("a", "X", "") is False
    assert breaker.allows("a")


def test_a_refunded_job_is_charged_when_it_fails_again_while_others_succeed(
    clock: Clock,
) -> None:
    breaker = _breaker(clock, [])
    sick, other = uuid.uuid4(), uuid.uuid4()
    assert breaker.charges("a", sick) is False  # never refunded
    breaker.refunded("a", sick)
    assert breaker.charges("a", sick) is False  # nothing succeeded since: still the store's
    breaker.succeeded("b", other)
    assert breaker.charges("a", sick) is False  # another kind's success says nothing
    breaker.succeeded("a", other)
    assert breaker.charges("a", sick) is True
    breaker.succeeded("a", sick)  # it worked in the end: forgotten
    assert breaker.charges("a", sick) is False
