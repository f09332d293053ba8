"""Declarative models. The migrations in `alembic/versions` build the same schema;
`tests/integration/test_migrations.py` checks that the two agree."""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Numeric,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    # Not `column_0_label`: that would put the schema in the name.
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

JOB_STATES = ("pending", "running", "done", "failed", "dead")
ANALYSIS_STATUSES = ("done", "failed")
NSFW_RATINGS = ("safe", "suggestive", "explicit")
"""`nsfw_rating` values, mildest first: the check constraint and the model's answer schema."""

INFLIGHT = "state IN ('pending', 'running')"
DEDUP_SLOTS = {
    "uq_crawler_jobs_chapter_content_inflight": ("sync_chapter_content", "chapter_id"),
    "uq_crawler_jobs_analyze_page_inflight": ("analyze_page", "page_id"),
}
"""The jobs that hold a dedup slot, at most one in flight per chapter / page: each
slot's unique index, and the kind and the payload field that name the slot."""

TABLE_SETTINGS = {
    "fillfactor": "80",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_scale_factor": "0.02",
    "autovacuum_vacuum_insert_threshold": "1000",
    "autovacuum_vacuum_insert_scale_factor": "0.02",
    "autovacuum_analyze_threshold": "1000",
    "autovacuum_analyze_scale_factor": "0.05",
    "autovacuum_vacuum_cost_delay": "0",
}
"""crawler_jobs storage parameters, as set by migration 0003."""


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _partial(name: str, *columns: Any, where: str, unique: bool = False) -> Index:
    """An index of the rows matching `where` only."""
    return Index(name, *columns, unique=unique, postgresql_where=text(where))


class Base(DeclarativeBase):
    # "public" is also the key `manga_page_analysis.db.schema_options` translates:
    # a host's tables (no schema of their own) never move with ours.
    metadata = MetaData(schema="public", naming_convention=NAMING_CONVENTION)


def _uuid_pk() -> Mapped[uuid.UUID]:
    return mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=func.gen_random_uuid()
    )


def _timestamp() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())


class Job(Base):
    """A row of the durable queue, shared by crawl and analysis jobs."""

    __tablename__ = "crawler_jobs"

    id: Mapped[uuid.UUID] = _uuid_pk()
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    state: Mapped[str] = mapped_column(Text, nullable=False, server_default="pending")
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    max_attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default="5")
    lease_generation: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    leased_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    scheduled_at: Mapped[datetime] = _timestamp()
    created_at: Mapped[datetime] = _timestamp()
    updated_at: Mapped[datetime] = _timestamp()
    last_error: Mapped[str | None] = mapped_column(Text)
    reclaim_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    """How often the job's lease was reclaimed from a worker that died (crash-loop guard)."""
    leased_by: Mapped[str | None] = mapped_column(Text)
    """The runner that leased the job last (never cleared; migration 0011)."""

    __table_args__ = (
        CheckConstraint(_in("state", JOB_STATES), name="state"),
        # The lease reads due pending rows in schedule order through these
        # pending-only indexes, so it never steps over running rows; its other
        # arm, running rows with an expired lease, uses the leased_until index
        # below (migration 0003).
        _partial(
            "ix_crawler_jobs_pending_kind",
            text("(payload ->> 'kind')"),
            "scheduled_at",
            "created_at",
            where="state = 'pending'",
        ),
        _partial(
            "ix_crawler_jobs_pending", "scheduled_at", "created_at", where="state = 'pending'"
        ),
        # reclaim_orphaned and the lease's expired arm: running rows by lease expiry.
        _partial("ix_crawler_jobs_running_leased_until", "leased_until", where="state = 'running'"),
        # The admin's job listing by state, newest first, and reap_done by age;
        # running rows (few) are left out, and only dead and failed rows are
        # indexed by kind: every index a row enters costs each state change
        # (migration 0010). A page's analyze_page jobs.
        _partial(
            "ix_crawler_jobs_listed_updated_at",
            "state",
            "updated_at",
            "id",
            where="state <> 'running'",
        ),
        _partial(
            "ix_crawler_jobs_dead_kind_updated_at",
            "state",
            text("(payload ->> 'kind')"),
            "updated_at",
            "id",
            where="state IN ('dead', 'failed')",
        ),
        _partial(
            "ix_crawler_jobs_analyze_page_id",
            text("(payload ->> 'page_id')"),
            "created_at",
            where="(payload ->> 'kind') = 'analyze_page'",
        ),
        *(
            _partial(
                name,
                text(f"(payload ->> '{field}')"),
                unique=True,
                where=f"payload ->> 'kind' = '{kind}' AND {INFLIGHT}",
            )
            for name, (kind, field) in DEDUP_SLOTS.items()
        ),
        # Storage and autovacuum settings (reasoning in migration 0003), and
        # the wake-up triggers, live in the migrations only: autogenerate
        # compares neither.
        {"postgresql_with": TABLE_SETTINGS},
    )


class QueueLeader(Base):
    """Who runs the queue's maintenance: one row per role, held until `expires_at`."""

    __tablename__ = "queue_leader"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    leader_id: Mapped[str] = mapped_column(Text)
    elected_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Manga(Base):
    __tablename__ = "mangas"

    id: Mapped[uuid.UUID] = _uuid_pk()
    title: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = _timestamp()
    # The host's own name for the manga (its source and its key there), by which
    # `pages.ensure_manga` finds it; both NULL for mangas made otherwise.
    source_id: Mapped[str | None] = mapped_column(Text)
    source_key: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        UniqueConstraint("source_id", "source_key"),
        CheckConstraint("(source_id IS NULL) = (source_key IS NULL)", name="source_keys"),
    )


class Chapter(Base):
    __tablename__ = "chapters"

    id: Mapped[uuid.UUID] = _uuid_pk()
    manga_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("mangas.id", ondelete="CASCADE"), nullable=False, index=True
    )
    # Numeric, not int: chapters like 10.5 exist.
    number: Mapped[Decimal] = mapped_column(Numeric, nullable=False)
    title: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    created_at: Mapped[datetime] = _timestamp()

    __table_args__ = (UniqueConstraint("manga_id", "number"),)


class Page(Base):
    __tablename__ = "pages"

    id: Mapped[uuid.UUID] = _uuid_pk()
    chapter_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("chapters.id", ondelete="CASCADE"), nullable=False
    )
    number: Mapped[int] = mapped_column(Integer, nullable=False)
    storage_key: Mapped[str] = mapped_column(Text, nullable=False)
    content_type: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _timestamp()

    __table_args__ = (UniqueConstraint("chapter_id", "number"),)


class PageAnalysis(Base):
    """The latest analysis of a page: `done` with results, or `failed` with `error`."""

    __tablename__ = "page_analysis"

    page_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("pages.id", ondelete="CASCADE"), primary_key=True
    )
    status: Mapped[str] = mapped_column(Text, nullable=False)
    ocr_text: Mapped[str | None] = mapped_column(Text)
    ocr_blocks: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONB)
    tags: Mapped[list[str]] = mapped_column(
        ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")
    )
    description: Mapped[str | None] = mapped_column(Text)
    nsfw_rating: Mapped[str | None] = mapped_column(Text)
    nsfw_score: Mapped[float | None] = mapped_column(Float)
    model: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    duration_ms: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = _timestamp()
    updated_at: Mapped[datetime] = _timestamp()

    __table_args__ = (
        CheckConstraint(_in("status", ANALYSIS_STATUSES), name="status"),
        CheckConstraint(
            f"nsfw_rating IS NULL OR {_in('nsfw_rating', NSFW_RATINGS)}", name="nsfw_rating"
        ),
        CheckConstraint(
            "nsfw_score IS NULL OR (nsfw_score >= 0 AND nsfw_score <= 1)", name="nsfw_score"
        ),
    )
