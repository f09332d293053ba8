"""Leader election on a row with a lease (`queue_leader`): each a single statement,
so it works through PgBouncer in transaction mode (no session advisory lock)."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from manga_page_analysis.db import Conn
from manga_page_analysis.queue.table import run

MAINTENANCE: Final = "maintenance"
"""The role whose leader reclaims expired leases and reaps done jobs."""

_ELECT: Final = """
    INSERT INTO <<queue_leader>> AS l (name, leader_id, elected_at, expires_at)
    VALUES (%(name)s, %(leader_id)s, now(), now() + %(ttl)s::interval)
    ON CONFLICT (name) DO UPDATE
    SET leader_id = excluded.leader_id, expires_at = excluded.expires_at,
        elected_at = CASE WHEN l.leader_id = excluded.leader_id
                          THEN l.elected_at ELSE excluded.elected_at END
    WHERE l.leader_id = excluded.leader_id OR l.expires_at < now()
    RETURNING l.leader_id
"""

_RESIGN: Final = "DELETE FROM <<queue_leader>> WHERE name = %(name)s AND leader_id = %(leader_id)s"


def elect(conn: Conn, name: str, leader_id: str, ttl: timedelta) -> bool:
    """Become or stay leader of `name` until now + `ttl`: `True` when `leader_id`
    holds the role (it was free, expired, or already ours and is now renewed)."""
    params = {"name": name, "leader_id": leader_id, "ttl": ttl}
    return run(conn, _ELECT, params).first() is not None


def resign(conn: Conn, name: str, leader_id: str) -> bool:
    """Give up `name` if `leader_id` holds it, so another process takes over at
    once instead of after the lease; `True` if it did hold it."""
    return bool(run(conn, _RESIGN, {"name": name, "leader_id": leader_id}).rowcount)
