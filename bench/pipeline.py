"""Section 4: page-analysis pipeline efficiency against a model that answers after 100 ms.

The parent writes `pages` small PNGs and their rows, requests analysis of
each, and serves the scripted vision server (testbed/vision_server.py) on its
own threads. The worker is `analysis_runner` from `Settings`, in a child
process (role `analyze`), timed from `start()` until every job is `done`.
With `workers` slots and a model taking `delay` seconds a page, the ideal is
`workers / delay` pages/s; efficiency is the measured rate over that.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from bench import child
from bench.pages import create_pages
from manga_page_analysis.analysis.wiring import analysis_runner
from manga_page_analysis.config import Settings
from manga_page_analysis.db import make_engine
from manga_page_analysis.queue import request_analysis
from testbed.vision_server import ScriptedVisionServer, analysis_content, ok_answer

POLL_SECONDS = 0.01
DONE_SQL = text("SELECT count(*) FROM crawler_jobs WHERE state = 'done'")
NOT_DONE_SQL = text("SELECT count(*) FROM crawler_jobs WHERE state <> 'done'")


def measure(
    engine: Engine, url: str, pages: int, workers: int, delay: float, budget: float
) -> dict[str, Any]:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE page_analysis, pages, chapters, mangas, crawler_jobs"))
    with tempfile.TemporaryDirectory(prefix="bench-storage-") as storage:
        page_ids = create_pages(engine, Path(storage), pages)
        with engine.begin() as conn:
            for page_id in page_ids:
                request_analysis(conn, page_id)
        with ScriptedVisionServer() as server:
            reply = ok_answer(analysis_content())
            reply.delay = delay
            server.default = reply
            result = child.run(
                "pipeline",
                "analyze",
                {
                    "url": url,
                    "vision_url": server.url,
                    "storage": storage,
                    "workers": workers,
                    "jobs": pages,
                    "budget": budget,
                },
            )
    ideal = workers / delay
    result.update(ideal_pages_per_s=ideal, efficiency=result["pages_per_s"] / ideal)
    return result


def analyze(args: dict[str, Any]) -> dict[str, Any]:
    """Child role: run the analysis worker until every job is done (or the budget ends)."""
    settings = Settings(
        _env_file=None,
        database_url=args["url"],
        vision_url=args["vision_url"],
        storage_root=Path(args["storage"]),
        analysis_workers=args["workers"],
    )
    jobs = args["jobs"]
    engine = make_engine(settings)
    try:
        with analysis_runner(settings, engine=engine) as runner, engine.connect() as probe:
            begun = time.perf_counter()
            runner.start()
            done = 0
            while done < jobs and time.perf_counter() - begun < args["budget"]:
                time.sleep(POLL_SECONDS)
                with probe.begin():
                    done = int(probe.execute(DONE_SQL).scalar_one())
            seconds = time.perf_counter() - begun
            runner.stop()
            runner.join(10.0)
            with probe.begin():
                not_done = int(probe.execute(NOT_DONE_SQL).scalar_one())
    finally:
        engine.dispose()
    return {
        "pages": done,
        "not_done": not_done,
        "seconds": seconds,
        "pages_per_s": done / seconds,
        "rss_mb": child.peak_rss_mb(),
    }
