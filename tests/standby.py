"""A primary of a test's own with a real streaming standby, for the failover tests.

`primary_with_standby(dbname)` starts a primary (`private_postgres`), creates
`dbname` on it, and clones it with `pg_basebackup -R` (asynchronous streaming
replication, as initdb's `pg_hba.conf` lets a local superuser replicate) into
a standby on a port of its own. The test may then stop the primary the hard
way (`stop_primary`) and promote the standby (`promote`). As root, every
server program runs as the servers' user, as in tests/postgres_server.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import port_for
import psycopg
from pytest_postgresql.executors import PostgreSQLExecutor

from testbed.pg_binaries import find_bin_dir
from tests.postgres_server import pg_ctl, private_postgres

STANDBY_OPTIONS = "-c fsync=off -c listen_addresses=127.0.0.1"


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", os.environ.get("PG_TEST_USER", "postgres"), "--", *command]


@dataclass
class Pair:
    primary: PostgreSQLExecutor
    standby_port: int
    standby_data: Path
    dbname: str

    @property
    def user(self) -> str:
        return str(self.primary.user)

    def url(self, port: int | None = None) -> str:
        """A single-host SQLAlchemy URL: the primary's, or the server on `port`."""
        return (
            f"postgresql+psycopg://{self.user}@127.0.0.1:{port or self.primary.port}/{self.dbname}"
        )

    def multi_host_url(self, target_session_attrs: str) -> str:
        """Both servers, the primary first: the URL form docs/scaling.md names."""
        hosts = f"host=127.0.0.1:{self.primary.port}&host=127.0.0.1:{self.standby_port}"
        return (
            f"postgresql+psycopg://{self.user}@/{self.dbname}?{hosts}"
            f"&target_session_attrs={target_session_attrs}"
        )

    def connect(self, port: int) -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1", port=port, user=self.user, dbname=self.dbname, autocommit=True
        )

    def wait_replayed(self, timeout: float = 30.0) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        with self.connect(self.primary.port) as conn:
            lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
        deadline = time.monotonic() + timeout
        with self.connect(self.standby_port) as conn:
            query = "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn"
            while not conn.execute(query, (lsn,)).fetchone()[0]:  # type: ignore[index]
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the standby did not replay up to {lsn}")
                time.sleep(0.02)

    def stop_primary(self) -> None:
        """`pg_ctl stop -m immediate`: no checkpoint, clients cut off at once."""
        _pg_ctl("-D", str(self.primary.datadir), "-m", "immediate", "-w", "stop")

    def promote(self) -> None:
        _pg_ctl("-D", str(self.standby_data), "-w", "promote")


def _pg_ctl(*args: str) -> None:
    subprocess.run([pg_ctl(), *args], check=True, capture_output=True, cwd="/")


@contextmanager
def primary_with_standby(dbname: str) -> Iterator[Pair]:
    with private_postgres(dbname=dbname) as primary:
        with psycopg.connect(
            host="127.0.0.1",
            port=primary.port,
            user=primary.user,
            autocommit=True,
            dbname="postgres",
        ) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')
        base = Path(tempfile.mkdtemp(prefix="manga-tests-standby-"))
        if os.geteuid() == 0:
            shutil.chown(base, os.environ.get("PG_TEST_USER", "postgres"))
        data, port = base / "data", port_for.select_random()
        pair = Pair(primary, port, data, dbname)
        try:
            source = ["-h", "127.0.0.1", "-p", str(primary.port), "-U", pair.user]
            basebackup = [str(find_bin_dir() / "pg_basebackup"), *source]
            subprocess.run(
                _as_server_user([*basebackup, "-D", str(data), "-R", "-X", "stream", "-c", "fast"]),
                check=True,
                capture_output=True,
                cwd="/",
            )
            options = f"-p {port} -k {base} {STANDBY_OPTIONS}"
            _pg_ctl("-D", str(data), "-l", str(base / "standby.log"), "-o", options, "-w", "start")
            yield pair
        finally:
            if (data / "postmaster.pid").exists():
                subprocess.run(
                    [pg_ctl(), "-D", str(data), "-m", "immediate", "-w", "stop"],
                    capture_output=True,
                    cwd="/",
                )
            shutil.rmtree(base, ignore_errors=True)
