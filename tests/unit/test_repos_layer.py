"""`manga_page_analysis.repos` sits below `manga_page_analysis.analysis`: it never imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import manga_page_analysis.repos

REPOS = Path(manga_page_analysis.repos.__file__).parent


def imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_repos_import_nothing_from_analysis() -> None:
    sources = sorted(REPOS.glob("*.py"))
    assert sources, "no repository modules found"
    upward = {
        f"{path.name}: {module}"
        for path in sources
        for module in imported_modules(path)
        if module == "manga_page_analysis.analysis"
        or module.startswith("manga_page_analysis.analysis.")
    }
    assert upward == set()
