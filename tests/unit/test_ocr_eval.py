"""The OCR measuring tool's scoring: CER, blocks intact, reading order, ignore regions."""

from __future__ import annotations

import pytest

from bench.ocr_eval import (
    cer,
    edit_distance,
    folds_by_manga,
    normalise,
    score_image,
    unscorable_blocks,
)
from bench.ocr_lomo import EXCLUDED, GRID, leave_one_manga_out, manga_of
from manga_page_analysis.analysis.reader.text.thresholds import DEFAULT_THRESHOLDS

TRUTH = {
    "kind": "page",
    "blocks": [
        {"box": [300, 0, 400, 100], "text": "おはよう"},
        {"box": [100, 0, 200, 100], "text": "ございます！"},
        {"box": [100, 200, 200, 300], "text": "さようなら"},
    ],
    "ignore": [{"box": [0, 400, 100, 500], "what": "sound effect"}],
}


def test_edit_distance_and_cer_normalise_width_and_spaces():
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("", "abc") == 3 and edit_distance("abc", "") == 3
    assert normalise("Ｈｉ ！\n") == "Hi!"
    assert cer("ござい ます！", "ございます!") == 0
    assert cer("abcd", "abXd") == pytest.approx(0.25)
    assert cer("", "") == 0 and cer("", "x") == 1


def test_a_perfect_reading_scores_zero_and_output_in_ignore_regions_is_left_out():
    returned = [
        {"text": "おはよう", "box": [300, 0, 400, 100]},
        {"text": "ドドド", "box": [10, 410, 90, 490]},  # inside the ignore region
        {"text": "ございます!", "box": [100, 0, 200, 100]},
        {"text": "さようなら", "box": [100, 200, 200, 300]},
    ]
    score = score_image(TRUTH, returned)
    assert (score.errors, score.reference_chars) == (0, 15)
    assert (score.intact, score.blocks, score.pairs_in_order, score.pairs) == (3, 3, 2, 2)
    assert score.ignored_chars == 3  # not scored, but counted: an effect read as text


def test_a_block_whose_middle_an_ignore_region_covers_is_reported_as_unscorable():
    assert unscorable_blocks(TRUTH) == []
    covered = {**TRUTH, "ignore": [{"box": [250, 0, 450, 60], "what": "sound effect"}]}
    assert unscorable_blocks(covered) == ["おはよう"]
    # The reading of that block is ignored, so it cannot count as intact however right.
    assert score_image(covered, [{"text": "おはよう", "box": [300, 0, 400, 100]}]).intact == 0


def test_noise_outside_ignore_regions_counts_and_merged_blocks_are_not_intact():
    returned = [
        {"text": "おはようございます！", "box": [100, 0, 400, 100]},  # two bubbles as one
        {"text": "huwww"},
        {"text": "さようなら"},
    ]
    score = score_image(TRUTH, returned)
    assert score.errors == 5 and score.cer == pytest.approx(5 / 15)
    assert score.intact == 1  # only さようなら came out as a unit


def test_reading_order_counts_consecutive_pairs_in_the_returned_order():
    returned = [{"text": "さようなら"}, {"text": "おはよう"}, {"text": "ございます！"}]
    score = score_image(TRUTH, returned)
    assert (score.pairs_in_order, score.pairs) == (1, 2)


def test_blocks_read_alike_are_matched_by_their_boxes_for_the_order():
    # Two balloons of dots only, one at the head of the page and one at its foot.
    truth = {
        "blocks": [
            {"text": "……", "box": [400, 0, 420, 60]},
            {"text": "そうか", "box": [300, 0, 330, 100]},
            {"text": "……", "box": [100, 500, 120, 560]},
        ]
    }
    in_order = [
        {"text": "……", "box": [398, 2, 421, 58]},
        {"text": "そうか", "box": [301, 1, 329, 99]},
        {"text": "……", "box": [99, 502, 121, 559]},
    ]
    assert (score_image(truth, in_order).pairs_in_order, score_image(truth, in_order).pairs) == (
        2,
        2,
    )
    swapped = [in_order[2], in_order[1], in_order[0]]  # the foot's dots read first
    assert score_image(truth, swapped).pairs_in_order == 0
    # Without boxes the first of the closest is taken, as before.
    plain = [{"text": block["text"]} for block in in_order]
    assert score_image(truth, plain).pairs_in_order == 1


def test_error_classes_count_missed_blocks_dropped_columns_voiced_marks_and_garbage():
    returned = [
        {"text": "おはよ", "box": [300, 0, 400, 100]},  # two characters short: not a column
        {"text": "こさいます！", "box": [100, 0, 200, 100]},  # ご read as こ, ざ as さ
        {"text": "木才才", "box": [500, 500, 560, 560]},  # read where nothing is printed
        {"text": "ドドド", "box": [10, 410, 90, 490]},  # in an ignore region: not garbage
    ]
    score = score_image(TRUTH, returned)
    assert score.missed == 1  # さようなら is not returned at all
    assert score.voicing_errors == 2
    assert score.garbage_chars == 3
    assert score.dropped_columns == 0


def test_a_block_that_lost_a_column_counts_as_a_dropped_column():
    truth = {"kind": "page", "blocks": [{"box": [0, 0, 100, 100], "text": "あいうえおかきくけこ"}]}
    score = score_image(truth, [{"text": "あいうえお", "box": [0, 0, 60, 100]}])
    assert (score.dropped_columns, score.missed, score.voicing_errors) == (1, 0, 0)


def test_folds_keep_a_manga_together_and_leave_crops_out():
    truth = {
        "a1.jpg": {"kind": "page", "manga": "a"},
        "a2.jpg": {"kind": "page", "manga": "a"},
        "b.jpg": {"kind": "page", "manga": "b"},
        "c.jpg": {"kind": "page"},
        "crop.jpg": {"kind": "crop"},
    }
    folds = folds_by_manga(truth, 2)
    assert sorted(map(sorted, folds)) == [["a1.jpg", "a2.jpg"], ["b.jpg", "c.jpg"]]


def test_each_manga_is_read_with_the_setting_best_on_the_other_manga():
    # Setting 0 suits manga "a" alone, setting 1 the others: "a" is read with the setting
    # the others chose, and they with the one "a" and the rest chose.
    scores = {
        "a1": [(0, 0), (10, 0)],
        "a2": [(0, 0), (10, 0)],
        "b": [(5, 0), (1, 0)],
        "c": [(5, 0), (1, 0)],
        "d": [(0, 0), (0, 0)],
    }
    manga = {"a1": "a", "a2": "a", "b": "b", "c": "c", "d": "d"}
    chosen = leave_one_manga_out(scores, manga, errors=lambda score: score)
    assert chosen == {"a1": 1, "a2": 1, "b": 0, "c": 0, "d": 0}
    # A page kept aside fits nothing: "b" alone fits "a", and the tie goes to setting 0.
    kept_aside = leave_one_manga_out(
        scores, manga, errors=lambda score: score, fit_on=lambda name: name not in ("c", "d")
    )
    assert kept_aside["a1"] == 1 and kept_aside["c"] == 0
    # More blocks intact breaks a tie in characters.
    tie = {"x": [(1, 0), (1, -2)], "y": [(0, 0), (0, 0)]}
    assert leave_one_manga_out(tie, {"x": "x", "y": "y"}, errors=lambda s: s)["y"] == 1


def test_the_manga_of_a_page_and_the_pages_no_figure_reads():
    assert manga_of("mtd_ym31_343.jpg", {}) == manga_of("x.jpg", {"manga": "空手小公子物語"})
    assert manga_of("koharu_od_1.jpg", {}) == manga_of("koharu_e2e_13.png", {})
    assert manga_of("own.jpg", {}) == "own.jpg"
    assert "kocarus_04.jpg" in EXCLUDED
    assert GRID[0] == DEFAULT_THRESHOLDS and len(set(GRID)) == len(GRID)
