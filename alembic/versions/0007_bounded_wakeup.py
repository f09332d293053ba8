"""Wake-up notifications carry a bounded payload, never a raw job kind.

`pg_notify` refuses a payload of 8000 bytes or more, and the triggers of
0003 passed the kind (or, for an insert, every distinct kind joined by
commas) as it stood. Kinds are defined by hosts and a row may already hold
a long one: then inserting it as a due job, and moving it back to pending
(an admin retry, a release), failed with `payload string too long`.

Now each kind is cut to its first 63 characters (the listener compares its
own kinds cut the same way: `WAKEUP_KIND_CHARS`), and an insert whose kinds
together would still be too long sends an empty payload, which wakes every
listener (a spurious lease round, never a lost wake-up).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Sequence

from alembic import op
from manga_page_analysis.db import channel_name

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Kept here, not imported: a migration must not change when the package does.
KIND_CHARS = 63
MAX_PAYLOAD_BYTES = 7999


def _wakeup_channel() -> str:
    """The channel's name as an SQL string literal, for the migration's schema (as in 0003)."""
    schema = op.get_context().version_table_schema or "public"
    return "'" + channel_name("crawler_jobs_wakeup", schema).replace("'", "''") + "'"


def upgrade() -> None:
    channel = _wakeup_channel()
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION crawler_jobs_wake_inserted() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
            kinds text;
        BEGIN
            SELECT string_agg(DISTINCT left(payload ->> 'kind', {KIND_CHARS}), ',') INTO kinds
            FROM inserted_rows
            WHERE state = 'pending' AND scheduled_at <= now();
            IF kinds IS NOT NULL THEN
                IF octet_length(kinds) > {MAX_PAYLOAD_BYTES} THEN
                    kinds := '';
                END IF;
                PERFORM pg_notify({channel}, kinds);
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION crawler_jobs_wake_pending() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify(
                {channel}, coalesce(left(NEW.payload ->> 'kind', {KIND_CHARS}), '')
            );
            RETURN NULL;
        END
        $$
        """
    )


def downgrade() -> None:
    channel = _wakeup_channel()
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION crawler_jobs_wake_inserted() RETURNS trigger
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
        f"""
        CREATE OR REPLACE FUNCTION crawler_jobs_wake_pending() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify({channel}, NEW.payload ->> 'kind');
            RETURN NULL;
        END
        $$
        """
    )
