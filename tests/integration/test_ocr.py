"""The `ocr` analyzer on the sample manga pages shipped in examples/sample_manga/.

Tolerance: none beyond normalisation. Both sides are NFKC-normalised (a
full-width ！ and a plain ! are one character to a reader, and the recogniser
may emit either) and stripped of all whitespace (Japanese has none, and how
the OCR spaces English words is not what is tested); then every expected
phrase must appear exactly, in reading order. The pages are clean synthetic
renderings that the models read exactly today, and inference is
deterministic; a one-character tolerance would hide the very faults seen
while building this (a vertical column's ！ dropped, a column split in two
and read in the wrong order).
"""

from __future__ import annotations

import json
import threading
import time
import unicodedata
from datetime import timedelta
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
import requests
from PIL import Image
from sqlalchemy import text

from manga_page_analysis.analysis.analyzer.prepared_image import prepare_image
from manga_page_analysis.analysis.page_events import analysis_event_bus
from manga_page_analysis.analysis.reader.ocr_analyzer import (
    OcrAnalyzer,
    OcrModelError,
    OcrModelMissing,
    wheel_model_dir,
)
from manga_page_analysis.analysis.wiring import analysis_runner
from manga_page_analysis.cli.importer import import_folder
from manga_page_analysis.config import Settings
from manga_page_analysis.errors import DispatchTimeout, VisionCancelled
from tests.worker_support import EventRecorder

SAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sample_manga"
MANIFEST: dict[str, Any] = json.loads((SAMPLES / "pages.json").read_text("utf-8"))
EXPECTED: dict[str, list[str]] = MANIFEST["pages"]
NOT_TEXT: dict[str, list[str]] = MANIFEST["not_text"]


def normalise(value: str) -> str:
    return "".join(unicodedata.normalize("NFKC", value).split())


def assert_reads(text_read: str, phrases: list[str]) -> None:
    """Each phrase appears, after the previous one."""
    haystack = normalise(text_read)
    position = 0
    for phrase in phrases:
        found = haystack.find(normalise(phrase), position)
        assert found >= 0, f"{phrase!r} not read (after position {position}) in {text_read!r}"
        position = found + len(normalise(phrase))


def page(name: str) -> Any:
    return prepare_image((SAMPLES / name).read_bytes())


def far() -> float:
    return time.monotonic() + 120


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_reads_the_sample_pages_in_manga_reading_order(ocr, name):
    result = ocr.analyze(page(name), deadline=far())
    assert_reads(result.analysis.ocr_text, EXPECTED[name])
    if not EXPECTED[name]:
        assert result.analysis.ocr_text == ""
    # One line per bubble.
    assert len(result.analysis.ocr_text.splitlines()) == len(EXPECTED[name])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_bubble_is_one_block_read_whole_and_nothing_else_is_read(ocr, name):
    """Blocks, exactly: no furigana, no sound effect, no bubble split or merged."""
    result = ocr.analyze(page(name), deadline=far())
    blocks = result.analysis.ocr_blocks
    assert blocks is not None
    assert [normalise(block["text"]) for block in blocks] == [
        normalise(phrase) for phrase in EXPECTED[name]
    ]
    assert result.analysis.ocr_text.splitlines() == [block["text"] for block in blocks]
    for drawn in NOT_TEXT.get(name, []):
        if not any(drawn in phrase for phrase in EXPECTED[name]):
            assert drawn not in result.analysis.ocr_text


def test_the_test_pages_draw_furigana_a_sound_effect_and_a_left_to_right_page():
    drawn = [text for texts in NOT_TEXT.values() for text in texts]
    assert "ドドド" in drawn and "あした" in drawn
    assert any(
        all(phrase.isascii() for phrase in phrases) and phrases for phrases in EXPECTED.values()
    )


def test_blocks_give_their_place_on_the_page_in_original_pixels(ocr):
    full = ocr.analyze(page("005.png"), deadline=far()).analysis.ocr_blocks
    assert full is not None
    with Image.open(SAMPLES / "005.png") as original:
        width, height = original.size
    # The tall right-hand panel spans x 306..580; the stacked ones 20..294.
    for block, in_right_panel in zip(full, [True, True, False, False, True], strict=True):
        x0, y0, x1, y1 = block["box"]
        assert 0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height
        assert (x0 > 300) == in_right_panel, block
        assert block["vertical"] is True and 0.5 <= block["score"] <= 1
    # The same page scaled down for the model: boxes still in the original's pixels.
    small = prepare_image((SAMPLES / "005.png").read_bytes(), max_side_px=700)
    assert small.original_size == (width, height) and small.height == 700
    scaled = ocr.analyze(small, deadline=far()).analysis.ocr_blocks
    assert scaled is not None and len(scaled) == len(full)
    for got, want in zip(scaled, full, strict=True):
        assert all(abs(a - b) <= 12 for a, b in zip(got["box"], want["box"], strict=True))


def test_a_single_bubble_cut_from_a_page_reads_as_well_as_on_the_page(ocr):
    """No blind upscaling: a small crop reads the same as the page it came from."""
    blocks = ocr.analyze(page("001.png"), deadline=far()).analysis.ocr_blocks
    assert blocks is not None
    x0, y0, x1, y1 = blocks[0]["box"]
    with Image.open(SAMPLES / "001.png") as original:
        crop = original.convert("L").crop((x0 - 6, y0 - 6, x1 + 6, y1 + 6))
    buffer = BytesIO()
    crop.save(buffer, "PNG")
    result = ocr.analyze(prepare_image(buffer.getvalue()), deadline=far())
    assert normalise(result.analysis.ocr_text) == normalise(EXPECTED["001.png"][0])


def test_leaves_tags_description_and_nsfw_unjudged_and_names_the_model(ocr):
    result = ocr.analyze(page("001.png"), deadline=far())
    analysis = result.analysis
    assert (analysis.tags, analysis.description) == ((), "")
    assert (analysis.nsfw_rating, analysis.nsfw_score) == (None, None)
    assert result.model == ocr.model
    assert ocr.model.startswith("rapidocr 3.")
    assert "PP-OCRv6_det_small+PP-OCRv6_rec_small" in ocr.model


def test_the_test_pages_cover_vertical_and_horizontal_japanese_and_english():
    phrases = [phrase for phrases in EXPECTED.values() for phrase in phrases]
    assert any(phrase.isascii() for phrase in phrases)
    assert any(not phrase.isascii() for phrase in phrases)
    assert len(phrases) >= 10
    for name in EXPECTED:
        assert (SAMPLES / name).stat().st_size < 64 * 1024, f"{name} should stay small"


@pytest.mark.slow
def test_worker_threads_share_one_analyzer_safely(ocr):
    names = ["001.png", "003.png"]
    serial = {name: ocr.analyze(page(name), deadline=far()).analysis.ocr_text for name in names}
    results: dict[tuple[int, str], str] = {}
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            order = names if worker % 2 == 0 else list(reversed(names))
            for name in order:
                results[worker, name] = ocr.analyze(page(name), deadline=far()).analysis.ocr_text
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(worker,)) for worker in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors
    assert results == {(worker, name): serial[name] for worker in range(2) for name in names}


def test_checks_cancel_and_deadline_before_reading(ocr):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(VisionCancelled):
        ocr.analyze(page("001.png"), deadline=far(), cancel=cancel, job_label="job x")
    with pytest.raises(DispatchTimeout):
        ocr.analyze(page("001.png"), deadline=time.monotonic() - 1, job_label="job x")


def test_a_transparent_page_reads_as_if_on_white_paper(ocr):
    with Image.open(SAMPLES / "001.png") as original:
        grey = original.convert("L")
    # Black text on a fully transparent background: flattened onto black it would vanish.
    rgba = Image.new("RGBA", grey.size, (0, 0, 0, 0))
    rgba.putalpha(grey.point(lambda value: 255 - value))
    buffer = BytesIO()
    rgba.save(buffer, "PNG")
    result = ocr.analyze(prepare_image(buffer.getvalue()), deadline=far())
    assert_reads(result.analysis.ocr_text, EXPECTED["001.png"])


@pytest.mark.slow
def test_loading_uses_only_the_wheel_models_and_downloads_nothing(monkeypatch):
    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"network access attempted: {args} {kwargs}")

    monkeypatch.setattr(requests, "get", no_network)
    monkeypatch.setattr(requests.Session, "request", no_network)
    analyzer = OcrAnalyzer()
    assert analyzer.det_model_path.parent == wheel_model_dir()
    assert not analyzer.readiness().ready
    analyzer.start()
    assert analyzer.wait_loaded(120), analyzer.load_error
    assert analyzer.load_error is None
    assert analyzer.readiness().ready and analyzer.load_seconds is not None
    assert_reads(analyzer.analyze(page("003.png"), deadline=far()).analysis.ocr_text, ["ドキドキ"])


def test_a_missing_model_is_an_error_when_the_analyzer_is_built(tmp_path):
    (tmp_path / "PP-OCRv6_det_small.onnx").write_bytes(b"")
    with pytest.raises(OcrModelMissing) as raised:
        OcrAnalyzer(model_dir=tmp_path)
    message = str(raised.value)
    assert "PP-OCRv6_rec_small.onnx" in message and "downloads nothing" in message


def test_a_model_that_fails_to_load_keeps_the_gate_shut_and_reports(tmp_path):
    for name in ("PP-OCRv6_det_small.onnx", "PP-OCRv6_rec_small.onnx"):
        (tmp_path / name).write_bytes(b"not an onnx model")
    analyzer = OcrAnalyzer(model_dir=tmp_path)
    failures: list[OcrModelError] = []
    analyzer.start(on_failure=failures.append)
    assert not analyzer.wait_loaded(120)
    assert failures and failures[0] is analyzer.load_error
    assert "failed to load" in str(failures[0])


def _ocr_settings(database_url: str, storage_root: Path) -> Settings:
    return Settings(  # type: ignore[call-arg]
        _env_file=None,
        database_url=database_url,
        vision_url=None,  # init values beat the environment: the default backend, whatever is set
        vision_backend=None,
        storage_root=storage_root,
        analysis_workers=2,
        idle_poll_seconds=0.05,
        readiness_poll_seconds=0.05,
        reap_retention_days=0,
    )


@pytest.mark.slow
def test_the_runner_stores_ocr_results_with_a_null_nsfw_verdict(
    database_url, engine, ocr, tmp_path
):
    storage = tmp_path / "storage"
    imported = import_folder(engine, storage, SAMPLES, title="Sample", chapter=1)
    settings = _ocr_settings(database_url, storage)
    assert settings.backend == "ocr"
    recorder = EventRecorder()
    bus = analysis_event_bus(engine)
    bus.subscribe(recorder)
    with analysis_runner(settings, engine=engine, vision=ocr, events=bus) as runner:
        assert runner.lease_duration == timedelta(seconds=settings.lease_seconds)
        runner.start()
        try:
            for page_id in imported.page_ids:
                recorder.wait_for("completed", page_id, timeout=60)
        finally:
            runner.stop()
            assert runner.join(10)
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT p.number, a.* FROM page_analysis a JOIN pages p ON p.id = a.page_id "
                "ORDER BY p.number"
            )
        ).all()
    assert [row.status for row in rows] == ["done"] * len(EXPECTED)
    for row, name in zip(rows, sorted(EXPECTED), strict=True):
        assert_reads(row.ocr_text, EXPECTED[name])
        assert [block["text"] for block in row.ocr_blocks] == (
            row.ocr_text.splitlines() if row.ocr_text else []
        )
        assert all(len(block["box"]) == 4 for block in row.ocr_blocks)
        assert (row.nsfw_rating, row.nsfw_score) == (None, None)
        assert (row.tags, row.description, row.model) == ([], "", ocr.model)


def test_without_a_model_the_runner_is_not_built(database_url, tmp_path, monkeypatch):
    monkeypatch.setattr(
        "manga_page_analysis.analysis.reader.ocr_analyzer.wheel_model_dir", lambda: tmp_path
    )
    with pytest.raises(OcrModelMissing), analysis_runner(_ocr_settings(database_url, tmp_path)):
        pass


def test_a_model_failing_to_load_stops_the_runner_and_raises_on_exit(
    database_url, engine, tmp_path, monkeypatch
):
    for name in ("PP-OCRv6_det_small.onnx", "PP-OCRv6_rec_small.onnx"):
        (tmp_path / name).write_bytes(b"garbage")
    monkeypatch.setattr(
        "manga_page_analysis.analysis.reader.ocr_analyzer.wheel_model_dir", lambda: tmp_path
    )
    with (
        pytest.raises(OcrModelError, match="failed to load"),
        analysis_runner(_ocr_settings(database_url, tmp_path), engine=engine) as runner,
    ):
        runner.start()
        assert runner.wait_stopping(30), "the runner should stop when the model cannot load"
        assert runner.join(10)
