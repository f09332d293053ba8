"""`storage copy`: move a local store (a `STORAGE_ROOT` folder) into an S3-compatible bucket.

What is copied is what the `pages` table references, each object with its page's content
type (a file on disk has none to give) and verified after the write: its bytes, read
back, must be the file's (the store's size and `x-amz-meta-sha256` are metadata anyone
can write, not proof). An object already in the bucket with the file's bytes is skipped,
so a run that was interrupted (or failed on some objects) is simply run again; one with
other bytes is left alone and counted failed, unless `overwrite`. Files under the folder
that no page references are left behind.
"""

from __future__ import annotations

import mimetypes
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Final, Literal, TextIO

from sqlalchemy import Engine, func, select

from manga_page_analysis.cli.parser import DEFAULT_COPY_JOBS
from manga_page_analysis.errors import ObjectNotFound, ObjectTooLarge, StorageError
from manga_page_analysis.models import Page
from manga_page_analysis.storage import LocalStorage
from manga_page_analysis.storage.s3 import S3Storage

BATCH_SIZE: Final = 1000
"""Keys read from the database, and handed to the copying threads, at a time."""

Outcome = Literal["copied", "present", "missing", "failed"]


@dataclass(frozen=True)
class CopyReport:
    """How many objects were copied, found already there (verified), missing from the
    folder, or failed (an error or a verification mismatch)."""

    copied: int = 0
    present: int = 0
    missing: int = 0
    failed: int = 0

    @property
    def complete(self) -> bool:
        """Every referenced object is now in the bucket, verified."""
        return self.missing == 0 and self.failed == 0


def copy_store(
    engine: Engine,
    source: LocalStorage,
    target: S3Storage,
    *,
    jobs: int = DEFAULT_COPY_JOBS,
    problems: TextIO = sys.stderr,
    overwrite: bool = False,
) -> CopyReport:
    """Copy every object the `pages` table references from `source` to `target`; each
    missing or failed one is named on `problems`, one line each. A different object
    already under a key is replaced only with `overwrite`."""
    counts: Counter[str] = Counter()

    def copy_one(item: tuple[str, str | None]) -> Outcome:
        key, content_type = item
        outcome, why = _copy(source, target, key, content_type, overwrite=overwrite)
        if why:
            print(f"{outcome}: {key}: {why}", file=problems, flush=True)
        return outcome

    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="storage-copy") as pool:
        keys = _referenced_keys(engine)
        while batch := list(islice(keys, BATCH_SIZE)):
            counts.update(pool.map(copy_one, batch))
    return CopyReport(**counts)


def _referenced_keys(engine: Engine) -> Iterator[tuple[str, str | None]]:
    """Each storage key of the `pages` table once, with a content type of its pages."""
    query = (
        select(Page.storage_key, func.max(Page.content_type))
        .group_by(Page.storage_key)
        .order_by(Page.storage_key)
    )
    with engine.connect() as conn:
        result = conn.execution_options(yield_per=BATCH_SIZE).execute(query)
        for key, content_type in result:
            yield str(key), content_type


def _copy(
    source: LocalStorage,
    target: S3Storage,
    key: str,
    content_type: str | None,
    *,
    overwrite: bool,
) -> tuple[Outcome, str]:
    try:
        with source.open(key) as stream:
            data = stream.read()
    except ObjectNotFound:
        return "missing", f"no file under {source.root}"
    except (StorageError, OSError) as exc:
        return "failed", str(exc)
    try:
        same = _holds(target, key, data)
        if same:
            return "present", ""
        if same is not None and not overwrite:
            return (
                "failed",
                "a different object is already under this key (--overwrite replaces it)",
            )
        target.write_bytes(
            key,
            data,
            content_type=content_type or mimetypes.guess_type(key)[0] or "application/octet-stream",
        )
        if not _holds(target, key, data):
            return "failed", "the stored object's bytes, read back, differ from the file's"
    except StorageError as exc:
        return "failed", str(exc)
    return "copied", ""


def _holds(target: S3Storage, key: str, data: bytes) -> bool | None:
    """Whether the object under `key` has exactly the bytes `data` (`None`: no object)."""
    try:
        return target.read_bytes(key, len(data)) == data
    except ObjectNotFound:
        return None
    except ObjectTooLarge:
        return False
