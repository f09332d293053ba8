"""The schema is built by alembic, and the models agree with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text

from alembic import command
from manga_page_analysis.migrations import (
    alembic_config,
    current_revision,
    differences,
    head_revision,
)


def test_upgrade_head_matches_the_models_and_downgrade_removes_everything(empty_database_url):
    config = alembic_config(empty_database_url)
    engine = create_engine(empty_database_url)
    try:
        command.upgrade(config, "head")
        with engine.connect() as conn:
            assert differences(conn) == []
            tables = set(inspect(conn).get_table_names())
        assert {"crawler_jobs", "mangas", "chapters", "pages", "page_analysis"} <= tables

        command.downgrade(config, "base")
        with engine.connect() as conn:
            assert set(inspect(conn).get_table_names()) == {"alembic_version"}

        command.upgrade(config, "head")
        with engine.connect() as conn:
            version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        assert version == ScriptDirectory.from_config(config).get_current_head()
    finally:
        engine.dispose()


def test_the_comparison_does_notice_a_drift(empty_database_url):
    """Guards the test above: a missing index must show up as a difference."""
    config = alembic_config(empty_database_url)
    engine = create_engine(empty_database_url)
    try:
        command.upgrade(config, "head")
        with engine.begin() as conn:
            conn.execute(text("DROP INDEX uq_crawler_jobs_analyze_page_inflight"))
        with engine.connect() as conn:
            diff = differences(conn)
        assert any(
            op[0] == "add_index" and op[1].name == "uq_crawler_jobs_analyze_page_inflight"
            for op in diff
        )
    finally:
        engine.dispose()


def test_alembic_upgrade_head_from_the_checkout_uses_the_top_level_alembic_ini(
    empty_database_url, tmp_path
):
    """`alembic upgrade head` as a person runs it in a checkout (DATABASE_URL from the
    environment), beside `python -m manga_page_analysis migrate` that the installed package uses."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "DATABASE_URL": empty_database_url}
    result = subprocess.run(
        [sys.executable, "-m", "alembic", "upgrade", "head"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    engine = create_engine(empty_database_url)
    try:
        assert current_revision(engine) == head_revision() is not None
    finally:
        engine.dispose()


def test_host_keys_upgrade_keeps_old_mangas_and_names_duplicate_chapters(empty_database_url):
    """0006 adds the host's keys (NULL on existing mangas) and one chapter per
    number; a database with two chapters of one number is told which, not
    handed the unique index's error."""
    config = alembic_config(empty_database_url)
    engine = create_engine(empty_database_url)
    try:
        command.upgrade(config, "0005")
        with engine.begin() as conn:
            manga_id = conn.execute(
                text("INSERT INTO mangas (title) VALUES ('Old') RETURNING id")
            ).scalar_one()
            conn.execute(
                text("INSERT INTO chapters (manga_id, number) VALUES (:m, 3), (:m, 3.0)"),
                {"m": manga_id},
            )
        with pytest.raises(RuntimeError, match=f"manga {manga_id} chapter 3"):
            command.upgrade(config, "head")
        assert current_revision(engine) == "0005"
        with engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE chapters SET number = 4 WHERE number = 3.0 AND ctid = "
                    "(SELECT max(ctid) FROM chapters)"
                )
            )
        command.upgrade(config, "head")
        with engine.connect() as conn:
            keys = conn.execute(text("SELECT source_id, source_key FROM mangas")).one()
        assert tuple(keys) == (None, None)
    finally:
        engine.dispose()
