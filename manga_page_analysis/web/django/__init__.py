"""Django integration: `INSTALLED_APPS = [..., "manga_page_analysis.web.django"]`.

Settings, URLs and commands: docs/embedding.md, "Django". `request_analysis`
and the pages-in API (`ensure_manga`, `ensure_chapter`, `add_page`) run on
Django's own connection, in the open `transaction.atomic()` block.
"""

from __future__ import annotations

from manga_page_analysis.web.django.conf import database_from_url
from manga_page_analysis.web.django.hostapi import (
    add_page,
    ensure_chapter,
    ensure_manga,
    request_analysis,
)

__all__ = ["add_page", "database_from_url", "ensure_chapter", "ensure_manga", "request_analysis"]
