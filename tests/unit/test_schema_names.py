"""How the package names its objects in another schema, and when a failed
`migrate` may blame a pooler."""

from __future__ import annotations

import psycopg
import pytest

from manga_page_analysis.cli.migrate_command import could_be_the_pooler, revision_text
from manga_page_analysis.db import channel_name
from manga_page_analysis.queue.states import _TAKE_EXPIRED
from manga_page_analysis.queue.table import in_schema


def test_hand_written_sql_names_the_schema_of_its_tables() -> None:
    """Only the `<<table>>` placeholders are rendered: a CTE, an alias or a string
    named like one of the tables is left as written."""
    statement = (
        "WITH pages AS (SELECT 1) UPDATE <<crawler_jobs>> AS crawler_jobs SET state = 'done' "
        "FROM unnest(%(ids)s::uuid[]) AS v(id) JOIN <<pages>> p ON true JOIN pages ON true "
        "WHERE crawler_jobs.payload ->> 'kind' = 'crawler_jobs_wakeup'"
    )
    assert in_schema(statement, "public") == (
        "WITH pages AS (SELECT 1) UPDATE crawler_jobs AS crawler_jobs SET state = 'done' "
        "FROM unnest(%(ids)s::uuid[]) AS v(id) JOIN pages p ON true JOIN pages ON true "
        "WHERE crawler_jobs.payload ->> 'kind' = 'crawler_jobs_wakeup'"
    )
    assert in_schema(statement, "pa") == (
        "WITH pages AS (SELECT 1) UPDATE \"pa\".crawler_jobs AS crawler_jobs SET state = 'done' "
        'FROM unnest(%(ids)s::uuid[]) AS v(id) JOIN "pa".pages p ON true JOIN pages ON true '
        "WHERE crawler_jobs.payload ->> 'kind' = 'crawler_jobs_wakeup'"
    )
    # Every table of a real statement, none left to `search_path`.
    qualified = in_schema(_TAKE_EXPIRED, "pa")
    assert qualified.count('"pa".crawler_jobs') == _TAKE_EXPIRED.count("<<crawler_jobs>>") > 0
    assert "<<" not in qualified


def test_a_placeholder_naming_no_table_is_refused() -> None:
    with pytest.raises(ValueError, match="<<crawler_job>> names no table"):
        in_schema("SELECT 1 FROM <<crawler_job>>", "pa")


def test_every_table_of_the_models_can_be_named_in_hand_written_sql() -> None:
    """A table added to the models is rendered too (queue_leader once was not)."""
    from manga_page_analysis.models import Base

    for table in Base.metadata.tables.values():
        assert (
            in_schema(f"SELECT 1 FROM <<{table.name}>>", "pa") == f'SELECT 1 FROM "pa".{table.name}'
        )
        assert (
            in_schema(f"SELECT 1 FROM <<{table.name}>>", "public") == f"SELECT 1 FROM {table.name}"
        )


def test_channels_keep_their_names_in_public_only() -> None:
    assert channel_name("analysis_events", "public") == "analysis_events"
    assert channel_name("analysis_events", "pa") == "pa.analysis_events"


@pytest.mark.parametrize(
    ("message", "pooler"),
    [
        ('connection failed: FATAL:  database "nosuchdb" does not exist', False),
        ('FATAL:  password authentication failed for user "app"', False),
        ("connection failed: Connection refused", False),
        ("server closed the connection unexpectedly", True),
        ("query_wait_timeout", True),
        ('prepared statement "_pg3_0" does not exist', True),
    ],
)
def test_the_pgbouncer_hint_only_where_the_pooler_can_be_the_cause(
    message: str, pooler: bool
) -> None:
    assert could_be_the_pooler(psycopg.OperationalError(message)) is pooler


def test_an_empty_database_is_not_revision_none() -> None:
    assert revision_text(None) == "an empty database"
    assert revision_text("0005") == "revision 0005"
