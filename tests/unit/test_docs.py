"""The docs live in the repository and keep up with the code: every variable of
`Settings` is documented, and every link of the README and `docs/` stays inside
the repository and leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

from manga_page_analysis.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_every_setting_is_documented() -> None:
    documented = (DOCS / "environment.md").read_text()
    missing = [
        name.upper() for name in Settings.model_fields if f"`{name.upper()}`" not in documented
    ]
    assert missing == []


def _documents() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted(DOCS.glob("*.md")),
        *sorted(ROOT.glob("examples/*/README.md")),
    ]


def test_links_stay_inside_the_repository_and_resolve() -> None:
    problems = []
    for document in _documents():
        for target in LINK.findall(document.read_text()):
            where = f"{document.relative_to(ROOT)}: {target}"
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                if not target.startswith("http://127.0.0.1"):
                    problems.append(f"{where} leaves the repository")
                continue
            path = (document.parent / target.split("#")[0]).resolve()
            if not path.is_relative_to(ROOT):
                problems.append(f"{where} leaves the repository")
            elif not path.exists():
                problems.append(f"{where} leads nowhere")
    assert problems == []


def test_the_readme_starts_with_the_two_commands_and_points_at_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```")[1]
    assert "make run-worker" in first_block and "make test" in first_block
    assert "(docs/index.md)" in readme
    assert "shared/" not in readme
