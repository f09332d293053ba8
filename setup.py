"""Packaging that pyproject.toml cannot say: the wheel carries the migrations and the sample manga.

`alembic/` (top level, the source of truth, where `alembic upgrade head` in a
checkout finds it) ships as the package `app._alembic`, and
`examples/sample_manga/` (what `python -m app demo` imports) as
`app._sample_manga`, so an installed package needs no checkout.
`app.migrations` and `app.cli.demo` find them there, or in the checkout.
"""

from setuptools import find_packages, setup

SHIPPED_FOLDERS = {
    "app._alembic": "alembic",
    "app._alembic.versions": "alembic/versions",
    "app._sample_manga": "examples/sample_manga",
}

setup(
    packages=[*find_packages(include=["app", "app.*"]), *SHIPPED_FOLDERS],
    package_dir=SHIPPED_FOLDERS,
    package_data={
        "app._alembic": ["script.py.mako"],
        "app._sample_manga": ["*"],  # whatever the samples are made of
        "app.web": ["templates/*.html"],
    },
)
