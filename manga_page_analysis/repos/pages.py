"""Pages repository: what the worker needs to know about a page, and which pages a
request for analysis covers."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from sqlalchemy import ColumnElement, Select, bindparam, exists, func, select
from sqlalchemy.util.typing import TupleAny

from manga_page_analysis.db import Conn
from manga_page_analysis.models import Chapter, Manga, Page, PageAnalysis


@dataclass(frozen=True, slots=True)
class PageContext:
    """A page with its breadcrumb: the chapter and manga it belongs to."""

    page_id: uuid.UUID
    storage_key: str
    content_type: str | None
    page_number: int
    chapter_id: uuid.UUID
    chapter_number: Decimal
    manga_id: uuid.UUID
    manga_title: str


def get_page_to_analyse(conn: Conn, page_id: uuid.UUID) -> tuple[PageContext, str | None] | None:
    """The page, its breadcrumb and the status of its analysis (`done`, `failed`,
    or `None` when never analysed), in one query; `None` when the page no
    longer exists. A page job's `load` needs both, once per job."""
    row = conn.execute(_page_to_analyse(), {"page_id": page_id}).first()
    if row is None:
        return None
    *context, status = row
    return PageContext(*context), status


@functools.cache
def _page_to_analyse() -> Select[*TupleAny]:
    """The statement of `get_page_to_analyse`, built once (on first use)."""
    return (
        select(
            Page.id,
            Page.storage_key,
            Page.content_type,
            Page.number,
            Chapter.id,
            Chapter.number,
            Manga.id,
            Manga.title,
            PageAnalysis.status,
        )
        .join(Chapter, Chapter.id == Page.chapter_id)
        .join(Manga, Manga.id == Chapter.manga_id)
        .outerjoin(PageAnalysis, PageAnalysis.page_id == Page.id)
        .where(Page.id == bindparam("page_id"))
    )


# --- selections for requests of analysis ------------------------------------------

PageGroup = Literal["page", "chapter", "manga"]


def page_ids_of(conn: Conn, group: PageGroup, group_id: uuid.UUID) -> list[uuid.UUID] | None:
    """The pages of a page, chapter or manga, in reading order; `None` when
    that page, chapter or manga does not exist (one without pages gives `[]`)."""
    key = {"page": Page.id, "chapter": Chapter.id, "manga": Manga.id}[group]
    if conn.execute(select(key).where(key == group_id)).first() is None:
        return None
    if group == "page":
        return [group_id]
    statement = select(Page.id).join(Chapter, Chapter.id == Page.chapter_id)
    if group == "chapter":
        statement = statement.where(Page.chapter_id == group_id)
    else:
        statement = statement.where(Chapter.manga_id == group_id)
    statement = statement.order_by(Chapter.number, Page.number, Page.id)
    return list(conn.execute(statement).scalars())


def _analysed() -> ColumnElement[bool]:
    return exists().where(PageAnalysis.page_id == Page.id, PageAnalysis.status == "done")


def count_unanalysed(conn: Conn) -> int:
    """Pages with no `done` analysis: never analysed, or whose analysis failed."""
    statement = select(func.count()).select_from(Page).where(~_analysed())
    return int(conn.execute(statement).scalar_one())


def unanalysed_page_ids(conn: Conn, *, after: uuid.UUID | None, limit: int) -> list[uuid.UUID]:
    """The next `limit` pages (by id, after `after`) with no `done` analysis: pass
    the last id of a batch as `after` for the next, so no page is seen twice."""
    statement = select(Page.id).where(~_analysed())
    if after is not None:
        statement = statement.where(Page.id > after)
    return list(conn.execute(statement.order_by(Page.id).limit(limit)).scalars())


def analysed_page_ids(conn: Conn, page_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Those of `page_ids` whose analysis is `done`."""
    statement = select(PageAnalysis.page_id).where(
        PageAnalysis.page_id.in_(page_ids), PageAnalysis.status == "done"
    )
    return set(conn.execute(statement).scalars())


def some_storage_key(conn: Conn) -> str | None:
    """The storage key of one page (any), or `None` when there is no page: what a
    start-up check reads to see that the store lets the worker read page images."""
    return conn.execute(select(Page.storage_key).limit(1)).scalar()
