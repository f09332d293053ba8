"""The analyzers' shared result: what it stores; the retry policy's edges."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from manga_page_analysis.analysis.analyzer.answer import Analysis
from manga_page_analysis.analysis.analyzer.protocol import VisionResult
from manga_page_analysis.analysis.model_server.retry_policy import RetryingCall, RetryPolicy
from manga_page_analysis.errors import VisionUnavailable
from manga_page_analysis.repos.page_analysis import AnalysisRecord


def test_a_result_becomes_the_record_save_done_stores() -> None:
    analysis = Analysis("台詞", ("rain", "street"), "It rains.", "suggestive", 0.4)
    record = VisionResult(analysis, model="served-model", attempts=3).record()
    assert record == AnalysisRecord(
        model="served-model",
        ocr_text="台詞",
        tags=("rain", "street"),
        description="It rains.",
        nsfw_rating="suggestive",
        nsfw_score=0.4,
        ocr_blocks=None,
    )
    # Every stored field comes from the result: none is left at a default.
    assert {field.name for field in dataclasses.fields(AnalysisRecord)} <= {
        "model",
        *(field.name for field in dataclasses.fields(Analysis)),
    }


def test_nothing_judged_stays_nothing_judged_and_blocks_go_through() -> None:
    blocks = [{"text": "text", "box": [1, 2, 3, 4], "vertical": False, "score": 0.9}]
    analysis = Analysis("text", (), "", None, None, ocr_blocks=blocks)
    record = VisionResult(analysis, model="ocr").record()
    assert (record.nsfw_rating, record.nsfw_score, record.tags) == (None, None, ())
    assert record.ocr_blocks == blocks


def test_a_policy_needs_one_attempt_at_least() -> None:
    with pytest.raises(ValueError, match="max_attempts must be >= 1"):
        RetryPolicy(max_attempts=0)


class OversleepingEvent(threading.Event):
    """A cancel event whose timed waits overrun by far, as on a machine that is busy."""

    def wait(self, timeout: float | None = None) -> bool:
        time.sleep((timeout or 0.0) + 1.5)
        return False


def test_a_backoff_that_overruns_the_deadline_gives_up_naming_the_last_failure() -> None:
    def attempt() -> None:
        raise VisionUnavailable("vision server answered 503: Loading model", status_code=503)

    call = RetryingCall(
        attempt,
        RetryPolicy(max_attempts=10, initial_seconds=0.01, max_seconds=0.01, jitter=0.0),
        deadline=time.monotonic() + 1.0,
        cancel=OversleepingEvent(),
        label=" for job 7",
    )
    with pytest.raises(VisionUnavailable) as caught:
        call.run()
    assert str(caught.value) == (
        "vision request for job 7 failed after 1 attempt(s), no time left before the "
        "deadline; last error: vision server answered 503: Loading model"
    )
    assert caught.value.status_code == 503 and call.attempts == 1
