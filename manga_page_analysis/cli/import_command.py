"""`import-pages FOLDER`: a folder of images in as one chapter."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, TextIO

from manga_page_analysis.cli.shutdown import (
    EXIT_FAILED,
)
from manga_page_analysis.config import Settings
from manga_page_analysis.db import database_url, make_engine
from manga_page_analysis.errors import ServiceError

if TYPE_CHECKING:
    from manga_page_analysis.cli.importer import SkippedFile

logger = logging.getLogger("manga_page_analysis.cli")


def import_pages_command(settings: Settings, args: argparse.Namespace) -> int:
    """Import `args.folder` as a chapter; print what was created (ids people look for)
    and what was skipped, and why."""
    from manga_page_analysis.cli.importer import NoPages, import_folder
    from manga_page_analysis.storage import open_storage

    engine = make_engine(database_url(settings), schema=settings.database_schema)
    try:
        result = import_folder(
            engine,
            open_storage(settings),
            args.folder,
            title=args.title,
            chapter=args.chapter,
            new_manga=args.new_manga,
            max_bytes=settings.max_image_bytes,
        )
    except NoPages as exc:
        print(f"error: {exc}", file=sys.stderr)
        _print_skipped(exc.skipped, file=sys.stderr)
        return EXIT_FAILED
    except (OSError, ValueError, ServiceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        engine.dispose()
    if args.json:
        print(json.dumps(asdict(result), indent=2, default=str))
        return 0
    manga = "new manga" if result.created_manga else "existing manga"
    print(
        f"imported {len(result.pages)} page(s) of {args.title!r} chapter {args.chapter} "
        f"into {manga} {result.manga_id} (chapter {result.chapter_id}); analysis requested"
    )
    for page in result.pages:
        print(f"  page {page.number:>3}  {page.page_id}  {page.file}")
    _print_skipped(result.skipped, file=sys.stdout)
    return 0


def _print_skipped(skipped: Sequence[SkippedFile], *, file: TextIO) -> None:
    if skipped:
        print(f"skipped {len(skipped)} file(s):", file=file)
    for entry in skipped:
        print(f"  {entry.file}: {entry.reason}", file=file)
