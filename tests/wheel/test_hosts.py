"""The wheel inside real hosts, each in a fresh virtualenv outside the checkout:

- a Flask host laid out like the Flask Mega-Tutorial (its own package `app/`
  with `app/__init__.py` and `app/models.py`, a `microblog.py` entry point),
  itself pip-installed as a distribution named `app`, with the `[flask]` extra;
- a `django-admin startproject` host with the `[django]` extra.

Each: migrate (Django: `manage.py migrate`), add pages inside the host's own
transaction (a rollback leaves nothing; a commit queues one job per page),
the worker analyses them (a scripted vision server), the admin API answers.
Then the same with `DATABASE_SCHEMA` set and a host table `pages` already in
`public`, directly and through PgBouncer in transaction mode.

Run by `make test-wheel` (WHEEL_TEST=1).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pytest_postgresql.executors import PostgreSQLExecutor
from sqlalchemy import create_engine, text

from testbed.vision_server import ScriptedVisionServer, analysis_content, ok_answer
from tests.conftest import _fresh_database
from tests.helpers import wait_until
from tests.worker_support import png_bytes

REPO = Path(__file__).resolve().parents[2]
SCHEMA = "page_analysis"
TOKEN = "s3cret"

pytestmark = pytest.mark.timeout(900)


@dataclass(frozen=True)
class Host:
    python: Path
    folder: Path
    """The host project; commands run from here, its own `app/` first on sys.path."""

    def env(self, **extra: str) -> dict[str, str]:
        clean = {
            key: value
            for key, value in os.environ.items()
            if key not in ("PYTHONPATH", "DATABASE_URL", "DATABASE_SCHEMA", "VIRTUAL_ENV")
            and not key.startswith("DJANGO")
        }
        return {**clean, "PYTHONNOUSERSITE": "1", "PYTHONUNBUFFERED": "1", **extra}

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), *args],
            env=self.env(**env),
            cwd=self.folder,
            capture_output=True,
            text=True,
            timeout=300,
        )

    def start(self, *args: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(self.python), *args],
            env=self.env(**env),
            cwd=self.folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )


def _check(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr
    (built,) = dist.glob("manga_page_analysis-*.whl")
    return built


def _virtualenv(root: Path, *requirements: str) -> Path:
    venv.EnvBuilder(with_pip=True).create(root / "venv")
    python = root / "venv" / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", *requirements],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr
    return python


# --- the Flask host ------------------------------------------------------------------

MEGA_TUTORIAL = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "app"
        version = "1.0"

        [tool.setuptools]
        packages = ["app"]
    """,
    "microblog.py": """
        import sqlalchemy as sa
        import sqlalchemy.orm as so
        from app import app, db
        from app.models import Post


        @app.shell_context_processor
        def make_shell_context():
            return {"sa": sa, "so": so, "db": db, "Post": Post}
    """,
    "app/__init__.py": """
        import os

        from flask import Flask
        from flask_sqlalchemy import SQLAlchemy

        from manga_page_analysis.db import schema_options
        from manga_page_analysis.web.flask import admin_blueprint

        app = Flask(__name__)
        app.config["SQLALCHEMY_DATABASE_URI"] = os.environ["HOST_DATABASE_URL"]
        app.config["SQLALCHEMY_ENGINE_OPTIONS"] = {
            # Our tables in DATABASE_SCHEMA, the host's where they always were.
            "execution_options": schema_options(os.environ.get("DATABASE_SCHEMA", "public")),
            # PgBouncer in transaction mode: no prepared statements.
            "connect_args": {"prepare_threshold": None},
        }
        db = SQLAlchemy(app)
        app.register_blueprint(
            admin_blueprint(lambda: db.engine, token="s3cret"), url_prefix="/admin/analysis"
        )

        from app import models, routes  # noqa: E402,F401  (the tutorial's layout)
    """,
    "app/models.py": """
        import sqlalchemy as sa
        import sqlalchemy.orm as so

        from app import db


        class Post(db.Model):
            __tablename__ = "post"
            id: so.Mapped[int] = so.mapped_column(primary_key=True)
            body: so.Mapped[str] = so.mapped_column(sa.String(140))
    """,
    "app/routes.py": """
        from app import app


        @app.route("/")
        def index():
            return "Hello, World!"
    """,
    "add_pages.py": """
        import json, sys

        from app import app, db
        from app.models import Post
        from manga_page_analysis.config import Settings
        from manga_page_analysis.storage import open_storage
        from pages_in import add_pages

        images = [open(path, "rb").read() for path in sys.argv[2:]]
        with app.app_context():
            db.create_all()  # the host's own tables
            db.session.add(Post(body="a post beside the pages"))
            jobs = add_pages(db.session, open_storage(Settings()), images)
            if sys.argv[1] == "rollback":
                db.session.rollback()
            else:
                db.session.commit()
            print(json.dumps(jobs))
    """,
    "admin_get.py": """
        import json, sys
        from app import app

        client = app.test_client()
        answer = client.get(sys.argv[1], headers={"Authorization": "Bearer s3cret"})
        print(json.dumps({"status": answer.status_code, "json": answer.get_json()}))
    """,
}

PAGES_IN = """
    from decimal import Decimal

    from manga_page_analysis.pages import add_page, ensure_chapter, ensure_manga


    def add_pages(conn, storage, images):
        '''The pages-in API, in the host's transaction: the job id of each image.'''
        manga_id = ensure_manga(conn, source_id="site", source_key="one-piece", title="One Piece")
        chapter_id = ensure_chapter(conn, manga_id, number=Decimal("1"), title="")
        added = [
            add_page(conn, storage, chapter_id, number=n, data=data, analyze=True)
            for n, data in enumerate(images, start=1)
        ]
        return [str(page.job_id) for page in added]
"""


def _write_tree(root: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(content).lstrip())


@pytest.fixture(scope="module")
def flask_host(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Host:
    root = tmp_path_factory.mktemp("flask_host")
    folder = root / "microblog"
    _write_tree(folder, {**MEGA_TUTORIAL, "pages_in.py": PAGES_IN})
    # The host itself is pip-installed too, as `app`: it must not overwrite us, nor we it.
    python = _virtualenv(root, f"{wheel}[flask]", str(folder))
    return Host(python, folder)


# --- the Django host -----------------------------------------------------------------

DJANGO_SETTINGS_TAIL = """

    # --- added for page analysis -----------------------------------------------------
    import os as _os

    from manga_page_analysis.web.django import database_from_url as _database_from_url

    INSTALLED_APPS += ["manga_page_analysis.web.django"]
    DATABASES = {"default": _database_from_url(_os.environ["HOST_DATABASE_URL"])}
    DATABASES["default"]["OPTIONS"]["prepare_threshold"] = None  # PgBouncer, transaction mode
    PAGE_ANALYSIS = {
        "ADMIN_TOKEN": "s3cret",
        "DATABASE_SCHEMA": _os.environ.get("DATABASE_SCHEMA", "public"),
        "LISTEN_DATABASE_URL": _os.environ.get("LISTEN_DATABASE_URL") or None,
    }
    ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
"""

DJANGO_URLS = """
    from django.contrib import admin
    from django.urls import include, path

    urlpatterns = [
        path("admin/analysis/", include("manga_page_analysis.web.django.urls")),  # before admin/
        path("admin/", admin.site.urls),
    ]
"""

DJANGO_ADD_PAGES = """
    import json, sys

    import django

    django.setup()  # DJANGO_SETTINGS_MODULE=mysite.settings

    from django.db import connection, transaction

    from manga_page_analysis.web.django import add_page, ensure_chapter, ensure_manga


    class RolledBack(Exception):
        pass


    images = [open(path, "rb").read() for path in sys.argv[2:]]
    jobs = []
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM auth_user")  # the host's own work
            # The package's Django face: Django's own connection, inside its atomic block.
            manga_id = ensure_manga(source_id="site", source_key="one-piece", title="One Piece")
            chapter_id = ensure_chapter(manga_id, number="1")
            jobs = [
                str(add_page(chapter_id, number=n, data=data, analyze=True).job_id)
                for n, data in enumerate(images, start=1)
            ]
            if sys.argv[1] == "rollback":
                raise RolledBack
    except RolledBack:
        pass
    print(json.dumps(jobs))
"""

DJANGO_ADMIN_GET = """
    import json, sys

    import django

    django.setup()  # DJANGO_SETTINGS_MODULE=mysite.settings

    from django.test import Client

    answer = Client().get(sys.argv[1], HTTP_AUTHORIZATION="Bearer s3cret")
    print(json.dumps({"status": answer.status_code, "json": answer.json()}))
"""


@pytest.fixture(scope="module")
def django_host(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Host:
    root = tmp_path_factory.mktemp("django_host")
    python = _virtualenv(root, f"{wheel}[django]")
    project = root / "mysite"
    project.mkdir()
    django_admin = python.parent / "django-admin"
    _check(
        subprocess.run(
            [str(django_admin), "startproject", "mysite", str(project)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    )
    settings = project / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + textwrap.dedent(DJANGO_SETTINGS_TAIL))
    _write_tree(
        project,
        {
            "mysite/urls.py": DJANGO_URLS,
            "add_pages.py": DJANGO_ADD_PAGES,
            "admin_get.py": DJANGO_ADMIN_GET,
        },
    )
    return Host(python, project)


# --- the runs ------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    url: str
    """What the host and the worker use (through PgBouncer when pooled)."""
    direct: str
    schema: str
    storage: Path
    images: list[str]

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "HOST_DATABASE_URL": self.url,
            "DATABASE_URL": self.url,
            "LISTEN_DATABASE_URL": self.direct,
            "DATABASE_SCHEMA": self.schema,
            "STORAGE_ROOT": str(self.storage),
            **extra,
        }

    def count(self, sql: str) -> int:
        engine = create_engine(self.direct)
        try:
            with engine.connect() as conn:
                return int(conn.execute(text(sql.format(s=self.schema))).scalar_one())
        finally:
            engine.dispose()


CASES = [("public", "direct"), (SCHEMA, "direct"), (SCHEMA, "pooled")]


@pytest.fixture(params=CASES, ids=[f"{schema}-{route}" for schema, route in CASES])
def setup(
    request: pytest.FixtureRequest, postgresql_proc: PostgreSQLExecutor, tmp_path: Path
) -> Iterator[Setup]:
    schema, route = request.param
    for direct in _fresh_database(postgresql_proc, None):
        if schema != "public":
            engine = create_engine(direct)
            with engine.begin() as conn:  # the host's own catalogue, in the way in `public`
                conn.execute(text("CREATE TABLE pages (id serial PRIMARY KEY, slug text)"))
            engine.dispose()
        url = request.getfixturevalue("pgbouncer").url_for(direct) if route == "pooled" else direct
        storage = tmp_path / "storage"
        storage.mkdir()
        images = []
        for n in (1, 2):
            image = tmp_path / f"{n}.png"
            image.write_bytes(png_bytes(color=("white", "gray")[n - 1]))
            images.append(str(image))
        yield Setup(url, direct, schema, storage, images)


def _add_pages_rollback_then_commit(host: Host, setup: Setup, script: str, **env: str) -> list[str]:
    rolled_back = json.loads(_check(host.run(script, "rollback", *setup.images, **env)))
    assert len(rolled_back) == 2  # they were added, then rolled back
    assert setup.count("SELECT count(*) FROM {s}.pages") == 0
    assert setup.count("SELECT count(*) FROM {s}.crawler_jobs") == 0
    # Nor any stored image that nothing would ever reap.
    assert [path for path in setup.storage.rglob("*") if path.is_file()] == []
    committed = json.loads(_check(host.run(script, "commit", *setup.images, **env)))
    assert len(set(committed)) == 2
    assert setup.count("SELECT count(*) FROM {s}.pages") == 2
    assert setup.count("SELECT count(*) FROM {s}.crawler_jobs WHERE state = 'pending'") == 2
    return committed


def _worker_analyses(host: Host, setup: Setup, args: list[str], **env: str) -> None:
    worker = host.start(*args, **env)
    try:
        wait_until(
            lambda: (
                setup.count("SELECT count(*) FROM {s}.page_analysis WHERE status = 'done'") == 2
                or worker.poll() is not None
            ),
            timeout=90,
            interval=0.2,
        )
        assert worker.poll() is None, worker.communicate()[0]
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, output
    assert setup.count("SELECT count(*) FROM {s}.crawler_jobs WHERE state = 'done'") == 2


def test_a_mega_tutorial_flask_host_uses_the_package_side_by_side(
    flask_host: Host, setup: Setup, vision_server: ScriptedVisionServer
) -> None:
    vision_server.default = ok_answer(analysis_content(ocr_text="海賊王"))
    env = setup.env(FLASK_APP="microblog.py", VISION_URL=vision_server.url)
    # Both packages import, each its own: the host's `app`, our `manga_page_analysis`.
    both = _check(
        flask_host.run(
            "-c",
            "import app, app.models, manga_page_analysis.models as ours; "
            "print(app.__file__, ours.__file__)",
            **env,
        )
    )
    assert "microblog/app/__init__.py" in both and "site-packages/manga_page_analysis" in both
    routes = _check(flask_host.run("-m", "flask", "routes", **env))
    assert "/admin/analysis/api/stats" in routes

    migrated = _check(flask_host.run("-m", "manga_page_analysis", "migrate", **env))
    assert "from an empty database to revision" in migrated

    _add_pages_rollback_then_commit(flask_host, setup, "add_pages.py", **env)
    _worker_analyses(flask_host, setup, ["-m", "manga_page_analysis", "run-worker"], **env)

    stats = json.loads(_check(flask_host.run("admin_get.py", "/admin/analysis/api/stats", **env)))
    assert stats["status"] == 200
    assert stats["json"]["jobs"]["analyze_page"]["done"] == 2
    if setup.schema != "public":
        assert setup.count("SELECT count(*) FROM public.pages") == 0  # the host's, untouched


def test_a_startproject_django_host_migrates_with_manage_py_migrate(
    django_host: Host, setup: Setup, vision_server: ScriptedVisionServer
) -> None:
    vision_server.default = ok_answer(analysis_content(ocr_text="海賊王"))
    env = setup.env(VISION_URL=vision_server.url, DJANGO_SETTINGS_MODULE="mysite.settings")
    _check(django_host.run("manage.py", "check", **env))
    migrated = _check(django_host.run("manage.py", "migrate", **env))
    assert f"page analysis schema ({setup.schema}) is at head" in migrated
    assert setup.count("SELECT count(*) FROM {s}.alembic_version") == 1

    _add_pages_rollback_then_commit(django_host, setup, "add_pages.py", **env)
    _worker_analyses(django_host, setup, ["manage.py", "run_worker"], **env)

    stats = json.loads(_check(django_host.run("admin_get.py", "/admin/analysis/api/stats", **env)))
    assert stats["status"] == 200
    assert stats["json"]["jobs"]["analyze_page"]["done"] == 2
    if setup.schema != "public":
        assert setup.count("SELECT count(*) FROM public.pages") == 0  # the host's, untouched


# --- what a user of the wheel reads ----------------------------------------------------

HOST_REVISION = "ca8a52db738a"
"""Flask-Migrate's revision of the host's own schema, in `public`."""

FORGOT_SCHEMA_OPTIONS = """
    import json

    from app import app, db
    from manga_page_analysis.pages import ensure_manga
    from manga_page_analysis.queue import request_analysis

    calls = {
        "ensure_manga": lambda: ensure_manga(db.session, source_id="s", source_key="k", title="T"),
        "request_analysis": lambda: request_analysis(db.session, "page-1"),
    }
    raised = {}
    with app.app_context():
        for name, call in calls.items():
            try:
                call()
            except Exception as exc:
                raised[name] = [type(exc).__module__ + "." + type(exc).__name__, str(exc)]
            db.session.rollback()
    print(json.dumps(raised))
"""


@pytest.fixture
def flask_migrate_database(postgresql_proc: PostgreSQLExecutor) -> Iterator[str]:
    """The Mega-Tutorial's database after `flask db upgrade`: its tables and its
    alembic revision in `public`."""
    for url in _fresh_database(postgresql_proc, None):
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE pages (id serial PRIMARY KEY, slug text)"))
            conn.execute(text("CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)"))
            conn.execute(text(f"INSERT INTO alembic_version VALUES ('{HOST_REVISION}')"))
        engine.dispose()
        yield url


def _console(host: Host, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user types it."""
    return subprocess.run(
        [str(host.python.parent / "manga-analysis"), *args],
        env=host.env(**env),
        cwd=host.folder,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _one_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]


# Setting up the host (a wheel, a virtualenv) counts against the timeout.
@pytest.mark.timeout(1800)
def test_a_flask_host_is_told_what_to_set_in_its_own_words(
    flask_host: Host,
    flask_migrate_database: str,
    tmp_path: Path,
    vision_server: ScriptedVisionServer,
) -> None:
    url = flask_migrate_database
    env = {"HOST_DATABASE_URL": url, "DATABASE_URL": url, "STORAGE_ROOT": str(tmp_path / "s")}

    # No DATABASE_SCHEMA, the host's revision in `public`: every face names DATABASE_SCHEMA
    # the first time, and none sends the user to `migrate` or --migrate, which refuse there.
    worker = _console(flask_host, "run-worker", VISION_URL=vision_server.url, **env)
    assert worker.returncode == 2, worker.stderr
    line = _one_line(worker.stderr)
    assert HOST_REVISION in line and "DATABASE_SCHEMA=page_analysis" in line, line
    assert "`manga-analysis migrate` creates it" in line and "--migrate" not in line, line
    assert "alembic" not in worker.stderr.lower().replace("alembic revision", "")
    stats = _console(flask_host, "jobs", "stats", **env)
    assert stats.returncode == 1
    line = _one_line(stats.stderr)
    assert line.startswith("error: schema public holds another project's alembic revision")
    assert "DATABASE_SCHEMA=page_analysis" in line, line
    admin = json.loads(_check(flask_host.run("admin_get.py", "/admin/analysis/api/stats", **env)))
    assert admin["status"] == 503
    message = admin["json"]["error"]["message"]
    assert HOST_REVISION in message and "DATABASE_SCHEMA" in message, message
    assert 'schema_options("page_analysis")' in message

    # A bad schema name is a plain sentence; then migrate into a schema of its own.
    empty = _console(flask_host, "jobs", "stats", DATABASE_SCHEMA="", **env)
    assert empty.returncode == 2
    assert _one_line(empty.stderr).startswith("error: bad setting: DATABASE_SCHEMA: is empty: ")
    assert "pattern" not in empty.stderr and "pydantic" not in empty.stderr
    migrated = _console(flask_host, "migrate", DATABASE_SCHEMA=SCHEMA, **env)
    assert migrated.returncode == 0, migrated.stderr

    # The host forgets schema_options on its engine (DATABASE_SCHEMA not passed to it):
    # the package's own errors, saying what to set; a bad page id is the package's too.
    (flask_host.folder / "forgot_schema.py").write_text(textwrap.dedent(FORGOT_SCHEMA_OPTIONS))
    raised = json.loads(_check(flask_host.run("forgot_schema.py", **env)))
    kind, message = raised["ensure_manga"]
    assert kind == "manga_page_analysis.errors.TablesNotFound", raised
    assert "public.mangas" in message and "schema_options(DATABASE_SCHEMA)" in message
    kind, message = raised["request_analysis"]
    assert kind == "manga_page_analysis.errors.NotAPageId", raised
    assert message.startswith("'page-1' is not a page id") and "pydantic" not in message

    # The worker starts quietly (no alembic lines), naming its schema.
    worker_env = {**env, "DATABASE_SCHEMA": SCHEMA, "VISION_URL": vision_server.url}
    process = subprocess.Popen(
        [str(flask_host.python.parent / "manga-analysis"), "run-worker"],
        env=flask_host.env(**worker_env),
        cwd=flask_host.folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    started = []
    for output_line in process.stdout:
        started.append(output_line)
        if "run-worker: database" in output_line:
            break
    process.send_signal(signal.SIGTERM)
    rest, _ = process.communicate(timeout=60)
    output = "".join(started) + rest
    assert process.returncode == 0, output
    assert f"(schema {SCHEMA})" in started[-1], output
    assert "alembic" not in output.lower(), output


# Setting up the host (a wheel, a virtualenv) counts against the timeout.
@pytest.mark.timeout(1800)
def test_what_the_installed_commands_say_points_at_the_installed_package(
    flask_host: Host, database_url: str, tmp_path: Path, vision_server: ScriptedVisionServer
) -> None:
    # Usage under the name it was run by; the docs where the package is installed.
    helped = _console(flask_host, "--help")
    assert helped.returncode == 0
    text_ = " ".join(helped.stdout.split())
    assert text_.startswith("usage: manga-analysis ") and "python -m" not in text_
    site_packages = flask_host.python.parents[1] / "lib"
    docs = [word.rstrip(".)") for word in text_.split() if word.endswith("environment.md")]
    assert len(docs) == 1 and Path(docs[0]).is_file(), text_
    assert Path(docs[0]).is_relative_to(site_packages) and not docs[0].startswith("docs/")
    module = _check(flask_host.run("-m", "manga_page_analysis", "jobs", "--help"))
    assert module.startswith("usage: python -m manga_page_analysis jobs")

    # The demo, run from the wheel, suggests no `make`: the commands that are installed.
    vision_server.default = ok_answer(analysis_content(ocr_text="デモ"))
    env = {
        "DATABASE_URL": database_url,
        "STORAGE_ROOT": str(tmp_path / "storage"),
        "VISION_URL": vision_server.url,
    }
    demo = _console(flask_host, "demo", "--timeout", "120", **env)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "make" not in demo.stdout, demo.stdout
    assert "Run again:   manga-analysis demo" in demo.stdout
    assert "manga-analysis run-worker" in demo.stdout
