"""SQLAlchemy on Django's own connection, for enqueueing in the host's transaction.

An engine's connections are the psycopg connection Django holds for the alias
in the calling thread. SQLAlchemy's commit, rollback and close are no-ops on
them, so Django's `transaction.atomic()` alone decides (aldjemy's
`DjangoPool` idea, without reaching into pool internals).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connections
from psycopg.types.json import JsonbLoader, JsonLoader
from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool

from manga_page_analysis.db import schema_options
from manga_page_analysis.web.django.conf import check_postgresql


class BorrowedConnection:
    """Django's psycopg connection as SQLAlchemy's pool sees it."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        cursor = self._raw.cursor(*args, **kwargs)
        # Django loads json/jsonb as text (it decodes them itself); the
        # library's statements expect decoded values. Per cursor, so
        # Django's own cursors are untouched.
        cursor.adapters.register_loader("jsonb", JsonbLoader)
        cursor.adapters.register_loader("json", JsonLoader)
        return cursor

    def commit(self) -> None:
        """Django's `atomic()` commits, never SQLAlchemy."""

    def rollback(self) -> None:
        """Django's `atomic()` rolls back, never SQLAlchemy (not even its
        first-connect or reset-on-return rollbacks)."""

    def close(self) -> None:
        """The connection belongs to Django."""

    def add_notice_handler(self, _handler: Any) -> None:
        # SQLAlchemy adds one per checkout; on a connection that outlives
        # every checkout they would pile up.
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def _borrow(alias: str) -> BorrowedConnection:
    connection = connections[alias]
    connection.ensure_connection()
    return BorrowedConnection(connection.connection)


class BorrowedEngines:
    """One SQLAlchemy engine per Django alias, its statements on the tables in
    the schema `schema()` names (`PAGE_ANALYSIS["DATABASE_SCHEMA"]`)."""

    def __init__(self, schema: Callable[[], str] = lambda: "public") -> None:
        self._schema = schema
        self._engines: dict[str, Engine] = {}
        self._lock = threading.Lock()

    def engine(self, alias: str) -> Engine:
        with self._lock:
            engine = self._engines.get(alias)
            if engine is None:
                check_postgresql(alias)
                engine = create_engine(
                    "postgresql+psycopg://",
                    creator=lambda: _borrow(alias),
                    poolclass=NullPool,
                    pool_reset_on_return=None,
                    # No hstore probe, no adapter registration on Django's connection.
                    use_native_hstore=False,
                    execution_options=schema_options(self._schema()),
                )
                self._engines[alias] = engine
            return engine

    def dispose(self) -> None:
        """Forget the engines; Django's connections stay open (they are Django's)."""
        with self._lock:
            for engine in self._engines.values():
                engine.dispose(close=False)
            self._engines.clear()
