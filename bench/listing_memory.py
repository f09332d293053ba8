"""Memory of the admin's job listing over jobs with huge payloads: docs/performance.md
("Memory of the admin listing").

    .venv/bin/python -m bench.listing_memory                  # 200 dead jobs of 2 MB, limit=200
    .venv/bin/python -m bench.listing_memory --jobs 500 --limit 500

Starts a throwaway Postgres, migrates it, inserts `--jobs` dead jobs of a host kind
whose payload carries a `--payload-mb` field (a crawler's page, say), then answers
`GET api/jobs?state=dead&limit=N` through the Flask blueprint in this process, and
prints one JSON line: the answer's size, the process's resident memory growth
(`VmRSS` after minus before), its peak growth (`VmHWM`, reset before the request
through `/proc/self/clear_refs`), and the peak of Python's own allocations
(tracemalloc) during the request.
"""

from __future__ import annotations

import argparse
import gc
import json
import tracemalloc
from pathlib import Path
from typing import Any

from flask import Flask
from sqlalchemy import create_engine, text

from bench.pg import throwaway_server

TOKEN = "bench"


def status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise LookupError(field)


def reset_peak() -> None:
    # "5" resets the peak resident size (VmHWM) to the current one (Linux >= 4.0).
    Path("/proc/self/clear_refs").write_text("5")


def measure(jobs: int, limit: int, payload_mb: float) -> dict[str, Any]:
    from manga_page_analysis.migrations import migrate
    from manga_page_analysis.web.flask import admin_blueprint

    with throwaway_server() as url:
        migrate(url)
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO crawler_jobs (payload, state, last_error) "
                    "SELECT jsonb_build_object('kind', 'crawl_page', 'url', 'https://x/' || n, "
                    "'html', repeat(md5(n::text), :repeats)), 'dead', 'gave up' "
                    "FROM generate_series(1, :jobs) AS n"
                ),
                {"jobs": jobs, "repeats": int(payload_mb * 1_000_000 / 32)},
            )
        app = Flask(__name__)
        app.register_blueprint(admin_blueprint(engine, token=TOKEN), url_prefix="/admin")
        client = app.test_client()
        headers = {"Authorization": f"Bearer {TOKEN}"}
        client.get("/admin/api/jobs?state=dead&limit=1", headers=headers)  # warm up
        gc.collect()
        before = status_mib("VmRSS")
        reset_peak()
        tracemalloc.start()
        response = client.get(f"/admin/api/jobs?state=dead&limit={limit}", headers=headers)
        _, traced_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        body = response.get_data()
        peak = status_mib("VmHWM")
        gc.collect()
        after = status_mib("VmRSS")
        engine.dispose()
    return {
        "jobs": jobs,
        "limit": limit,
        "payload_mb": payload_mb,
        "status": response.status_code,
        "listed": len(json.loads(body)["jobs"]),
        "answer_kb": round(len(body) / 1024, 1),
        "rss_growth_mib": round(after - before, 1),
        "peak_growth_mib": round(peak - before, 1),
        "python_peak_mib": round(traced_peak / 2**20, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--payload-mb", type=float, default=2.0)
    args = parser.parse_args()
    print(json.dumps(measure(args.jobs, args.limit, args.payload_mb)))


if __name__ == "__main__":
    main()
