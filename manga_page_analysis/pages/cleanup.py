"""Deleting the stored object of a page whose row a rollback took away.

`add_page` writes the object first, then inserts the row: a worker that sees
the row (and its job) always finds the object. If the transaction is rolled
back instead, the object belongs to no row; this module deletes it. It
listens to the SQLAlchemy `Connection` the page was added on (a `Session`'s
transactions run on one too, savepoints included):

- a rollback of the whole transaction deletes every object written in it;
- a rollback to a savepoint may or may not have taken a given row (it depends
  on where the savepoint began), so the objects written so far become
  *suspect*; just before the transaction commits, one select finds which of
  their rows are gone, and those objects are deleted.

A process killed between the write and the commit, or a COMMIT that fails
itself (no rollback event follows it), still leaves its object behind (no
row names it): see docs/api.md, "Adding pages".
"""

from __future__ import annotations

import logging
import threading
import uuid
import weakref
from dataclasses import dataclass, field

from sqlalchemy import Connection, event, select

from manga_page_analysis.models import Page
from manga_page_analysis.storage import Storage

logger = logging.getLogger(__name__)


@dataclass
class _Written:
    storage: Storage
    key: str
    page_id: uuid.UUID


@dataclass
class _Transaction:
    """The objects written for rows of the current transaction of one connection."""

    written: list[_Written] = field(default_factory=list)
    suspect: bool = False
    """A savepoint was rolled back since the first of them was written."""

    def on_rollback(self, _conn: Connection) -> None:
        written, self.written, self.suspect = self.written, [], False
        _delete(written, "the transaction was rolled back")

    def on_rollback_savepoint(self, _conn: Connection, _name: str, _context: object) -> None:
        if self.written:
            self.suspect = True

    def on_commit(self, conn: Connection) -> None:
        written, suspect = self.written, self.suspect
        self.written, self.suspect = [], False
        if not (written and suspect):
            return
        try:
            # Still inside the transaction: the commit is issued after this event.
            ids = [entry.page_id for entry in written]
            kept = set(conn.execute(select(Page.id).where(Page.id.in_(ids))).scalars())
        except Exception:
            logger.warning(
                "could not tell which of %d page(s) a rolled-back savepoint took away; "
                "their stored objects are kept",
                len(written),
                exc_info=True,
            )
            return
        _delete(
            [entry for entry in written if entry.page_id not in kept],
            "a rolled-back savepoint took their rows away",
        )


_lock = threading.Lock()
_transactions: weakref.WeakKeyDictionary[Connection, _Transaction] = weakref.WeakKeyDictionary()
"""The listener state of each connection a page was added on; an entry goes
with its connection (a `Session` makes a new one per transaction)."""


def delete_on_rollback(conn: Connection, storage: Storage, key: str, page_id: uuid.UUID) -> None:
    """Delete `key` from `storage` if the transaction open on `conn` does not
    end up committing the row `page_id`."""
    with _lock:
        transaction = _transactions.get(conn)
        if transaction is None:
            transaction = _transactions[conn] = _Transaction()
            event.listen(conn, "rollback", transaction.on_rollback)
            event.listen(conn, "rollback_savepoint", transaction.on_rollback_savepoint)
            event.listen(conn, "commit", transaction.on_commit)
    transaction.written.append(_Written(storage, key, page_id))


def _delete(written: list[_Written], why: str) -> None:
    """Delete the objects; a failure is logged, never raised (this runs inside
    the host's commit or rollback)."""
    for entry in written:
        try:
            entry.storage.delete(entry.key)
        except Exception:
            logger.warning(
                "could not delete stored object %r of page %s (%s); it is left behind",
                entry.key,
                entry.page_id,
                why,
                exc_info=True,
            )
        else:
            logger.info("deleted stored object %r of page %s: %s", entry.key, entry.page_id, why)
