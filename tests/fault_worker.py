"""A worker process for the many-processes fault test: the generic runner
with a fast `sync_manga` handler that appends each job id it executes to its
own file, one `write` per id on an `O_APPEND` descriptor, so the test can count
how often each job ran across processes. Runs until SIGTERM, then exits 0.

    python -m tests.fault_worker DATABASE_URL LOG_FILE THREADS
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection

from manga_page_analysis.db import make_engine
from manga_page_analysis.queue import KIND_SYNC_MANGA, Lease
from manga_page_analysis.worker import JobContext, Runner


class CountingHandler:
    kind = KIND_SYNC_MANGA
    timeout_message = "counting timed out"
    writes_result = False  # nothing of its own to save: the batched-ack path where there is one

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def load(self, conn: Connection, lease: Lease) -> Lease:
        return lease

    def describe(self, item: Lease) -> str:
        return f"sync_manga {item.id}"

    def breadcrumb(self, item: Lease) -> Mapping[str, Any] | None:
        return None

    def execute(self, item: Lease, ctx: JobContext) -> None:
        os.write(self._fd, f"{item.id}\n".encode())

    def save(self, conn: Connection, item: Lease, result: None, ctx: JobContext) -> None:
        return None

    def save_failure(self, conn: Connection, item: Lease, error: str, ctx: JobContext) -> None:
        return None


def main(argv: list[str]) -> int:
    database_url, log_file, threads = argv[0], argv[1], int(argv[2])
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    engine = make_engine(database_url, pool_size=threads * 2 + 2)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    runner = Runner(engine, [CountingHandler(fd)], workers=threads, idle_poll=0.05, name="counting")
    try:
        runner.start()
        with open(log_file + ".ready", "w"):
            pass  # the test enqueues once every process is up
        stopping.wait()
        runner.stop()
        runner.join(10)
    finally:
        engine.dispose()
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
