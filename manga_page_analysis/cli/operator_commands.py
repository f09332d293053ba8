"""`jobs stats|list|retry|reap|reclaim`, `analyze` and `request-analysis`: each prints
a table, or with `--json` exactly the JSON body of the matching admin API route."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Final, TextIO

from sqlalchemy import Engine

from manga_page_analysis import admin
from manga_page_analysis.admin.analyze import RequestCounts, request_pages
from manga_page_analysis.cli.invocation import command_name
from manga_page_analysis.cli.shutdown import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE
from manga_page_analysis.models import JOB_STATES
from manga_page_analysis.observability.terminal import visible
from manga_page_analysis.queue.requests import BATCH_SIZE
from manga_page_analysis.queue.states import reap_done, reclaim_expired
from manga_page_analysis.queue.stats import UNKNOWN_KIND
from manga_page_analysis.repos.pages import (
    PageGroup,
    count_unanalysed,
    page_ids_of,
    unanalysed_page_ids,
)

ERROR_COLUMN_CHARS: Final = 60
"""`jobs list` shortens `last_error` to this many characters (`--json` has it whole)."""
LABEL_COLUMN_CHARS: Final = 40


def run(args: argparse.Namespace, engine: Engine, *, reap_retention_days: int = 7) -> int:
    """Run the operator command `args` names (checked by `parser.check_usage`); returns
    the exit code."""
    if args.command == "request-analysis":
        return request_analysis(engine, args.page_id, force=args.force)
    if args.command == "analyze":
        return analyze(engine, args)
    command = args.jobs_command
    if command == "stats":
        return jobs_stats(engine, as_json=args.json)
    if command == "list":
        return jobs_list(engine, args)
    if command == "retry":
        return jobs_retry(engine, args.job_ids, all_dead=args.all_dead, kind=args.kind)
    if command == "reap":
        return jobs_reap(engine, args.days if args.days is not None else reap_retention_days)
    return jobs_reclaim(engine)


def request_analysis(engine: Engine, page_id: uuid.UUID, *, force: bool) -> int:
    """What `POST api/pages/<id>/analysis` does: prints the id of the job that will
    analyse the page (an in-flight one is reused)."""
    try:
        with engine.begin() as conn:
            job_id = admin.request_page_analysis(conn, page_id, force=force)["job_id"]
    except (admin.NotFound, admin.Conflict) as exc:
        error(f"no such page {page_id}" if isinstance(exc, admin.NotFound) else str(exc))
        return EXIT_FAILED
    print(job_id)
    return 0


def jobs_stats(engine: Engine, *, as_json: bool) -> int:
    with engine.connect() as conn:
        stats = admin.queue_stats(conn)
    if as_json:
        print_json(stats)
        return 0
    counts: dict[str, dict[str, int]] = stats["jobs"]
    rows = [[kind, *(str(states.get(s, 0)) for s in JOB_STATES)] for kind, states in counts.items()]
    totals = [sum(states.get(s, 0) for states in counts.values()) for s in JOB_STATES]
    rows.append(["total", *(str(number) for number in totals)])
    headers = ["KIND", *(state.upper() for state in JOB_STATES)]
    print(table(headers, rows, numeric=range(1, len(headers))))
    age = stats["oldest_pending_age_seconds"]
    if age is None:
        print("oldest due pending job: none (nothing is waiting)")
    else:
        print(f"oldest due pending job: waiting {duration_text(age)}")
    return 0


def jobs_list(engine: Engine, args: argparse.Namespace) -> int:
    try:
        with engine.connect() as conn:
            listing = admin.list_jobs(
                conn, state=args.state, kind=args.kind, limit=args.limit, cursor=args.cursor
            )
    except admin.BadRequest as exc:
        error(f"{exc}; see `{command_name()} jobs list --help`")
        return EXIT_USAGE
    if args.json:
        print_json(listing)
        return 0
    if not listing["jobs"]:
        print("no jobs match")
        return 0
    rows = [
        [
            job["id"],
            job["kind"] or UNKNOWN_KIND,
            job["state"],
            f"{job['attempts']}/{job['max_attempts']}",
            time_text(job["updated_at"]),
            shorten(job["label"] or "", LABEL_COLUMN_CHARS),
            shorten(job["last_error"] or "", ERROR_COLUMN_CHARS),
        ]
        for job in listing["jobs"]
    ]
    headers = ["ID", "KIND", "STATE", "TRIES", "UPDATED (UTC)", "LABEL", "LAST ERROR"]
    print(table(headers, rows, numeric=[3]))
    if listing["next_cursor"]:
        print(f"more jobs: add --cursor {listing['next_cursor']}")
    return 0


def jobs_retry(
    engine: Engine, job_ids: Sequence[uuid.UUID], *, all_dead: bool, kind: str | None
) -> int:
    if all_dead:
        with engine.begin() as conn:
            report = admin.retry_dead_jobs(conn, kind=kind)
        what = f"dead {kind} job(s)" if kind else "dead job(s)"
        print(visible(f"retried {len(report.retried)} {what}: back to pending, attempts reset"))
        for job_id, reason in report.left_dead:
            print(visible(f"job {job_id} left dead: {reason}"))
        return 0
    code = 0
    for job_id in job_ids:
        # One transaction per id: one that cannot be retried does not undo the others.
        try:
            with engine.begin() as conn:
                admin.retry_job(conn, job_id)
        except (admin.NotFound, admin.Conflict) as exc:
            error(f"no such job {job_id}" if isinstance(exc, admin.NotFound) else str(exc))
            code = EXIT_FAILED
            continue
        print(f"job {job_id}: back to pending, attempts reset")
    return code


def jobs_reap(engine: Engine, days: int) -> int:
    if days <= 0:
        print("REAP_RETENTION_DAYS is 0 (keep done jobs): nothing deleted; pass --days N")
        return 0
    with engine.begin() as conn:
        deleted = reap_done(conn, days)
    print(f"deleted {deleted} done job(s) last updated more than {days} day(s) ago")
    return 0


def jobs_reclaim(engine: Engine) -> int:
    with engine.begin() as conn:
        reclaim = reclaim_expired(conn)
    print(
        f"reclaimed {len(reclaim.released)} running job(s) whose lease had expired: "
        "back to pending, attempt refunded"
    )
    if reclaim.dead_lettered:
        # The runner's start-up reclaim also records these through their handler
        # (a failed page_analysis row); from here only the dead job row tells.
        print(
            f"dead-lettered {len(reclaim.dead_lettered)} job(s) reclaimed from a dead worker "
            f"too often (crash loop): "
            + ", ".join(str(lease.id) for lease in reclaim.dead_lettered)
        )
    return 0


def analyze(engine: Engine, args: argparse.Namespace) -> int:
    counts = RequestCounts()
    # A bar for many pages, on a terminal only.
    progress = Progress(sys.stderr if args.page is None and sys.stderr.isatty() else None)
    try:
        with engine.connect() as conn:
            if args.missing:
                progress.total = count_unanalysed(conn)
            else:
                target: PageGroup = "page" if args.page else "chapter" if args.chapter else "manga"
                target_id = args.page or args.chapter or args.manga
                found = page_ids_of(conn, target, target_id)
                if found is None:
                    error(f"no such {target} {target_id}")
                    return EXIT_FAILED
                page_ids = found
                progress.total = len(page_ids)
        after: uuid.UUID | None = None
        while True:
            # One transaction per batch: short locks, and an interrupted
            # run keeps what it enqueued.
            with engine.begin() as conn:
                if args.missing:
                    batch = unanalysed_page_ids(conn, after=after, limit=BATCH_SIZE)
                else:
                    batch = page_ids[progress.done : progress.done + BATCH_SIZE]
                if not batch:
                    break
                counts.add(request_pages(conn, batch, force=args.force))
            after = batch[-1]
            progress.advance(len(batch), counts)
    except KeyboardInterrupt:
        progress.finish()
        error(f"interrupted; {counts.enqueued} job(s) were enqueued and stay queued")
        return EXIT_INTERRUPTED
    progress.finish()
    print(counts_text(counts, force=args.force))
    return 0


def counts_text(counts: RequestCounts, *, force: bool) -> str:
    text = f"enqueued {counts.enqueued} analysis job(s); skipped {counts.skipped}"
    reasons = []
    if counts.in_flight:
        marked = ", now forced" if force else ""
        reasons.append(f"{counts.in_flight} already pending or running{marked}")
    if counts.already_done:
        reasons.append(f"{counts.already_done} already analysed: add --force to redo")
    return text + (f" ({'; '.join(reasons)})" if reasons else "")


def print_json(body: Any) -> None:
    print(json.dumps(body, ensure_ascii=False, indent=2))


def error(message: str) -> None:
    print(f"error: {visible(message)}", file=sys.stderr)


def shorten(text: str, width: int) -> str:
    """One line, at most `width` characters (an ellipsis marks a cut), control
    characters escaped (`visible`) before it is measured."""
    flat = visible(" ".join(text.split()))
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def time_text(iso: str) -> str:
    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def duration_text(seconds: float) -> str:
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.1f} s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, numeric: Iterable[int] = ()
) -> str:
    """Aligned columns, two spaces apart; `numeric` column indexes are right-aligned.
    Every cell is shown with its control characters escaped (`visible`)."""
    right = set(numeric)
    headers = [visible(str(cell)) for cell in headers]
    rows = [[visible(str(cell)) for cell in row] for row in rows]
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(padded).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])


class Progress:
    """A one-line progress bar redrawn in place with `\\r` on `stream` (`None`: no bar)."""

    WIDTH: Final = 30

    def __init__(self, stream: TextIO | None) -> None:
        self.total = 0
        self.done = 0
        self._stream = stream

    def advance(self, pages: int, counts: RequestCounts) -> None:
        self.done += pages
        if self._stream is None:
            return
        share = min(self.done / self.total, 1.0) if self.total else 1.0
        filled = int(self.WIDTH * share)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self._stream.write(
            f"\r[{bar}] {self.done}/{self.total} pages, {counts.enqueued} enqueued, "
            f"{counts.skipped} skipped"
        )
        self._stream.flush()

    def finish(self) -> None:
        if self._stream is not None and self.done:
            self._stream.write("\n")
            self._stream.flush()
