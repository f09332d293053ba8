"""Hostile input the worker meets: a page too large to decode, a storage key
naming a FIFO or a folder, a payload's `"force": "yes"`. Each is a dead job at
once (no retry could fix it), with an error that says why; the worker stays up."""

from __future__ import annotations

import os
import struct
import zlib

from tests.helpers import insert_raw_job


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares `width` x `height` RGBA but carries almost no pixel data:
    a small file can declare a huge image."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


def test_a_page_over_max_image_pixels_is_a_dead_job_naming_its_size_and_the_setting(
    harness, vision_server
):
    page_id = harness.add_page(png_header_only(9400, 9400))
    job_id = harness.request(page_id)
    with harness.running():
        harness.events.wait_for("failed", page_id)
    job = harness.job(job_id)
    assert job.state == "dead" and job.attempts == 1
    assert "9400x9400 is 88360000 pixels" in job.last_error
    assert "MAX_IMAGE_PIXELS (40000000)" in job.last_error
    assert vision_server.requests == []


def test_max_image_pixels_is_read_from_the_settings(harness, vision_server):
    page_id = harness.add_page(png_header_only(300, 200))
    job_id = harness.request(page_id)
    with harness.running(max_image_pixels=59_999):
        harness.events.wait_for("failed", page_id)
    assert "MAX_IMAGE_PIXELS (59999)" in harness.job(job_id).last_error


def test_a_key_naming_a_fifo_or_a_folder_is_a_dead_job_at_once(harness, vision_server):
    os.mkfifo(harness.storage_root / "pipe.png")
    (harness.storage_root / "folder.png").mkdir()
    pages = [harness.add_page(key="pipe.png"), harness.add_page(key="folder.png")]
    jobs = [harness.request(page_id) for page_id in pages]
    with harness.running():
        for page_id in pages:
            harness.events.wait_for("failed", page_id)
    fifo, folder = (harness.job(job_id) for job_id in jobs)
    assert (fifo.state, fifo.attempts) == ("dead", 1) and "special file" in fifo.last_error
    assert (folder.state, folder.attempts) == ("dead", 1) and "directory" in folder.last_error
    assert vision_server.requests == []


def test_a_payloads_force_must_be_a_real_boolean(harness, vision_server):
    page_id = harness.add_page(key="never-read.png")
    with harness.engine.begin() as conn:
        job_id = insert_raw_job(
            conn, {"kind": "analyze_page", "page_id": str(page_id), "force": "yes"}
        )
        good = harness.add_page(key="missing.png")
    with harness.running():
        harness.request(good)
        harness.events.wait_for("failed", good)  # the queue went on past the bad row
    job = harness.job(job_id)
    assert job.state == "dead" and "force" in job.last_error
    # Its page was found from what could be read of the payload, and its end
    # recorded there as any failure would be (the one writer of ends).
    analysis = harness.analysis(page_id)
    assert analysis.status == "failed" and "force" in analysis.error
