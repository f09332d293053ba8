"""crawler_jobs.reclaim_count: how often a job was reclaimed from a dead worker.

`reclaim_orphaned` refunds the attempt of a job whose worker died, so a page
that kills the whole process (a decoder segfault, an OOM kill) would loop
across restarts forever; counting the reclaims lets it be dead-lettered.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A constant default: no table rewrite on Postgres 11+, safe on a busy queue.
    op.add_column(
        "crawler_jobs",
        sa.Column("reclaim_count", sa.Integer(), server_default="0", nullable=False),
    )


def downgrade() -> None:
    op.drop_column("crawler_jobs", "reclaim_count")
