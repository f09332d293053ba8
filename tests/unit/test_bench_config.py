"""`make bench PEERS=...`: which peers a run measures beside this project."""

from __future__ import annotations

import pytest

from bench.config import KNOWN_PEERS, BenchConfig


@pytest.mark.parametrize(
    ("value", "peers"),
    [
        ("", ()),
        ("0", ()),
        ("1", KNOWN_PEERS),
        ("pgqueuer", ("pgqueuer",)),
        ("procrastinate, pgqueuer", ("procrastinate", "pgqueuer")),
    ],
)
def test_peers_are_all_none_or_those_named(monkeypatch, value, peers):
    monkeypatch.setenv("BENCH_PEERS", value)
    assert BenchConfig().peers == peers


def test_an_unknown_peer_is_refused_with_the_known_ones(monkeypatch):
    monkeypatch.setenv("BENCH_PEERS", "pgqueuer,celery")
    with pytest.raises(ValueError, match="celery"):
        BenchConfig()
