"""`queue_leader`: which process runs the queue's maintenance (reclaiming expired
leases, the crash-loop rule, reaping done jobs), held as a lease that expires.

One row per role; the leader renews `expires_at`, and any process may take the
row over once it has expired. A row, not a session advisory lock, so that the
election works through PgBouncer in transaction mode.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "queue_leader",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("leader_id", sa.Text(), nullable=False),
        sa.Column(
            "elected_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_queue_leader")),
    )


def downgrade() -> None:
    op.drop_table("queue_leader")
