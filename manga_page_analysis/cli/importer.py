"""Importing a folder of page images as a chapter: handy to try the worker. The
pages go in through the public pages-in API (`manga_page_analysis.pages`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from sqlalchemy import Engine

from manga_page_analysis.config import DEFAULT_MAX_IMAGE_BYTES
from manga_page_analysis.pages import PageRefused, add_page, ensure_chapter
from manga_page_analysis.pages.adding import MAX_TITLE_CHARS, check_text
from manga_page_analysis.repos.catalog import create_manga, has_chapter, newest_manga_titled
from manga_page_analysis.storage import LocalStorage, Storage

IMAGE_SUFFIXES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
    ".gif": "image/gif",
    ".bmp": "image/bmp",
}
"""The file names taken as pages (the content type stored is the decoded one)."""
_NAMES = ", ".join(IMAGE_SUFFIXES)


@dataclass(frozen=True)
class ImportedPage:
    number: int
    page_id: uuid.UUID
    job_id: uuid.UUID | None
    file: str


@dataclass(frozen=True)
class SkippedFile:
    """A folder entry that is not a page, and why."""

    file: str
    reason: str


@dataclass(frozen=True)
class ImportResult:
    """`import-pages --json` prints it as it is (`dataclasses.asdict`)."""

    manga_id: uuid.UUID
    chapter_id: uuid.UUID
    created_manga: bool
    pages: list[ImportedPage]
    skipped: list[SkippedFile] = field(default_factory=list)

    @property
    def page_ids(self) -> list[uuid.UUID]:
        return [page.page_id for page in self.pages]


class NoPages(ValueError):
    """The folder holds no page image; `skipped` says what it holds instead."""

    def __init__(self, message: str, skipped: list[SkippedFile]) -> None:
        super().__init__(message)
        self.skipped = skipped


def import_folder(
    engine: Engine,
    storage: Storage | Path,
    folder: Path,
    *,
    title: str,
    chapter: Decimal,
    new_manga: bool = False,
    max_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
) -> ImportResult:
    """Import the images of `folder` (sorted by name) as pages 1..n of a new chapter,
    stored through `storage` (a folder: a `LocalStorage` there), and request their
    analysis, all in one transaction.

    Entries that are not pages are skipped and listed: other file names, files
    that do not decode as images or are larger than `max_bytes`, symbolic
    links that lead out of the folder, folders. The chapter goes into the
    newest manga titled `title`, or a new one when there is none or
    `new_manga` is set. Raises `NoPages` (a `ValueError`) when the folder
    holds no images, and `ValueError` when that manga already has chapter
    `chapter` (and `new_manga` is not set): two copies under one title could
    not be told apart.
    """
    store = LocalStorage(storage) if isinstance(storage, Path) else storage
    check_text(title, "the manga's title", max_chars=MAX_TITLE_CHARS)  # PageRefused, a ValueError
    candidates, skipped = _candidates(folder)
    with engine.begin() as conn:
        manga_id = None if new_manga else newest_manga_titled(conn, title)
        created_manga = manga_id is None
        if manga_id is None:
            manga_id = create_manga(conn, title)
        elif has_chapter(conn, manga_id, chapter):
            raise ValueError(
                f"manga {title!r} ({manga_id}) already has chapter {chapter}: nothing imported. "
                "Give another --chapter or --title, or --new-manga to import it as a new manga "
                "with the same title"
            )
        chapter_id = ensure_chapter(conn, manga_id, number=chapter)
        pages: list[ImportedPage] = []
        for image in candidates:
            try:
                added = add_page(
                    conn,
                    store,
                    chapter_id,
                    number=len(pages) + 1,
                    # Resolved: the file read is the one checked to be inside the folder.
                    file=image.resolve(),
                    max_bytes=max_bytes,
                    analyze=True,
                )
            except PageRefused as refused:
                skipped.append(SkippedFile(image.name, str(refused)))
                continue
            except OSError as exc:
                skipped.append(SkippedFile(image.name, f"cannot be read: {exc.strerror or exc}"))
                continue
            pages.append(ImportedPage(len(pages) + 1, added.page_id, added.job_id, image.name))
        skipped.sort(key=lambda entry: entry.file)
        if not pages:
            # Leaving the block by an exception rolls back the manga and chapter.
            raise NoPages(f"no page images ({_NAMES}) in {folder}", skipped)
    return ImportResult(manga_id, chapter_id, created_manga, pages, skipped)


def _candidates(folder: Path) -> tuple[list[Path], list[SkippedFile]]:
    """The entries of `folder` that may be pages (by name, inside the folder),
    in name order, and the others with the reason they are not."""
    root = folder.resolve()
    candidates: list[Path] = []
    skipped: list[SkippedFile] = []
    for entry in sorted(folder.iterdir()):
        if entry.suffix.lower() not in IMAGE_SUFFIXES:
            reason = "a folder" if entry.is_dir() else f"not a page image name ({_NAMES})"
            skipped.append(SkippedFile(entry.name, reason))
        elif not entry.resolve().is_relative_to(root):
            # `a.png -> /etc/passwd` must not be copied into the store.
            skipped.append(SkippedFile(entry.name, "a symbolic link out of the folder"))
        elif entry.is_dir():
            skipped.append(SkippedFile(entry.name, "a folder"))
        else:
            candidates.append(entry)
    return candidates, skipped
