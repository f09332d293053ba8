"""`page_analysis.ocr_blocks`: stored by the `ocr` analyzer, NULL for `http`, served by the API."""

from __future__ import annotations

from manga_page_analysis.admin.queries import get_page_analysis
from manga_page_analysis.analysis.analyzer.answer import Analysis, parse_analysis
from manga_page_analysis.analysis.analyzer.protocol import VisionResult
from manga_page_analysis.repos.page_analysis import AnalysisRecord, save_done
from tests.helpers import make_page

BLOCKS = [
    {"text": "おはようございます", "box": [412, 81, 488, 237], "vertical": True, "score": 0.999},
    {"text": "Good morning, Tokyo!", "box": [199, 508, 399, 586], "vertical": False, "score": 1.0},
]


def ocr_analysis(blocks: list[dict]) -> Analysis:
    return Analysis(
        ocr_text="\n".join(block["text"] for block in blocks),
        tags=(),
        description="",
        nsfw_rating=None,
        nsfw_score=None,
        ocr_blocks=blocks,
    )


def stored(analysis: Analysis, model: str) -> AnalysisRecord:
    return VisionResult(analysis, model=model).record()


def test_blocks_are_stored_in_order_and_served_as_ocr_blocks(engine):
    with engine.begin() as conn:
        page_id = make_page(conn)
        save_done(conn, page_id, stored(ocr_analysis(BLOCKS), "rapidocr"), duration_ms=10)
        body = get_page_analysis(conn, page_id)
    assert body["ocr_blocks"] == BLOCKS
    assert body["ocr_text"].splitlines() == [block["text"] for block in BLOCKS]


def test_a_model_server_answer_stores_no_positions_and_clears_stale_ones(engine):
    answer = parse_analysis(
        '{"ocr_text": "よつばと", "tags": [], "description": "", '
        '"nsfw": {"rating": "safe", "score": 0.1}}'
    )
    assert answer.ocr_blocks is None
    with engine.begin() as conn:
        page_id = make_page(conn)
        save_done(conn, page_id, stored(ocr_analysis(BLOCKS), "rapidocr"), duration_ms=10)
        # A forced re-analysis by the http backend: the old positions no longer match its text.
        save_done(conn, page_id, stored(answer, "vlm"), duration_ms=10)
        body = get_page_analysis(conn, page_id)
    assert body["ocr_blocks"] is None and body["ocr_text"] == "よつばと"
