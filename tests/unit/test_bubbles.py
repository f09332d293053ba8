"""Balloons around text lines (an enclosed patch of paper), on pages drawn with numpy."""

from __future__ import annotations

import numpy as np

from manga_page_analysis.analysis.reader.order.blocks import reading_order
from manga_page_analysis.analysis.reader.order.lines import TextLine
from manga_page_analysis.analysis.reader.regions.bubbles import (
    empty_bubbles,
    in_balloons,
    in_bubbles,
    uncovered_bubbles,
)


def page_with_a_balloon() -> np.ndarray:
    """Grey art (a magazine scan's paper is grey too) with one white balloon, outlined, and
    a strip of open paper down the left margin."""
    grey = np.full((800, 500), 120, dtype=np.uint8)
    grey[:, :60] = 225  # the margin: open paper, not a balloon
    grey[100:400, 150:350] = 20  # the balloon's outline
    grey[104:396, 154:346] = 250  # its paper
    grey[120:380, 300:330] = 30  # a column of text: its glyphs are ink
    return grey


def test_a_line_in_a_balloon_is_in_it_and_a_margin_note_is_in_none():
    grey = page_with_a_balloon()
    column = TextLine(296, 116, 334, 384, "まあドンマイ")
    note = TextLine(10, 20, 50, 780, "サイン会やります")
    placed = in_bubbles([column, note], grey)
    assert placed[0].bubble is not None
    assert placed[1].bubble is None


def test_a_column_beside_a_balloon_is_not_read_into_it():
    """Close enough to join by distance alone, but one is in a balloon and one is not."""
    grey = page_with_a_balloon()
    grey[120:380, 262:292] = 30  # a second column of the balloon
    lines = [
        TextLine(296, 116, 334, 384, "まあドンマイ"),
        TextLine(258, 116, 294, 384, "だよな"),
        TextLine(352, 116, 390, 384, "おしらせ"),  # just outside the outline, on the art
    ]
    blocks = reading_order(in_bubbles(lines, grey))
    assert sorted(block.text for block in blocks) == ["おしらせ", "まあドンマイだよな"]


def test_a_balloon_with_a_column_no_line_covers_is_read_again():
    grey = page_with_a_balloon()
    grey[120:380, 262:292] = 30  # a second column, which the detection missed
    read = TextLine(296, 116, 334, 384, "まあドンマイ")
    missed = TextLine(258, 116, 294, 384, "だよな")
    # The balloon's paper, less the pixel its outline is grown by at the top and left.
    assert uncovered_bubbles([read], grey) == [(155, 105, 346, 396)]
    assert uncovered_bubbles([read, missed], grey) == []


def test_a_balloon_with_lettering_but_no_line_is_read_again():
    grey = page_with_a_balloon()
    grey[520:660, 200:300] = 20  # a second, smaller balloon's outline
    grey[524:656, 204:296] = 250  # its paper
    for top in range(540, 640, 30):  # lettering the detection missed: a column of glyphs
        grey[top : top + 24, 240:264] = 30
    read = TextLine(296, 116, 334, 384, "まあドンマイ")
    assert empty_bubbles([read], grey) == [(204, 524, 296, 656)]
    assert empty_bubbles([], grey) == []  # nothing read: nothing to measure lettering by


def test_a_blank_balloon_and_a_patch_of_hatched_art_are_not_read_again():
    grey = page_with_a_balloon()
    grey[520:660, 200:300] = 20
    grey[524:656, 204:296] = 250  # a balloon with nothing in it
    grey[540:700, 380:480] = 250  # a patch of paper, hatched: art
    grey[544:696:2, 384:476] = 20
    read = TextLine(296, 116, 334, 384, "まあドンマイ")
    assert empty_bubbles([read], grey) == []


def test_paper_winding_round_the_art_is_not_read_again():
    """A ring of paper round a block of art (gutters round a panel): its pixels are few, so a
    line in it is in a balloon, but its box is most of the page: not read again."""
    grey = np.full((800, 500), 120, dtype=np.uint8)
    grey[40:760, 40:460] = 250
    grey[75:725, 75:425] = 120  # the art the paper winds round
    grey[45:70, 100:300] = 30  # a line of text in the ring
    line = TextLine(96, 42, 304, 72, "おしらせ")
    assert in_bubbles([line], grey)[0].bubble is not None
    assert uncovered_bubbles([line], grey) == []


def test_a_balloon_whose_thin_outline_has_gaps_is_still_a_balloon():
    """On a small scan a balloon's outline is a pixel thin, and broken where its strokes are
    lighter than ink: the gaps are closed, so its paper does not run into the page's."""
    grey = np.full((400, 300), 230, dtype=np.uint8)  # open paper all round
    grey[100:300, 100:200] = 20  # the outline, one pixel thick...
    grey[101:299, 101:199] = 250  # ...round the balloon's paper
    grey[100, 110:190:4] = 230  # broken every fourth pixel, top and bottom
    grey[299, 110:190:4] = 230
    grey[120:280, 150:170] = 30  # a column of text in the balloon
    column = TextLine(148, 118, 172, 282, "ゆ…夢か")
    caption = TextLine(210, 118, 234, 282, "第21話")  # beside it, on open paper
    placed = in_bubbles([column, caption], grey)
    assert placed[0].bubble is not None
    assert placed[1].bubble is None


def test_a_balloon_holding_no_line_is_sought_only_in_paper_wholly_enclosed():
    """Gaps in an outline are closed to place a line in its balloon, but not to find a
    balloon holding no line: pockets between strokes of art would close up into balloons."""
    grey = np.full((800, 500), 230, dtype=np.uint8)  # open paper
    grey[100:400, 150:350] = 250  # a balloon, wholly enclosed
    grey[100:104, 150:350] = grey[396:400, 150:350] = 20
    grey[100:400, 150:154] = grey[100:400, 346:350] = 20
    grey[120:380, 300:330] = 30  # the column read in it
    grey[500:640, 200:300] = 20  # strokes of art, round a pocket of paper...
    grey[501:639, 201:299] = 230
    grey[500, 210:290:4] = 230  # ...open to the page through gaps of a pixel
    grey[639, 210:290:4] = 230
    for top in range(520, 620, 30):  # hatching in the pocket
        grey[top : top + 20, 240:260] = 30
    read = TextLine(296, 116, 334, 384, "まあドンマイ")
    assert empty_bubbles([read], grey) == []


def test_a_line_reaching_well_out_of_a_patch_of_paper_is_not_in_it():
    """Lettering printed over art, its lower half on a patch of paper (a face): the patch
    does not surround it, so it is no balloon of it, and the column beside it on the art
    stays in its block."""
    grey = np.full((800, 500), 120, dtype=np.uint8)  # art
    grey[300:500, 205:400] = 250  # a patch of paper under the lower half of one column
    grey[150:450, 200:230] = 30  # that column
    grey[150:450, 164:192] = 30  # the next column, on the art
    right = TextLine(196, 146, 234, 454, "いろいろ悩んでた")
    left = TextLine(160, 146, 194, 454, "癒されてくのを")
    placed = in_bubbles([right, left], grey)
    assert [line.bubble for line in placed] == [None, None]
    assert [block.text for block in reading_order(placed)] == ["いろいろ悩んでた癒されてくのを"]


def test_a_column_filling_a_small_balloon_is_in_that_balloon_not_in_a_larger_one():
    """A bold column leaves its small balloon too little paper to count as its own; it is
    in the innermost balloon holding it (its neighbour's), not the ring of page paper whose
    box holds the whole page."""
    grey = np.full((800, 500), 120, dtype=np.uint8)
    grey[40:760, 40:460] = 250  # a ring of paper round the art (the page's gutters)
    grey[75:725, 75:425] = 120
    grey[45:70, 100:300] = 30  # a line of text in the ring
    grey[200:400, 150:350] = 20  # a small balloon's outline
    grey[204:396, 154:346] = 250  # its paper
    grey[220:380, 300:330] = 30  # a column
    grey[220:380, 180:260] = 30  # a bold column, nearly as wide as the balloon's paper
    ring_line = TextLine(96, 42, 304, 72, "おしらせ")
    column = TextLine(296, 216, 334, 384, "それにしても")
    bold = TextLine(176, 216, 264, 384, "ねぇ")
    placed = in_bubbles([ring_line, column, bold], grey)
    assert placed[1].bubble is not None
    assert placed[2].bubble == placed[1].bubble != placed[0].bubble


def test_joined_balloons_are_a_balloon_and_open_paper_winding_round_the_art_is_not():
    grey = np.full((1000, 1000), 120, dtype=np.uint8)
    # Two lobes joined by a neck (top, left, bottom, right): one patch of paper, about
    # convex, 5 % of the page.
    lobes = ((100, 100, 300, 240), (230, 230, 260, 290), (200, 280, 360, 400))
    for top, left, bottom, right in lobes:
        grey[top - 5 : bottom + 5, left - 5 : right + 5] = 20  # the outlines ...
    for top, left, bottom, right in lobes:
        grey[top:bottom, left:right] = 250  # ... then the paper
    # Open paper shaped like an L round a figure: as large, but far from convex.
    grey[600:980, 600:640] = 250
    grey[940:980, 600:990] = 250
    lines = [
        TextLine(200, 120, 230, 280, "あのね"),  # first lobe
        TextLine(350, 215, 380, 345, "それでね"),  # second lobe
        TextLine(605, 620, 635, 900, "そのころ町では"),  # on the L of open paper
    ]
    for line in lines:
        grey[int(line.y0) + 5 : int(line.y1) - 5, int(line.x0) + 5 : int(line.x1) - 5] = 30
    placed, balloons = in_balloons(lines, grey)
    assert placed[0].bubble is not None and placed[0].bubble == placed[1].bubble
    assert placed[2].bubble is not None
    assert balloons == {placed[0].bubble}


def test_a_white_glow_on_light_tone_is_a_balloon_of_its_own():
    # A panel of light screen tone (paper to the page's bar, not white) holding a white glow
    # drawn without an outline round a thought; narration is set on the tone beside it.
    grey = np.full((1000, 1000), 255, dtype=np.uint8)
    grey[195:705, 195:565] = 20  # the panel's frame ...
    grey[200:700, 200:560] = 235  # ... and its tone
    grey[300:660, 260:440] = 255  # the glow
    lines = [
        TextLine(510, 320, 540, 600, "あんな現場に"),  # on the tone
        TextLine(470, 320, 500, 560, "出くわしたら"),
        TextLine(400, 380, 430, 600, "薙切えりな"),  # in the glow
        TextLine(360, 380, 390, 480, "を娶る"),
    ]
    for line in lines:
        grey[int(line.y0) + 5 : int(line.y1) - 5, int(line.x0) + 5 : int(line.x1) - 5] = 30
    # The page's bar counts tone and glow as one patch of paper: one balloon for all four.
    assert len({line.bubble for line in in_bubbles(lines, grey)}) == 1
    placed, balloons = in_balloons(lines, grey)
    narration, thought = placed[:2], placed[2:]
    assert narration[0].bubble == narration[1].bubble
    assert thought[0].bubble == thought[1].bubble != narration[0].bubble
    # The glow is a balloon proper; the tone round it is open paper.
    assert balloons == {thought[0].bubble}
    texts = [block.text for block in reading_order(placed, balloons=balloons)]
    assert texts == ["あんな現場に出くわしたら", "薙切えりなを娶る"]


def test_white_between_strokes_on_tone_is_no_balloon():
    # The same tone, with a white patch as large as the glow but cut into by strokes of
    # tone (speed lines) from one side: a comb, far from convex. A column in its spine stays
    # on the tone with its neighbour.
    grey = np.full((1000, 1000), 255, dtype=np.uint8)
    grey[195:705, 195:565] = 20
    grey[200:700, 200:560] = 235
    grey[300:660, 260:505] = 255
    for top in range(312, 660, 40):
        grey[top : top + 16, 260:440] = 235  # the strokes
    lines = [TextLine(510, 320, 540, 600, "富良野へ"), TextLine(470, 320, 500, 560, "ついたら")]
    for line in lines:
        grey[int(line.y0) + 5 : int(line.y1) - 5, int(line.x0) + 5 : int(line.x1) - 5] = 30
    placed, balloons = in_balloons(lines, grey)
    assert placed[0].bubble == placed[1].bubble
    assert [block.text for block in reading_order(placed, balloons=balloons)] == [
        "富良野へついたら"
    ]
