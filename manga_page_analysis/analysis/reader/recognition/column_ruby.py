"""A column whose box took in its ruby, read again without it (docs/ocr.md, "A column read
without its ruby").

The detector sometimes gives a column of one or two kanji a box that holds the ruby set
beside it; the recogniser, reading both side by side, misreads the kanji (気絶 read as
气色). Across such a box the ink stands in two runs with paper between: the column, and a
narrower run of ruby.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from manga_page_analysis.analysis.reader.recognition.column_cells import INK_LEVEL

REREAD_BELOW: Final = 0.8
"""A column read with less confidence than this is looked at for ruby inside its box."""
RUBY_MAX_RATIO: Final = 0.7
"""A run of ink beside the column at most this share of its width is ruby (ruby is set at
half size; the layout's furigana rule uses the same share)."""
PAPER_PAD_PX: Final = 2
"""Paper kept on each side of the column's run of ink when it is read alone."""


def read_without_ruby(
    recogniser: Any,
    source: NDArray[np.uint8],
    boxes: list[NDArray[np.float32]],
    texts: list[str],
    scores: list[float],
) -> tuple[list[str], list[float]]:
    """The readings of `boxes`, where a column (a box taller than wide) read doubtfully
    (under `REREAD_BELOW`) whose box holds, beside its widest run of ink, only runs of
    ruby (each at most `RUBY_MAX_RATIO` as wide, paper between) is read again as that run
    alone; that reading replaces the first when it is more confident. The ruby is left out
    of the text (the layout drops ruby anyway); the box is kept as it is, holding its ruby
    like its neighbours' boxes (narrowed, it was no longer set in their size and left its
    block). `source`: the image the boxes lie in (BGR)."""
    from rapidocr.ch_ppocr_rec import TextRecInput
    from rapidocr.utils.process_img import get_rotate_crop_image

    texts, scores = list(texts), list(scores)
    for index, box in enumerate(boxes):
        if not _upright(box) or scores[index] >= REREAD_BELOW:
            continue
        column = _column_alone(box, source)
        if column is None:
            continue
        again = recogniser(TextRecInput(img=[get_rotate_crop_image(source, column.copy())]))
        text, score = again.txts[0], float(again.scores[0])
        if text.strip() and score > scores[index]:
            texts[index], scores[index] = text, score
    return texts, scores


def _upright(box: NDArray[np.float32]) -> bool:
    """Taller than wide: a column, or one of a kanji or two whose box took in their ruby
    (気絶 with its ruby is about as wide as tall)."""
    width, height = box.max(axis=0) - box.min(axis=0)
    return bool(height > width)


def _column_alone(
    box: NDArray[np.float32], source: NDArray[np.uint8]
) -> NDArray[np.float32] | None:
    """The box narrowed to its widest run of ink (columns of pixels holding ink, paper on
    either side), when every other run beside it is ruby; None otherwise."""
    x0, y0 = box.min(axis=0)
    x1, y1 = box.max(axis=0)
    left = int(x0)
    grey = source[int(y0) : int(np.ceil(y1)), left : int(np.ceil(x1))].mean(axis=2)
    inked = np.pad((grey < INK_LEVEL).any(axis=0), 1)
    edges = np.flatnonzero(np.diff(inked.astype(np.int8)))
    runs = list(zip(edges[::2], edges[1::2], strict=True))  # [start, end) in the box
    if len(runs) < 2:
        return None
    widest = max(runs, key=lambda run: run[1] - run[0])
    width = widest[1] - widest[0]
    if any(run != widest and run[1] - run[0] > RUBY_MAX_RATIO * width for run in runs):
        return None
    start = max(float(x0), left + widest[0] - PAPER_PAD_PX)
    end = min(float(x1), left + widest[1] + PAPER_PAD_PX)
    return np.array([[start, y0], [end, y0], [end, y1], [start, y1]], dtype=np.float32)
