"""`make bench PGBOUNCER=1`: page-analysis workers through PgBouncer vs direct.

For 1, 2, 4 and 8 worker processes (`python -m manga_page_analysis run-worker`, each with
`BENCH_SCALE_THREADS` analysis threads) on each route:

- `direct`: `DATABASE_URL` is Postgres itself (LISTEN on it);
- `pgbouncer`: `DATABASE_URL` goes through PgBouncer in transaction mode
  (`BENCH_PGBOUNCER_POOL` server connections), `LISTEN_DATABASE_URL` is direct.

Once every process is up and idle, `BENCH_SCALE_JOBS` analysis jobs are
enqueued in one transaction and timed until all are done (jobs/s); the CPU
that Postgres (every server process) and PgBouncer used meanwhile, per job,
is what the capacity estimate of docs/scaling.md is worked out from. Then
`BENCH_SCALE_PICKUPS` jobs are enqueued one at a time on the idle workers,
each timed from its commit to the model server's receipt of its request.
A sampler counts the backends Postgres sees for the database (the
benchmark's own excluded) and PgBouncer's server connections and clients.
The model is the scripted server (testbed/vision_server.py) answering at once,
in this process: the rates are the database path's, bounded by 2 cores
shared by Postgres, PgBouncer, the workers and the model stub.

Run alone with `python -m bench.scale` (a throwaway server, like `make bench`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from bench.pages import create_pages
from bench.report import emit, percentile, progress, table
from manga_page_analysis.db import connect_kwargs, make_engine
from manga_page_analysis.queue import AnalyzePage, enqueue_many, request_analysis
from testbed.pgbouncer import PgBouncer, start_pgbouncer, stop_pgbouncer
from testbed.vision_server import ScriptedVisionServer

PROCESSES = tuple(int(n) for n in os.environ.get("BENCH_SCALE_PROCESSES", "1,2,4,8").split(","))
THREADS = int(os.environ.get("BENCH_SCALE_THREADS", "4"))
JOBS = int(os.environ.get("BENCH_SCALE_JOBS", "2000"))
PICKUPS = int(os.environ.get("BENCH_SCALE_PICKUPS", "30"))
POOL = int(os.environ.get("BENCH_PGBOUNCER_POOL", "8"))
BUDGET_SECONDS = float(os.environ.get("BENCH_BUDGET_SECONDS", "60"))
IDLE_POLL_SECONDS = 0.1
"""Poll interval of the idle-polling measurement (short, so its cost is measurable)."""
IDLE_WINDOW_SECONDS = 5.0
BENCH_APP = "bench"
"""`application_name` of the benchmark's own connections (not counted as the workers')."""


def measure(url: str) -> dict[str, Any]:
    """Every (route, processes) case; plain JSON data."""
    engine = make_engine(
        url, pool_size=2, max_overflow=0, connect_args={"application_name": BENCH_APP}
    )
    results: list[dict[str, Any]] = []
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-scale-") as folder,
            _bouncer(url, Path(folder)) as bouncer,
            ScriptedVisionServer() as vision,
        ):
            storage = Path(folder) / "storage"
            storage.mkdir()
            for processes in PROCESSES:
                for route in ("direct", "pgbouncer"):
                    progress(f"scale: {route}, {processes} process(es) x {THREADS} threads")
                    results.append(_case(engine, url, bouncer, vision, storage, route, processes))
            progress(f"scale: idle polling, {max(PROCESSES)} processes through PgBouncer")
            idle = _idle_polling(engine, url, bouncer, vision, storage, max(PROCESSES))
    finally:
        engine.dispose()
    return {
        "pool_size": POOL,
        "threads": THREADS,
        "jobs": JOBS,
        "cases": results,
        "idle_polling": idle,
    }


def _idle_polling(
    engine: Engine,
    url: str,
    bouncer: PgBouncer,
    vision: ScriptedVisionServer,
    storage: Path,
    processes: int,
) -> dict[str, Any]:
    """What an empty queue costs the server when workers poll (`QUEUE_LISTEN=false`):
    the transactions counted by PgBouncer, and the server's CPU meanwhile, less
    what it used in as long a window before the workers started."""
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE page_analysis, pages, chapters, mangas, crawler_jobs"))
    dbname = make_url(url).database or ""
    env = _env(bouncer.url_for(url), url, vision.url, storage)
    env.update(QUEUE_LISTEN="false", IDLE_POLL_SECONDS=str(IDLE_POLL_SECONDS))
    baseline = _server_cpu(url)
    time.sleep(IDLE_WINDOW_SECONDS)  # the server's own background work, with no worker
    baseline = (_server_cpu(url) - baseline) * 1000 / IDLE_WINDOW_SECONDS
    with _workers(env, processes):
        deadline = time.monotonic() + 120
        while _pooled_clients(bouncer, dbname) < processes:
            if time.monotonic() > deadline:
                raise RuntimeError("the polling workers did not come up")
            time.sleep(0.1)
        time.sleep(5.0)  # past start-up (schema check, reclaim, first probes)
        cpu, transactions = _server_cpu(url), _pooled_transactions(bouncer, dbname)
        begun = time.perf_counter()
        time.sleep(IDLE_WINDOW_SECONDS)
        seconds = time.perf_counter() - begun
        cpu = _server_cpu(url) - cpu
        transactions = _pooled_transactions(bouncer, dbname) - transactions
    return {
        "processes": processes,
        "idle_poll_seconds": IDLE_POLL_SECONDS,
        "transactions_per_s": transactions / seconds,
        "server_cpu_ms_per_s": cpu * 1000 / seconds,
        "server_cpu_ms_per_s_without_workers": baseline,
        "server_cpu_ms_per_transaction": (cpu * 1000 / seconds - baseline)
        * seconds
        / max(transactions, 1),
    }


def _pooled_clients(bouncer: PgBouncer, dbname: str) -> int:
    return sum(row["database"] == dbname for row in bouncer.show("CLIENTS"))


def _pooled_transactions(bouncer: PgBouncer, dbname: str) -> int:
    """Transactions PgBouncer has passed to the database so far (its `SHOW STATS`)."""
    rows = [row for row in bouncer.show("STATS") if row["database"] == dbname]
    return int(rows[0]["total_xact_count"]) if rows else 0


@contextmanager
def _bouncer(url: str, folder: Path) -> Iterator[PgBouncer]:
    parsed = make_url(url)
    pgbouncer_folder = folder / "pgbouncer"
    pgbouncer_folder.mkdir()
    bouncer = start_pgbouncer(
        pgbouncer_folder,
        parsed.host or "127.0.0.1",
        parsed.port or 5432,
        parsed.username or "postgres",
        pool_size=POOL,
    )
    try:
        yield bouncer
    finally:
        stop_pgbouncer(bouncer)


def _case(
    engine: Engine,
    url: str,
    bouncer: PgBouncer,
    vision: ScriptedVisionServer,
    storage: Path,
    route: str,
    processes: int,
) -> dict[str, Any]:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE page_analysis, pages, chapters, mangas, crawler_jobs"))
    page_ids = create_pages(engine, storage, JOBS + PICKUPS)
    # Each case starts with no server connection left over from the last one.
    dbname = make_url(url).database or ""
    bouncer.admin(f'KILL "{dbname}"')
    bouncer.admin(f'RESUME "{dbname}"')
    worker_url = bouncer.url_for(url) if route == "pgbouncer" else url
    env = _env(worker_url, url, vision.url, storage)
    probes_before = vision.health_hits
    with (
        _Sampler(url, bouncer, dbname) as sampler,
        _workers(env, processes),
    ):
        _wait_idle(url, vision, processes, probes_before)
        cpu_before = _server_cpu(url), _process_cpu(bouncer.process.pid)
        wal_before = _wal_bytes(url)
        begun = time.perf_counter()
        with engine.begin() as conn:
            enqueue_many(conn, [AnalyzePage(page_id=page) for page in page_ids[:JOBS]])
        done = 0
        while done < JOBS and time.perf_counter() - begun < BUDGET_SECONDS:
            time.sleep(0.02)
            done = sampler.done
        seconds = time.perf_counter() - begun
        cpu_after = _server_cpu(url), _process_cpu(bouncer.process.pid)
        wal = _wal_bytes(url) - wal_before
        pickups = _pickups(engine, vision, page_ids[JOBS:])
        max_backends, max_listeners = sampler.max_backends, sampler.max_listeners
        max_servers, max_clients = sampler.max_servers, sampler.max_clients
    server_ms = (cpu_after[0] - cpu_before[0]) * 1000 / max(done, 1)
    bouncer_ms = (cpu_after[1] - cpu_before[1]) * 1000 / max(done, 1)
    return {
        "route": route,
        "processes": processes,
        "jobs": done,
        "capped": done < JOBS,
        "seconds": seconds,
        "jobs_per_s": done / seconds,
        "server_cpu_ms_per_job": server_ms,
        "pgbouncer_cpu_ms_per_job": bouncer_ms if route == "pgbouncer" else None,
        "wal_kb_per_job": wal / 1024 / max(done, 1),
        "pickup_ms": pickups,
        "pickup_p50_ms": percentile(pickups, 0.5),
        "pickup_p99_ms": percentile(pickups, 0.99),
        "max_backends": max_backends,
        "max_listen_backends": max_listeners,
        "max_pgbouncer_servers": max_servers if route == "pgbouncer" else None,
        "max_pgbouncer_clients": max_clients if route == "pgbouncer" else None,
    }


def _env(worker_url: str, direct_url: str, vision_url: str, storage: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("DATABASE_URL")}
    env.update(
        DATABASE_URL=worker_url,
        LISTEN_DATABASE_URL=direct_url,
        VISION_URL=vision_url,
        VISION_MODEL="bench-model",
        STORAGE_ROOT=str(storage),
        ANALYSIS_WORKERS=str(THREADS),
        READINESS_POLL_SECONDS="0.1",
        IDLE_POLL_SECONDS="5",  # the wake-ups do the work; polling is the fallback
        REAP_RETENTION_DAYS="0",
    )
    return env


@contextmanager
def _workers(env: dict[str, str], processes: int) -> Iterator[None]:
    started = [
        subprocess.Popen(
            [sys.executable, "-m", "manga_page_analysis", "--log-level", "WARNING", "run-worker"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sys.stderr,
        )
        for _ in range(processes)
    ]
    try:
        yield
    finally:
        for process in started:
            process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def _wait_idle(url: str, vision: ScriptedVisionServer, processes: int, probes_before: int) -> None:
    """Every process LISTENs and has probed the model (so it is in its idle wait)."""
    deadline = time.monotonic() + 120
    with _connect(url) as conn:
        while True:
            (listening,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query LIKE 'LISTEN%crawler_jobs_wakeup%'"
            ).fetchone() or (0,)
            if listening >= processes and vision.health_hits - probes_before >= processes:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {listening} of {processes} workers came up")
            time.sleep(0.05)
    time.sleep(0.5)  # past the first (empty) lease round of each process


def _pickups(engine: Engine, vision: ScriptedVisionServer, page_ids: list[Any]) -> list[float]:
    """Commit-to-model-request latency, ms, one job at a time on idle workers."""
    latencies = []
    for page_id in page_ids:
        seen = len(vision.requests)
        with engine.begin() as conn:
            request_analysis(conn, page_id)
        committed = time.perf_counter()
        vision.wait_for_requests(seen + 1, timeout=30)
        latencies.append((time.perf_counter() - committed) * 1000)
        time.sleep(0.03)  # let the job finish: each pickup starts from idle workers
    return latencies


def _wal_bytes(url: str) -> int:
    with _connect(url) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return int(row[0]) if row else 0


def _connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(**connect_kwargs(url), autocommit=True, application_name=BENCH_APP)


class _Sampler:
    """Every 50 ms: the backends Postgres sees for the database (LISTENs among
    them), PgBouncer's server connections and clients for it, and the jobs
    done. Backends older than the sampler (the benchmark's own pool) and the
    benchmark's own connections are not counted."""

    def __init__(self, url: str, bouncer: PgBouncer, dbname: str) -> None:
        self.max_backends = self.max_listeners = self.max_servers = self.max_clients = 0
        self.done = 0
        self._url, self._bouncer, self._dbname = url, bouncer, dbname
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scale-sampler", daemon=True)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with _connect(self._url) as conn:
            (since,) = conn.execute("SELECT clock_timestamp()").fetchone() or (None,)
            while not self._stop.wait(0.05):
                backends, listeners, done = conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE query LIKE 'LISTEN%%'),"
                    " (SELECT count(*) FROM crawler_jobs WHERE state = 'done')"
                    " FROM pg_stat_activity WHERE datname = current_database()"
                    " AND backend_type = 'client backend'"
                    " AND application_name <> %s AND backend_start >= %s",
                    (BENCH_APP, since),
                ).fetchone() or (0, 0, 0)
                self.done = done
                self.max_backends = max(self.max_backends, backends)
                self.max_listeners = max(self.max_listeners, listeners)
                servers = self._bouncer.show("SERVERS")
                clients = self._bouncer.show("CLIENTS")
                self.max_servers = max(
                    self.max_servers, sum(row["database"] == self._dbname for row in servers)
                )
                self.max_clients = max(
                    self.max_clients, sum(row["database"] == self._dbname for row in clients)
                )


_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rindex(")") + 2 :].split()  # fields from the 3rd (state) on


def _process_cpu(pid: int) -> float:
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def _server_cpu(url: str) -> float:
    """CPU seconds used by the whole Postgres server so far: the postmaster with
    its exited children (cutime, cstime), plus every live server process."""
    with _connect(url) as conn:  # the backend must live while its parent is read
        (backend,) = conn.execute("SELECT pg_backend_pid()").fetchone() or (0,)
        postmaster = int(_stat(backend)[1])  # ppid
    fields = _stat(postmaster)
    total = sum(int(fields[index]) for index in (11, 12, 13, 14)) / _TICKS
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            child = _stat(int(entry.name))
        except (OSError, ValueError):
            continue  # exited meanwhile
        if int(child[1]) == postmaster:
            total += (int(child[11]) + int(child[12])) / _TICKS
    return total


def print_table(scale: dict[str, Any]) -> None:
    emit(
        f"PgBouncer vs direct: {scale['jobs']:,} analysis jobs, worker processes x "
        f"{scale['threads']} threads, PgBouncer transaction mode, pool {scale['pool_size']}"
    )
    rows = []
    for case in scale["cases"]:
        bouncer_ms = case["pgbouncer_cpu_ms_per_job"]
        servers = case["max_pgbouncer_servers"]
        rows.append(
            [
                case["route"],
                str(case["processes"]),
                f"{case['jobs_per_s']:,.0f}" + (" (capped)" if case["capped"] else ""),
                f"{case['server_cpu_ms_per_job']:.2f}",
                f"{case['wal_kb_per_job']:.1f}",
                "-" if bouncer_ms is None else f"{bouncer_ms:.2f}",
                f"{case['pickup_p50_ms']:.1f} / {case['pickup_p99_ms']:.1f}",
                f"{case['max_backends']} ({case['max_listen_backends']})",
                "-" if servers is None else f"{servers} / {case['max_pgbouncer_clients']}",
            ]
        )
    table(
        [
            "route",
            "procs",
            "jobs/s",
            "PG CPU ms/job",
            "WAL kB/job",
            "bouncer CPU ms/job",
            "pickup p50 / p99 ms",
            "PG backends (LISTEN)",
            "bouncer servers / clients",
        ],
        rows,
    )
    idle = scale.get("idle_polling")
    if idle:
        emit(
            f"  idle polling (QUEUE_LISTEN=false, IDLE_POLL_SECONDS={idle['idle_poll_seconds']}),"
            f" {idle['processes']} processes through PgBouncer: "
            f"{idle['transactions_per_s']:.0f} transactions/s, "
            f"{idle['server_cpu_ms_per_s']:.0f} ms of server CPU per s "
            f"({idle['server_cpu_ms_per_s_without_workers']:.0f} without workers), "
            f"{idle['server_cpu_ms_per_transaction']:.2f} ms per transaction"
        )


def main() -> int:
    from bench.db import bench_database

    with bench_database() as database:
        scale = measure(database.url)
    path = Path(os.environ.get("BENCH_SCALE_RESULTS", "bench/scale.json"))
    path.write_text(json.dumps(scale, indent=2) + "\n")
    print_table(scale)
    emit(f"  - written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
