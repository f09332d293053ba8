"""Lease indexes that skip running rows, wake-up notifications, table health.

1. The lease indexes covered `state IN ('pending', 'running')`, so every live
   running row sat ahead of the due pending rows and each lease stepped over
   all of them. The lease now has two arms: pending rows (these pending-only
   indexes, in schedule order) and running rows with an expired lease (the
   existing `ix_crawler_jobs_running_leased_until`, which finds only the
   expired ones).

2. Instant pickup: inserting due jobs, or moving a job back to pending and
   due (release, admin retry), sends `NOTIFY crawler_jobs_wakeup` with the
   job kinds as payload. It is sent at commit, once per statement for inserts
   (a statement trigger over the transition table: `enqueue_many` and rows
   written by other writers wake workers too) and once per kind per
   transaction for updates (Postgres folds identical notifications). A
   failed attempt waiting out its backoff is not due, so it sends nothing.
   With the tables in another schema than `public` (`DATABASE_SCHEMA`), the
   channel is `<schema>.crawler_jobs_wakeup`, written into the functions here.

3. Table health under churn. Every write a job sees changes an indexed
   column or a column of a partial index predicate (`state`,
   `leased_until`, `updated_at`), so no update of this table is ever HOT:
   each one adds entries to the indexes whatever the fillfactor. What free
   space still buys is that the new row version usually lands on the same
   heap page as the old one: one page dirtied and written instead of two,
   rows of a batch staying together, and the page pruned in place once the
   old versions are dead. 80 keeps that room for the 3 to 5 versions a job
   leaves behind without spreading a large backlog over many more pages.
   Autovacuum: the defaults wait for 20 % of the table to be dead, which on
   a queue that is mostly done rows lets dead index entries pile up in front
   of the pending ones the lease reads first; vacuum after 1,000 dead rows
   plus 2 % (and inserts alike), analyze after 5 %, and without the cost
   delay so one run ends quickly instead of trailing the churn.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from manga_page_analysis.db import channel_name

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INFLIGHT = "state IN ('pending', 'running')"
PENDING = "state = 'pending'"

TABLE_SETTINGS = (
    "fillfactor = 80, "
    "autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0.02, "
    "autovacuum_vacuum_insert_threshold = 1000, autovacuum_vacuum_insert_scale_factor = 0.02, "
    "autovacuum_analyze_threshold = 1000, autovacuum_analyze_scale_factor = 0.05, "
    "autovacuum_vacuum_cost_delay = 0"
)


def _wakeup_channel() -> str:
    """The channel's name as an SQL string literal, for the migration's schema."""
    schema = op.get_context().version_table_schema or "public"
    return "'" + channel_name("crawler_jobs_wakeup", schema).replace("'", "''") + "'"


def upgrade() -> None:
    channel = _wakeup_channel()
    op.create_index(
        "ix_crawler_jobs_pending",
        "crawler_jobs",
        ["scheduled_at", "created_at"],
        unique=False,
        postgresql_where=sa.text(PENDING),
    )
    op.create_index(
        "ix_crawler_jobs_pending_kind",
        "crawler_jobs",
        [sa.literal_column("(payload ->> 'kind')"), "scheduled_at", "created_at"],
        unique=False,
        postgresql_where=sa.text(PENDING),
    )
    op.drop_index("ix_crawler_jobs_lease_kind", table_name="crawler_jobs")
    op.drop_index("ix_crawler_jobs_lease", table_name="crawler_jobs")

    op.execute(f"ALTER TABLE crawler_jobs SET ({TABLE_SETTINGS})")

    op.execute(
        f"""
        CREATE FUNCTION crawler_jobs_wake_inserted() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
            kinds text;
        BEGIN
            SELECT string_agg(DISTINCT payload ->> 'kind', ',') INTO kinds
            FROM inserted_rows
            WHERE state = 'pending' AND scheduled_at <= now();
            IF kinds IS NOT NULL THEN
                PERFORM pg_notify({channel}, kinds);
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER crawler_jobs_wake_on_insert
        AFTER INSERT ON crawler_jobs
        REFERENCING NEW TABLE AS inserted_rows
        FOR EACH STATEMENT EXECUTE FUNCTION crawler_jobs_wake_inserted()
        """
    )
    op.execute(
        f"""
        CREATE FUNCTION crawler_jobs_wake_pending() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify({channel}, NEW.payload ->> 'kind');
            RETURN NULL;
        END
        $$
        """
    )
    # A row trigger with a WHEN clause: the condition is checked in C for each
    # updated row and is false for leases, renewals and acks, so the hot
    # paths queue no trigger event at all.
    op.execute(
        """
        CREATE TRIGGER crawler_jobs_wake_on_pending
        AFTER UPDATE OF state ON crawler_jobs
        FOR EACH ROW
        WHEN (NEW.state = 'pending' AND OLD.state <> 'pending' AND NEW.scheduled_at <= now())
        EXECUTE FUNCTION crawler_jobs_wake_pending()
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER crawler_jobs_wake_on_pending ON crawler_jobs")
    op.execute("DROP TRIGGER crawler_jobs_wake_on_insert ON crawler_jobs")
    op.execute("DROP FUNCTION crawler_jobs_wake_pending()")
    op.execute("DROP FUNCTION crawler_jobs_wake_inserted()")
    op.execute(
        "ALTER TABLE crawler_jobs RESET (fillfactor, "
        "autovacuum_vacuum_threshold, autovacuum_vacuum_scale_factor, "
        "autovacuum_vacuum_insert_threshold, autovacuum_vacuum_insert_scale_factor, "
        "autovacuum_analyze_threshold, autovacuum_analyze_scale_factor, "
        "autovacuum_vacuum_cost_delay)"
    )
    op.create_index(
        "ix_crawler_jobs_lease",
        "crawler_jobs",
        ["scheduled_at", "created_at"],
        unique=False,
        postgresql_where=sa.text(INFLIGHT),
    )
    op.create_index(
        "ix_crawler_jobs_lease_kind",
        "crawler_jobs",
        [sa.literal_column("(payload ->> 'kind')"), "scheduled_at", "created_at"],
        unique=False,
        postgresql_where=sa.text(INFLIGHT),
    )
    op.drop_index("ix_crawler_jobs_pending_kind", table_name="crawler_jobs")
    op.drop_index("ix_crawler_jobs_pending", table_name="crawler_jobs")
