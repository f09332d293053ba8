"""A real PgBouncer in transaction pooling mode in front of the test Postgres.

Loaded as a pytest plugin (`pytest_plugins` in tests/conftest.py). Started
once per test session (so once per pytest-xdist worker process), and only
when a test asks for it.

Fixtures
    `pgbouncer`: a started `PgBouncer` (session scope).
    `database_url` parametrized `["direct", "pooled"]`: a test marked
        `@pytest.mark.pgbouncer` (or a module with `pytestmark = pytest.mark.pgbouncer`)
        that uses `database_url` (or `engine`) runs twice, once with the
        database's direct URL and once with its URL through PgBouncer.
    `direct_database_url`: the direct URL of the same database as
        `database_url`, whichever way that one goes (for LISTEN, and for
        reading what Postgres itself sees).

PgBouncer refuses to run as root: as root it is started with `-u` as the
unprivileged user that runs the test Postgres (`PG_TEST_USER`, see
tests/pg_ctl_as_postgres), and its folder (config, auth file, socket, pid,
log) belongs to that user. Debian's package puts the binary in /usr/sbin,
which a normal user's PATH may lack. Without the binary the tests that need
it are skipped, except under CI (`CI` set), where that is a failure:
.ci/run installs the `pgbouncer` package.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

POOL_SIZE = 6
"""Server connections per (database, user) pair: `default_pool_size`."""

START_TIMEOUT_SECONDS = 15.0

ADMIN_DATABASE = "pgbouncer"
"""The admin console's database name (`SHOW POOLS`, `SHOW SERVERS`)."""


@dataclass
class PgBouncer:
    """A running PgBouncer: `url_for(direct_url)` routes a database URL through it."""

    host: str
    port: int
    user: str
    pool_size: int
    folder: Path
    process: subprocess.Popen[bytes]

    def url_for(self, direct_url: str) -> str:
        """The same database, user and password, through PgBouncer."""
        return (
            make_url(direct_url)
            .set(host=self.host, port=self.port)
            .render_as_string(hide_password=False)
        )

    def show(self, what: str) -> list[dict[str, Any]]:
        """`SHOW <what>` on the admin console (POOLS, SERVERS, CLIENTS, ...), as dicts."""
        return self.admin(f"SHOW {what}")

    def admin(self, command: str) -> list[dict[str, Any]]:
        """Run `command` on the admin console (`KILL db`, `RESUME db`, `SHOW ...`)."""
        # The console speaks only the simple query protocol.
        with psycopg.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            dbname=ADMIN_DATABASE,
            autocommit=True,
            cursor_factory=psycopg.ClientCursor,
        ) as conn:
            cursor = conn.execute(command)  # type: ignore[call-overload]
            if cursor.description is None:
                return []
            names = [column.name for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def server_connections(self, dbname: str) -> int:
        """Server connections PgBouncer holds to `dbname` now, in any state."""
        return sum(1 for row in self.show("SERVERS") if row["database"] == dbname)

    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""


def find_pgbouncer() -> str | None:
    return shutil.which("pgbouncer") or shutil.which(
        "pgbouncer", path="/usr/sbin:/usr/local/sbin:/usr/bin"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _give_to(user: str, folder: Path) -> None:
    """As root: `user` owns `folder` and can traverse every folder above it."""
    entry = pwd.getpwnam(user)
    for path in [folder, *folder.iterdir()]:
        os.chown(path, entry.pw_uid, entry.pw_gid)
    parent = folder.parent
    while parent != parent.parent:
        parent.chmod(parent.stat().st_mode | 0o001)
        parent = parent.parent


def _write_config(folder: Path, port: int, server_host: str, server_port: int, user: str) -> Path:
    (folder / "userlist.txt").write_text(f'"{user}" ""\n')
    config = folder / "pgbouncer.ini"
    config.write_text(
        "\n".join(
            [
                "[databases]",
                # Every database (the tests make one per test) on the test server.
                f"* = host={server_host} port={server_port}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {port}",
                f"unix_socket_dir = {folder}",
                f"pidfile = {folder / 'pgbouncer.pid'}",
                f"logfile = {folder / 'pgbouncer.log'}",
                "auth_type = trust",
                f"auth_file = {folder / 'userlist.txt'}",
                f"admin_users = {user}",
                "pool_mode = transaction",
                f"default_pool_size = {POOL_SIZE}",
                "max_client_conn = 500",
                # A dropped test database is not retried for long.
                "server_login_retry = 1",
                "log_connections = 0",
                "log_disconnections = 0",
                "",
            ]
        )
    )
    return config


def _wait_ready(bouncer: PgBouncer) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while True:
        if bouncer.process.poll() is not None:
            raise RuntimeError(
                f"pgbouncer exited with {bouncer.process.returncode}:\n{bouncer.log()}"
            )
        try:
            bouncer.show("VERSION")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def start_pgbouncer(
    folder: Path, server_host: str, server_port: int, user: str, *, pool_size: int = POOL_SIZE
) -> PgBouncer:
    """Start PgBouncer (foreground child process) in `folder`, on a free port."""
    binary = find_pgbouncer()
    if binary is None:
        raise FileNotFoundError("pgbouncer is not installed (apt-get install pgbouncer)")
    as_root = os.geteuid() == 0
    run_as = os.environ.get("PG_TEST_USER", "postgres") if as_root else user
    for attempt in range(3):  # a free port may be taken before PgBouncer binds it
        port = _free_port()
        config = _write_config(folder, port, server_host, server_port, user)
        if as_root:
            _give_to(run_as, folder)
        # -q: the log goes to its file only.
        command = [binary, "-q", *(["-u", run_as] if as_root else []), str(config)]
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, cwd=folder)
        bouncer = PgBouncer("127.0.0.1", port, user, pool_size, folder, process)
        try:
            _wait_ready(bouncer)
            return bouncer
        except (RuntimeError, psycopg.OperationalError):
            stop_pgbouncer(bouncer)
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def stop_pgbouncer(bouncer: PgBouncer) -> None:
    process = bouncer.process
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


@pytest.fixture(scope="session")
def pgbouncer(
    postgresql_proc: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PgBouncer]:
    """PgBouncer in transaction mode in front of the session's test Postgres."""
    if find_pgbouncer() is None:
        message = "pgbouncer is not installed (apt-get install pgbouncer; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    folder = tmp_path_factory.mktemp("pgbouncer")
    bouncer = start_pgbouncer(
        folder, postgresql_proc.host, postgresql_proc.port, postgresql_proc.user
    )
    try:
        yield bouncer
    finally:
        stop_pgbouncer(bouncer)


ROUTES = ("direct", "pooled")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "pgbouncer: run the test's database_url both directly and through PgBouncer",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("pgbouncer") is None:
        return
    if "database_url" in metafunc.fixturenames:
        metafunc.parametrize("database_url", ROUTES, indirect=True, ids=ROUTES)


@pytest.fixture
def direct_database_url(database_url: str, postgresql_proc: Any) -> str:
    """`database_url`'s database, reached directly (never through PgBouncer)."""
    return (
        make_url(database_url)
        .set(host=postgresql_proc.host, port=postgresql_proc.port)
        .render_as_string(hide_password=False)
    )
