"""The detector is run as rapidocr runs it, to the same bits, without rebuilding its
pre-processor on every call (no model: a network that answers with a drawn text map)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
from rapidocr.ch_ppocr_det.main import TextDetector
from rapidocr.ch_ppocr_det.utils import DBPostProcess, DetPreProcess

from manga_page_analysis.analysis.reader.recognition.detector import run_detector

HALF = [0.5, 0.5, 0.5]


class Network:
    """Records its input and answers with a text map that holds one line, or none."""

    def __init__(self, line: tuple[int, int, int, int] | None, certainty: float = 0.9) -> None:
        self.line = line
        self.certainty = certainty
        self.inputs: list[np.ndarray] = []

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        self.inputs.append(batch)
        text_map = np.zeros((1, 1, *batch.shape[2:]), dtype=np.float32)
        if self.line is not None:
            x0, y0, x1, y1 = self.line
            text_map[0, 0, y0:y1, x0:x1] = self.certainty
        return text_map


def detector(network: Network) -> Any:
    return SimpleNamespace(
        limit_side_len=4096,
        limit_type="max",
        mean=HALF,
        std=HALF,
        session=network,
        postprocess_op=DBPostProcess(thresh=0.3, box_thresh=0.5, unclip_ratio=1.3),
        sorted_boxes=TextDetector.sorted_boxes,
    )


def page(height: int, width: int) -> np.ndarray:
    return np.random.default_rng(7).integers(0, 256, (height, width, 3), dtype=np.uint8)


def test_the_network_sees_the_bits_rapidocr_gives_it():
    network = Network(line=(40, 20, 200, 44))
    image = page(150, 250)  # rounded to 160x256 for the network
    run_detector(detector(network), image)
    (seen,) = network.inputs
    expected = DetPreProcess(4096, "max", HALF, HALF)(image)
    assert expected is not None
    assert seen.shape == expected.shape == (1, 3, 160, 256)
    assert seen.dtype == np.float32 and np.array_equal(seen, expected)


def test_a_line_on_the_map_is_a_box_in_the_image_pixels():
    boxes, doubtful = run_detector(detector(Network(line=(40, 20, 200, 44))), page(150, 250))
    assert len(boxes) == 1 and doubtful == []
    (x0, y0), (x1, y1) = boxes[0].min(axis=0), boxes[0].max(axis=0)
    # The map is 256x160 for a 250x150 image: the line is (39, 19, 195, 41) in the image's
    # pixels, and its box is grown a little around it (unclip).
    assert 19 <= x0 <= 39 and 0 <= y0 <= 19 and 195 <= x1 <= 215 and 41 <= y1 <= 61


def test_a_line_scored_just_under_the_detectors_bar_is_a_doubtful_box():
    """rapidocr drops a box scored under its bar (0.5); it is kept apart, to be read."""
    network = Network(line=(40, 20, 200, 44), certainty=0.45)
    boxes, doubtful = run_detector(detector(network), page(150, 250))
    assert boxes == [] and len(doubtful) == 1
    (x0, y0), (x1, y1) = doubtful[0].min(axis=0), doubtful[0].max(axis=0)
    assert 19 <= x0 <= 39 and 0 <= y0 <= 19 and 195 <= x1 <= 215 and 41 <= y1 <= 61


def test_a_faint_line_is_no_box_at_all():
    network = Network(line=(40, 20, 200, 44), certainty=0.35)
    assert run_detector(detector(network), page(150, 250)) == ([], [])


def test_an_empty_map_is_no_box():
    assert run_detector(detector(Network(line=None)), page(150, 250)) == ([], [])
