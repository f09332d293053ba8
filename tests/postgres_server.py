"""A throw-away PostgreSQL server for the integration tests (and anything else that needs one).

`private_postgres()` starts a server on a free port in a folder of its own,
made with `tempfile.mkdtemp` (so never under pytest's `pytest-of-USER` folder:
every pytest session run as that user strips that folder's group and other
bits on start, which locks the `postgres` user out of a server another session
runs as root). On exit the server is stopped and its folder deleted.

As root, the server runs as the unprivileged `PG_TEST_USER` (default:
`postgres`, created when missing) through `tests/pg_ctl_as_postgres`; as any
other user it runs as that user. Nothing here runs at import time, so the unit
tests, which import the shared conftest, need no PostgreSQL binaries at all.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import port_for
import psycopg
from mirakuru.exceptions import ExecutorError
from pytest_postgresql.executors import PostgreSQLExecutor

from testbed.pg_binaries import find_bin_dir

PG_CTL_WRAPPER = Path(__file__).resolve().parent / "pg_ctl_as_postgres"
"""pg_ctl for the executor: runs the real one, through `runuser` when root."""

FAST_OPTIONS = "-c fsync=off -c synchronous_commit=off"
"""Test data is thrown away: durability only costs time."""

_START_ATTEMPTS = 3
"""A free port picked here can be taken by another server before Postgres binds it
(pytest-xdist workers start theirs at the same moment): then try another port."""


@cache
def pg_ctl() -> str:
    """The pg_ctl to give `PostgreSQLExecutor`, once the environment is ready for it."""
    real = str(find_bin_dir() / "pg_ctl")
    os.environ["REAL_PG_CTL"] = real  # read by the wrapper, in every process it starts
    if os.geteuid() == 0:
        _prepare_unprivileged_user(real)
    return str(PG_CTL_WRAPPER)


def _prepare_unprivileged_user(real_pg_ctl: str) -> None:
    """As root: make sure the server's user exists and can reach the binaries."""
    user = os.environ.setdefault("PG_TEST_USER", "postgres")
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", user], check=True)
    directory = Path(real_pg_ctl).resolve().parent.parent
    while directory != directory.parent:
        mode = directory.stat().st_mode
        if not mode & 0o001:
            directory.chmod(mode | 0o001)
        directory = directory.parent


@contextmanager
def private_postgres(
    dbname: str = "tests", postgres_options: str = FAST_OPTIONS
) -> Iterator[PostgreSQLExecutor]:
    """A started server whose superuser is `executor.user`, with no password, on
    127.0.0.1:`executor.port`. `dbname` is not created (the caller decides what
    to build); `executor.stop()` and `executor.start()` may be called meanwhile."""
    executable = pg_ctl()
    base = Path(tempfile.mkdtemp(prefix="manga-tests-pg-"))
    executor: PostgreSQLExecutor | None = None
    try:
        for attempt in range(1, _START_ATTEMPTS + 1):
            executor = PostgreSQLExecutor(
                executable=executable,
                host="127.0.0.1",
                port=port_for.select_random(),
                datadir=str(base / "data"),
                unixsocketdir=str(base),  # not /tmp: no socket or lock file shared with others
                logfile=str(base / "postgresql.log"),
                startparams="-w",
                dbname=dbname,
                postgres_options=postgres_options,
            )
            try:
                executor.start()
                wait_accepting(executor)
                break
            except ExecutorError:
                if attempt == _START_ATTEMPTS:
                    raise
                _stop_quietly(executor)
        assert executor is not None
        yield executor
    finally:
        if executor is not None:
            _stop_quietly(executor)
        shutil.rmtree(base, ignore_errors=True)


def wait_accepting(executor: PostgreSQLExecutor, timeout: float = 60.0) -> None:
    """Until a connection works: `start()` returns once the port is open, and
    `pg_ctl status` says "running" while the server still refuses ("starting up")."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(
                host=executor.host, port=executor.port, user=executor.user, dbname="postgres"
            ).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _stop_quietly(executor: PostgreSQLExecutor) -> None:
    if executor.running():
        executor.stop()
