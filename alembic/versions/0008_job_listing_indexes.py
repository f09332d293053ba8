"""Indexes for the admin's job views: the listing by any state and kind, and a page's jobs.

`list_jobs` pages newest `updated_at` first (ties by id) with a keyset
`(updated_at, id) < cursor`, filtered by state, kind, both or neither:

- `(state, updated_at, id)` serves a state filter, and the unfiltered listing
  as one short range per state, merged (`list_jobs` writes it so);
- `(state, payload->>'kind', updated_at, id)` serves a kind filter (with or
  without a state) the same way, however rare the kind.

Each walk stops after `limit + 1` rows, so a listing costs the same with a
million done jobs as with a hundred. They replace the partial indexes of
done rows (reap_done's `state = 'done' AND updated_at < ...` is a range of
the first) and of dead rows (migration 0004), which they cover.

A page's view lists its `analyze_page` jobs, whatever their state: a partial
index by `payload->>'page_id'` over that kind.

Each index is built `CONCURRENTLY`, in a step outside the migrations'
transaction (manga_page_analysis.online_ddl): workers keep writing while it builds.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from manga_page_analysis.online_ddl import create_index_concurrently, drop_index_concurrently

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KIND = sa.text("(payload ->> 'kind')")


def upgrade() -> None:
    create_index_concurrently(
        "ix_crawler_jobs_state_updated_at", "crawler_jobs", ["state", "updated_at", "id"]
    )
    create_index_concurrently(
        "ix_crawler_jobs_state_kind_updated_at",
        "crawler_jobs",
        ["state", KIND, "updated_at", "id"],
    )
    create_index_concurrently(
        "ix_crawler_jobs_analyze_page_id",
        "crawler_jobs",
        [sa.text("(payload ->> 'page_id')"), "created_at"],
        postgresql_where=sa.text("(payload ->> 'kind') = 'analyze_page'"),
    )
    drop_index_concurrently("ix_crawler_jobs_dead_updated_at", "crawler_jobs")
    drop_index_concurrently("ix_crawler_jobs_done_updated_at", "crawler_jobs")


def downgrade() -> None:
    op.create_index(
        "ix_crawler_jobs_done_updated_at",
        "crawler_jobs",
        ["updated_at"],
        postgresql_where=sa.text("state = 'done'"),
    )
    op.create_index(
        "ix_crawler_jobs_dead_updated_at",
        "crawler_jobs",
        ["updated_at", "id"],
        postgresql_where=sa.text("state = 'dead'"),
    )
    op.drop_index("ix_crawler_jobs_analyze_page_id", table_name="crawler_jobs")
    op.drop_index("ix_crawler_jobs_state_kind_updated_at", table_name="crawler_jobs")
    op.drop_index("ix_crawler_jobs_state_updated_at", table_name="crawler_jobs")
