"""`storage copy`: the pages' images from a folder into a bucket."""

from __future__ import annotations

import argparse
import logging
import sys

from manga_page_analysis.cli.output import DB_CONNECT_TIMEOUT_SECONDS
from manga_page_analysis.cli.shutdown import (
    EXIT_FAILED,
    EXIT_USAGE,
)
from manga_page_analysis.config import Settings
from manga_page_analysis.db import make_engine

logger = logging.getLogger("manga_page_analysis.cli")


def storage_copy_command(settings: Settings, args: argparse.Namespace) -> int:
    """`storage copy`: the pages' images from a folder into a bucket; 0 when all are there."""
    from manga_page_analysis.cli.storage_copy import copy_store
    from manga_page_analysis.storage import LocalStorage
    from manga_page_analysis.storage.s3 import S3Storage

    to = args.to or settings.storage_url
    if not to:
        print("error: give --to s3://bucket/prefix, or set STORAGE_URL", file=sys.stderr)
        return EXIT_USAGE
    source = LocalStorage(args.source or settings.storage_root)
    if not source.root.is_dir():
        print(f"error: {source.root} is not a folder (--from, STORAGE_ROOT)", file=sys.stderr)
        return EXIT_FAILED
    target = S3Storage(to, max_pool_connections=args.jobs)
    engine = make_engine(settings, connect_args={"connect_timeout": DB_CONNECT_TIMEOUT_SECONDS})
    try:
        report = copy_store(engine, source, target, jobs=args.jobs, overwrite=args.overwrite)
    finally:
        engine.dispose()
    print(
        f"storage copy {source.root} -> {target.location}: {report.copied} copied, "
        f"{report.present} already there, {report.missing} missing from the folder, "
        f"{report.failed} failed"
    )
    return 0 if report.complete else EXIT_FAILED
