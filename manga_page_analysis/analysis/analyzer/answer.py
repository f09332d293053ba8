"""The answer the vision model must give: the prompt, its JSON schema, and a validating parser.

The parser validates, because servers enforce only part of a schema (llama.cpp's grammar
ignores a number's `minimum`/`maximum`; some ignore the schema). Over-long strings are cut and
extra tags dropped rather than failing the page: at temperature 0 a retry gives the same
answer, so rejecting would only turn a usable transcription into a dead job.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Final

from manga_page_analysis.errors import VisionError
from manga_page_analysis.models import NSFW_RATINGS

ANSWER_TEXT_MAX_CHARS: Final = 1900
"""Bound on `ocr_text` in the model's answer (the schema's `maxLength`). Kept under 2000
because llama.cpp's grammar parser refuses (or, in newer builds, silently drops)
repetition bounds of 2000 and more. Not a bound on stored text: the in-process
`ocr` analyzer has its own (`manga_page_analysis.analysis.reader.ocr_analyzer.OCR_TEXT_MAX_CHARS`)."""
DESCRIPTION_MAX_CHARS: Final = 600
"""Bound on `description`: one or two sentences with room to spare."""
TAG_MAX_CHARS: Final = 40
"""Bound on one tag."""
TAGS_MAX_ITEMS: Final = 24
"""Bound on the number of tags."""

ANSWER_EXCERPT_CHARS: Final = 200
"""How much of a bad answer an error message quotes."""

ANALYSIS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "ocr_text": {"type": "string", "maxLength": ANSWER_TEXT_MAX_CHARS},
        "tags": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": TAG_MAX_CHARS},
            "maxItems": TAGS_MAX_ITEMS,
        },
        "description": {"type": "string", "maxLength": DESCRIPTION_MAX_CHARS},
        "nsfw": {
            "type": "object",
            "properties": {
                "rating": {"type": "string", "enum": list(NSFW_RATINGS)},
                "score": {"type": "number", "minimum": 0, "maximum": 1},
            },
            "required": ["rating", "score"],
            "additionalProperties": False,
        },
    },
    "required": ["ocr_text", "tags", "description", "nsfw"],
    "additionalProperties": False,
}
"""JSON schema of the model's answer. Shared, so treat it as read-only."""

SYSTEM_PROMPT: Final = f"""\
You analyse one page of a manga or comic for a search index. Answer with one JSON \
object only: no prose, no code fences. Fields:
- ocr_text: all visible text (speech bubbles, captions, narration, signs, sound \
effects), transcribed exactly in its original language and script, in reading order \
(for Japanese manga: right to left, top to bottom); one line per bubble or caption; \
an empty string if the page has no text.
- tags: at most {TAGS_MAX_ITEMS} short lowercase tags (one to three words each) for the \
characters, setting, objects, actions and mood; no duplicates.
- description: one or two sentences describing what happens on the page.
- nsfw: "rating" is "safe", "suggestive" or "explicit"; "score" is a number from 0 \
to 1, the likelihood that the page is not safe for work."""
"""Instructions sent as the system message."""

USER_PROMPT: Final = "Analyse this page."
"""Text part of the user message, next to the image."""

# A whole answer wrapped in a Markdown code fence: ```json ... ``` or ``` ... ```.
_FENCE = re.compile(r"\A\s*```[A-Za-z0-9_-]*[ \t]*\n?(?P<body>.*?)\s*```\s*\Z", re.DOTALL)


@dataclass(frozen=True)
class Analysis:
    """A validated answer: strings within their bounds, tags stripped, non-empty and unique,
    `nsfw_rating` one of `NSFW_RATINGS`, `nsfw_score` a finite float in [0, 1].

    Both NSFW fields are `None` when nothing was judged (the `ocr` analyzer);
    a parsed model answer always carries both."""

    ocr_text: str
    tags: tuple[str, ...]
    description: str
    nsfw_rating: str | None
    nsfw_score: float | None
    ocr_blocks: list[dict[str, Any]] | None = None
    """Text blocks with positions (the `ocr` analyzer); `None` when there are none to give."""


def parse_analysis(content: str | None) -> Analysis:
    """Parse and validate the model's `message.content`.

    Accepts surrounding whitespace and a Markdown code fence around the JSON,
    and ignores unknown extra keys. Raises `VisionError` for empty content,
    for content that is not JSON, and for JSON that is not the promised shape;
    the message quotes the start of what came back.
    """
    if content is None or not content.strip():
        raise VisionError("model returned no content")
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced is not None:
        text = fenced.group("body")
    try:
        answer = json.loads(text)
    except ValueError as exc:
        raise _invalid(f"is not JSON ({exc})", content) from None
    if not isinstance(answer, dict):
        raise _invalid(f"is a JSON {type(answer).__name__}, not an object", content)

    ocr_text = _bounded_string(answer, "ocr_text", ANSWER_TEXT_MAX_CHARS, content)
    description = _bounded_string(answer, "description", DESCRIPTION_MAX_CHARS, content)
    tags = _tags(answer, content)
    rating, score = _nsfw(answer, content)
    return Analysis(ocr_text, tags, description, rating, score)


def _bounded_string(answer: dict[str, Any], key: str, max_chars: int, content: str) -> str:
    value = answer.get(key)
    if key not in answer:
        raise _invalid(f"lacks {key!r}", content)
    if not isinstance(value, str):
        raise _invalid(f"has {key!r} of type {type(value).__name__}, not a string", content)
    return value.strip()[:max_chars]


def _tags(answer: dict[str, Any], content: str) -> tuple[str, ...]:
    if "tags" not in answer:
        raise _invalid("lacks 'tags'", content)
    raw = answer["tags"]
    if not isinstance(raw, list) or not all(isinstance(tag, str) for tag in raw):
        raise _invalid("has 'tags' that is not a list of strings", content)
    # Tags are matched by readers and search as lowercase words ("Kitchen" and
    # "kitchen" are one tag); dict.fromkeys keeps the first occurrence, in order.
    cleaned = (tag.strip().lower()[:TAG_MAX_CHARS].strip() for tag in raw)
    unique = dict.fromkeys(tag for tag in cleaned if tag)
    return tuple(unique)[:TAGS_MAX_ITEMS]


def _nsfw(answer: dict[str, Any], content: str) -> tuple[str, float]:
    nsfw = answer.get("nsfw")
    if not isinstance(nsfw, dict):
        raise _invalid("lacks an 'nsfw' object", content)
    rating = nsfw.get("rating")
    if not isinstance(rating, str) or rating.strip().lower() not in NSFW_RATINGS:
        raise _invalid(
            f"has nsfw.rating {rating!r}, expected one of {', '.join(NSFW_RATINGS)}", content
        )
    score = nsfw.get("score")
    # bool is an int subclass, but `true` is not a score.
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise _invalid(f"has nsfw.score {score!r}, expected a number in [0, 1]", content)
    # json.loads accepts NaN and Infinity; neither is a score.
    if not math.isfinite(score) or not 0.0 <= score <= 1.0:
        raise _invalid(f"has nsfw.score {score!r} outside [0, 1]", content)
    return rating.strip().lower(), float(score)


def _invalid(reason: str, content: str) -> VisionError:
    excerpt = content.strip()[:ANSWER_EXCERPT_CHARS]
    return VisionError(f"model answer {reason}: {excerpt!r}")
