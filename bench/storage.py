"""Time per page, a local folder against an S3-compatible store on the same machine.

`python -m bench.storage [--rounds N] [--copies N] [--workers N]` starts SeaweedFS
(testbed/seaweedfs.py) and a private Postgres on 127.0.0.1, then measures:

1. `read_bytes` of the sample manga's 6 pages (3-16 KB), and of one 1 MiB object,
   `rounds` times each, through `LocalStorage` and through `S3Storage` (one client,
   warm connection pool);
2. a worker end to end: `copies` × 6 sample pages analysed by `analysis_runner`
   (`workers` threads) against the scripted vision server answering at once, timed
   from `start()` until every job is `done`, the pages in the folder, then in the bucket.

Prints one JSON object. The figures are docs/scaling.md's "Page images: what a bucket costs".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from bench.pg import throwaway_server
from manga_page_analysis.analysis.wiring import analysis_runner
from manga_page_analysis.cli.importer import import_folder
from manga_page_analysis.config import Settings
from manga_page_analysis.db import make_engine
from manga_page_analysis.migrations import upgrade_head
from manga_page_analysis.storage import LocalStorage, Storage
from manga_page_analysis.storage.s3 import S3Storage
from testbed.seaweedfs import start_s3_server, stop_s3_server
from testbed.vision_server import ScriptedVisionServer

SAMPLES = Path(__file__).resolve().parents[1] / "examples" / "sample_manga"
CAP = 20 * 1024 * 1024


def read_times(storage: Storage, keys: list[str], rounds: int) -> dict[str, float]:
    for key in keys:  # warm: connections opened, files cached
        storage.read_bytes(key, CAP)
    samples = []
    for _ in range(rounds):
        for key in keys:
            started = time.perf_counter()
            storage.read_bytes(key, CAP)
            samples.append((time.perf_counter() - started) * 1000)
    return {
        "reads": len(samples),
        "mean_ms": round(statistics.fmean(samples), 3),
        "median_ms": round(statistics.median(samples), 3),
        "p95_ms": round(statistics.quantiles(samples, n=20)[-1], 3),
    }


def drain(engine: Engine, settings: Settings, storage: Storage, copies: int) -> dict[str, Any]:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE page_analysis, pages, chapters, mangas, crawler_jobs"))
    for copy in range(copies):
        import_folder(engine, storage, SAMPLES, title=f"bench {copy}", chapter=Decimal(1))
    pages = copies * 6
    with analysis_runner(settings, engine=engine, storage=storage) as runner:
        started = time.perf_counter()
        runner.start()
        while True:
            with engine.connect() as conn:
                done = conn.scalar(text("SELECT count(*) FROM crawler_jobs WHERE state='done'"))
            if done == pages:
                break
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
        runner.stop()
        runner.join(10)
    return {
        "pages": pages,
        "seconds": round(elapsed, 3),
        "ms_per_page": round(elapsed * 1000 / pages, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--copies", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    keys = [f"sample/{path.name}" for path in sorted(SAMPLES.glob("*.png"))]
    with tempfile.TemporaryDirectory(prefix="bench-s3-") as folder:
        server = start_s3_server(Path(folder), "bench", "bench-secret-key")
        try:
            for name, value in server.env().items():
                os.environ[name] = value
            bucket = server.new_bucket()
            local = LocalStorage(Path(folder) / "local")
            s3 = S3Storage(f"s3://{bucket}/bench", max_pool_connections=args.workers + 2)
            for path in sorted(SAMPLES.glob("*.png")):
                for storage in (local, s3):
                    storage.write_bytes(
                        f"sample/{path.name}", path.read_bytes(), content_type="image/png"
                    )
            # A scanned page of a real chapter is nearer 1 MiB than the samples' 3-16 KB.
            large = os.urandom(1024 * 1024)
            for storage in (local, s3):
                storage.write_bytes("large/page.png", large, content_type="image/png")
            result: dict[str, Any] = {
                "page_bytes": [p.stat().st_size for p in sorted(SAMPLES.glob("*.png"))],
                "read_local": read_times(local, keys, args.rounds),
                "read_s3": read_times(s3, keys, args.rounds),
                "read_1mib_local": read_times(local, ["large/page.png"], args.rounds),
                "read_1mib_s3": read_times(s3, ["large/page.png"], args.rounds),
            }
            with throwaway_server() as url, ScriptedVisionServer() as vision:
                upgrade_head(url)
                engine = make_engine(url, pool_size=10)
                settings = Settings(
                    _env_file=None,  # type: ignore[call-arg]
                    database_url=url,
                    vision_url=vision.url,
                    analysis_workers=args.workers,
                    idle_poll_seconds=0.05,
                    reap_retention_days=0,
                )
                result["worker_local"] = drain(engine, settings, local, args.copies)
                result["worker_s3"] = drain(engine, settings, s3, args.copies)
                engine.dispose()
        finally:
            stop_s3_server(server.process)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
