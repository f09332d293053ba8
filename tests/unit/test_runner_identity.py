"""A runner's id: `host:pid:name:random`, bounded, unique per runner."""

from __future__ import annotations

import os
import socket

from manga_page_analysis.worker.identity import RUNNER_ID_MAX_CHARS, new_runner_id


def test_the_id_names_host_process_and_runner_with_a_random_suffix() -> None:
    first, second = new_runner_id("crawl"), new_runner_id("crawl")
    assert first.rsplit(":", 1)[0] == f"{socket.gethostname()}:{os.getpid()}:crawl"
    assert first != second  # the suffix tells two runners of one process apart
    assert len(first.rsplit(":", 1)[1]) == 8


def test_a_long_name_is_cut_but_the_suffix_stays() -> None:
    runner_id = new_runner_id("n" * 1000)
    assert len(runner_id) == RUNNER_ID_MAX_CHARS
    where, suffix = runner_id.rsplit(":", 1)
    assert len(suffix) == 8 and where.endswith("n")
    assert new_runner_id("n" * 1000) != runner_id
