"""Entry point of `make bench`: set up a database, run every section, print the report.

The report goes to stdout as it is measured; progress lines and warnings go
to stderr. Ctrl-C or SIGTERM stops the run and still stops and deletes the
throwaway server.
"""

from __future__ import annotations

import logging
import os
import platform
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import backlog, enqueue, interrupt, lease_ack, worker
from bench.config import BenchConfig
from bench.db import bench_database, engine_for, server_settings
from bench.pages import create_pages
from bench.report import emit, heading, note, progress, table

ENGINE_CONNECTIONS = 12
"""Enough for the largest thread count of section 2, plus slack."""


def _header(config: BenchConfig, origin: str, settings: dict[str, str]) -> None:
    heading("Benchmark: page-analysis job queue and worker")
    emit(f"  started     {datetime.now(UTC).isoformat(timespec='seconds')}")
    emit(f"  machine     {os.cpu_count()} CPU(s), {platform.platform()}")
    emit(f"  python      {platform.python_version()}")
    emit(f"  database    {origin}")
    emit("  postgres    " + ", ".join(f"{name}={value}" for name, value in settings.items()))
    emit(f"  sizes       {config.describe()}")


def _peak_rss(started: float) -> None:
    heading("5. Process")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    table(
        ["measure", "value"],
        [
            ["peak RSS (ru_maxrss)", f"{usage.ru_maxrss / 1024:.1f} MiB"],
            ["CPU user / system", f"{usage.ru_utime:.1f} s / {usage.ru_stime:.1f} s"],
            ["wall time", f"{time.perf_counter() - started:.1f} s"],
        ],
    )
    note("This process only: benchmark client threads and the scripted vision server.")


def run(config: BenchConfig) -> None:
    started = time.perf_counter()
    progress("starting the database")
    with bench_database() as database:
        engine = engine_for(database.url, ENGINE_CONNECTIONS)
        try:
            _header(config, database.origin, server_settings(engine))
            enqueue.run(engine, config.enqueue_jobs, config.enqueue_budget_seconds)
            lease_ack.run(engine, config.lease_jobs, config.lease_budget_seconds)
            backlog.run(engine, config.backlog, config.backlog_calls, config.backlog_budget_seconds)
            with tempfile.TemporaryDirectory(prefix="bench-storage-") as storage:
                storage_root = Path(storage)
                progress(f"worker: writing {config.worker_pages} page images")
                page_ids = create_pages(engine, storage_root, config.worker_pages)
                worker.run(
                    database.url,
                    storage_root,
                    page_ids,
                    list(config.worker_cases),
                    config.worker_budget_seconds,
                )
        finally:
            engine.dispose()
        progress("stopping the database")
    _peak_rss(started)


def main() -> int:
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    interrupt.install()
    try:
        run(BenchConfig.from_env())
    except KeyboardInterrupt:
        print("\n[bench] interrupted; the database was cleaned up", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
