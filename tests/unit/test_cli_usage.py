"""The command line explains itself: every command and option has help, `--version`
answers, and a bad `DATABASE_URL` is one line naming it, exit 2 (no database needed)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from manga_page_analysis.cli.parser import build_parser


def _parsers(
    parser: argparse.ArgumentParser, path: str = "python -m manga_page_analysis"
) -> Iterator[tuple[str, argparse.ArgumentParser, str | None]]:
    """Every parser of the tree, with the help line its parent shows for it."""
    yield path, parser, "(top)"
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                for found in _parsers(sub, f"{path} {name}"):
                    if found[1] is sub:
                        yield found[0], sub, helps.get(name)
                    else:
                        yield found


def test_every_command_and_option_has_help() -> None:
    missing = []
    commands = list(_parsers(build_parser()))
    assert {"run-worker", "migrate", "import-pages", "request-analysis", "demo"} <= {
        path.split()[-1] for path, _parser, _help in commands
    }
    for path, parser, summary in commands:
        if not summary:
            missing.append(f"{path}: no one-line help in its parent's list")
        if not parser.description:
            missing.append(f"{path}: no description")
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


def test_the_checker_above_notices_an_option_without_help() -> None:
    parser = build_parser()
    parser.add_argument("--undocumented")
    (_path, top, _summary) = next(_parsers(parser))
    assert any(not action.help for action in top._actions)


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "manga_page_analysis", *args],
        env={**clean, **env},
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_version() -> None:
    result = _cli("--version")
    assert result.returncode == 0
    assert metadata.version("manga-page-analysis") in result.stdout


@pytest.mark.parametrize(
    ("command", "url", "says"),
    [
        ("migrate", "not-a-url", "not a URL"),
        ("run-worker", "mysql://root:hunter2@db/manga", "mysql:// is not supported"),
        ("jobs stats", "postgresql://u@h:notaport/db", "not a valid URL"),
    ],
)
def test_a_bad_database_url_is_one_line_and_exit_2(command: str, url: str, says: str) -> None:
    result = _cli(*command.split(), DATABASE_URL=url)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: bad setting: DATABASE_URL: ")
    assert says in lines[0] and "postgresql+psycopg://" in lines[0]
    assert "hunter2" not in result.stderr


def test_an_embedded_database_that_cannot_start_is_one_line(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "dev"
    not_a_folder.write_text("a file where the dev folder should be")
    result = _cli("migrate", DEV_DIR=str(not_a_folder))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "the embedded PostgreSQL in" in lines[0] and "did not start" in lines[0]
    assert "set DATABASE_URL" in lines[0]


def test_settings_passed_in_are_used_and_the_environment_is_not_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Django's `run_worker` hands its settings to `main`: a bad DATABASE_URL in the
    # environment must not matter, the settings given must (a port nothing listens on).
    from manga_page_analysis.cli import commands
    from manga_page_analysis.config import Settings

    # In-process: the test runner's own signal handlers stay as they are.
    monkeypatch.setattr(commands, "interrupt_on_stop_signals", lambda: None)
    monkeypatch.setenv("DATABASE_URL", "mysql://root@db/manga")
    given = Settings(_env_file=None, database_url="postgresql+psycopg://u@127.0.0.1:1/db")  # type: ignore[call-arg]
    assert commands.main(["jobs", "stats"], settings=given) == 1
    error = capsys.readouterr().err
    assert "cannot reach the database" in error and "bad setting" not in error
