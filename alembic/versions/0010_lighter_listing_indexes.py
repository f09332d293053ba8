"""Lighter listing indexes: the job listing's indexes leave running rows out, and
only the rare dead (and failed) rows are indexed by kind.

Migration 0008 indexed every row by `(state, updated_at, id)` and by
`(state, kind, updated_at, id)`. A job changes `state` and `updated_at` twice
(leased, then ended), and each change writes a new entry into every index whose
predicate the row meets: six index entries per job on top of the queue's own,
four of them while the job is drained, at the index's busiest page (every
worker's "now"). `make bench` measured it: the multi-process drain lost a
quarter to a third of its throughput.

Now:

- `(state, updated_at, id) WHERE state <> 'running'`: one entry when a job is
  enqueued (pending) and one when it ends; the listing of every state but
  `running`, and `reap_done`'s range of old done rows, walk it as before.
  Running rows are few (at most what the workers hold) and are listed from the
  lease-expiry index, sorted.
- `(state, kind, updated_at, id) WHERE state IN ('dead', 'failed')`: a kind
  filter among the rows an operator looks for by kind. A kind filter on
  pending or done rows walks the first index newest first and skips the other
  kinds.

Each index is built (and dropped) `CONCURRENTLY`, in a step outside the
migrations' transaction (manga_page_analysis.online_ddl): workers keep writing
meanwhile.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from manga_page_analysis.online_ddl import create_index_concurrently, drop_index_concurrently

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KIND = sa.text("(payload ->> 'kind')")


def upgrade() -> None:
    drop_index_concurrently("ix_crawler_jobs_state_kind_updated_at", "crawler_jobs")
    drop_index_concurrently("ix_crawler_jobs_state_updated_at", "crawler_jobs")
    create_index_concurrently(
        "ix_crawler_jobs_listed_updated_at",
        "crawler_jobs",
        ["state", "updated_at", "id"],
        postgresql_where=sa.text("state <> 'running'"),
    )
    create_index_concurrently(
        "ix_crawler_jobs_dead_kind_updated_at",
        "crawler_jobs",
        ["state", KIND, "updated_at", "id"],
        postgresql_where=sa.text("state IN ('dead', 'failed')"),
    )


def downgrade() -> None:
    op.drop_index("ix_crawler_jobs_dead_kind_updated_at", table_name="crawler_jobs")
    op.drop_index("ix_crawler_jobs_listed_updated_at", table_name="crawler_jobs")
    op.create_index(
        "ix_crawler_jobs_state_updated_at", "crawler_jobs", ["state", "updated_at", "id"]
    )
    op.create_index(
        "ix_crawler_jobs_state_kind_updated_at",
        "crawler_jobs",
        ["state", KIND, "updated_at", "id"],
    )
