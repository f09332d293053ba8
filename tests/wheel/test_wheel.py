"""The built wheel is all a host needs: built from this checkout, installed with
its dependencies (from the package index) into a fresh virtualenv in a
temporary folder, and run there, away from the checkout, against the test
session's Postgres: `python -m manga_page_analysis migrate`, a small Flask host serving the
admin blueprint, and Django's `page_analysis_migrate`.

`make test-wheel` runs it (WHEEL_TEST=1); it takes a minute or two.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from pytest_postgresql.executors import PostgreSQLExecutor
from sqlalchemy import inspect

from manga_page_analysis.db import make_engine
from manga_page_analysis.migrations import head_revision
from tests.conftest import _fresh_database

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(900)


@dataclass(frozen=True)
class Installed:
    python: Path
    home: Path
    """A folder outside the checkout to run the installed package from."""

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        clean = {
            key: value
            for key, value in os.environ.items()
            if key not in ("PYTHONPATH", "DATABASE_URL", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE")
        }
        return subprocess.run(
            [str(self.python), *args],
            env={**clean, "PYTHONNOUSERSITE": "1", **env},
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=300,
        )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = dist.glob("manga_page_analysis-*.whl")
    environment = root / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(environment)
    python = environment / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", f"{wheel}[web]"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr
    home = root / "home"
    home.mkdir()
    yield Installed(python, home)


def test_it_is_the_installed_copy_that_runs(installed: Installed) -> None:
    result = installed.run(
        "-c",
        "import manga_page_analysis, manga_page_analysis.cli.demo as demo, json; "
        "print(json.dumps([manga_page_analysis.__file__, str(demo.SAMPLE_FOLDER)]))",
    )
    assert result.returncode == 0, result.stderr
    package, samples = json.loads(result.stdout)
    assert "site-packages" in package and not package.startswith(str(REPO))
    assert {"001.png", "pages.json"} <= {path.name for path in Path(samples).iterdir()}
    version = installed.run("-m", "manga_page_analysis", "--version")
    expected = f"manga-page-analysis {metadata.version('manga-page-analysis')}"
    assert version.returncode == 0 and version.stdout.strip() == expected
    script = subprocess.run(
        [str(installed.python.parent / "manga-analysis"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert script.returncode == 0 and script.stdout.strip() == expected


@pytest.fixture
def blank_database(postgresql_proc: PostgreSQLExecutor) -> Iterator[str]:
    yield from _fresh_database(postgresql_proc, None)


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return set(inspect(conn).get_table_names())
    finally:
        engine.dispose()


def test_migrate_from_the_installed_package(installed: Installed, blank_database: str) -> None:
    result = installed.run("-m", "manga_page_analysis", "migrate", DATABASE_URL=blank_database)
    assert result.returncode == 0, result.stderr
    assert f"to revision {head_revision()} (head)" in result.stdout
    assert {"crawler_jobs", "page_analysis", "pages"} <= _tables(blank_database)


FLASK_HOST = textwrap.dedent(
    """
    import json, sys, threading, urllib.request
    from flask import Flask
    from werkzeug.serving import make_server
    from manga_page_analysis.db import make_engine
    from manga_page_analysis.web.flask import admin_blueprint

    engine = make_engine(sys.argv[1])
    host = Flask("host")
    host.register_blueprint(admin_blueprint(engine, token="s3cret"), url_prefix="/admin/analysis")
    server = make_server("127.0.0.1", 0, host, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}/admin/analysis/"

    def get(path, token=None):
        request = urllib.request.Request(base + path)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.headers["Content-Type"], response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.headers["Content-Type"], error.read().decode()

    page, stats, refused = get(""), get("api/stats", "s3cret"), get("api/stats")
    server.shutdown()
    engine.dispose()
    print(json.dumps({"page": page, "stats": stats, "refused": refused}))
    """
)


def test_a_flask_host_serves_the_admin_page_and_api(
    installed: Installed, database_url: str
) -> None:
    result = installed.run("-c", FLASK_HOST, database_url)
    assert result.returncode == 0, result.stderr
    answers = json.loads(result.stdout)
    status, content_type, body = answers["page"]
    assert status == 200 and content_type.startswith("text/html") and "<html" in body.lower()
    status, content_type, body = answers["stats"]
    assert status == 200 and content_type.startswith("application/json")
    assert set(json.loads(body)) == {"jobs", "oldest_pending_age_seconds"}
    assert answers["refused"][0] == 401


DJANGO_SETTINGS = textwrap.dedent(
    """
    import os
    from manga_page_analysis.web.django import database_from_url

    SECRET_KEY = "wheel-test"
    INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "manga_page_analysis.web.django"]
    DATABASES = {"default": database_from_url(os.environ["HOST_DATABASE_URL"])}
    USE_TZ = True
    """
)


def test_django_page_analysis_migrate_from_the_installed_package(
    installed: Installed, blank_database: str
) -> None:
    (installed.home / "host_settings.py").write_text(DJANGO_SETTINGS)
    result = installed.run(
        "-m",
        "django",
        "page_analysis_migrate",
        HOST_DATABASE_URL=blank_database,
        DJANGO_SETTINGS_MODULE="host_settings",
        PYTHONPATH=str(installed.home),
    )
    assert result.returncode == 0, result.stderr
    assert "schema is at head" in result.stdout
    assert {"crawler_jobs", "page_analysis", "pages"} <= _tables(blank_database)
