"""A horizontal line cut at a wide gap between its characters, and its pieces' reading order:
pure logic (a stand-in recogniser gives the character positions)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from manga_page_analysis.analysis.reader.order.blocks import reading_order
from manga_page_analysis.analysis.reader.order.line_cut import cut_at_wide_gaps, widest_gap
from manga_page_analysis.analysis.reader.order.lines import TextLine


def positions(columns: list[int], length: float) -> SimpleNamespace:
    """Character positions as rapidocr's recogniser gives them (one word, CTC steps)."""
    return SimpleNamespace(word_cols=[columns], line_txt_len=length)


def test_a_gap_of_two_characters_between_neighbours_is_cut_after_the_first_piece():
    # A crop 20 thicknesses long read in 160 steps: one thickness is 8 steps.
    columns = [4, 12, 20, 52, 60, 68]  # three characters, 3 characters' room, three more
    cut = widest_gap(positions(columns, 160.0), crop_ratio=20.0)
    assert cut is not None
    split, gap_start, gap_end = cut
    assert split == 3
    # Half a character past the third character's centre, half before the fourth's.
    assert gap_start == pytest.approx((20 + 4) / 160)
    assert gap_end == pytest.approx((52 - 4) / 160)


def test_characters_set_about_one_apart_are_not_cut():
    columns = [4, 12, 20, 28, 38, 46]  # one gap a little wider than the rest
    assert widest_gap(positions(columns, 160.0), crop_ratio=20.0) is None


class PositionsRecogniser:
    """Reads every crop as `text`, with the given character positions."""

    def __init__(self, text: str, columns: list[int], length: float) -> None:
        self.text, self.columns, self.length = text, columns, length
        self.calls = 0

    def __call__(self, request: Any) -> SimpleNamespace:
        self.calls += 1
        return SimpleNamespace(
            txts=(self.text,), scores=(0.9,), word_results=(positions(self.columns, self.length),)
        )


def box(x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype=np.float32)


def crop_of(quad: np.ndarray) -> np.ndarray:
    width, height = (quad.max(axis=0) - quad.min(axis=0)).astype(int)
    return np.full((int(height), int(width), 3), 255, dtype=np.uint8)


def test_a_header_line_is_cut_into_two_lines_that_keep_the_line_they_came_from():
    header = box(0, 0, 1000, 50)  # 20 thicknesses long
    recogniser = PositionsRecogniser("第八回板橋区", [4, 12, 20, 52, 60, 68], 160.0)
    boxes, texts, scores, origins = cut_at_wide_gaps(
        recogniser, crop_of, [header], ["第八回板橋区"], [0.9]
    )
    assert texts == ["第八回", "板橋区"]
    assert scores == [0.9, 0.9]
    assert boxes[0].max(axis=0)[0] == pytest.approx(1000 * 24 / 160)
    assert boxes[1].min(axis=0)[0] == pytest.approx(1000 * 48 / 160)
    assert all(origin is header for origin in origins)


def test_latin_short_and_vertical_lines_are_not_read_again():
    recogniser = PositionsRecogniser("x", [4, 52], 160.0)
    lines = [box(0, 0, 1000, 50), box(0, 100, 200, 150), box(0, 200, 50, 1200)]
    texts = ["Hello there", "板橋区赤塚", "板橋区赤塚系ギャグ"]
    _, kept, _, origins = cut_at_wide_gaps(recogniser, crop_of, lines, texts, [0.9] * 3)
    assert recogniser.calls == 0
    assert kept == texts
    assert origins == [None, None, None]


def test_the_pieces_of_a_cut_line_are_read_left_to_right_on_a_right_to_left_page():
    origin = (100.0, 20.0, 1300.0, 100.0)
    pieces = [
        TextLine(520, 20, 1300, 100, "板橋区赤塚系ギャグ", cut_from=origin),
        TextLine(100, 20, 370, 100, "第872回", cut_from=origin),
    ]
    bubble = TextLine(600, 200, 640, 400, "こんにちは")
    texts = [block.text for block in reading_order([*pieces, bubble])]
    assert texts == ["第872回", "板橋区赤塚系ギャグ", "こんにちは"]


def test_two_lines_on_one_baseline_not_cut_from_one_are_read_right_to_left():
    lines = [
        TextLine(520, 20, 1300, 100, "板橋区赤塚系ギャグ"),
        TextLine(100, 20, 370, 100, "第872回"),
    ]
    texts = [block.text for block in reading_order(lines)]
    assert texts == ["板橋区赤塚系ギャグ", "第872回"]


def test_a_moved_piece_moves_the_line_it_came_from():
    piece = TextLine(10, 20, 30, 40, "第八回", cut_from=(0, 20, 90, 40)).moved(5, 7)
    assert piece.cut_from == (5, 27, 95, 47)
