"""The admin page's views of the work under Django, in a real headless browser:
the same walk as under Flask (tests/integration/test_admin_page_views.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from manga_page_analysis.analysis.reader.ocr_analyzer import OcrAnalyzer
from tests.integration.test_admin_page import browser  # noqa: F401  (the browser fixture)
from tests.integration.test_admin_page_views import TOKEN, exercise_the_views
from tests.integration.web_django.test_django_events_http import serve_django

pytestmark = pytest.mark.slow


@pytest.mark.usefixtures("django_db")
def test_django_admin_page_shows_jobs_pages_and_boxes(
    django_engine: Engine,
    browser: Any,  # noqa: F811
    ocr: OcrAnalyzer,
    vision_server: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storage_root = tmp_path / "storage"
    # Django's admin reads page images from the store the environment configures.
    monkeypatch.setenv("STORAGE_ROOT", str(storage_root))
    with serve_django(ADMIN_TOKEN=TOKEN) as (host, port):
        exercise_the_views(
            browser,
            f"http://{host}:{port}/admin/analysis/",
            django_engine,
            storage_root,
            ocr,
            vision_server,
            "django",
        )
