"""What a user of the installed package reads, in its words: the command under the
name it was run by, the documentation where it is installed, no `make` outside a
checkout, a bad schema name as a plain sentence, and `make wheel` building with
pip alone. (The same from the installed wheel: tests/wheel/.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import manga_page_analysis.migrations as migrations
from manga_page_analysis.cli import demo
from manga_page_analysis.cli.invocation import command_line, command_name, docs_folder
from manga_page_analysis.cli.parser import build_parser
from manga_page_analysis.config import Settings

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("argv0", "name"),
    [
        ("/srv/venv/bin/manga-analysis", "manga-analysis"),
        ("manga-analysis", "manga-analysis"),
        ("/srv/venv/lib/python3.11/site-packages/manga_page_analysis/__main__.py", None),
        ("manage.py", None),
        ("", None),
    ],
)
def test_the_command_is_named_as_it_was_run(argv0: str, name: str | None) -> None:
    assert command_name(argv0) == (name or "python -m manga_page_analysis")


def test_usage_and_help_name_the_command_and_the_docs_that_exist(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        build_parser("manga-analysis").parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the epilog
    assert out.startswith("usage: manga-analysis ")
    environment = docs_folder() / "environment.md"
    assert environment.is_absolute() and environment.is_file()
    assert f"See {environment}" in out and "`manga-analysis COMMAND --help`" in out
    assert "python -m" not in out


@pytest.mark.parametrize("checkout", [True, False])
def test_the_demo_suggests_make_only_in_a_checkout(
    monkeypatch: pytest.MonkeyPatch, checkout: bool
) -> None:
    monkeypatch.setattr(migrations, "in_checkout", lambda: checkout)
    monkeypatch.setattr(sys, "argv", ["/venv/bin/manga-analysis", "demo"])
    lines = "\n".join(demo._where(Settings(database_url="postgresql://u@h/d"), "db"))
    if checkout:
        assert "make demo" in lines and "make run-worker" in lines
    else:
        assert "make" not in lines
        assert "manga-analysis demo" in lines and "manga-analysis run-worker" in lines
    assert command_line("migrate", make_target="migrate") == (
        "make migrate" if checkout else "manga-analysis migrate"
    )


@pytest.mark.parametrize(
    ("value", "said"),
    [("", "DATABASE_SCHEMA: is empty: "), ("Page-Analysis", "DATABASE_SCHEMA: is 'Page-Analysis'")],
)
def test_a_bad_schema_name_is_a_plain_sentence(tmp_path: Path, value: str, said: str) -> None:
    env = {**os.environ, "DATABASE_SCHEMA": value}
    result = subprocess.run(
        [sys.executable, "-m", "manga_page_analysis", "jobs", "stats"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: bad setting: " + said), line
    assert "e.g. page_analysis, or leave it unset for public" in line
    assert "pattern" not in line and "^[a-z" not in line


def test_make_wheel_builds_with_pip_alone() -> None:
    plan = subprocess.run(
        ["make", "-n", "wheel", "BUILD_VENV=/nonexistent/build-venv"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert plan.returncode == 0, plan.stderr
    commands = plan.stdout
    assert "/nonexistent/build-venv/bin/python -m pip wheel" in commands
    assert "pip install" not in commands and "[test" not in commands, commands
