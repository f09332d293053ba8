"""Initial schema: the crawler_jobs queue and the content tables.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "crawler_jobs",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("state", sa.Text(), server_default="pending", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_attempts", sa.Integer(), server_default="5", nullable=False),
        sa.Column("lease_generation", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("leased_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "scheduled_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "state IN ('pending', 'running', 'done', 'failed', 'dead')",
            name=op.f("ck_crawler_jobs_state"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_crawler_jobs")),
    )
    op.create_index(
        "ix_crawler_jobs_done_updated_at",
        "crawler_jobs",
        ["updated_at"],
        unique=False,
        postgresql_where=sa.text("state = 'done'"),
    )
    op.create_index(
        "ix_crawler_jobs_lease",
        "crawler_jobs",
        ["scheduled_at", "created_at"],
        unique=False,
        postgresql_where=sa.text("state IN ('pending', 'running')"),
    )
    op.create_index(
        "ix_crawler_jobs_lease_kind",
        "crawler_jobs",
        [sa.literal_column("(payload ->> 'kind')"), "scheduled_at", "created_at"],
        unique=False,
        postgresql_where=sa.text("state IN ('pending', 'running')"),
    )
    op.create_index(
        "ix_crawler_jobs_running_leased_until",
        "crawler_jobs",
        ["leased_until"],
        unique=False,
        postgresql_where=sa.text("state = 'running'"),
    )
    op.create_index(
        "uq_crawler_jobs_analyze_page_inflight",
        "crawler_jobs",
        [sa.literal_column("(payload ->> 'page_id')")],
        unique=True,
        postgresql_where=sa.text(
            "payload ->> 'kind' = 'analyze_page' AND state IN ('pending', 'running')"
        ),
    )
    op.create_index(
        "uq_crawler_jobs_chapter_content_inflight",
        "crawler_jobs",
        [sa.literal_column("(payload ->> 'chapter_id')")],
        unique=True,
        postgresql_where=sa.text(
            "payload ->> 'kind' = 'sync_chapter_content' AND state IN ('pending', 'running')"
        ),
    )
    op.create_table(
        "mangas",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mangas")),
    )
    op.create_table(
        "chapters",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("manga_id", sa.UUID(), nullable=False),
        sa.Column("number", sa.Numeric(), nullable=False),
        sa.Column("title", sa.Text(), server_default="", nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["manga_id"],
            ["mangas.id"],
            name=op.f("fk_chapters_manga_id_mangas"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chapters")),
    )
    op.create_index(op.f("ix_chapters_manga_id"), "chapters", ["manga_id"], unique=False)
    op.create_table(
        "pages",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("chapter_id", sa.UUID(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("storage_key", sa.Text(), nullable=False),
        sa.Column("content_type", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["chapter_id"],
            ["chapters.id"],
            name=op.f("fk_pages_chapter_id_chapters"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pages")),
        sa.UniqueConstraint("chapter_id", "number", name=op.f("uq_pages_chapter_id")),
    )
    op.create_table(
        "page_analysis",
        sa.Column("page_id", sa.UUID(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("ocr_text", sa.Text(), nullable=True),
        sa.Column(
            "tags",
            postgresql.ARRAY(sa.Text()),
            server_default=sa.text("'{}'::text[]"),
            nullable=False,
        ),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("nsfw_rating", sa.Text(), nullable=True),
        sa.Column("nsfw_score", sa.Float(), nullable=True),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "nsfw_rating IS NULL OR nsfw_rating IN ('safe', 'suggestive', 'explicit')",
            name=op.f("ck_page_analysis_nsfw_rating"),
        ),
        sa.CheckConstraint("status IN ('done', 'failed')", name=op.f("ck_page_analysis_status")),
        sa.CheckConstraint(
            "nsfw_score IS NULL OR (nsfw_score >= 0 AND nsfw_score <= 1)",
            name=op.f("ck_page_analysis_nsfw_score"),
        ),
        sa.ForeignKeyConstraint(
            ["page_id"],
            ["pages.id"],
            name=op.f("fk_page_analysis_page_id_pages"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("page_id", name=op.f("pk_page_analysis")),
    )


def downgrade() -> None:
    op.drop_table("page_analysis")
    op.drop_table("pages")
    op.drop_index(op.f("ix_chapters_manga_id"), table_name="chapters")
    op.drop_table("chapters")
    op.drop_table("mangas")
    op.drop_index(
        "uq_crawler_jobs_chapter_content_inflight",
        table_name="crawler_jobs",
        postgresql_where=sa.text(
            "payload ->> 'kind' = 'sync_chapter_content' AND state IN ('pending', 'running')"
        ),
    )
    op.drop_index(
        "uq_crawler_jobs_analyze_page_inflight",
        table_name="crawler_jobs",
        postgresql_where=sa.text(
            "payload ->> 'kind' = 'analyze_page' AND state IN ('pending', 'running')"
        ),
    )
    op.drop_index(
        "ix_crawler_jobs_running_leased_until",
        table_name="crawler_jobs",
        postgresql_where=sa.text("state = 'running'"),
    )
    op.drop_index(
        "ix_crawler_jobs_lease_kind",
        table_name="crawler_jobs",
        postgresql_where=sa.text("state IN ('pending', 'running')"),
    )
    op.drop_index(
        "ix_crawler_jobs_lease",
        table_name="crawler_jobs",
        postgresql_where=sa.text("state IN ('pending', 'running')"),
    )
    op.drop_index(
        "ix_crawler_jobs_done_updated_at",
        table_name="crawler_jobs",
        postgresql_where=sa.text("state = 'done'"),
    )
    op.drop_table("crawler_jobs")
