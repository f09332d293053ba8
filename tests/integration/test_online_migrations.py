"""Migrations that index `crawler_jobs` build CONCURRENTLY, outside the one
transaction (manga_page_analysis.online_ddl): workers' writes go on while an
index builds, and an invalid index left by an interrupted build is rebuilt by
the next `migrate`. Also outside `public`, where the schema is named only on
the migrations' transaction's `search_path`."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

from alembic import command
from manga_page_analysis.db import make_engine
from manga_page_analysis.migrations import alembic_config, differences, head_revision, migrate
from manga_page_analysis.queue import SyncManga, enqueue
from tests.helpers import wait_until

LISTED = "ix_crawler_jobs_listed_updated_at"  # built by 0010


def _index_state(conn, schema: str, name: str):
    return conn.execute(
        text(
            "SELECT i.indisvalid, pg_get_indexdef(i.indexrelid) FROM pg_index AS i "
            "JOIN pg_class AS c ON c.oid = i.indexrelid "
            "JOIN pg_namespace AS n ON n.oid = c.relnamespace "
            "WHERE n.nspname = :schema AND c.relname = :name"
        ),
        {"schema": schema, "name": name},
    ).first()


@pytest.mark.parametrize("schema", ["public", "page_analysis"])
def test_an_invalid_index_left_by_an_interrupted_build_is_rebuilt_by_the_next_migrate(
    empty_database_url, schema
):
    command.upgrade(alembic_config(empty_database_url, schema), "0009")
    engine = make_engine(empty_database_url, schema=schema)
    try:
        with engine.begin() as conn:
            for key in ("a", "b"):
                enqueue(conn, SyncManga(source_id="s", source_manga_key=key))
        # An interrupted CONCURRENTLY build: a unique one over two equal rows
        # fails after creating its index, and leaves it invalid.
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            with pytest.raises(Exception, match="could not create unique index"):
                conn.execute(
                    text(
                        f'CREATE UNIQUE INDEX CONCURRENTLY {LISTED} ON "{schema}".crawler_jobs (state)'
                    )
                )
            assert _index_state(conn, schema, LISTED)[0] is False

        before, after = migrate(empty_database_url, schema)

        assert (before, after) == ("0009", head_revision())
        with engine.connect() as conn:
            valid, definition = _index_state(conn, schema, LISTED)
            assert valid is True
            assert "UNIQUE" not in definition and "WHERE (state <> 'running'::text)" in definition
            assert differences(conn, schema) == []
            # The migrations after 0010 ran in the schema too (its search_path came back).
            assert (
                conn.execute(
                    text(
                        "SELECT count(*) FROM information_schema.columns "
                        "WHERE table_schema = :schema AND table_name = 'crawler_jobs' "
                        "AND column_name = 'leased_by'"
                    ),
                    {"schema": schema},
                ).scalar_one()
                == 1
            )
    finally:
        engine.dispose()


def test_writes_go_on_while_migrate_builds_an_index(empty_database_url):
    command.upgrade(alembic_config(empty_database_url), "0009")
    engine = make_engine(empty_database_url)
    try:
        with engine.begin() as conn:
            enqueue(conn, SyncManga(source_id="s", source_manga_key="old"))
        # A transaction that wrote to the table and stays open: an index step
        # waits for it, plain or concurrent. A plain one's lock request (SHARE
        # to build, ACCESS EXCLUSIVE to drop) would queue every other writer
        # behind it meanwhile; a concurrent one queues no one.
        holder = engine.connect()
        holder.begin()
        holder.execute(text("UPDATE crawler_jobs SET max_attempts = 6"))
        migrated = threading.Thread(target=migrate, args=(empty_database_url,))
        migrated.start()
        try:
            with engine.connect() as watch:

                def waiting() -> bool:
                    watch.rollback()  # a fresh snapshot of pg_stat_activity
                    return bool(
                        watch.execute(
                            text(
                                "SELECT count(*) FROM pg_stat_activity "
                                "WHERE query ILIKE '%CONCURRENTLY%' AND wait_event_type = 'Lock'"
                            )
                        ).scalar_one()
                    )

                wait_until(waiting, timeout=60)  # the migration's index step waits for `holder`
            with engine.begin() as conn:
                conn.execute(text("SET LOCAL lock_timeout = '5s'"))
                assert enqueue(conn, SyncManga(source_id="s", source_manga_key="new")) is not None
        finally:
            holder.rollback()
            holder.close()
            migrated.join(timeout=60)
        assert not migrated.is_alive()
        with engine.connect() as conn:
            assert _index_state(conn, "public", LISTED)[0] is True
            assert conn.execute(text("SELECT count(*) FROM crawler_jobs")).scalar_one() == 2
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == (
                head_revision()
            )
    finally:
        engine.dispose()
