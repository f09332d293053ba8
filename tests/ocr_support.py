"""The in-process OCR engine, loaded once per test process.

Loaded as a pytest plugin (tests/conftest.py). Loading rapidocr's ONNX models
takes seconds (10 s on a busy machine), so every test that needs a loaded
`OcrAnalyzer`, and does not test loading itself, asks for the `ocr` fixture.
Such tests are kept on one pytest-xdist worker (the `xdist_group("ocr")`
marker that tests/conftest.py adds under `--dist loadgroup`), so a parallel
run loads the models once, not once per worker.

The analyzer is shared: a test may read with it and hand it to a runner (the
runner does not close an analyzer it was given), but must not close it.
"""

from __future__ import annotations

import pytest

from manga_page_analysis.analysis.reader.ocr_analyzer import OcrAnalyzer


@pytest.fixture(scope="session")
def ocr() -> OcrAnalyzer:
    """A loaded, warmed-up analyzer of the models in rapidocr's wheel."""
    analyzer = OcrAnalyzer()
    analyzer.load()
    return analyzer
