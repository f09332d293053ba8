"""`PAGE_ANALYSIS` validation and the SQLAlchemy URL built from `DATABASES`."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.engine import make_url

pytestmark = pytest.mark.usefixtures("django_setup")


def _params(entry: dict[str, Any]) -> dict[str, Any]:
    from django.db.utils import ConnectionHandler

    return dict(ConnectionHandler({"default": entry})["default"].get_connection_params())


@pytest.mark.parametrize(
    "setting",
    [
        "not a dict",
        {"ADMIN_TOKN": "typo"},
        {"ADMIN_TOKEN": ""},
        {"ADMIN_TOKEN": 42},
        {"DATABASE_ALIAS": "nope"},
        {"MAX_EVENT_STREAMS": 0},
        {"MAX_EVENT_STREAMS": True},
        {"EVENT_KEEPALIVE_SECONDS": -1},
    ],
)
def test_a_bad_setting_is_improperly_configured(setting: Any) -> None:
    from django.core.exceptions import ImproperlyConfigured
    from django.test import override_settings

    from manga_page_analysis.web.django.conf import page_analysis_settings

    with override_settings(PAGE_ANALYSIS=setting), pytest.raises(ImproperlyConfigured):
        page_analysis_settings()


def test_every_key_is_optional() -> None:
    from django.test import override_settings

    from manga_page_analysis.web.django.conf import page_analysis_settings

    with override_settings(PAGE_ANALYSIS=None):
        parsed = page_analysis_settings()
    assert parsed.admin_token is None and parsed.database_alias == "default"
    assert parsed.max_event_streams >= 1 and parsed.event_keepalive_seconds == 15.0


def test_the_url_carries_django_options_over() -> None:
    from manga_page_analysis.web.django.conf import database_from_url, url_from_connection_params

    entry = database_from_url("postgresql://app:p%40ss@db.example:6543/shop?sslmode=require")
    assert entry["NAME"] == "shop" and entry["PASSWORD"] == "p@ss"
    url = url_from_connection_params(_params(entry))
    assert url.drivername == "postgresql+psycopg"
    assert (url.username, url.password, url.host, url.port, url.database) == (
        "app",
        "p@ss",
        "db.example",
        6543,
        "shop",
    )
    assert url.query["sslmode"] == "require"
    assert "cursor_factory" not in url.query and "context" not in url.query
    # Round trip through the string the worker gets as DATABASE_URL.
    assert make_url(url.render_as_string(hide_password=False)) == url


def test_a_unix_socket_host_goes_into_the_query() -> None:
    from manga_page_analysis.web.django.conf import url_from_connection_params

    entry = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "shop",
        "USER": "app",
        "HOST": "/run/postgresql",
    }
    url = url_from_connection_params(_params(entry))
    assert url.host is None and url.query["host"] == "/run/postgresql"


@pytest.mark.parametrize(
    ("port", "expected"),
    [("5432,5433", ("db1:5432", "db2:5433")), ("5432", ("db1:5432", "db2:5432"))],
)
def test_several_hosts_give_the_multi_host_url(port: str, expected: tuple[str, ...]) -> None:
    from manga_page_analysis.db import connect_kwargs
    from manga_page_analysis.web.django.conf import url_from_connection_params

    entry = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "shop",
        "USER": "app",
        "HOST": "db1,db2",
        "PORT": port,
        "OPTIONS": {"target_session_attrs": "read-write"},
    }
    url = url_from_connection_params(_params(entry))
    assert url.host is None and url.port is None and tuple(url.query["host"]) == expected
    driver = connect_kwargs(url)  # what psycopg is handed: libpq's lists
    assert driver["host"] == "db1,db2" and driver["port"] == ",".join(
        hostport.split(":")[1] for hostport in expected
    )
    assert driver["target_session_attrs"] == "read-write"
