"""Importing a folder of page images as a chapter: handy to try the worker."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from sqlalchemy import Connection, Engine, insert, select

from manga_page_analysis.models import Chapter, Manga, Page
from manga_page_analysis.queue import request_analysis
from manga_page_analysis.storage import LocalStorage, Storage

IMAGE_SUFFIXES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
    ".gif": "image/gif",
    ".bmp": "image/bmp",
}


@dataclass(frozen=True)
class ImportedPage:
    number: int
    page_id: uuid.UUID
    job_id: uuid.UUID | None
    file: str


@dataclass(frozen=True)
class ImportResult:
    """`import-pages --json` prints it as it is (`dataclasses.asdict`)."""

    manga_id: uuid.UUID
    chapter_id: uuid.UUID
    created_manga: bool
    pages: list[ImportedPage]

    @property
    def page_ids(self) -> list[uuid.UUID]:
        return [page.page_id for page in self.pages]


def import_folder(
    engine: Engine,
    storage: Storage | Path,
    folder: Path,
    *,
    title: str,
    chapter: Decimal,
    new_manga: bool = False,
) -> ImportResult:
    """Import the images of `folder` (sorted by name) as pages 1..n of a new chapter,
    written to `storage` (a `Path` means a folder) under `<manga id>/<chapter>/`, and
    request their analysis, all in one transaction (an image written before a failure
    stays in the store, unreferenced).

    The chapter goes into the newest manga titled `title`, or a new one when
    there is none or `new_manga` is set. Raises `ValueError` when the folder
    holds no images, or when that manga already has chapter `chapter` (and
    `new_manga` is not set): two copies under one title could not be told apart.
    """
    if isinstance(storage, Path):
        storage = LocalStorage(storage)
    images = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not images:
        raise ValueError(f"no page images ({', '.join(IMAGE_SUFFIXES)}) in {folder}")
    with engine.begin() as conn:
        manga_id = None if new_manga else _manga_titled(conn, title)
        created_manga = manga_id is None
        if manga_id is None:
            manga_id = conn.execute(
                insert(Manga).values(title=title).returning(Manga.id)
            ).scalar_one()
        elif _has_chapter(conn, manga_id, chapter):
            raise ValueError(
                f"manga {title!r} ({manga_id}) already has chapter {chapter}: nothing imported. "
                "Give another --chapter or --title, or --new-manga to import it as a new manga "
                "with the same title"
            )
        chapter_id = conn.execute(
            insert(Chapter).values(manga_id=manga_id, number=chapter).returning(Chapter.id)
        ).scalar_one()
        pages = []
        for number, image in enumerate(images, start=1):
            key = f"{manga_id}/{chapter}/{number:04d}{image.suffix.lower()}"
            content_type = IMAGE_SUFFIXES[image.suffix.lower()]
            storage.write_bytes(key, image.read_bytes(), content_type=content_type)
            page_id = conn.execute(
                insert(Page)
                .values(
                    chapter_id=chapter_id,
                    number=number,
                    storage_key=key,
                    content_type=content_type,
                )
                .returning(Page.id)
            ).scalar_one()
            job_id = request_analysis(conn, page_id)
            pages.append(ImportedPage(number, page_id, job_id, image.name))
    return ImportResult(manga_id, chapter_id, created_manga, pages)


def _manga_titled(conn: Connection, title: str) -> uuid.UUID | None:
    return conn.scalar(
        select(Manga.id).where(Manga.title == title).order_by(Manga.created_at.desc()).limit(1)
    )


def _has_chapter(conn: Connection, manga_id: uuid.UUID, number: Decimal) -> bool:
    found = conn.execute(
        select(Chapter.id).where(Chapter.manga_id == manga_id, Chapter.number == number).limit(1)
    ).first()
    return found is not None
