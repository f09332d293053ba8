"""How long an admin query waits for a lock. Which database errors mean "not now"
(a 503 with `Retry-After`) rather than a fault is `dberrors.is_transient_db_error`'s
rule, the runner's too."""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection, text

LOCK_TIMEOUT: Final = "5s"
"""Longest wait of an admin query for a row or table lock (`lock_timeout`): a table
locked by a migration or a long host transaction answers 503 then, instead of
holding a web thread (and a pool connection) until the host's pool times out."""


def bound_lock_waits(conn: Connection) -> None:
    """`lock_timeout` = `LOCK_TIMEOUT` for the connection's current transaction only."""
    # Transaction-local (PgBouncer in transaction mode keeps no session state).
    conn.execute(text("SELECT set_config('lock_timeout', :wait, true)"), {"wait": LOCK_TIMEOUT})
