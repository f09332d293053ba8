"""Pure logic: backoff arithmetic and the payload wire format."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from manga_page_analysis.errors import PayloadError
from manga_page_analysis.queue import (
    AnalyzePage,
    SyncChapterContent,
    SyncChapterList,
    SyncManga,
    apply_jitter,
    backoff_base,
    decode_payload,
)
from manga_page_analysis.queue.backoff import backoff_for


@pytest.mark.parametrize(
    ("attempts", "seconds"),
    [
        (-3, 60),
        (0, 60),
        (1, 60),
        (2, 120),
        (3, 240),
        (6, 1920),
        (7, 3600),
        (21, 3600),
        (10**9, 3600),
    ],
)
def test_backoff_base_doubles_from_a_minute_and_caps_at_an_hour(attempts, seconds):
    assert backoff_base(attempts) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("jitter", "seconds"),
    [(0.0, 48), (0.5, 60), (1.0, 72), (-5.0, 48), (7.0, 72), (0.25, 54)],
)
def test_apply_jitter_scales_within_plus_minus_twenty_percent(jitter, seconds):
    assert apply_jitter(timedelta(seconds=60), jitter) == timedelta(seconds=seconds)


def test_apply_jitter_rounds_to_whole_seconds():
    assert apply_jitter(timedelta(seconds=61), 0.3) == timedelta(seconds=56)  # 61 × 0.92 = 56.12
    assert apply_jitter(timedelta(seconds=61), 0.9) == timedelta(seconds=71)  # 61 × 1.16 = 70.76


def test_backoff_for_draws_the_jitter():
    assert backoff_for(2, draw=lambda: 0.0) == timedelta(seconds=96)
    assert backoff_for(2, draw=lambda: 1.0) == timedelta(seconds=144)


def test_payloads_produce_exactly_the_documented_json():
    manga_id, chapter_id, page_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    assert SyncManga(source_id="s", source_manga_key="k").to_json() == {
        "kind": "sync_manga",
        "source_id": "s",
        "source_manga_key": "k",
        "url": "",
        "title": "",
    }
    assert SyncChapterList(source_id="s", manga_id=manga_id, source_manga_key="k").to_json() == {
        "kind": "sync_chapter_list",
        "source_id": "s",
        "manga_id": str(manga_id),
        "source_manga_key": "k",
    }
    assert SyncChapterContent(
        source_id="s", chapter_id=chapter_id, source_chapter_key="k"
    ).to_json() == {
        "kind": "sync_chapter_content",
        "source_id": "s",
        "chapter_id": str(chapter_id),
        "source_chapter_key": "k",
    }
    assert AnalyzePage(page_id=page_id).to_json() == {
        "kind": "analyze_page",
        "page_id": str(page_id),
        "force": False,
    }


def test_rows_of_the_previous_service_decode_with_defaults_and_extra_keys_ignored():
    page_id = uuid.uuid4()
    decoded = decode_payload({"kind": "analyze_page", "page_id": str(page_id), "priority": 3})
    assert decoded == AnalyzePage(page_id=page_id, force=False)
    manga = decode_payload('{"kind": "sync_manga", "source_id": "s", "source_manga_key": "k"}')
    assert manga == SyncManga(source_id="s", source_manga_key="k", url="", title="")


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ({"kind": "launch_rockets"}, "kind"),
        ({"page_id": str(uuid.uuid4())}, "kind"),
        ({"kind": "analyze_page", "page_id": "not-a-uuid"}, "page_id"),
        ({"kind": "sync_chapter_content", "source_id": "s"}, "chapter_id"),
        ("{not json", "invalid job payload"),
        ([1, 2, 3], "invalid job payload"),
    ],
)
def test_bad_payloads_raise_payload_error_saying_what_is_wrong(payload, fragment):
    with pytest.raises(PayloadError, match="invalid job payload") as info:
        decode_payload(payload)
    assert fragment in str(info.value)
