"""Text blocks (a bubble, a caption) from OCR lines, and their reading order (the rules:
docs/ocr.md, "Blocks"). Pure functions: tests feed boxes directly.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Collection, Sequence
from typing import Final

from manga_page_analysis.analysis.reader.order.lines import Block, Box, TextLine
from manga_page_analysis.analysis.reader.order.missing_column import with_missing_column

JOIN_GAP: Final = 0.5
"""Side-by-side lines share a block when the gap between them is under this many thicknesses
of the thinner one (columns of one bubble nearly touch; the next bubble is most of a character
away). The thinner: a box that took in ruby or a note set beside its column is wider than its
lettering, and would stretch the gap it may bridge."""
SIDE_OVERLAP: Final = 0.3
"""Side-by-side lines of one block lie beside each other along this share of the shorter."""
CONTINUE_GAP: Final = 0.5
"""A line continues another (a column cut in two) across a gap of up to this many thicknesses
of the thinner one."""
CONTINUE_MIN_SCORE: Final = 0.5
"""A line continues another only when both were read with at least this confidence: pieces
of one line are one lettering, read alike; garbage read from a drawing (a sound effect)
touching the end of a name tag is not part of it."""
CONTINUE_MAX_WIDER: Final = 1.5
"""The shorter of two lines continuing each other is at most this many times as wide across
its lane as the longer: a piece of a column is set in the column's width, a sound effect
drawn under a column spreads wider."""
SAME_LANE: Final = 0.5
"""Two lines share a column (or a row) when they overlap by this fraction of the thinner one."""
LANE_MAX_ALONG: Final = 0.5
"""Two lines overlapping along their length by more than this share of the shorter are two
lanes (two rows of a slanted caption), however close their centres."""
SAME_SIZE: Final = 2.0
"""Lines of one block differ in thickness by at most this factor."""
LONE_GLYPH_MAX_SIZE: Final = 1.5
"""A lone character (a square box) is of a block only when at most this many times as thick
as the line beside it: a glyph that much bigger beside a column is a hand-lettered label or
effect drawn next to the balloon (裏 of a label beside 夏〜秋は単衣), not its lettering."""

BESIDE_MAX_SHARED: Final = 0.25
"""Two blocks are side by side when they share at most this share of the narrower's width
(the boxes of two neighbouring columns set as two blocks overlap by a few pixels)."""
BESIDE_MIN_LEVEL: Final = 0.3
"""Two blocks side by side (`BESIDE_MAX_SHARED`) are read right first (left first on a page read
left to right) when they lie level with each other along more than this share of the shorter
one's height; blocks less level, or one over the other, are read top first."""

PANEL_MIN_BESIDE: Final = 0.25
"""A block in no panel lies beside a panel when they overlap along at least this share of the
block's height: a caption under a panel's foot that its box merely touches is not beside it."""


def reading_order(
    lines: Sequence[TextLine],
    panels: Sequence[Box] = (),
    *,
    right_to_left: bool = True,
    apart: Callable[[TextLine, TextLine], bool] | None = None,
    balloons: Collection[int] = (),
) -> list[Block]:
    """The blocks of `lines` in reading order, each with its lines in order.

    `panels`: panel boxes already in reading order (`manga_page_analysis.analysis.reader.regions.panels`);
    a block belongs to the panel holding its centre, and the panels are read
    in turn. Without panels the page is one panel; a column of panels the finder missed
    beside a column it found is put back (`missing_column`). `right_to_left`: manga
    order; `False` reads rows left to right (comics, webtoons). `apart`: two near lines
    it holds apart are not joined (a rule drawn between them:
    `manga_page_analysis.analysis.reader.regions.ruled_lines`). `balloons`: the
    `TextLine.bubble` labels that are balloons proper (`regions.bubbles.in_balloons`): the
    blocks of one are read one after another, within a panel.
    """
    blocks = [_order_block(group) for group in _group(lines, apart)]
    boxes = [(block.x0, block.y0, block.x1, block.y1) for block in blocks]
    panels = with_missing_column(panels, boxes, right_to_left=right_to_left)
    by_panel: dict[float, list[Block]] = {}
    for block in blocks:
        by_panel.setdefault(_panel_of(block, panels, right_to_left), []).append(block)
    ordered: list[Block] = []
    for index in sorted(by_panel):
        ordered.extend(_order_panel(by_panel[index], right_to_left, balloons))
    return pieces_in_line_order(ordered)


def pieces_in_line_order(blocks: list[Block]) -> list[Block]:
    """`blocks` (in reading order) with the pieces of each cut line (blocks of lines sharing
    a `cut_from`) read one after the other, left to right, where the first of them was."""
    by_origin: dict[tuple[float, float, float, float], list[Block]] = {}
    for block in blocks:
        origin = _origin(block)
        if origin is not None:
            by_origin.setdefault(origin, []).append(block)
    ordered: list[Block] = []
    for block in blocks:
        origin = _origin(block)
        if origin is None:
            ordered.append(block)
        elif by_origin[origin][0] is block:
            ordered.extend(sorted(by_origin[origin], key=lambda piece: piece.x0))
    return ordered


def _origin(block: Block) -> tuple[float, float, float, float] | None:
    return next((line.cut_from for line in block.lines if line.cut_from is not None), None)


def page_text(lines: Sequence[TextLine]) -> str:
    """The page's text: one line per block, in reading order; `""` when there is none."""
    return "\n".join(block.text for block in reading_order(lines) if block.text)


def _compatible(a: TextLine, b: TextLine) -> bool:
    if a.bubble != b.bubble:
        return False  # two balloons, or a balloon and open paper
    if not (a.orientation is None or b.orientation is None or a.orientation == b.orientation):
        return False
    # One block is set in one size: a title beside a bubble, or ruby, is not joined (a lone
    # glyph, more strictly). A line of marks alone in a balloon ("……" set as a column of its
    # own) is as thin as its dots.
    if a.bubble is not None and (is_marks(a.text) or is_marks(b.text)):
        return True
    for glyph, line in ((a, b), (b, a)):
        if _is_lone_glyph(glyph) and glyph.thickness > LONE_GLYPH_MAX_SIZE * line.thickness:
            return False
    return max(a.thickness, b.thickness) <= SAME_SIZE * min(a.thickness, b.thickness)


def _is_lone_glyph(line: TextLine) -> bool:
    return line.orientation is None and len("".join(line.text.split())) == 1


def is_marks(text: str) -> bool:
    """Leader dots, dashes and ！？ alone: no letter."""
    compact = "".join(text.split())
    return bool(compact) and all(unicodedata.category(char)[0] in "PS" for char in compact)


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    """How much two spans overlap, as a share of the shorter one (negative: a gap)."""
    return (min(a1, b1) - max(a0, b0)) / max(1.0, min(a1 - a0, b1 - b0))


def _near(a: TextLine, b: TextLine) -> bool:
    """Neighbours in one block: side by side along most of the shorter one with a
    gap under `JOIN_GAP` thicknesses of the thinner, or one continuing the other (a split
    column; both read with at least `CONTINUE_MIN_SCORE`)."""
    size = min(a.thickness, b.thickness)
    x_gap = max(a.x0, b.x0) - min(a.x1, b.x1)
    y_gap = max(a.y0, b.y0) - min(a.y1, b.y1)
    vertical = "v" in (a.orientation, b.orientation) or (
        a.orientation is None and b.orientation is None
    )
    if vertical:
        beside = x_gap <= JOIN_GAP * size and _overlap(a.y0, a.y1, b.y0, b.y1) >= SIDE_OVERLAP
        below = y_gap <= CONTINUE_GAP * size and _overlap(a.x0, a.x1, b.x0, b.x1) >= SAME_LANE
        piece, line = sorted((a, b), key=lambda line: line.height)
        across = piece.width <= CONTINUE_MAX_WIDER * line.width
    else:
        beside = y_gap <= JOIN_GAP * size and _overlap(a.x0, a.x1, b.x0, b.x1) >= SIDE_OVERLAP
        below = x_gap <= CONTINUE_GAP * size and _overlap(a.y0, a.y1, b.y0, b.y1) >= SAME_LANE
        piece, line = sorted((a, b), key=lambda line: line.width)
        across = piece.height <= CONTINUE_MAX_WIDER * line.height
    return beside or (below and across and min(a.score, b.score) >= CONTINUE_MIN_SCORE)


def _group(
    lines: Sequence[TextLine], apart: Callable[[TextLine, TextLine], bool] | None = None
) -> list[list[TextLine]]:
    """Connected groups of near, orientation-compatible lines (union-find; pages are small)."""
    parent = list(range(len(lines)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, a in enumerate(lines):
        for j in range(i + 1, len(lines)):
            b = lines[j]
            if _compatible(a, b) and _near(a, b) and not (apart and apart(a, b)):
                parent[root(i)] = root(j)
    groups: dict[int, list[TextLine]] = {}
    for i, line in enumerate(lines):
        groups.setdefault(root(i), []).append(line)
    return list(groups.values())


def _order_block(lines: list[TextLine]) -> Block:
    votes = {"v": 0, "h": 0}
    for line in lines:
        if line.orientation is not None:
            votes[line.orientation] += len(line.text)
    vertical = votes["v"] > votes["h"]
    if vertical:
        # Columns right to left, each column top to bottom.
        lanes = _lanes(lines, _x_span, _y_span)
        lanes.sort(key=lambda lane: -_lane_centre(lane, _x_span))
        ordered = [line for lane in lanes for line in sorted(lane, key=lambda line: line.y0)]
    else:
        # Rows top to bottom, each row left to right.
        lanes = _lanes(lines, _y_span, _x_span)
        lanes.sort(key=lambda lane: _lane_centre(lane, _y_span))
        ordered = [line for lane in lanes for line in sorted(lane, key=lambda line: line.x0)]
    return Block(tuple(ordered), vertical)


def _lanes(
    lines: list[TextLine],
    extent: Callable[[TextLine], tuple[float, float]],
    along: Callable[[TextLine], tuple[float, float]],
) -> list[list[TextLine]]:
    """Lines sharing a column (`extent` = x span, `along` = y span) or a row (the other way
    round): their centres lie within `SAME_LANE` of the thinner one's thickness, and they do
    not lie beside each other (`_alongside`)."""
    lanes: list[list[TextLine]] = []
    for line in sorted(lines, key=lambda line: _centre(extent(line))):
        start, end = extent(line)
        for lane in lanes:
            thinnest = min(min(end - start, extent(other)[1] - extent(other)[0]) for other in lane)
            if abs(
                _centre(extent(line)) - _lane_centre(lane, extent)
            ) <= SAME_LANE * thinnest and not any(_alongside(line, other, along) for other in lane):
                lane.append(line)
                break
        else:
            lanes.append([line])
    return lanes


def _alongside(a: TextLine, b: TextLine, along: Callable[[TextLine], tuple[float, float]]) -> bool:
    """True when `a` and `b` overlap along their lane (`along`: their span down a column or
    across a row) by more than `LANE_MAX_ALONG` of the shorter. Two pieces of one row follow
    each other; the boxes of two rows of a slanted caption, each as tall as its slant, lie
    one over the other instead."""
    return _overlap(*along(a), *along(b)) > LANE_MAX_ALONG


def _x_span(line: TextLine) -> tuple[float, float]:
    return line.x0, line.x1


def _y_span(line: TextLine) -> tuple[float, float]:
    return line.y0, line.y1


def _centre(span: tuple[float, float]) -> float:
    return (span[0] + span[1]) / 2


def _lane_centre(lane: list[TextLine], extent: Callable[[TextLine], tuple[float, float]]) -> float:
    return sum(_centre(extent(line)) for line in lane) / len(lane)


def _panel_of(block: Block, panels: Sequence[Box], right_to_left: bool) -> float:
    """The index of the panel holding the block's centre. A block in no panel (a title or
    caption on the open page) is read just before the first panel it precedes: one wholly
    below it, or beside it on the side read later; after all of them when there is none."""
    cx, cy = (block.x0 + block.x1) / 2, (block.y0 + block.y1) / 2
    for index, (x0, y0, x1, y1) in enumerate(panels):
        if x0 <= cx <= x1 and y0 <= cy <= y1:
            return index
    for index, (x0, y0, x1, y1) in enumerate(panels):
        along = min(y1, block.y1) - max(y0, block.y0)
        beside = along >= PANEL_MIN_BESIDE * max(1.0, block.y1 - block.y0)
        later_side = x1 <= block.x0 if right_to_left else x0 >= block.x1
        if y0 >= block.y1 or (beside and later_side):
            return index - 0.5
    return len(panels)


def _order_panel(
    blocks: list[Block], right_to_left: bool, balloons: Collection[int] = ()
) -> list[Block]:
    """The blocks of one panel in reading order: of two blocks side by side and level
    (`_read_before`) the one on the right first, else the higher first. The next block read is
    one that comes before every block left, the highest of them; where the rule goes round a
    loop (a block level with the foot of one block and the head of another, in a staircase
    of balloons) and no block comes before all, the one furthest on the side read first.
    After a block in one of `balloons`, the other blocks of that balloon are read first (by
    the same rule among them): a reader follows a balloon's joined lobes before moving on."""

    def across(block: Block) -> float:
        return -block.x1 if right_to_left else block.x0

    def balloon(block: Block) -> int | None:
        bubble = block.lines[0].bubble  # the lines of one block share their balloon
        return bubble if bubble in balloons else None

    left = sorted(blocks, key=lambda block: (block.y0, across(block)))
    # after[i]: the blocks left that block i is not read before (it is read first when none).
    after = [
        {
            j
            for j, other in enumerate(left)
            if j != i and not _read_before(block, other, right_to_left)
        }
        for i, block in enumerate(left)
    ]
    remaining = list(range(len(left)))
    ordered: list[Block] = []
    while remaining:
        candidates = remaining
        if ordered and (last := balloon(ordered[-1])) is not None:
            candidates = [i for i in remaining if balloon(left[i]) == last] or remaining
        pool = set(candidates)
        chosen = next(
            (i for i in candidates if not (after[i] & pool)),
            min(candidates, key=lambda i: across(left[i])),
        )
        ordered.append(left[chosen])
        remaining.remove(chosen)
        for i in remaining:
            after[i].discard(chosen)
    return ordered


def _read_before(a: Block, b: Block, right_to_left: bool) -> bool:
    """True when `a` is read before `b`: the one on the side read first when they lie side
    by side (`BESIDE_MAX_SHARED`) and level along more than `BESIDE_MIN_LEVEL` of the
    shorter's height, else the one starting higher (the one on the side read first when both
    start at one height)."""
    level = _overlap(a.y0, a.y1, b.y0, b.y1)
    if level > BESIDE_MIN_LEVEL and _overlap(a.x0, a.x1, b.x0, b.x1) <= BESIDE_MAX_SHARED:
        return a.x1 > b.x1 if right_to_left else a.x0 < b.x0
    if a.y0 != b.y0:
        return a.y0 < b.y0
    return a.x1 > b.x1 if right_to_left else a.x0 < b.x0
