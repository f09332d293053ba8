"""The embedded dev database outlives no one: a user of it that was SIGKILLed
(and so never ran its atexit clean-up) does not keep it running after the
next clean exit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from tests.helpers import wait_until

REPO = Path(__file__).resolve().parents[2]

USE_IT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import psycopg
    from manga_page_analysis.devdb import embedded_database_url
    url = embedded_database_url(Path(sys.argv[1]))
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        conn.execute("SELECT 1")
    print("attached", flush=True)
    if sys.argv[2] == "linger":
        time.sleep(120)
    """
)


def _postmaster(pgdata: Path) -> psutil.Process | None:
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        return psutil.Process(pid)
    except (OSError, ValueError, IndexError, psutil.NoSuchProcess):
        return None


def _users(pgdata: Path) -> list[int]:
    return json.loads((pgdata / ".handle_pids.json").read_text())


@pytest.mark.slow
def test_a_killed_user_does_not_keep_the_server_running(tmp_path: Path) -> None:
    dev_dir = tmp_path / "dev"
    pgdata = dev_dir / "pgdata"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    killed = subprocess.Popen(
        [sys.executable, "-c", USE_IT, str(dev_dir), "linger"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert killed.stdout is not None
        assert killed.stdout.readline().strip() == "attached", killed.stderr
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
        server = _postmaster(pgdata)
        assert server is not None and server.is_running()
        assert _users(pgdata) == [killed.pid]  # its atexit clean-up never ran

        clean = subprocess.run(
            [sys.executable, "-c", USE_IT, str(dev_dir), "exit"],
            env={**env, "PYTHONUNBUFFERED": "1"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert clean.returncode == 0, clean.stderr
        wait_until(lambda: not server.is_running(), timeout=30, interval=0.1)
        assert _users(pgdata) == []
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait()
        leftover = _postmaster(pgdata)
        if leftover is not None and leftover.is_running():
            leftover.terminate()
