"""The admin page: one HTML file, shipped as package data, served at the mount point.

It holds no queue data (it fetches `api/...` with the bearer token the user
types in), so the adapters serve it without auth.
"""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def admin_page_html() -> str:
    """The admin page's HTML (read once per process)."""
    return resources.files("app.web").joinpath("templates/admin.html").read_text("utf-8")
