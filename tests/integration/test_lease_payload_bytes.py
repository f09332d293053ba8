"""A lease says how large its payload's stored text is: the runner bounds its
prefetch by it (`worker.lease_loop.prefetch_slots`)."""

from __future__ import annotations

from datetime import timedelta

from manga_page_analysis.queue import SyncManga, enqueue, lease_kinds


def test_a_lease_carries_the_size_of_its_payload(engine):
    with engine.begin() as conn:
        enqueue(conn, SyncManga(source_id="s", source_manga_key="big", title="x" * 100_000))
    with engine.begin() as conn:
        (leased,) = lease_kinds(conn, ["sync_manga"], 10, timedelta(minutes=1))
    assert 100_000 < leased.payload_bytes < 100_200
