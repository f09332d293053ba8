"""`make bench` at toy sizes, so the benchmark cannot rot unnoticed.

Runs `python -m bench` as `make bench` does, against this session's Postgres
(`BENCH_DATABASE_URL`), and checks that bench/results.json has every section
with numbers in it. The figures themselves are not asserted (timing targets
are measured, not tested); only that each measurement ran and counted jobs.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import manga_page_analysis.queue

ROOT = Path(__file__).resolve().parents[2]
TOY_SIZES = {
    "BENCH_ENQUEUE_JOBS": "200",
    "BENCH_JOBS_PER_TXN": "50",
    "BENCH_DRAIN_JOBS": "60",
    "BENCH_THREADS": "1,4",
    "BENCH_PROCESSES": "2",
    "BENCH_PICKUP_JOBS": "5",
    "BENCH_PAGES": "8",
    "BENCH_BACKLOG": "1000",
    "BENCH_LEASE_CALLS": "20",
    "BENCH_BUDGET_SECONDS": "30",
    "BENCH_ROUNDS": "1",
}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not math.isnan(value)


def _run_bench(database_url: str, results: Path, **extra: str) -> dict[str, Any]:
    env = {
        **os.environ,
        **TOY_SIZES,
        "BENCH_DATABASE_URL": database_url,
        "BENCH_RESULTS": str(results),
        **extra,
    }
    completed = subprocess.run(
        [sys.executable, "-m", "bench"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "no-op throughput, best, jobs/s" in completed.stdout
    data: dict[str, Any] = json.loads(results.read_text())
    return data


def _check_system(data: dict[str, Any], system: str) -> None:
    (enqueued,) = data["enqueue"][system]
    assert enqueued["single"]["jobs"] == 200 and _is_number(enqueued["single"]["jobs_per_s"])
    if system != "ours" or hasattr(manga_page_analysis.queue, "enqueue_many"):
        assert enqueued["many"]["jobs"] == 200 and _is_number(enqueued["many"]["jobs_per_s"])
    else:
        assert enqueued["many"] is None  # reported as n/a until enqueue_many exists
    for runs in data["throughput"][system].values():
        (drained,) = runs
        assert drained["jobs"] == 60 and not drained["capped"]
        assert _is_number(drained["jobs_per_s"]) and drained["rss_mb"] > 0
        if system == "ours":
            assert drained["ack_batches"] >= 1 and 1 <= drained["acks_per_batch"] <= 60
    (picked,) = data["pickup"][system]
    assert picked["jobs"] == 5 and picked["missed"] == 0
    # Timed from the COMMIT sent: never negative (from the COMMIT returned it can be).
    assert 0 < picked["p50_ms"] <= picked["p95_ms"] <= picked["p99_ms"]
    assert _is_number(picked["after_commit_p50_ms"])
    assert picked["after_commit_p50_ms"] < picked["p50_ms"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bench_writes_every_section_with_numbers(database_url: str, tmp_path: Path) -> None:
    data = _run_bench(database_url, tmp_path / "results.json")

    _check_system(data, "ours")
    assert set(data["throughput"]["ours"]) == {"1 thread", "4 threads"}
    ((together,),) = data["processes"].values()
    assert together["processes"] == 2 and together["jobs"] == 60 and not together["capped"]
    (pipeline,) = data["pipeline"]
    assert pipeline["pages"] == 8 and pipeline["not_done"] == 0
    assert pipeline["efficiency"] > 0 and pipeline["rss_mb"] > 0
    (lease,) = data["lease_latency"]
    assert lease["calls"] == 20 and 0 < lease["p50_ms"] <= lease["p99_ms"]
    assert data["meta"]["postgres"]["fsync"] in ("on", "off")
    assert data["ratios"] == {}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bench_peers_when_the_bench_extra_is_installed(database_url: str, tmp_path: Path) -> None:
    pytest.importorskip("pgqueuer", reason="the `bench` extra is not installed")
    pytest.importorskip("procrastinate", reason="the `bench` extra is not installed")
    data = _run_bench(database_url, tmp_path / "results.json", BENCH_PEERS="1", BENCH_THREADS="4")

    for system in ("ours", "pgqueuer", "procrastinate"):
        _check_system(data, system)
    for peer in ("pgqueuer", "procrastinate"):
        assert _is_number(data["ratios"][peer]["no-op throughput, best, jobs/s"])
