"""parse_analysis: the model's answer is validated, whatever the server enforced."""

from __future__ import annotations

import json
from typing import Any

import pytest

from manga_page_analysis.analysis.analyzer.answer import (
    ANSWER_TEXT_MAX_CHARS,
    DESCRIPTION_MAX_CHARS,
    TAG_MAX_CHARS,
    TAGS_MAX_ITEMS,
    Analysis,
    parse_analysis,
)
from manga_page_analysis.errors import VisionError
from testbed.vision_server import analysis_content


def answer(**overrides: Any) -> str:
    return json.dumps(analysis_content(**overrides), ensure_ascii=False)


def test_valid_answer() -> None:
    assert parse_analysis(answer()) == Analysis(
        ocr_text="こんにちは",
        tags=("school", "two girls", "classroom"),
        description="Two girls talk in a classroom after school.",
        nsfw_rating="safe",
        nsfw_score=0.02,
    )


@pytest.mark.parametrize(
    "wrap",
    ["```json\n{}\n```", "```\n{}\n```", "  ```JSON\n{}```  ", "```{}```", "\n\n{}\n"],
)
def test_fences_and_whitespace_are_tolerated(wrap: str) -> None:
    assert parse_analysis(wrap.replace("{}", answer())).ocr_text == "こんにちは"


def test_integer_scores_are_numbers() -> None:
    assert parse_analysis(answer(nsfw={"rating": "explicit", "score": 1})).nsfw_score == 1.0
    assert parse_analysis(answer(nsfw={"rating": "Safe ", "score": 0})).nsfw_rating == "safe"


def test_tags_are_stripped_deduplicated_in_order_and_bounded() -> None:
    tags = [" cat ", "", "dog", "cat", "   ", "x" * 100, *[f"t{i}" for i in range(40)]]
    parsed = parse_analysis(answer(tags=tags)).tags
    assert parsed[:3] == ("cat", "dog", "x" * TAG_MAX_CHARS)
    assert len(parsed) == TAGS_MAX_ITEMS
    assert len(set(parsed)) == len(parsed)


def test_long_strings_are_truncated_to_their_bounds() -> None:
    parsed = parse_analysis(answer(ocr_text="あ" * 5000, description="d" * 5000))
    assert parsed.ocr_text == "あ" * ANSWER_TEXT_MAX_CHARS
    assert len(parsed.description) == DESCRIPTION_MAX_CHARS


def test_unknown_keys_are_ignored() -> None:
    assert parse_analysis(answer(language="ja")).ocr_text == "こんにちは"


@pytest.mark.parametrize("content", [None, "", " \n\t"])
def test_no_content(content: str | None) -> None:
    with pytest.raises(VisionError, match=r"^model returned no content$"):
        parse_analysis(content)


def test_not_json_quotes_the_first_200_characters() -> None:
    content = "I cannot help with that. " + "z" * 500
    with pytest.raises(VisionError, match="not JSON") as caught:
        parse_analysis(content)
    message = str(caught.value)
    assert "I cannot help with that. " + "z" * 175 in message
    assert "z" * 176 not in message


@pytest.mark.parametrize(
    "content, problem",
    [
        ("[1, 2]", "not an object"),
        (json.dumps({"tags": [], "description": "", "nsfw": {}}), "lacks 'ocr_text'"),
        (answer(ocr_text=None), "'ocr_text' of type NoneType"),
        (answer(description=3), "'description' of type int"),
        (answer(tags="cat, dog"), "not a list of strings"),
        (answer(tags=["cat", 3]), "not a list of strings"),
        (answer(nsfw="safe"), "'nsfw' object"),
        (answer(nsfw={"rating": "safe"}), "expected a number"),
        (answer(nsfw={"rating": "safe", "score": False}), "expected a number"),
        (answer(nsfw={"rating": "safe", "score": 1.0001}), "outside"),
        (answer(nsfw={"rating": None, "score": 0.1}), "expected one of"),
        (
            '{"ocr_text": "", "tags": [], "description": "", '
            '"nsfw": {"rating": "safe", "score": NaN}}',
            "outside",
        ),
    ],
)
def test_wrong_shapes_are_rejected(content: str, problem: str) -> None:
    with pytest.raises(VisionError, match=problem) as caught:
        parse_analysis(content)
    assert content[:40] in str(caught.value)
