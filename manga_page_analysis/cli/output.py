"""What every command shares in what it prints: a URL without its password, an error's
first line, and how long an operator command waits for the database."""

from __future__ import annotations

from sqlalchemy.engine import make_url

DB_CONNECT_TIMEOUT_SECONDS = 10
"""An operator command gives up on an unreachable database after this long."""


def first_line(error: BaseException | None) -> str:
    text = str(error).strip() if error is not None else ""
    return text.splitlines()[0] if text else type(error).__name__


def safe_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)
