"""The analyzers' shared result: what it stores, and the retry policy's guard."""

from __future__ import annotations

import dataclasses

import pytest

from app.analysis.analyzer import VisionResult
from app.analysis.answer import Analysis
from app.analysis.http_retry import RetryPolicy
from app.repos.page_analysis import AnalysisRecord


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
    )
    # Every stored field comes from the result: none is left at a default.
    assert {field.name for field in dataclasses.fields(AnalysisRecord)} <= {
        "model",
        *(field.name for field in dataclasses.fields(Analysis)),
    }


def test_nothing_judged_stays_nothing_judged() -> None:
    analysis = Analysis("text", (), "", None, None)
    record = VisionResult(analysis, model="ocr").record()
    assert (record.nsfw_rating, record.nsfw_score, record.tags) == (None, None, ())


def test_a_policy_needs_one_attempt_at_least() -> None:
    with pytest.raises(ValueError, match="max_attempts must be >= 1"):
        RetryPolicy(max_attempts=0)
