"""The OCR measuring tool's scoring: CER, blocks intact, reading order, ignore regions."""

from __future__ import annotations

import pytest

from manga_page_analysis.analysis.ocr_eval import cer, edit_distance, normalise, score_image

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
