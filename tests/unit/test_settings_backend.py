"""`VISION_BACKEND`: `http` or `ocr`; unset, `http` exactly when `VISION_URL` is set."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from manga_page_analysis.config import Settings


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    for name in ("VISION_URL", "VISION_BACKEND", "VISION_HEALTH_URL"):
        monkeypatch.delenv(name, raising=False)


def settings(**env: str) -> Settings:
    return Settings(_env_file=None, **env)  # type: ignore[call-arg]


def test_no_vision_url_means_the_in_process_ocr_backend():
    configured = settings()
    assert (configured.vision_url, configured.backend, configured.health_url) == (None, "ocr", None)


def test_a_vision_url_means_the_http_backend(monkeypatch):
    monkeypatch.setenv("VISION_URL", "http://127.0.0.1:8080/")
    configured = settings()
    assert configured.backend == "http"
    assert configured.health_url == "http://127.0.0.1:8080/health"


def test_an_empty_vision_url_counts_as_unset(monkeypatch):
    monkeypatch.setenv("VISION_URL", "")
    assert settings().backend == "ocr"


def test_vision_backend_overrides_the_default_either_way(monkeypatch):
    monkeypatch.setenv("VISION_URL", "http://gpu-box:8000")
    monkeypatch.setenv("VISION_BACKEND", "OCR")
    assert settings().backend == "ocr"
    monkeypatch.setenv("VISION_BACKEND", "http")
    assert settings().backend == "http"


def test_http_without_a_url_is_a_configuration_error(monkeypatch):
    monkeypatch.setenv("VISION_BACKEND", "http")
    with pytest.raises(ValidationError, match="VISION_BACKEND=http needs VISION_URL"):
        settings()


def test_an_unknown_backend_is_a_configuration_error(monkeypatch):
    monkeypatch.setenv("VISION_BACKEND", "tesseract")
    with pytest.raises(ValidationError):
        settings()
