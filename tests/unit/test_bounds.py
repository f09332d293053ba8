"""Every number an operator or the environment gives has bounds: out of them is one
line and exit 2 before anything runs (no database needed), never a traceback or a
thread that dies later."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from manga_page_analysis.config import MAX_RETENTION_DAYS, Settings
from manga_page_analysis.worker.noop import NoopHandler
from manga_page_analysis.worker.runner import Runner

# Nothing listens there: any attempt to use the database would fail differently.
NO_DATABASE = "postgresql+psycopg://nobody@127.0.0.1:1/none"


def _run(*args: str, tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env.update(DATABASE_URL=NO_DATABASE, **variables)
    return subprocess.run(
        [sys.executable, "-m", "manga_page_analysis", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _one_line_usage_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and expected in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args, expected",
    [
        (["jobs", "reap", "--days", "99999999999999"], "from 1 to 36500"),
        (["jobs", "reap", "--days", "3000000"], "from 1 to 36500"),
        (["jobs", "reap", "--days", "\u0665"], "from 1 to 36500"),
        (["jobs", "list", "--limit", "5_0"], "limit must be an integer from 1 to 500"),
        (["jobs", "list", "--limit", "\u0665"], "limit must be an integer from 1 to 500"),
        (["demo", "--timeout", "inf"], "at most 86400"),
        (["demo", "--timeout", "nan"], "at most 86400"),
    ],
)
def test_an_argument_out_of_bounds_is_a_usage_error(tmp_path, args, expected) -> None:
    _one_line_usage_error(_run(*args, tmp_path=tmp_path), expected)


@pytest.mark.parametrize(
    "variable, value, command",
    [
        ("REAP_RETENTION_DAYS", "99999999999999", ["jobs", "reap"]),
        ("REAP_RETENTION_DAYS", "99999999999999", ["run-worker"]),
        ("ANALYSIS_WORKERS", "100000", ["run-worker"]),
        ("JOB_TIMEOUT_SECONDS", "inf", ["run-worker"]),
        ("LEASE_SECONDS", "1e300", ["run-worker"]),
        ("IDLE_POLL_SECONDS", "nan", ["run-worker"]),
        ("MAX_IMAGE_PIXELS", "100000000", ["run-worker"]),
    ],
)
def test_a_setting_out_of_bounds_is_one_line_and_exit_2(tmp_path, variable, value, command):
    result = _run(*command, tmp_path=tmp_path, **{variable: value})
    _one_line_usage_error(result, f"error: bad setting: {variable}: ")
    assert len(result.stderr.splitlines()) == 1


def test_the_bounds_are_inclusive() -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        reap_retention_days=MAX_RETENTION_DAYS,
        analysis_workers=64,
        job_timeout_seconds=86_400,
        max_image_pixels=89_478_485,
    )
    assert settings.reap_retention_days == 36_500


def test_a_runner_refuses_a_retention_no_heartbeat_could_reap_with() -> None:
    engine = create_engine(NO_DATABASE)
    with pytest.raises(ValueError, match="reap_retention_days must be from 0 to 36500"):
        Runner(engine, [NoopHandler("sync_manga")], reap_retention_days=MAX_RETENTION_DAYS + 1)
