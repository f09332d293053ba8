"""The runner's prefetch is bounded by payload bytes as well as by count: a host
kind whose payloads carry megabytes a crawler controls is not leased by hundreds."""

from __future__ import annotations

from manga_page_analysis.worker.lease_loop import PREFETCH_MAX, PREFETCH_MAX_BYTES, prefetch_slots


def test_adaptive_prefetch_of_small_payloads_is_bounded_by_count():
    # Jobs 1000 times faster than a lease round trip: the count bound decides.
    slots = prefetch_slots(
        8, prefetch=None, job_seconds=0.00001, round_seconds=0.01, payload_bytes=200
    )
    assert slots == 8 + PREFETCH_MAX


def test_adaptive_prefetch_of_two_megabyte_payloads_is_bounded_by_bytes():
    slots = prefetch_slots(
        8, prefetch=None, job_seconds=0.00001, round_seconds=0.01, payload_bytes=2_000_000
    )
    assert slots - 8 == PREFETCH_MAX_BYTES // 2_000_000 < 20
    assert (slots - 8) * 2_000_000 <= PREFETCH_MAX_BYTES


def test_a_set_prefetch_is_bounded_by_bytes_too_and_never_the_pool():
    assert (
        prefetch_slots(4, prefetch=100, job_seconds=None, round_seconds=0, payload_bytes=0) == 104
    )
    huge = prefetch_slots(
        4, prefetch=100, job_seconds=None, round_seconds=0, payload_bytes=PREFETCH_MAX_BYTES * 2
    )
    assert huge == 4  # no prefetch at all, but every pool thread still gets a job


def test_nothing_measured_yet_means_no_adaptive_prefetch():
    assert prefetch_slots(3, prefetch=None, job_seconds=None, round_seconds=1, payload_bytes=0) == 3
