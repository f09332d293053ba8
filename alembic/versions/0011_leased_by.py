"""`crawler_jobs.leased_by`: the runner that leased the job last.

Written by the lease statement itself (no extra statement on the hot path) and
never cleared: while a job runs it names the runner that holds it; after, the
runner that ran it last (a dead-lettered crash loop names the process that
died). NULL for a job never leased, or whose last lease named no holder. Not
indexed: it is read one job at a time, and an index would cost every lease.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: adding it rewrites nothing, whatever the table's size.
    op.add_column("crawler_jobs", sa.Column("leased_by", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("crawler_jobs", "leased_by")
