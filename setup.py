"""Packaging that pyproject.toml cannot say: the wheel carries the migrations, the sample manga
and the documentation.

`alembic/` (top level, the source of truth, where `alembic upgrade head` in a
checkout finds it) ships as the package `manga_page_analysis._alembic`, and
`examples/sample_manga/` (what `python -m manga_page_analysis demo` imports) as
`manga_page_analysis._sample_manga`, and `docs/` (which `--help` points at) as
`manga_page_analysis._docs`, so an installed package needs no checkout.
`manga_page_analysis.migrations` and `manga_page_analysis.cli.demo` find them there, or in the checkout.

Every build copies the sources into an empty `build/lib`: setuptools otherwise
keeps what an earlier build left there, and a module or migration deleted
since would still ship in the wheel (an old migration file, a second head).
"""

import shutil

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py


class FreshBuildPy(build_py):  # type: ignore[misc]  # setuptools is untyped
    """`build_py` into an emptied `build_lib` (this package has no extension modules)."""

    def run(self) -> None:
        shutil.rmtree(self.build_lib, ignore_errors=True)
        super().run()


SHIPPED_FOLDERS = {
    "manga_page_analysis._alembic": "alembic",
    "manga_page_analysis._alembic.versions": "alembic/versions",
    "manga_page_analysis._sample_manga": "examples/sample_manga",
    "manga_page_analysis._docs": "docs",
}

setup(
    cmdclass={"build_py": FreshBuildPy},
    packages=[
        *find_packages(include=["manga_page_analysis", "manga_page_analysis.*"]),
        *SHIPPED_FOLDERS,
    ],
    package_dir=SHIPPED_FOLDERS,
    package_data={
        "manga_page_analysis._alembic": ["script.py.mako"],
        "manga_page_analysis._sample_manga": ["*"],  # whatever the samples are made of
        "manga_page_analysis._docs": ["*.md"],
        "manga_page_analysis.web": ["templates/*.html"],
    },
)
