"""Page fixtures for the worker benchmark: small PNGs on disk and their rows."""

from __future__ import annotations

import io
import random
import uuid
from decimal import Decimal
from pathlib import Path

from PIL import Image, ImageDraw
from sqlalchemy import Engine, insert

from manga_page_analysis.models import Chapter, Manga, Page

PAGES_PER_CHAPTER = 20
PAGE_SIZE_PX = (240, 340)


def page_png(seed: int) -> bytes:
    """A few-KB PNG that looks vaguely like a page: panel borders and scribbles."""
    rng = random.Random(seed)
    image = Image.new("L", PAGE_SIZE_PX, 255)
    draw = ImageDraw.Draw(image)
    width, height = PAGE_SIZE_PX
    for _ in range(4):
        left, top = rng.randrange(0, width // 2), rng.randrange(0, height // 2)
        draw.rectangle(
            (left, top, left + rng.randrange(40, width // 2), top + rng.randrange(40, height // 2)),
            outline=0,
            width=2,
        )
    for _ in range(40):
        x, y = rng.randrange(width), rng.randrange(height)
        draw.line((x, y, x + rng.randrange(-30, 30), y + rng.randrange(-30, 30)), fill=0)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def create_pages(engine: Engine, storage_root: Path, count: int) -> list[uuid.UUID]:
    """Write `count` page images under `storage_root` and insert one manga, its
    chapters and the pages; returns the page ids in page order."""
    storage_root.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    page_ids: list[uuid.UUID] = []
    with engine.begin() as conn:
        manga_id = conn.execute(
            insert(Manga).values(title="Benchmark Manga").returning(Manga.id)
        ).scalar_one()
        chapter_ids: list[uuid.UUID] = []
        for number in range(1, (count + PAGES_PER_CHAPTER - 1) // PAGES_PER_CHAPTER + 1):
            chapter_ids.append(
                conn.execute(
                    insert(Chapter)
                    .values(manga_id=manga_id, number=Decimal(number), title=f"Chapter {number}")
                    .returning(Chapter.id)
                ).scalar_one()
            )
        for index in range(count):
            key = f"bench/{index:05d}.png"
            (storage_root / key).parent.mkdir(parents=True, exist_ok=True)
            (storage_root / key).write_bytes(page_png(index))
            page_ids.append(uuid.uuid4())
            rows.append(
                {
                    "id": page_ids[-1],
                    "chapter_id": chapter_ids[index // PAGES_PER_CHAPTER],
                    "number": index % PAGES_PER_CHAPTER + 1,
                    "storage_key": key,
                    "content_type": "image/png",
                }
            )
        conn.execute(insert(Page), rows)
    return page_ids
