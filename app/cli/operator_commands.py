"""The operator commands: `jobs stats|list|retry|reap|reclaim` and `analyze`.

Entry points only: they parse arguments, call `app.admin`, `app.queue` and
`app.repos.pages`, and turn the answer into a table (or, with `--json`,
exactly the JSON body of the matching admin API route). Exit codes: 0 ok,
1 the command failed (unknown id, conflict), 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final

from sqlalchemy import Engine

from app import admin
from app.admin.analyze import NoSuchTarget, RequestCounts, request_pages, target_page_ids
from app.cli.tables import (
    Progress,
    duration_text,
    error,
    print_json,
    shorten,
    table,
    time_text,
)
from app.models import JOB_STATES
from app.queue.requests import BATCH_SIZE
from app.queue.states import reap_done, reclaim_expired
from app.queue.stats import count_dead
from app.repos.pages import PageGroup, count_unanalysed, unanalysed_page_ids

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130

ERROR_COLUMN_CHARS: Final = 60
"""`jobs list` shortens `last_error` to this many characters (`--json` has it whole)."""
LABEL_COLUMN_CHARS: Final = 40


# --- argument types (their messages say what is expected) -------------------


def uuid_arg(what: str) -> Callable[[str], uuid.UUID]:
    def parse(value: str) -> uuid.UUID:
        try:
            return uuid.UUID(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{value!r} is not a {what} id: give a UUID such as "
                "0b6f4c4e-6a0e-4d55-9a39-2f6f6d3c1a7e"
            ) from None

    parse.__name__ = f"{what} id"
    return parse


def limit_arg(value: str) -> int:
    try:
        return admin.parse_limit(value)
    except admin.BadRequest as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def days_arg(value: str) -> int:
    try:
        days = int(value)
    except ValueError:
        days = 0
    if days < 1:
        raise argparse.ArgumentTypeError(
            f"--days must be a whole number of days, at least 1, not {value!r}"
        )
    return days


# --- parser -----------------------------------------------------------------


def add_commands(commands: Any) -> None:
    """Add `jobs ...` and `analyze` to the `add_subparsers()` object `commands`."""
    jobs = commands.add_parser(
        "jobs",
        help="inspect and steer the job queue (stats, list, retry, reap, reclaim)",
        description="Inspect and steer the job queue.",
    )
    sub = jobs.add_subparsers(dest="jobs_command", metavar="COMMAND", required=True)

    stats = sub.add_parser(
        "stats",
        help="counts by kind and state, oldest pending age",
        description="Job counts by kind and state, and how long the oldest due pending job "
        "has waited. --json prints the body of GET api/stats.",
    )
    stats.add_argument("--json", action="store_true", help="print the admin API's JSON")

    listing = sub.add_parser(
        "list",
        help="jobs newest first, with labels and last_error",
        description="Jobs, most recently updated first. --json prints the body of GET api/jobs "
        "(last_error in full; next_cursor continues the listing with --cursor).",
    )
    listing.add_argument("--state", choices=JOB_STATES, help="only jobs in this state")
    listing.add_argument("--kind", help="only jobs of this kind, e.g. analyze_page")
    listing.add_argument(
        "--limit", type=limit_arg, default=admin.DEFAULT_LIMIT, help="how many, 1-500 (default 50)"
    )
    listing.add_argument("--cursor", help="continue after a listing's next_cursor")
    listing.add_argument("--json", action="store_true", help="print the admin API's JSON")

    retry = sub.add_parser(
        "retry",
        help="dead jobs back to pending, attempts reset",
        description="Move dead jobs back to pending, attempts reset, due now. Give job ids, "
        "or --all-dead (optionally with --kind). A dead job whose page already has a job "
        "pending or running is left dead.",
    )
    retry.add_argument(
        "job_ids", nargs="*", type=uuid_arg("job"), metavar="ID", help="ids of dead jobs"
    )
    retry.add_argument("--all-dead", action="store_true", help="retry every dead job")
    retry.add_argument("--kind", help="with --all-dead: only dead jobs of this kind")
    retry.set_defaults(retry_parser=retry)

    reap = sub.add_parser(
        "reap",
        help="delete done jobs older than N days",
        description="Delete done jobs last updated more than N days ago.",
    )
    reap.add_argument(
        "--days",
        type=days_arg,
        help="retention in days, at least 1 (default: REAP_RETENTION_DAYS, 7)",
    )

    sub.add_parser(
        "reclaim",
        help="give back running jobs whose lease expired",
        description="Running jobs whose lease has expired (their worker died) go back to "
        "pending with the attempt refunded.",
    )

    analyze = commands.add_parser(
        "analyze",
        help="request analysis of a page, chapter, manga or every page missing one",
        description="Request analysis (dedup respected: a page with a job already pending or "
        "running gets no second one). Without --force, pages already analysed are skipped. "
        "--missing takes every page without a done analysis, including those whose analysis "
        f"failed, in batches of {BATCH_SIZE}; on a terminal it shows a progress bar.",
    )
    target = analyze.add_mutually_exclusive_group(required=True)
    target.add_argument("--page", type=uuid_arg("page"), metavar="ID", help="this one page")
    target.add_argument(
        "--chapter", type=uuid_arg("chapter"), metavar="ID", help="every page of this chapter"
    )
    target.add_argument(
        "--manga", type=uuid_arg("manga"), metavar="ID", help="every page of this manga"
    )
    target.add_argument("--missing", action="store_true", help="every page with no done analysis")
    analyze.add_argument(
        "--force", action="store_true", help="re-analyse pages even if already analysed"
    )


def check_usage(args: argparse.Namespace) -> None:
    """Usage errors argparse cannot see; exits 2 with a message (before any database work)."""
    if args.command == "jobs" and args.jobs_command == "retry":
        if bool(args.job_ids) == bool(args.all_dead):
            args.retry_parser.error("give job ids or --all-dead (not both)")
        if args.kind is not None and not args.all_dead:
            args.retry_parser.error("--kind only goes with --all-dead")


def run(args: argparse.Namespace, engine: Engine, *, reap_retention_days: int = 7) -> int:
    """Run the operator command `args` names (see `check_usage`); returns the exit code."""
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


# --- jobs ---------------------------------------------------------------------


def jobs_stats(engine: Engine, *, as_json: bool) -> int:
    with engine.connect() as conn:
        stats = admin.queue_stats(conn)
    if as_json:
        print_json(stats)
        return EXIT_OK
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
    return EXIT_OK


def jobs_list(engine: Engine, args: argparse.Namespace) -> int:
    try:
        with engine.connect() as conn:
            listing = admin.list_jobs(
                conn, state=args.state, kind=args.kind, limit=args.limit, cursor=args.cursor
            )
    except admin.BadRequest as exc:
        error(f"{exc}; see `python -m app jobs list --help`")
        return EXIT_USAGE
    if args.json:
        print_json(listing)
        return EXIT_OK
    if not listing["jobs"]:
        print("no jobs match")
        return EXIT_OK
    rows = [
        [
            job["id"],
            job["kind"] or "?",
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
    return EXIT_OK


def jobs_retry(
    engine: Engine, job_ids: Sequence[uuid.UUID], *, all_dead: bool, kind: str | None
) -> int:
    if all_dead:
        with engine.begin() as conn:
            dead_before = count_dead(conn, kind)
            retried = admin.retry_dead_jobs(conn, kind=kind)
        what = f"dead {kind} job(s)" if kind else "dead job(s)"
        print(f"retried {len(retried)} {what}: back to pending, attempts reset")
        left = dead_before - len(retried)
        if left:
            print(f"left {left} dead: another job for the same page or chapter is in flight")
        return EXIT_OK
    code = EXIT_OK
    for job_id in job_ids:
        # One transaction per id: one that cannot be retried does not undo the others.
        try:
            with engine.begin() as conn:
                admin.retry_job(conn, job_id)
        except admin.NotFound:
            error(f"no such job {job_id}")
            code = EXIT_FAILED
            continue
        except admin.Conflict as exc:
            error(str(exc))
            code = EXIT_FAILED
            continue
        print(f"job {job_id}: back to pending, attempts reset")
    return code


def jobs_reap(engine: Engine, days: int) -> int:
    if days <= 0:
        print("REAP_RETENTION_DAYS is 0 (keep done jobs): nothing deleted; pass --days N")
        return EXIT_OK
    with engine.begin() as conn:
        deleted = reap_done(conn, days)
    print(f"deleted {deleted} done job(s) last updated more than {days} day(s) ago")
    return EXIT_OK


def jobs_reclaim(engine: Engine) -> int:
    with engine.begin() as conn:
        reclaim = reclaim_expired(conn)
    print(
        f"reclaimed {len(reclaim.given_back)} running job(s) whose lease had expired: "
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
    return EXIT_OK


# --- analyze ------------------------------------------------------------------


def analyze(engine: Engine, args: argparse.Namespace) -> int:
    counts = RequestCounts()
    progress: Progress | None = None
    try:
        if args.missing:
            with engine.connect() as conn:
                total = count_unanalysed(conn)
            progress = Progress(total, sys.stderr) if sys.stderr.isatty() else None
            after: uuid.UUID | None = None
            while True:
                # One transaction per batch: short locks, and an interrupted
                # run keeps what it enqueued.
                with engine.begin() as conn:
                    batch = unanalysed_page_ids(conn, after=after, limit=BATCH_SIZE)
                    if not batch:
                        break
                    counts.add(request_pages(conn, batch, force=args.force))
                after = batch[-1]
                if progress:
                    progress.advance(len(batch), counts.enqueued, counts.skipped)
        else:
            target: PageGroup = "page" if args.page else "chapter" if args.chapter else "manga"
            target_id: uuid.UUID = args.page or args.chapter or args.manga
            with engine.connect() as conn:
                page_ids = target_page_ids(conn, target, target_id)
            if target != "page" and sys.stderr.isatty():
                progress = Progress(len(page_ids), sys.stderr)
            for start in range(0, len(page_ids), BATCH_SIZE):
                batch = page_ids[start : start + BATCH_SIZE]
                with engine.begin() as conn:
                    counts.add(request_pages(conn, batch, force=args.force))
                if progress:
                    progress.advance(len(batch), counts.enqueued, counts.skipped)
    except NoSuchTarget as exc:
        error(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        if progress:
            progress.finish()
        error(f"interrupted; {counts.enqueued} job(s) were enqueued and stay queued")
        return EXIT_INTERRUPTED
    if progress:
        progress.finish()
    print(counts_text(counts, force=args.force))
    return EXIT_OK


def counts_text(counts: RequestCounts, *, force: bool) -> str:
    text = f"enqueued {counts.enqueued} analysis job(s); skipped {counts.skipped}"
    reasons = []
    if counts.in_flight:
        marked = ", now forced" if force else ""
        reasons.append(f"{counts.in_flight} already pending or running{marked}")
    if counts.already_done:
        reasons.append(f"{counts.already_done} already analysed: add --force to redo")
    return text + (f" ({'; '.join(reasons)})" if reasons else "")
