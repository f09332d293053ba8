"""An index for the dead-job listing (admin page, `jobs list --state dead`).

`list_jobs` pages newest `updated_at` first (ties by id) with a keyset
`(updated_at, id) < cursor`. Without an index it read every row of the table
and sorted (about 70-100 ms at 200,000 jobs); dead rows are few and rarely
written, so a partial index over them costs the queue's hot path nothing and
serves that listing as a backward index scan that stops after `limit` rows.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_crawler_jobs_dead_updated_at",
        "crawler_jobs",
        ["updated_at", "id"],
        unique=False,
        postgresql_where=sa.text("state = 'dead'"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_crawler_jobs_dead_updated_at",
        table_name="crawler_jobs",
        postgresql_where=sa.text("state = 'dead'"),
    )
