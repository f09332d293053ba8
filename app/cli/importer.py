"""Importing a folder of page images as a chapter: handy to try the worker.

Images are copied into the storage root under `<manga id>/<chapter>/`, rows
are created for the manga, chapter and pages, and analysis is requested for
each page, all in one transaction.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from sqlalchemy import Engine, insert

from app.models import Chapter, Manga, Page
from app.queue import request_analysis

IMAGE_SUFFIXES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
    ".gif": "image/gif",
    ".bmp": "image/bmp",
}


@dataclass(frozen=True)
class ImportResult:
    manga_id: uuid.UUID
    chapter_id: uuid.UUID
    page_ids: list[uuid.UUID]


def import_folder(
    engine: Engine, storage_root: Path, folder: Path, *, title: str, chapter: Decimal
) -> ImportResult:
    """Import the images of `folder` (sorted by name) as pages 1..n of a new chapter."""
    images = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not images:
        raise ValueError(f"no page images ({', '.join(IMAGE_SUFFIXES)}) in {folder}")
    with engine.begin() as conn:
        manga_id = conn.execute(insert(Manga).values(title=title).returning(Manga.id)).scalar_one()
        chapter_id = conn.execute(
            insert(Chapter).values(manga_id=manga_id, number=chapter).returning(Chapter.id)
        ).scalar_one()
        page_ids = []
        for number, image in enumerate(images, start=1):
            key = f"{manga_id}/{chapter}/{number:04d}{image.suffix.lower()}"
            target = storage_root / key
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(image, target)
            page_id = conn.execute(
                insert(Page)
                .values(
                    chapter_id=chapter_id,
                    number=number,
                    storage_key=key,
                    content_type=IMAGE_SUFFIXES[image.suffix.lower()],
                )
                .returning(Page.id)
            ).scalar_one()
            request_analysis(conn, page_id)
            page_ids.append(page_id)
    return ImportResult(manga_id, chapter_id, page_ids)
