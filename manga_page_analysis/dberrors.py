"""Which database errors are an outage, not a fault: the server cannot take the
call now, and the same call will work once it can (docs/scaling.md, "Failover").

A failover has many shapes: the server is gone (the connection drops), it
shuts down (57P01, 57P02) or is still starting (57P03), or it answers but
refuses writes: a standby not yet promoted, a primary being demoted, a pooler
pointed at the wrong node (25006). Each is the same to a caller: roll back,
drop the connection, and try again later on a new one (which a multi-host
URL with `target_session_attrs=read-write` sends to the new primary).

The runner retries these under its retry policy (`worker.dbsession.DbRetry`);
the functions hosts call (pages in, enqueueing) raise `DatabaseUnavailable`
for them (`outage_raises_unavailable`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final, ParamSpec, TypeVar

from sqlalchemy import Engine, event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DBAPIError, OperationalError

from manga_page_analysis.errors import DatabaseUnavailable

P = ParamSpec("P")
T = TypeVar("T")

REFUSED_SQLSTATES: Final = frozenset({"25006", "57P01", "57P02", "57P03"})
"""Read-only transaction, admin shutdown, crash shutdown, cannot connect now."""
STATEMENT_SQLSTATES: Final = frozenset({"55P03", "57014"})
"""A lock timeout and a cancelled statement (`statement_timeout`, a cancel request)."""
CONFLICT_SQLSTATES: Final = frozenset({"40P01", "40001"})
"""A deadlock or a serialization failure: the same call may work at once."""


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a driver error (wrapped by SQLAlchemy or not), else `None`."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    return getattr(orig, "sqlstate", None)


def is_outage(exc: BaseException) -> bool:
    """The server is unreachable, going away, or refusing writes: see above.
    A lock timeout or a cancelled statement is about that statement, not the
    server: no outage (the runner still retries it, `is_transient_db_error`)."""
    if isinstance(exc, DatabaseUnavailable):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    code = sqlstate(exc)
    if exc.connection_invalidated or code in REFUSED_SQLSTATES:
        return True
    # A lost connection, a server that is not there (no SQLSTATE at all), a
    # server out of connections or resources.
    return isinstance(exc, OperationalError) and code not in STATEMENT_SQLSTATES


def is_transient_db_error(exc: BaseException) -> bool:
    """An outage, a deadlock, a serialization failure, a lock timeout or a
    cancelled statement: worth one more try."""
    return (
        is_outage(exc)
        or isinstance(exc, OperationalError)
        or (isinstance(exc, DBAPIError) and sqlstate(exc) in CONFLICT_SQLSTATES)
    )


def outage_raises_unavailable(function: Callable[P, T]) -> Callable[P, T]:
    """Decorates a function hosts call: an outage inside raises `DatabaseUnavailable`
    (from the driver's error); any other error passes unchanged."""

    @functools.wraps(function)
    def translated(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return function(*args, **kwargs)
        except DBAPIError as exc:
            if not is_outage(exc):
                raise
            raise DatabaseUnavailable(
                f"the database cannot take writes now ({_first_line(exc)}); "
                "roll back and try again later"
            ) from exc

    return translated


def _first_line(exc: DBAPIError) -> str:
    text = str(exc.orig).strip() if exc.orig is not None else ""
    return text.splitlines()[0] if text else type(exc.orig).__name__


def drop_connections_refusing_writes(engine: Engine) -> None:
    """Have `engine` discard a connection whose server refused a write (or is
    shutting down), as it does one that dropped: its pool then makes new
    connections, which a multi-host URL sends to the server that takes writes.
    A pre-ping alone would keep it: a standby answers `SELECT 1`."""
    event.listen(engine, "handle_error", _refused_is_disconnect)


def _refused_is_disconnect(context: ExceptionContext) -> Any:
    if sqlstate(context.original_exception) in REFUSED_SQLSTATES:
        context.is_disconnect = True
    return None
