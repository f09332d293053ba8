"""`page_analysis.ocr_blocks`: the text blocks the `ocr` analyzer read, with their positions.

A JSON array in reading order, each element
`{"text": str, "box": [x0, y0, x1, y1], "vertical": bool, "score": float}`
with the box in the original image's pixels. NULL when the analyzer gives
no positions (the `http` backend) and for rows written before this revision.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable with no default: adding it rewrites nothing, whatever the table's size.
    op.add_column(
        "page_analysis",
        sa.Column("ocr_blocks", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("page_analysis", "ocr_blocks")
