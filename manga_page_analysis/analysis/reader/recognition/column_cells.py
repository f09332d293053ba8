"""A column's cells: what is ink (for every recognition module that looks at a column's
pixels), and how many cells a mark set down a column spans (`column_marks`' long dashes,
`wave_dashes`' stretched wave dashes)."""

from __future__ import annotations

from typing import Final

import numpy as np

INK_LEVEL: Final = 128
"""A pixel darker than this (0-255) is ink."""
DASH_CELL_SLACK: Final = 0.25
"""A dash (or a stretched wave dash) is one mark per thickness it spans, rounded up once past
this share of a cell (a dash set in two cells is shorter than two boxes' thicknesses)."""


def cells_spanned(length: float, thickness: float) -> int:
    """How many cells a mark `length` long spans down a column `thickness` thick: a mark set
    in n cells fills most of each, and the box's thickness has a little paper
    (`DASH_CELL_SLACK`)."""
    return max(1, int(np.ceil(length / thickness - DASH_CELL_SLACK)))
