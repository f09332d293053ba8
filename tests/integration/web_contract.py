"""What the admin API answers under every framework: the inputs and checks the
Flask and Django tests share (each drives its own adapter with them)."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from sqlalchemy import insert

from manga_page_analysis.models import PageAnalysis


def _cursor_of(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


DEEP_JSON = b"[" * 3000 + b"]" * 3000
"""6 KB, under the body cap, and deep enough to be a RecursionError for `json.loads`."""

BAD_LISTING_QUERIES = [
    "limit=0",
    "limit=501",
    "limit=1000000000",
    "limit=99999999999999999999999999",
    "limit=ten",
    "limit=-1",
    "state=zombie",
    "cursor=forged",
    "cursor=eyJ1IjogMX0",
    "kind=%00",
    "kind=" + "k" * 201,
    # Only plain ASCII digits: int() would read each of these as a number.
    "limit=%D9%A5",  # ٥, Arabic-Indic five
    "limit=5_0",
    "limit=%2B5",
    "limit=%205",
    "cursor=" + _cursor_of(DEEP_JSON),
    # A cursor this API could have issued, plus a key it never writes.
    "cursor="
    + _cursor_of(
        json.dumps({"u": "2026-12-01T00:00:00+00:00", "i": str(uuid.UUID(int=1)), "x": 1}).encode()
    ),
    "cursor=" + "A" * 5000,
]
"""Query strings of `api/jobs` that must each be a 400."""

BAD_ANALYSIS_BODIES = [
    b"{not json",
    b"[true]",
    b'"force"',
    b'{"force": "yes"}',
    b'{"force": 1}',
    b'{"forse": true}',
    b"\xff\xfe",
    b"x" * 70_000,
    DEEP_JSON,
    b'{"force": ' + b"[" * 100 + b"]" * 100 + b"}",
]
"""Bodies of `POST api/pages/<id>/analysis` that must each be a 400 and enqueue nothing."""

NASTY = ["", "%00", "%FF%FE", "..%2F..", "' OR 1=1 --", "9" * 400, "null", "[]", "%E2%80%AE"]


def nasty_requests(prefix: str) -> list[tuple[str, str, str]]:
    """`(method, url, body)` with a nasty value in every place input is taken."""
    return [
        (method, url, value)
        for value in NASTY
        for method, url in [
            ("GET", f"{prefix}/api/jobs?state={value}&kind={value}&limit={value}&cursor={value}"),
            ("POST", f"{prefix}/api/jobs/{value}/retry"),
            ("POST", f"{prefix}/api/jobs/{value}/discard"),
            ("GET", f"{prefix}/api/jobs/{value}"),
            ("GET", f"{prefix}/api/mangas?limit={value}&cursor={value}"),
            ("GET", f"{prefix}/api/mangas/{value}"),
            ("GET", f"{prefix}/api/chapters/{value}"),
            ("GET", f"{prefix}/api/pages/{value}"),
            ("GET", f"{prefix}/api/pages/{value}/image"),
            ("GET", f"{prefix}/api/pages/{value}/analysis"),
            ("POST", f"{prefix}/api/pages/{value}/analysis"),
            ("PATCH", f"{prefix}/api/stats?{value}"),
        ]
    ]


def check_error(status: int, content_type: str, body: Any, expected: int, code: str | None) -> Any:
    """An error answer: `expected` status, JSON `{"error": {"code", "message"}}`;
    returns the inner object."""
    assert status == expected, body
    assert content_type == "application/json"
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["message"]
    if code:
        assert body["error"]["code"] == code
    return body["error"]


def insert_done_analysis(conn: Any, page_id: uuid.UUID, *, ocr_text: str = "テキスト") -> None:
    """A finished analysis of `page_id`, with an NSFW verdict `safe` / 0.1."""
    conn.execute(
        insert(PageAnalysis).values(
            page_id=page_id,
            status="done",
            ocr_text=ocr_text,
            tags=["a"],
            description="d",
            nsfw_rating="safe",
            nsfw_score=0.1,
            model="m",
            duration_ms=12,
        )
    )
