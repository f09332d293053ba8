"""Detection and recognition with rapidocr's models, at a scale chosen for the lettering.

rapidocr's own pipeline enlarges the short side to 736 px. Here a page is detected at its own
size (scaled down to `DET_MAX_SIDE` at most), enlarged only when its lettering is small; each
line is recognised from the full-resolution image, or from the image enlarged as the detector
saw it when its lettering was small (docs/ocr.md, "What it reads").

Uses rapidocr's model wrappers (`_load_det_model`, run by `detector.detect`; `_load_rec_model`;
its crop helper) rather than its `__call__`, which has no per-call scale (why threads may
share them: `manga_page_analysis.analysis.reader.ocr_analyzer`).
"""

from __future__ import annotations

import dataclasses
import statistics
import unicodedata
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from PIL import Image, ImageOps

from manga_page_analysis.analysis.reader.order.line_cut import cut_at_wide_gaps
from manga_page_analysis.analysis.reader.order.lines import TextLine, quad_thickness
from manga_page_analysis.analysis.reader.recognition.column_marks import dots_and_dashes
from manga_page_analysis.analysis.reader.recognition.column_ruby import read_without_ruby
from manga_page_analysis.analysis.reader.recognition.detector import detect
from manga_page_analysis.analysis.reader.recognition.marks import read_marks
from manga_page_analysis.analysis.reader.recognition.merged_columns import split_merged_columns
from manga_page_analysis.analysis.reader.recognition.voicing import (
    adds_voicing_only,
    differs_in_voicing_only,
    may_be_voiced,
)

PAD_SHARE: Final = 0.05
"""Paper added around the image before detection, as a share of its short side."""
PAD_MIN_PX: Final = 8
"""At least this much paper is added (a bubble crop a hundred pixels wide)."""
DET_MAX_SIDE: Final = 960
"""The detector sees the page scaled down to this long side at most: lettering of a printed
page stays about 20 px thick, and memory and CPU grow with the pixels."""
DET_SMALL_TEXT_PX: Final = 21
"""Lettering thinner than this (boxes' short side, image pixels: 20 px boxes, glyphs of
about 14 px, are small) is detected again, enlarged."""
DET_TARGET_TEXT_PX: Final = 28
"""The enlarged pass scales lettering to about this thickness."""
DET_MAX_UPSCALE: Final = 2.5
"""The enlarged pass scales the page by at most this much."""
DET_UPSCALED_MAX_SIDE: Final = 1600
"""Nor beyond this long side (CPU grows with the pixels)."""
SECOND_LOOK_MAX_PIXELS: Final = 160_000
"""An image this small (a single bubble) is detected a second time, enlarged by
`SECOND_LOOK_SCALE`, and what that finds beside the first look's boxes is added."""
SECOND_LOOK_SCALE: Final = 1.5
"""The second look's enlargement."""
NEW_BOX_MAX_COVERED: Final = 0.3
"""A second-look box is new when at most this share of it lies in first-look boxes, and
no first-look box lies in it by more than `NEW_BOX_MAX_HOLDS` of its own area."""
NEW_BOX_MAX_HOLDS: Final = 0.5
"""See `NEW_BOX_MAX_COVERED`."""
VOICING_REREAD_BELOW: Final = 0.9
"""A line read with less confidence is read a second time, with paper added across it: the
recogniser loses voiced marks (ご→こ, ボ→ポ), and a glyph set smaller in its frame keeps
them more often. Only a reading that differs in voiced marks alone is taken (docs/ocr.md)."""
VOICING_REREAD_PAD: Final = 0.1
"""The paper added on each side across the line, as a share of its thickness."""
VOICING_ADD_PAD: Final = 0.2
"""A line the first paper did not make surer is read once more with this much on each side,
and from that read only voiced marks added are taken: glyphs set smaller still keep a mark
the tight crop lost, but also blur marks away, so a mark taken off is not trusted from it
(docs/ocr.md)."""
LINE_CUT_MARGIN_PX: Final = 2
"""A line cut from an enlarged image is enlarged with this many pixels round its box."""
MIN_TEXT_SCORE: Final = 0.3
"""Lines recognised with less confidence are noise (the layout judges blocks above it)."""
DOUBTFUL_MIN_TEXT_SCORE: Final = 0.85
"""A box the detector doubted (`detector.DOUBTFUL_BOX_SCORE`: a line of white lettering
outlined in black scores low) is read, and kept when read with at least this confidence and
no box found surely covers it (docs/ocr.md, "Doubtful boxes")."""


def read_lines(
    engine: Any, page: Image.Image, known: Sequence[TextLine] = (), *, look_twice: bool = True
) -> list[TextLine]:
    """The text lines of `page` (RGB), with boxes in its pixels, in no particular order.
    `known`: lines already read (in `page`'s pixels); boxes found again are not read again.
    `look_twice=False`: no second, enlarged look at a small image."""
    from rapidocr.ch_ppocr_rec import TextRecInput

    margin = max(PAD_MIN_PX, round(PAD_SHARE * min(page.size)))
    padded = ImageOps.expand(page, border=margin, fill="white")
    source = engine.load_img(padded)  # as rapidocr reads an image (BGR)
    detector = engine._load_det_model()
    scale = min(1.0, DET_MAX_SIDE / max(padded.size))
    boxes, doubtful = detect(detector, source, scale)
    cut_scale = 1.0  # the lines are cut from the image at this scale (`_line_crop`)
    second_look = look_twice and padded.width * padded.height <= SECOND_LOOK_MAX_PIXELS
    if boxes:
        thickness = statistics.median(quad_thickness(box) for box in boxes)
        # Only lettering small in the image itself: text made small by scaling a big
        # page down is left as it is (enlarging it again would cost the saving).
        if scale == 1.0 and thickness < DET_SMALL_TEXT_PX:
            enlarged = min(
                DET_TARGET_TEXT_PX / thickness,
                DET_MAX_UPSCALE,
                DET_UPSCALED_MAX_SIDE / max(padded.size),
            )
            if enlarged > scale * 1.2:
                boxes, doubtful = detect(detector, source, enlarged)
                second_look = False
                cut_scale = enlarged
    if second_look:
        # Stylised lettering thicker than print is sometimes found only enlarged.
        extra, _ = detect(detector, source, SECOND_LOOK_SCALE)
        boxes += [box for box in extra if _new(box, boxes)]
    if known:
        seen = [
            np.array([[line.x0, line.y0], [line.x1, line.y1]], dtype=np.float32) + margin
            for line in known
        ]
        boxes = [box for box in boxes if _new(box, seen)]
        doubtful = [box for box in doubtful if _new(box, seen)]
    doubtful = [box for box in doubtful if _new(box, boxes)]
    if not boxes and not doubtful:
        return []
    recogniser = engine._load_rec_model()
    boxes += doubtful
    crops = [_line_crop(source, box, cut_scale) for box in boxes]
    recognised = recogniser(TextRecInput(img=crops))
    boxes, crops, texts, scores = _confirmed(
        boxes, crops, list(recognised.txts), list(recognised.scores), len(doubtful)
    )
    texts, scores = _read_voicing_again(recogniser, crops, texts, scores)
    boxes, texts, scores = split_merged_columns(
        recogniser,
        source,
        lambda box: _line_crop(source, box, cut_scale),
        boxes,
        texts,
        scores,
        min_score=MIN_TEXT_SCORE,
    )
    texts, scores = read_without_ruby(recogniser, source, boxes, texts, scores)
    texts = read_marks(recogniser, source, boxes, texts)
    boxes, texts = dots_and_dashes(source, boxes, texts)  # "……" counted, "――" past the box
    boxes, texts, scores, origins = cut_at_wide_gaps(
        recogniser, lambda box: _line_crop(source, box, cut_scale), boxes, texts, scores
    )
    lines = []
    # Boxes grow into the paper added around the page: clipped back to the page.
    limit = np.array(page.size, dtype=np.float32)
    for box, text, score, origin in zip(boxes, texts, scores, origins, strict=True):
        if text.strip() and score >= MIN_TEXT_SCORE:
            quad = np.clip(box - margin, 0.0, limit)
            line = TextLine.from_quad(quad.tolist(), text, float(score))
            if origin is not None:
                whole = TextLine.from_quad(np.clip(origin - margin, 0.0, limit).tolist(), text)
                line = dataclasses.replace(line, cut_from=(whole.x0, whole.y0, whole.x1, whole.y1))
            lines.append(line)
    return lines


def _confirmed(
    boxes: list[NDArray[np.float32]],
    crops: list[NDArray[np.uint8]],
    texts: list[str],
    scores: list[float],
    doubtful: int,
) -> tuple[list[NDArray[np.float32]], list[NDArray[np.uint8]], list[str], list[float]]:
    """The lines read, less the last `doubtful` (boxes the detector scored under its bar)
    unless read as words (two letters or more: a lone letter or digits is what the
    recogniser makes of a stroke of art) with at least `DOUBTFUL_MIN_TEXT_SCORE`: only
    words read confidently confirm a box the detector doubted."""
    sure = len(boxes) - doubtful
    keep = [
        index
        for index, (text, score) in enumerate(zip(texts, scores, strict=True))
        if index < sure or (score >= DOUBTFUL_MIN_TEXT_SCORE and _letters(text) >= 2)
    ]
    return (
        [boxes[index] for index in keep],
        [crops[index] for index in keep],
        [texts[index] for index in keep],
        [float(scores[index]) for index in keep],
    )


def _letters(text: str) -> int:
    return sum(1 for char in text if unicodedata.category(char)[0] == "L")


def _line_crop(
    source: NDArray[np.uint8], box: NDArray[np.float32], scale: float
) -> NDArray[np.uint8]:
    """The line in `box` (4x2, in `source`'s pixels) cut out and laid horizontal, as rapidocr
    cuts it, from `source` enlarged by `scale` (bilinear, as `detector.detect` enlarges it for the
    detector) when the line is small (under `DET_SMALL_TEXT_PX` thick); a thicker line (a
    title among small lettering) is cut as it is. Lettering a few pixels thick is recognised
    better from the image the detector saw than from its own pixels stretched to the
    recogniser's height in one step (docs/ocr.md, "Figures, round 6: lettering a few pixels
    thick"). Only the box's surroundings are enlarged."""
    import cv2
    from rapidocr.utils.process_img import get_rotate_crop_image

    if scale <= 1.0 or quad_thickness(box) >= DET_SMALL_TEXT_PX:
        return get_rotate_crop_image(source, box.copy())
    height, width = source.shape[:2]
    # Pixels round the box, so that the interpolation at its edges sees the page round it.
    x0, y0 = (max(0, int(edge) - LINE_CUT_MARGIN_PX) for edge in box.min(axis=0))
    x1, y1 = box.max(axis=0)
    x1 = min(width, int(np.ceil(x1)) + LINE_CUT_MARGIN_PX)
    y1 = min(height, int(np.ceil(y1)) + LINE_CUT_MARGIN_PX)
    region = source[y0:y1, x0:x1]
    if region.size == 0:
        return get_rotate_crop_image(source, box.copy())
    size = (max(1, round(region.shape[1] * scale)), max(1, round(region.shape[0] * scale)))
    enlarged = cv2.resize(region, size, interpolation=cv2.INTER_LINEAR)
    moved = (box - np.array([x0, y0], dtype=np.float32)) * np.array(
        [size[0] / region.shape[1], size[1] / region.shape[0]], dtype=np.float32
    )
    crop: NDArray[np.uint8] = get_rotate_crop_image(enlarged, moved.astype(np.float32))
    return crop


def _read_voicing_again(
    recogniser: Any, crops: list[NDArray[np.uint8]], texts: list[str], scores: list[float]
) -> tuple[list[str], list[float]]:
    """`texts` and `scores`, where a doubtful line (under `VOICING_REREAD_BELOW`, but kept:
    `MIN_TEXT_SCORE` or more) holding kana that take voiced marks, read again with paper
    added across it (`VOICING_REREAD_PAD`), differs only in voiced marks and is read more
    confidently, with that reading. A line that paper did not make surer is read once more
    with more of it (`VOICING_ADD_PAD`), and that reading is taken only when it adds voiced
    marks and nothing else and is read more confidently. Each crop is a line laid
    horizontal."""
    doubtful = [
        index
        for index, score in enumerate(scores)
        if MIN_TEXT_SCORE <= score < VOICING_REREAD_BELOW and may_be_voiced(texts[index])
    ]
    if not doubtful:
        return texts, scores
    first, texts, scores = texts, list(texts), list(scores)
    again = _read_padded(recogniser, crops, doubtful, VOICING_REREAD_PAD)
    wider = []
    for index, (text, score) in zip(doubtful, again, strict=True):
        if score > scores[index] and differs_in_voicing_only(first[index], text):
            texts[index], scores[index] = text, score
        elif score <= scores[index]:
            wider.append(index)  # the paper did not help: more of it
    for index, (text, score) in zip(
        wider, _read_padded(recogniser, crops, wider, VOICING_ADD_PAD), strict=True
    ):
        if score > scores[index] and adds_voicing_only(first[index], text):
            texts[index], scores[index] = text, score
    return texts, scores


def _read_padded(
    recogniser: Any, crops: list[NDArray[np.uint8]], indices: list[int], share: float
) -> list[tuple[str, float]]:
    """The readings of the crops at `indices` with `share` of their thickness added as paper
    on each side across them (each crop is a line laid horizontal)."""
    import cv2
    from rapidocr.ch_ppocr_rec import TextRecInput

    if not indices:
        return []
    padded = []
    for index in indices:
        crop = np.ascontiguousarray(crops[index])
        pad = max(1, round(share * crop.shape[0]))
        padded.append(cv2.copyMakeBorder(crop, pad, pad, 0, 0, cv2.BORDER_REPLICATE))
    again = recogniser(TextRecInput(img=padded))
    return [(text, float(score)) for text, score in zip(again.txts, again.scores, strict=True)]


def _new(box: NDArray[np.float32], found: list[NDArray[np.float32]]) -> bool:
    """True when `box` is not (most of) one already in `found` and holds none of them."""
    x0, y0 = box.min(axis=0)
    x1, y1 = box.max(axis=0)
    area = max(1.0, float((x1 - x0) * (y1 - y0)))
    covered = 0.0
    for other in found:
        ox0, oy0 = other.min(axis=0)
        ox1, oy1 = other.max(axis=0)
        inter = max(0.0, min(x1, ox1) - max(x0, ox0)) * max(0.0, min(y1, oy1) - max(y0, oy0))
        if inter > NEW_BOX_MAX_HOLDS * max(1.0, float((ox1 - ox0) * (oy1 - oy0))):
            return False
        covered += float(inter)
    return covered <= NEW_BOX_MAX_COVERED * area
