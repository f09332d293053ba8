"""Job fields on log records: nested blocks, dropped `None`s, and fields read
only when a record is logged (the runner enters two blocks per job)."""

from __future__ import annotations

import logging
import threading

from manga_page_analysis.worker.reports.logcontext import (
    JobFieldsFilter,
    current_fields,
    job_log_context,
)


def _record() -> logging.LogRecord:
    return logging.LogRecord("t", logging.INFO, __file__, 1, "message", None, None)


def test_nested_blocks_add_and_override_fields_drop_none_and_end_with_their_block():
    outer = {"job_id": "j1", "kind": "sync_manga", "attempt": 1}
    assert current_fields() == {}
    with job_log_context(outer):
        with job_log_context(page_id="p1", attempt=2, chapter_id=None):
            assert current_fields() == {
                "job_id": "j1",
                "kind": "sync_manga",
                "attempt": 2,
                "page_id": "p1",
            }
        assert current_fields() == outer
    assert current_fields() == {}


def test_a_mapping_is_read_when_a_record_is_logged_not_when_the_block_starts():
    fields = {"job_id": "j1"}
    with job_log_context(fields):
        fields["page_id"] = "p9"
        record = _record()
        assert JobFieldsFilter().filter(record)
    assert (record.job_id, record.page_id) == ("j1", "p9")  # type: ignore[attr-defined]


def test_a_record_keeps_its_own_attribute_and_another_thread_sees_no_fields():
    seen: list[object] = []
    with job_log_context(job_id="j1", msg="not this"):
        record = _record()
        JobFieldsFilter().filter(record)
        thread = threading.Thread(target=lambda: seen.append(current_fields()))
        thread.start()
        thread.join()
    assert record.msg == "message" and record.job_id == "j1"  # type: ignore[attr-defined]
    assert seen == [{}]
