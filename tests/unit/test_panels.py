"""Panels from gutters (an XY cut), on pages drawn here with numpy."""

from __future__ import annotations

import numpy as np

from manga_page_analysis.analysis.reader.regions.panels import find_panels


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


def skewed_page_sharing_frame_lines(degrees: float) -> np.ndarray:
    """A grey magazine page with no gutter anywhere: dark art bleeds round a framed top panel,
    and below it a tall right-hand panel and a stack of two on the left share their frame
    lines. Each panel holds light art crossed by dark strokes that stop short of its frame.
    The page is turned by `degrees`, as a skewed scan."""
    from PIL import Image

    grey = np.full((900, 600), 60, dtype=np.uint8)  # art to the edges
    strokes = np.random.default_rng(1)
    for x0, y0, x1, y1 in FRAME_LINE_PANELS:
        grey[y0:y1, x0:x1] = 25  # the frame, 4 px, shared with the neighbour
        grey[y0 + 4 : y1 - 4, x0 + 4 : x1 - 4] = 215
        for _ in range(12):  # strokes of art, none running across the whole panel
            x = int(strokes.integers(x0 + 20, x1 - 60))
            y = int(strokes.integers(y0 + 20, y1 - 20))
            grey[y : y + 3, x : x + 40] = 70
    turned = Image.fromarray(grey).rotate(degrees, resample=Image.BILINEAR, fillcolor=220)
    return np.asarray(turned)


FRAME_LINE_PANELS = [
    (40, 30, 560, 300),  # the top panel, framed, in the bleed
    (300, 330, 600, 900),  # the tall right-hand panel
    (0, 330, 304, 620),  # the left-hand stack, top
    (0, 616, 304, 900),  # and bottom
]


def reading_indices(found, expected):
    """For each expected panel, the index of the first found panel holding its centre."""
    indices = []
    for x0, y0, x1, y1 in expected:
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        holding = [i for i, (a, b, c, d) in enumerate(found) if a <= cx <= c and b <= cy <= d]
        assert holding, (found, (cx, cy))
        indices.append(holding[0])
    return indices


def test_panels_sharing_frame_lines_on_a_skewed_scan_are_cut_at_the_lines():
    for degrees in (0.0, 0.8, -1.0):
        found = find_panels(skewed_page_sharing_frame_lines(degrees))
        indices = reading_indices(found, FRAME_LINE_PANELS)
        # The top panel, then the tall right-hand one, then the left-hand stack downwards.
        assert indices == sorted(set(indices)), (degrees, found)


def test_the_straight_side_of_a_caption_box_does_not_cut_its_panel():
    grey = page(600, 600, [(20, 20, 580, 580)])
    grey[:, 0:20] = 40  # dark art bleeding off the page: frame lines are looked for
    grey[300:306, 200:320] = 0  # a caption box's side, a fifth of the panel wide
    found = find_panels(grey)
    assert not any(y0 < 303 < y1 and 210 < x1 < 310 for x0, y0, x1, y1 in found), found


def test_the_skew_of_a_scan_is_found_from_its_frame_lines_and_none_is_found_on_a_straight_one():
    from manga_page_analysis.analysis.reader.regions.frame_lines import skew

    for degrees in (0.0, 0.75, -1.25):
        grey = skewed_page_sharing_frame_lines(degrees)
        # Turning the page back by the skew found lines its frames up again.
        assert abs(skew(grey, 215) + degrees) <= 0.25, degrees
    straight = page(600, 850, [(20, 20, 290, 400), (310, 20, 580, 400)])
    assert skew(straight, 255) == 0.0


def speckled(grey: np.ndarray) -> np.ndarray:
    """A dirty scan: no band of paper is clean enough to be a gutter (panels by their frames)."""
    grey[np.random.default_rng(0).random(grey.shape) < 0.02] = 0
    return grey


def test_a_four_panel_strip_beside_a_column_of_something_else_is_read_after_that_column():
    strip = [(20, 20 + 210 * row, 290, 210 + 210 * row) for row in range(4)]
    beside = (310, 650, 580, 840)  # below a promotion band, not a panel, beside the strip
    grey = page(600, 860, [*strip, beside])
    grey[40:600, 400:440] = 0  # the band's art crosses the strip's gutters
    close(find_panels(speckled(grey)), [beside, *strip], tolerance=4)


def test_a_grid_whose_row_gutters_cross_every_column_is_read_row_by_row():
    left = [(20, 20 + 210 * row, 290, 210 + 210 * row) for row in range(4)]
    right = [(310, 20 + 210 * row, 580, 210 + 210 * row) for row in range(1, 4)]
    found = find_panels(speckled(page(600, 860, [*left, *right])))
    close(found, [left[0], right[0], left[1], right[1], left[2], right[2], left[3]], tolerance=4)


def test_a_row_whose_gutters_are_crossed_is_split_into_its_framed_panels():
    top = (20, 20, 580, 300)
    row = [(410, 320, 580, 600), (215, 320, 395, 600), (20, 320, 200, 600)]
    grey = page(600, 620, [top, *row])
    grey[420:440, 203:212] = 0  # marks in the row's gutters (a balloon's edge, a speck),
    grey[500:520, 398:407] = 0  # touching no frame: no clean gutter, each frame whole
    found = find_panels(grey)
    close(found, [top, *row], tolerance=4)


def test_framed_pieces_covering_little_of_a_panel_do_not_split_it():
    # Below a top panel, a wide framed strip and a small framed panel take half the piece
    # between gutters; the rest is unframed art (a disc), which a split would leave out.
    top, strip, small = (20, 20, 580, 300), (20, 320, 580, 420), (400, 440, 580, 600)
    grey = page(600, 620, [top, strip, small])
    yy, xx = np.mgrid[0:620, 0:600]
    grey[(xx - 200) ** 2 + (yy - 520) ** 2 <= 70**2] = 40
    grey[422:438, 100:110] = 0  # a mark across the gutter under the strip, touching no frame
    close(find_panels(grey), [top, (20, 320, 580, 600)], tolerance=4)
