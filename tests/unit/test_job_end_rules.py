"""The rules that choose a job's end, each written once in `queue/ends.py`."""

from __future__ import annotations

import uuid

from manga_page_analysis.queue import CRASH_LOOP_ERROR, RECLAIM_LIMIT, Lease, SyncManga
from manga_page_analysis.queue.ends import (
    FINAL_ATTEMPT_EXPIRED,
    RECLAIMED,
    Outcome,
    after_expiry,
    after_failure,
)


def _lease(attempts: int, max_attempts: int = 3) -> Lease:
    payload = SyncManga(source_id="s", source_manga_key="k")
    return Lease(uuid.uuid4(), payload, attempts, max_attempts, 1)


def test_a_failure_retries_until_the_last_attempt_or_a_permanent_error():
    retry = after_failure(_lease(1), "502")
    assert (retry.outcome, retry.reason) == (Outcome.RETRY, "502")
    assert retry.delay is not None and retry.delay.total_seconds() > 0
    assert after_failure(_lease(3), "502").outcome is Outcome.DEAD
    assert after_failure(_lease(1), "bad image", permanent=True).outcome is Outcome.DEAD


def test_an_expired_lease_found_by_a_reclaim_is_released_below_the_crash_loop_limit():
    end = after_expiry(_lease(3), RECLAIM_LIMIT - 1, refund=True)
    assert end is not None and (end.outcome, end.reason) == (Outcome.RELEASE, RECLAIMED)


def test_an_expired_lease_found_by_a_lease_runs_again_unless_it_was_the_last_attempt():
    # The lease has already counted the new attempt: 2 of 3 runs, 4 of 3 does not.
    assert after_expiry(_lease(2), 1, refund=False) is None
    end = after_expiry(_lease(4), 1, refund=False)
    assert end is not None and (end.outcome, end.reason) == (Outcome.DEAD, FINAL_ATTEMPT_EXPIRED)


def test_the_crash_loop_limit_is_the_same_whoever_finds_the_lease():
    for refund in (True, False):
        end = after_expiry(_lease(2), RECLAIM_LIMIT, refund=refund)
        assert end is not None and (end.outcome, end.reason) == (Outcome.DEAD, CRASH_LOOP_ERROR)
