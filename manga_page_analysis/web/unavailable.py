"""When the database cannot serve an admin request: how long a query waits for a
lock, and which database errors mean "not now" (a 503 with `Retry-After`) rather
than a fault (a 500)."""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

LOCK_TIMEOUT: Final = "5s"
"""Longest wait of an admin query for a row or table lock (`lock_timeout`): a table
locked by a migration or a long host transaction answers 503 then, instead of
holding a web thread (and a pool connection) until the host's pool times out."""

_UNAVAILABLE_SQLSTATES: Final = ("08", "53", "55P03", "57014", "57P01", "57P03", "40001", "40P01")
"""SQLSTATEs (classes or codes) of a database that cannot serve now: connection
exceptions, insufficient resources (out of memory, too many connections), lock
timeout, statement cancelled, shutting down, serialization failures."""


def bound_lock_waits(conn: Connection) -> None:
    """`lock_timeout` = `LOCK_TIMEOUT` for the connection's current transaction only."""
    # Transaction-local (PgBouncer in transaction mode keeps no session state).
    conn.execute(text("SELECT set_config('lock_timeout', :wait, true)"), {"wait": LOCK_TIMEOUT})


def cannot_serve(exc: DBAPIError) -> bool:
    """Whether `exc` says the database cannot serve now (`_UNAVAILABLE_SQLSTATES`)."""
    sqlstate = getattr(exc.orig, "sqlstate", None) or ""
    return sqlstate.startswith(_UNAVAILABLE_SQLSTATES)
