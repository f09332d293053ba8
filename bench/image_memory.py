"""Peak memory of `run-worker` analysing large pages: docs/performance.md ("Memory per job").

    .venv/bin/python -m bench.image_memory                       # 9,400 x 9,400, default cap
    .venv/bin/python -m bench.image_memory --pixels 89478485 --jobs 2
    .venv/bin/python -m bench.image_memory --size 5000x8000

Starts a throwaway Postgres, makes a mostly flat RGBA PNG of `--size` (9,400 x
9,400 is about 360 KB), runs `python -m manga_page_analysis run-worker` (in-process
OCR, `ANALYSIS_WORKERS` = `--jobs`) as a child, waits until its memory settles,
enqueues `--jobs` copies of the page, waits for the jobs to end, and prints one JSON
line: the child's peak resident memory (`VmHWM`) before and after, and each job's
state and error.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw
from sqlalchemy import create_engine, text

from bench.pg import throwaway_server

SETTLE_SECONDS = 5.0
"""The worker is idle once its RSS moved less than 2 MiB for this long."""
JOBS_TIMEOUT_SECONDS = 600.0


def flat_png(path: Path, width: int, height: int) -> None:
    image = Image.new("RGBA", (width, height), (250, 250, 250, 255))
    draw = ImageDraw.Draw(image)
    for offset in range(0, min(width, height), 940):
        draw.rectangle([offset, offset, offset + 600, offset + 300], fill=(0, 0, 0, 255))
    image.save(path, optimize=True)


def status_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise LookupError(field)


def measure(size: tuple[int, int], pixels: int | None, jobs: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-image-memory-"))
    storage = work / "storage"
    storage.mkdir()
    flat_png(storage / "page.png", *size)
    with throwaway_server() as url:
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "STORAGE_ROOT": str(storage),
            "ANALYSIS_WORKERS": str(jobs),
        }
        env.pop("VISION_URL", None)
        if pixels is not None:
            env["MAX_IMAGE_PIXELS"] = str(pixels)
        command = [sys.executable, "-m", "manga_page_analysis"]
        subprocess.run([*command, "migrate"], env=env, cwd=work, check=True, capture_output=True)
        with (work / "worker.log").open("w") as log:
            worker = subprocess.Popen([*command, "run-worker"], env=env, cwd=work, stderr=log)
        try:
            last, settled_since = 0.0, time.monotonic()
            while time.monotonic() - settled_since < SETTLE_SECONDS:
                time.sleep(0.5)
                now = status_mib(worker.pid, "VmRSS")
                if abs(now - last) > 2:
                    last, settled_since = now, time.monotonic()
            idle_peak = status_mib(worker.pid, "VmHWM")
            engine = create_engine(url)
            with engine.begin() as conn:
                chapter = conn.execute(
                    text(
                        "WITH m AS (INSERT INTO mangas (title) VALUES ('bench') RETURNING id) "
                        "INSERT INTO chapters (manga_id, number, title) "
                        "SELECT id, 1, '' FROM m RETURNING id"
                    )
                ).scalar_one()
                conn.execute(
                    text(
                        "WITH p AS (INSERT INTO pages (chapter_id, number, storage_key) "
                        "SELECT :c, n, 'page.png' FROM generate_series(1, :jobs) AS n "
                        "RETURNING id) INSERT INTO crawler_jobs (payload) "
                        "SELECT jsonb_build_object('kind', 'analyze_page', 'page_id', id) FROM p"
                    ),
                    {"c": chapter, "jobs": jobs},
                )
            started = time.monotonic()
            query = text("SELECT state, coalesce(last_error, '') FROM crawler_jobs")
            while True:
                with engine.connect() as conn:
                    rows = conn.execute(query).all()
                ended = all(state in ("done", "dead") for state, _ in rows)
                if ended or time.monotonic() - started > JOBS_TIMEOUT_SECONDS:
                    break
                time.sleep(0.2)
            peak = status_mib(worker.pid, "VmHWM")
            engine.dispose()
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)
    return {
        "size": f"{size[0]}x{size[1]}",
        "png_bytes": (storage / "page.png").stat().st_size,
        "MAX_IMAGE_PIXELS": pixels if pixels is not None else "default",
        "jobs": jobs,
        "idle_peak_mib": round(idle_peak),
        "peak_mib": round(peak),
        "seconds": round(time.monotonic() - started, 1),
        "outcomes": [[state, error[:160]] for state, error in rows],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="9400x9400", help="WIDTHxHEIGHT of the page")
    parser.add_argument("--pixels", type=int, help="MAX_IMAGE_PIXELS (default: the setting's)")
    parser.add_argument("--jobs", type=int, default=1, help="pages at once (ANALYSIS_WORKERS)")
    args = parser.parse_args()
    width, height = (int(side) for side in args.size.lower().split("x"))
    print(json.dumps(measure((width, height), args.pixels, args.jobs)))


if __name__ == "__main__":
    main()
