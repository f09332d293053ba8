"""Lettering a few pixels thick is recognised from the image enlarged as the detector saw it;
print-size lettering from the image as it is (no models: a detector that answers with drawn
boxes, a recogniser that records what it is given)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageDraw
from rapidocr.utils.process_img import get_rotate_crop_image

from manga_page_analysis.analysis.reader.recognition import detect_and_read as ocr_pipeline
from manga_page_analysis.analysis.reader.recognition.detect_and_read import (
    DET_MAX_UPSCALE,
    _line_crop,
    read_lines,
)


def quad(x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype=np.float32)


def small_column_page() -> Image.Image:
    """A 200x300 page with one column of lettering 8 px thick at x 100-108, y 40-120: a
    bar for each glyph, the first one heavier."""
    page = Image.new("RGB", (200, 300), "white")
    draw = ImageDraw.Draw(page)
    draw.rectangle((100, 40, 108, 50), fill="black")
    for top in range(60, 120, 12):
        draw.rectangle((101, top, 107, top + 3), fill="black")
    return page


def bgr(page: Image.Image) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(page)[:, :, ::-1])


def test_a_line_cut_at_its_own_scale_is_cut_as_rapidocr_cuts_it():
    source = bgr(small_column_page())
    box = quad(98, 38, 110, 122)
    assert np.array_equal(_line_crop(source, box, 1.0), get_rotate_crop_image(source, box.copy()))


def test_a_print_size_line_is_cut_as_it_is_whatever_the_scale():
    source = bgr(small_column_page())
    box = quad(96, 38, 118, 122)  # 22 px thick: not small
    assert np.array_equal(_line_crop(source, box, 2.0), get_rotate_crop_image(source, box.copy()))


def test_a_line_cut_enlarged_is_laid_horizontal_at_that_scale_with_its_ink_in_place():
    source = bgr(small_column_page())
    box = quad(98, 38, 110, 122)  # 12 px thick, 84 px long
    crop = _line_crop(source, box, 2.0)
    plain = get_rotate_crop_image(source, box.copy())
    # Laid horizontal (the column's top on the left), twice the size either way.
    assert abs(crop.shape[0] - 2 * plain.shape[0]) <= 2
    assert abs(crop.shape[1] - 2 * plain.shape[1]) <= 2
    ink = crop.mean(axis=2) < 128
    columns = np.flatnonzero(ink.any(axis=0))
    # The heavy first glyph (y 40-50 on the page) lies at 4-26 px from the left of the crop.
    assert 2 <= columns[0] <= 6
    assert ink[:, 4:24].sum() > ink[:, 24:44].sum()
    # The same picture as the plain cut, only finer: its ink falls where the plain cut's does.
    again = np.asarray(Image.fromarray(plain).resize((crop.shape[1], crop.shape[0])))
    assert (ink & (again.mean(axis=2) < 160)).sum() >= 0.8 * ink.sum()


@dataclass
class Read:
    txts: tuple[str, ...]
    scores: tuple[float, ...]


class Recogniser:
    """Reads every crop as "あ" and records the crops' sizes."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, int]] = []

    def __call__(self, request: Any) -> Read:
        self.shapes += [crop.shape[:2] for crop in request.img]
        return Read(("あ",) * len(request.img), (0.95,) * len(request.img))


class Engine:
    def __init__(self) -> None:
        self.recogniser = Recogniser()

    def load_img(self, image: Image.Image) -> np.ndarray:
        return bgr(image)

    def _load_det_model(self) -> None:
        return None

    def _load_rec_model(self) -> Recogniser:
        return self.recogniser


def detecting(monkeypatch: pytest.MonkeyPatch, *thicknesses: int) -> list[float]:
    """The detector finds columns this many px thick (in the padded image's pixels), 90 px
    long, at any scale; returns the scales it was run at."""
    scales: list[float] = []

    def detect(
        detector: Any, image: np.ndarray, scale: float
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        scales.append(scale)
        sure = [quad(110 - 40 * n, 50, 110 - 40 * n + t, 140) for n, t in enumerate(thicknesses)]
        return sure, []  # no doubtful boxes

    monkeypatch.setattr(ocr_pipeline, "detect", detect)
    return scales


def test_small_lettering_is_recognised_from_the_page_enlarged_as_the_detector_saw_it(
    monkeypatch: pytest.MonkeyPatch,
):
    scales = detecting(monkeypatch, 10)  # under DET_SMALL_TEXT_PX
    engine = Engine()
    (line,) = read_lines(engine, small_column_page(), look_twice=False)
    assert scales == [1.0, DET_MAX_UPSCALE]  # 28 px wanted: 2.8x, capped
    # The crop is the 10x90 column laid horizontal at the detector's scale.
    (shape,) = engine.recogniser.shapes
    assert shape == pytest.approx((10 * DET_MAX_UPSCALE, 90 * DET_MAX_UPSCALE), abs=2)
    assert line.text == "あ"


def test_a_title_among_small_lettering_is_recognised_from_the_page_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
):
    scales = detecting(monkeypatch, 10, 10, 24)  # the median, 10 px, is small
    engine = Engine()
    assert len(read_lines(engine, small_column_page(), look_twice=False)) == 3
    assert scales == [1.0, DET_MAX_UPSCALE]
    # The two small columns at the detector's scale (10x90 by 2.5), the title as it is.
    assert sorted(engine.recogniser.shapes) == [(24, 90), (25, 225), (25, 225)]


def test_print_size_lettering_is_recognised_from_the_page_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
):
    scales = detecting(monkeypatch, 24)
    engine = Engine()
    read_lines(engine, small_column_page(), look_twice=False)
    assert scales == [1.0]
    assert engine.recogniser.shapes == [(24, 90)]


def test_lettering_in_boxes_20_px_thick_is_small_and_22_px_is_print(
    monkeypatch: pytest.MonkeyPatch,
):
    # A low-resolution spread's lettering, 8-11 px glyphs, comes in boxes 20 px thick.
    scales = detecting(monkeypatch, 20)
    read_lines(Engine(), small_column_page(), look_twice=False)
    assert scales == [1.0, pytest.approx(28 / 20)]
    scales = detecting(monkeypatch, 22)
    read_lines(Engine(), small_column_page(), look_twice=False)
    assert scales == [1.0]
