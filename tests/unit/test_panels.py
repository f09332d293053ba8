"""Panels from gutters (an XY cut), on pages drawn here with numpy."""

from __future__ import annotations

import numpy as np

from manga_page_analysis.analysis.panels import find_panels


def page(width: int, height: int, panels: list[tuple[int, int, int, int]]) -> np.ndarray:
    """White paper with a 3 px black border around each panel and some grey art inside."""
    grey = np.full((height, width), 255, dtype=np.uint8)
    for x0, y0, x1, y1 in panels:
        grey[y0:y1, x0:x1] = 0
        grey[y0 + 3 : y1 - 3, x0 + 3 : x1 - 3] = 255
        grey[(y0 + y1) // 2, x0 + 3 : x1 - 3] = 90  # a horizon line across the panel
    return grey


def close(found, expected, tolerance=2):
    assert len(found) == len(expected), found
    for got, want in zip(found, expected, strict=True):
        assert all(abs(a - b) <= tolerance for a, b in zip(got, want, strict=True)), (got, want)


def test_rows_top_to_bottom_and_panels_right_to_left():
    panels = [(20, 20, 290, 400), (310, 20, 580, 400), (20, 420, 580, 830)]
    found = find_panels(page(600, 850, panels))
    close(found, [panels[1], panels[0], panels[2]])


def test_a_tall_panel_beside_two_stacked_is_read_before_them():
    tall, top, bottom = (310, 20, 580, 560), (20, 20, 290, 280), (20, 300, 290, 560)
    found = find_panels(page(600, 600, [tall, top, bottom]))
    close(found, [tall, top, bottom])


def test_left_to_right_pages_read_each_row_left_to_right():
    panels = [(20, 20, 290, 400), (310, 20, 580, 400)]
    close(find_panels(page(600, 420, panels), right_to_left=False), panels)


def test_a_two_page_spread_reads_its_right_page_first():
    left = [(20, 20, 380, 300), (20, 320, 380, 600)]
    right = [(420, 20, 780, 300), (420, 320, 780, 600)]
    found = find_panels(page(800, 620, left + right))
    close(found, [right[0], right[1], left[0], left[1]])


def test_the_gap_between_two_text_columns_is_not_a_gutter():
    grey = page(400, 600, [(20, 20, 380, 580)])
    grey[100:300, 170:200] = 0  # two "columns" of text 6 px apart inside one panel
    grey[100:300, 206:236] = 0
    close(find_panels(grey), [(20, 20, 380, 580)])


def test_art_to_the_edges_is_one_panel_and_blank_paper_is_the_whole_page():
    dark = np.full((300, 200), 40, dtype=np.uint8)
    assert find_panels(dark) == [(0.0, 0.0, 200.0, 300.0)]
    blank = np.full((300, 200), 255, dtype=np.uint8)
    assert find_panels(blank) == [(0.0, 0.0, 200.0, 300.0)]


def centres(found):
    return [((x0 + x1) / 2, (y0 + y1) / 2) for x0, y0, x1, y1 in found]


def test_a_spread_whose_binding_hides_the_gutter_is_cut_at_its_middle():
    left = [(20, 20, 380, 300), (20, 320, 380, 600)]
    right = [(420, 20, 780, 300), (420, 320, 780, 600)]
    grey = page(800, 620, left + right)
    grey[:, 399:401] = 60  # the binding's shadow runs down the middle, across every gutter
    found = centres(find_panels(grey))
    assert len(found) == 4
    (ra, rb), (rc, rd), (la, lb), (lc, ld) = found
    assert ra > 400 and rc > 400 and la < 400 and lc < 400  # the right-hand page first
    assert rb < rd and lb < ld  # each page top to bottom


def test_panels_are_found_by_their_frames_where_speckles_fill_the_gutters():
    panels = [(20, 20, 290, 400), (310, 20, 580, 400), (20, 420, 580, 830)]
    grey = page(600, 850, panels)
    speckles = np.random.default_rng(0).random(grey.shape) < 0.02
    grey[speckles] = 0  # a dirty scan: no band of paper is clean enough to be a gutter
    close(find_panels(grey), [panels[1], panels[0], panels[2]], tolerance=4)
