"""The one table of `make bench`, from the results of bench/suite.py.

A cell is the median over rounds, with [min-max] when there were several;
`*` marks a run stopped by the time budget (its rate is over the jobs done).
Ratio columns are ours / theirs: above 1 is better for rates, below 1 is
better for latencies.
"""

from __future__ import annotations

import math
import statistics
import textwrap
from collections.abc import Callable
from typing import Any

from bench.report import emit, table

Row = tuple[str, dict[str, list[float]], str, set[str]]
"""(measure, values per system, target, systems with a capped run)."""


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def _cell(values: list[float] | None, capped: bool = False) -> str:
    if not values:
        return "n/a"
    text = _fmt(_median(values))
    if len(values) > 1:
        text += f" [{_fmt(min(values))}-{_fmt(max(values))}]"
    return text + ("*" if capped else "")


def _per_system(
    section: dict[str, Any], pick: Callable[[Any], float | None]
) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {}
    for system, rounds in section.items():
        picked = [pick(entry) for entry in rounds]
        values[system] = [value for value in picked if value is not None]
    return values


def _rows(results: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []

    def add(
        measure: str,
        values: dict[str, list[float]],
        target: str = "",
        capped: set[str] | None = None,
    ) -> None:
        rows.append((measure, values, target, capped or set()))

    def capped_in(section: dict[str, Any], key: str) -> set[str]:
        return {
            system for system, rounds in section.items()
            if any(entry[key] and entry[key]["capped"] for entry in rounds)
        }  # fmt: skip

    enqueue, pickup, throughput = results["enqueue"], results["pickup"], results["throughput"]
    add(
        "enqueue, single, jobs/s",
        _per_system(enqueue, lambda r: r["single"]["jobs_per_s"]),
        capped=capped_in(enqueue, "single"),
    )
    add(
        "enqueue_many, jobs/s",
        _per_system(enqueue, lambda r: r["many"] and r["many"]["jobs_per_s"]),
        capped=capped_in(enqueue, "many"),
    )
    best: dict[str, tuple[list[float], bool]] = {}
    for system, cases in throughput.items():
        for label, runs in cases.items():
            rates = [run["jobs_per_s"] for run in runs]
            capped = any(run["capped"] for run in runs)
            if system == "ours":
                add(
                    f"no-op throughput, {label}, jobs/s",
                    {"ours": rates},
                    "",
                    {"ours"} if capped else None,
                )
            if system not in best or _median(rates) > _median(best[system][0]):
                best[system] = (rates, capped)
    add(
        "no-op throughput, best, jobs/s",
        {system: rates for system, (rates, _) in best.items()},
        ">= 2x pgqueuer",
        {system for system, (_, capped) in best.items() if capped},
    )
    one_process = best.get("ours", ([], False))[0]
    for processes, runs in results.get("processes", {}).items():
        add(
            f"no-op throughput, {processes} processes x {runs[0]['threads']} threads, jobs/s",
            {"ours": [run["jobs_per_s"] for run in runs]},
            f">= 1 process ({_fmt(_median(one_process))})",
            {"ours"} if any(run["capped"] for run in runs) else None,
        )

    def ours_drains(key: str) -> list[float]:
        """`key` of every one-process no-op run of ours that reported it."""
        return [
            run[key] for runs in throughput.get("ours", {}).values() for run in runs if run.get(key)
        ]

    if acks := ours_drains("acks_per_batch"):
        add("no-op acks per batch (mean)", {"ours": acks})
    if cpu := ours_drains("cpu_us_per_job"):
        add("no-op worker CPU per job, best, us", {"ours": [min(cpu)]}, "<= 24")
    for name, target in (("p50", "<= 1.5"), ("p95", ""), ("p99", "<= 3")):
        add(
            f"pickup latency {name}, ms",
            _per_system(pickup, lambda r, n=name: r[f"{n}_ms"]),
            target,
        )
    add(
        "pickup p50 from the COMMIT returned, ms",
        _per_system(pickup, lambda r: r["after_commit_p50_ms"]),
    )
    lines, leases = results["pipeline"], results["lease_latency"]
    ideal = lines[0]["ideal_pages_per_s"]
    add(f"pipeline, pages/s (ideal {_fmt(ideal)})", {"ours": [r["pages_per_s"] for r in lines]})
    add("pipeline efficiency, %", {"ours": [100 * r["efficiency"] for r in lines]}, ">= 97")
    drain_rss = [run["rss_mb"] for runs in throughput.get("ours", {}).values() for run in runs]
    add("worker peak RSS, no-op runs, MiB", {"ours": [max(drain_rss)]}, "< 150")
    add("worker peak RSS, pipeline, MiB", {"ours": [max(r["rss_mb"] for r in lines)]}, "< 150")
    add("lease latency p50, ms", {"ours": [r["p50_ms"] for r in leases]})
    add("lease latency p99, ms", {"ours": [r["p99_ms"] for r in leases]})
    return rows


def ratios(results: dict[str, Any], peers: list[str]) -> dict[str, dict[str, float]]:
    """ours / theirs per peer and measure, from the medians."""
    found: dict[str, dict[str, float]] = {peer: {} for peer in peers}
    for measure, values, _target, _capped in _rows(results):
        ours = _median(values.get("ours", []))
        for peer in peers:
            theirs = _median(values.get(peer, []))
            if values.get(peer) and theirs and not math.isnan(ours):
                found[peer][measure] = ours / theirs
    return found


def print_table(results: dict[str, Any], peers: list[str]) -> None:
    found = ratios(results, peers)
    headers = ["measure", "ours", "target"]
    for peer in peers:
        headers += [peer, f"ours/{peer}"]
    lines = []
    for measure, values, target, capped in _rows(results):
        cells = [measure, _cell(values.get("ours"), "ours" in capped), target]
        for peer in peers:
            ratio = found[peer].get(measure)
            cells += [
                _cell(values.get(peer), peer in capped) if peer in values else "",
                "" if ratio is None else f"{ratio:.2f}",
            ]
        lines.append(cells)
    table(headers, lines)


def print_notes(results: dict[str, Any], config: dict[str, Any]) -> None:
    missed = {
        system: sum(r["missed"] for r in rounds) for system, rounds in results["pickup"].items()
    }
    calls = sum(r["calls"] for r in results["lease_latency"])
    not_done = sum(r["not_done"] for r in results["pipeline"])
    notes = [
        f"enqueue: {config['enqueue_jobs']:,} jobs in transactions of "
        f"{config['jobs_per_txn']:,} on one connection; 'single' is one enqueue call per job, "
        "'many' one call per transaction.",
        f"no-op throughput: {config['drain_jobs']:,} jobs seeded, then one worker process, timed "
        "from Runner.start() until the database counts every job done (peers: until their "
        "drain ends).",
        f"pickup: {config['pickup_jobs']} jobs, {config['pickup_gap_ms']} ms apart, from a "
        "separate producer process; from time.time() just before its COMMIT is sent (a peer's "
        "enqueue that commits by itself: before that call) to time.time() as the handler "
        f"starts (our runner: {config['pickup_threads']} threads). "
        f"Jobs never picked up: {missed}.",
        f"pipeline: {config['pages']} pages, {config['page_workers']} workers, the model answers "
        f"after {config['model_delay_ms']} ms; {not_done} job(s) not "
        "done at the end.",
        f"lease latency: BEGIN + lease(conn, None, 1) + COMMIT, {calls} calls in all, "
        f"{config['backlog']:,} pending rows behind {config['backlog_running']} running ones.",
        "* = stopped by the time budget. Ratios are ours/theirs: for rates > 1 means ours is "
        "faster, for latencies < 1 does.",
    ]
    for note in notes:
        emit(textwrap.fill(note, width=98, initial_indent="  - ", subsequent_indent="    "))
