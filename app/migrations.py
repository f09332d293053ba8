"""Running and checking alembic migrations from code (the CLI, `make migrate`)."""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from alembic import command

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def alembic_config(url: str) -> Config:
    """Alembic's config for `url`, from the project's alembic.ini, leaving logging alone."""
    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "alembic"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logging"] = False
    return config


def upgrade_head(url: str) -> None:
    command.upgrade(alembic_config(url), "head")


def revisions(engine: Engine) -> tuple[str | None, str | None]:
    """The database's revision and the head revision of the migrations."""
    head = ScriptDirectory.from_config(alembic_config(str(engine.url))).get_current_head()
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    return current, head
