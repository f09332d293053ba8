"""The host's keys of a manga, and one chapter per number within a manga.

`mangas.source_id` and `mangas.source_key` name a manga the way the host
(its crawler) knows it: `manga_page_analysis.pages.ensure_manga` finds or
creates a manga by them. Both NULL for mangas made otherwise (and every row
made before this revision), or both set; one manga per pair.

`chapters` gets one row per (manga, number): `ensure_chapter` finds or
creates a chapter by them, race-free. `import-pages` never made a second
chapter of the same number; should a database have some anyway (rows written
by other means), the upgrade stops and names them instead of failing on the
index.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DUPLICATE_CHAPTERS = sa.text(
    "SELECT manga_id, number, count(*) AS copies FROM chapters "
    "GROUP BY manga_id, number HAVING count(*) > 1 ORDER BY manga_id, number LIMIT 5"
)


def upgrade() -> None:
    duplicates = op.get_bind().execute(_DUPLICATE_CHAPTERS).all()
    if duplicates:
        named = "; ".join(
            f"manga {row.manga_id} chapter {row.number} ({row.copies} rows)" for row in duplicates
        )
        raise RuntimeError(
            "chapters must be unique per (manga_id, number), and some are not: "
            f"{named}. Merge or renumber them, then migrate again"
        )
    # Nullable, no default: adding them rewrites nothing.
    op.add_column("mangas", sa.Column("source_id", sa.Text(), nullable=True))
    op.add_column("mangas", sa.Column("source_key", sa.Text(), nullable=True))
    op.create_check_constraint(
        op.f("ck_mangas_source_keys"),
        "mangas",
        "(source_id IS NULL) = (source_key IS NULL)",
    )
    # NULLs are distinct in a unique constraint: mangas without keys never clash.
    op.create_unique_constraint(op.f("uq_mangas_source_id"), "mangas", ["source_id", "source_key"])
    op.create_unique_constraint(op.f("uq_chapters_manga_id"), "chapters", ["manga_id", "number"])


def downgrade() -> None:
    op.drop_constraint(op.f("uq_chapters_manga_id"), "chapters", type_="unique")
    op.drop_constraint(op.f("uq_mangas_source_id"), "mangas", type_="unique")
    op.drop_constraint(op.f("ck_mangas_source_keys"), "mangas", type_="check")
    op.drop_column("mangas", "source_key")
    op.drop_column("mangas", "source_id")
