"""Entry point of `make bench`: set up a database, measure, print one table, write JSON.

The table and notes go to stdout at the end; progress lines go to stderr.
The results, with the configuration and the server's settings, are written
to `bench/results.json` (`BENCH_RESULTS`). Ctrl-C or SIGTERM stops the run
and still stops and deletes the throwaway server.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
import textwrap
import time
from datetime import UTC, datetime

from bench import interrupt, scale, suite, summary
from bench.config import BenchConfig
from bench.db import bench_database, engine_for, server_settings
from bench.noop import noop_handler
from bench.report import emit, progress


def run(config: BenchConfig) -> dict[str, object]:
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    started = time.perf_counter()
    progress("starting the database")
    with bench_database() as database:
        engine = engine_for(database.url, 4)
        try:
            settings = server_settings(engine)
            results = suite.run(engine, database.url, config)
            if config.pgbouncer:
                results["scale"] = scale.measure(database.url)
        finally:
            engine.dispose()
        progress("stopping the database")
    peers = list(config.peers)
    results["ratios"] = summary.ratios(results, peers)
    results["meta"] = {
        "started": started_at,
        "machine": f"{os.cpu_count()} CPU(s), {platform.platform()}",
        "python": platform.python_version(),
        "database": database.origin,
        "postgres": settings,
        "noop_handler": noop_handler()[1],
        "config": config.as_json(),
        "wall_seconds": time.perf_counter() - started,
    }
    return results


def main() -> int:
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    interrupt.install()
    config = BenchConfig()
    try:
        results = run(config)
    except KeyboardInterrupt:
        print("\n[bench] interrupted; the database was cleaned up", file=sys.stderr)
        return 130
    config.results_path.write_text(json.dumps(results, indent=2) + "\n")
    meta = results["meta"]
    assert isinstance(meta, dict)
    emit(f"make bench, {meta['started']}: {meta['machine']}, Python {meta['python']}")
    emit("postgres: " + ", ".join(f"{name}={value}" for name, value in meta["postgres"].items()))
    emit(f"no-op handler: {meta['noop_handler']}")
    emit()
    summary.print_table(results, list(config.peers))
    emit()
    summary.print_notes(results, meta["config"])
    for peer in config.peers:
        description = suite.PEERS[peer]
        emit(
            textwrap.fill(
                f"{peer}: {description}.", 98, initial_indent="  - ", subsequent_indent="    "
            )
        )
    if "scale" in results:
        emit()
        scale.print_table(results["scale"])
    emit(f"  - written to {config.results_path}; wall time {meta['wall_seconds']:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
