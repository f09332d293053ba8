"""Packaging that pyproject.toml cannot say: the wheel carries the migrations and the sample manga.

`alembic/` (top level, the source of truth, where `alembic upgrade head` in a
checkout finds it) ships as the package `manga_page_analysis._alembic`, and
`examples/sample_manga/` (what `python -m manga_page_analysis demo` imports) as
`manga_page_analysis._sample_manga`, so an installed package needs no checkout.
`manga_page_analysis.migrations` and `manga_page_analysis.cli.demo` find them there, or in the checkout.
"""

from setuptools import find_packages, setup

SHIPPED_FOLDERS = {
    "manga_page_analysis._alembic": "alembic",
    "manga_page_analysis._alembic.versions": "alembic/versions",
    "manga_page_analysis._sample_manga": "examples/sample_manga",
}

setup(
    packages=[*find_packages(include=["manga_page_analysis", "manga_page_analysis.*"]), *SHIPPED_FOLDERS],
    package_dir=SHIPPED_FOLDERS,
    package_data={
        "manga_page_analysis._alembic": ["script.py.mako"],
        "manga_page_analysis._sample_manga": ["*"],  # whatever the samples are made of
        "manga_page_analysis.web": ["templates/*.html"],
    },
)
