"""Running and checking alembic migrations from code (the CLI, Django's
`page_analysis_migrate`, the tests). The scripts are the checkout's `alembic/`,
or the installed package's copy in `manga_page_analysis/_alembic/` (see setup.py)."""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, pool

from alembic import command


def script_location() -> Path:
    """The folder of `env.py` and `versions/`: the installed package's copy, else the checkout's."""
    package = Path(__file__).resolve().parent
    packaged = package / "_alembic"
    return packaged if (packaged / "env.py").is_file() else package.parent / "alembic"


def alembic_config(url: str) -> Config:
    """Alembic's config for `url`; it leaves logging alone and needs no `alembic.ini`."""
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    config.set_main_option("path_separator", "os")
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logging"] = False
    return config


def upgrade_head(url: str) -> None:
    """Apply every pending migration to the database at `url`."""
    command.upgrade(alembic_config(url), "head")


def head_revision() -> str | None:
    """The newest revision of the migration scripts."""
    return ScriptDirectory(str(script_location())).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The database's revision; `None` when it was never migrated."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def revisions(engine: Engine) -> tuple[str | None, str | None]:
    """The database's revision and the head revision of the migrations."""
    return current_revision(engine), head_revision()


def migrate(url: str) -> tuple[str | None, str | None]:
    """Bring the database at `url` to head; returns its revision before and after."""
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        before = current_revision(engine)
        upgrade_head(url)
        return before, current_revision(engine)
    finally:
        engine.dispose()
