"""Capturing the SQL that `app.queue.jobs` sends, and explaining it.

The lease statement is built inside `_lease`; rather than rebuild it here, a
`before_cursor_execute` listener records the exact text and parameters that
went to the driver, so the plan shown is the plan of the real statement.

Two plans are shown for a statement:

- the custom plan Postgres makes for these parameter values (what a one-off
  execution gets);
- the generic plan (`plan_cache_mode = force_generic_plan`), which a
  server-side prepared statement may switch to after five executions; psycopg
  prepares a statement once a connection has run it five times.

`EXPLAIN ANALYZE` really runs the `UPDATE`, so both run in a transaction
that is rolled back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, event

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
_SCANNED_INDEX = re.compile(
    r"(?:Index Scan using|Index Only Scan using|Bitmap Index Scan on) (\w+)"
)
_SQL_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),  # before int: bool is an int
    (int, "bigint"),
    (float, "double precision"),
    (timedelta, "interval"),
    (datetime, "timestamptz"),
    (str, "text"),
)


@dataclass(frozen=True)
class CapturedStatement:
    """One statement as the driver received it (psycopg `%(name)s` placeholders)."""

    sql: str
    parameters: Mapping[str, Any]


@contextmanager
def capture(engine: Engine, marker: str) -> Iterator[list[CapturedStatement]]:
    """Record every statement run on `engine` whose text contains `marker`."""
    captured: list[CapturedStatement] = []

    def record(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
    ) -> None:
        if marker in statement and isinstance(parameters, Mapping):
            captured.append(CapturedStatement(statement, dict(parameters)))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield captured
    finally:
        event.remove(engine, "before_cursor_execute", record)


def capture_one(engine: Engine, marker: str, run: Callable[[], object]) -> CapturedStatement:
    """Call `run` and return the first statement containing `marker` that it sent."""
    with capture(engine, marker) as captured:
        run()
    if not captured:
        raise RuntimeError(f"no statement containing {marker!r} was executed")
    return captured[0]


def explain(conn: Connection, statement: CapturedStatement) -> list[str]:
    """`EXPLAIN (ANALYZE, BUFFERS)` of the statement with its own parameters; rolled back."""
    with conn.begin() as transaction:
        rows = conn.exec_driver_sql(
            "EXPLAIN (ANALYZE, BUFFERS) " + statement.sql, dict(statement.parameters)
        ).all()
        transaction.rollback()
    return [str(row[0]) for row in rows]


def explain_generic(conn: Connection, statement: CapturedStatement) -> list[str]:
    """The same, through `PREPARE` with `plan_cache_mode = force_generic_plan`."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    body = _PLACEHOLDER.sub(number, statement.sql)
    types = ", ".join(_sql_type(statement.parameters[name]) for name in names)
    # EXPLAIN cannot take bind parameters, so EXECUTE's arguments are inlined.
    arguments = ", ".join(_sql_literal(statement.parameters[name]) for name in names)
    with conn.begin() as transaction:
        conn.exec_driver_sql("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.exec_driver_sql(f"PREPARE bench_generic ({types}) AS {body}")
        rows = conn.exec_driver_sql(
            f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE bench_generic ({arguments})"
        ).all()
        transaction.rollback()
    # DEALLOCATE is not transactional: the prepared statement outlives the rollback.
    with conn.begin():
        conn.exec_driver_sql("DEALLOCATE bench_generic")
    return [str(row[0]) for row in rows]


def prepared_plan_counts(conn: Connection, marker: str) -> tuple[int, int] | None:
    """(generic plans, custom plans) of this session's prepared statement containing
    `marker`, or `None` when the driver has not prepared it."""
    with conn.begin():
        row = conn.exec_driver_sql(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE strpos(statement, %(marker)s) > 0",
            {"marker": marker},
        ).first()
    return None if row is None else (int(row[0]), int(row[1]))


def plan_summary(plan: list[str], indexes: tuple[str, ...]) -> str:
    """One line: which of `indexes` the plan scans, whether it sorts or scans the
    whole table, and its execution time."""
    text = "\n".join(plan)
    scanned = set(_SCANNED_INDEX.findall(text))
    used = [index for index in indexes if index in scanned]
    flags = ["SORTS" if "Sort Key" in text else "no sort"]
    if "Seq Scan" in text:
        flags.append("SEQ SCAN")
    execution = next((line.strip() for line in plan if "Execution Time" in line), "")
    return f"index: {', '.join(used) or 'NONE'}; {'; '.join(flags)}; {execution.lower()}"


def _sql_type(value: Any) -> str:
    for python_type, sql_type in _SQL_TYPES:
        if isinstance(value, python_type):
            return sql_type
    raise TypeError(f"no SQL type for a {type(value).__name__} parameter")


def _sql_literal(value: Any) -> str:
    """`value` as a typed SQL literal, for the few types a lease statement binds."""
    if isinstance(value, timedelta):
        text = f"{value.total_seconds()} seconds"
    elif isinstance(value, datetime):
        text = value.isoformat()
    else:
        text = str(value).lower() if isinstance(value, bool) else str(value)
    return "'" + text.replace("'", "''") + "'::" + _sql_type(value)


def plan_shape(plan: list[str]) -> list[str]:
    """The plan's node names in order (`Index Scan using ix`, `Hash Join`...), no figures."""
    shape = []
    for line in plan:
        node = line.strip().removeprefix("->").strip()
        if "(cost=" in node:
            shape.append(node.split("(cost=")[0].split(" on ")[0].strip())
    return shape
