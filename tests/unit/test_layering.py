"""The package's rooms and their layers, read from its imports (docs/architecture.md).

Every import counts: at module level, inside a function, under `if TYPE_CHECKING:`;
relative imports are resolved. An import circle between two modules fails, however it is
hidden, and so does an import from a room to a room its layers put above it or beside it.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import manga_page_analysis

PACKAGE = "manga_page_analysis"
ROOT = Path(manga_page_analysis.__file__).parent

LAYERS: dict[str, list[set[str]]] = {
    # Top to bottom: a room imports only rooms of the layers below its own, never one beside
    # it. A folder listed here must place each of its rooms (folders and modules).
    PACKAGE: [
        {"__main__"},
        # Django's `run_worker` command calls the CLI, as procrastinate's does.
        {"web"},
        {"cli"},
        # `pages` checks a new page's image with the analyzer's decoding checks
        # (`analysis.analyzer.prepared_image`), and asks the queue for its analysis.
        {"admin", "pages", "observability"},
        # The page analysis plugs into the generic worker, which knows no job kind and no page.
        {"analysis"},
        {"worker"},
        {"queue", "repos", "schema_check"},
        {"migrations", "schema_errors"},
        {"db"},
        {"config", "devdb", "models", "dberrors", "online_ddl", "storable"},
        {"storage"},
        {"errors"},
    ],
    f"{PACKAGE}.analysis": [
        {"wiring", "startup_checks"},
        {"page_handler", "page_events"},
        {"model_server", "reader"},
        {"analyzer"},
    ],
    # The reader's stages, from the one module that composes them down to the reading order.
    f"{PACKAGE}.analysis.reader": [
        {"ocr_analyzer"},
        {"text"},
        {"recognition"},
        {"regions"},
        {"order"},
    ],
}

MAX_MODULES_PER_FOLDER = 15


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name; a package by its own name."""
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _known(name: str) -> str | None:
    """The package's module `name` is, or is in (`a.b.C` -> `a.b`); None outside the package."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_in(source: str, module: str, *, is_package: bool = False) -> dict[str, int]:
    """The package's modules that `source` (module `module`) imports, wherever the import
    stands, each with the line of its first import."""
    package = module if is_package else module.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            names = [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            target = _known(name)
            if target is not None and target != module:
                found.setdefault(target, node.lineno)
    return found


def imports_of(module: str) -> dict[str, int]:
    path = MODULES[module]
    return imports_in(
        path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py"
    )


GRAPH = {module: imports_of(module) for module in MODULES}


def _place(module: str) -> list[str]:
    """Where `module` stands: its folders, then its own name (`__init__` for a package)."""
    parts = module.split(".")
    return [*parts, "__init__"] if MODULES[module].name == "__init__.py" else parts


def _rank(folder: str, room: str) -> int:
    if room == "__init__":
        return -1  # a room's front door stands above its own modules
    for rank, layer in enumerate(LAYERS[folder]):
        if room in layer:
            return rank
    raise AssertionError(f"{folder}: room {room!r} is in no layer of LAYERS")


def upward_imports() -> list[str]:
    problems = []
    for module, targets in GRAPH.items():
        for target, line in targets.items():
            here, there = _place(module), _place(target)
            common = 0
            while here[common] == there[common]:
                common += 1
            folder = ".".join(here[:common])
            if folder not in LAYERS:
                continue
            room, other = here[common], there[common]
            if _rank(folder, room) >= _rank(folder, other):
                problems.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}")
    return problems


def test_no_import_circle() -> None:
    try:
        graphlib.TopologicalSorter(GRAPH).prepare()
    except graphlib.CycleError as exc:
        raise AssertionError(f"import circle through {', '.join(exc.args[1])}") from None


def test_no_room_imports_a_room_its_layers_put_above_or_beside_it() -> None:
    assert upward_imports() == []


def test_layers_place_every_room_once() -> None:
    for folder, layers in LAYERS.items():
        rooms = [room for layer in layers for room in layer]
        assert len(rooms) == len(set(rooms)), folder
        directory = ROOT.joinpath(*folder.split(".")[1:])
        present = {
            path.stem
            for path in directory.iterdir()
            if (path.suffix == ".py" and path.stem != "__init__")
            or (path / "__init__.py").is_file()
        }
        assert present == set(rooms), folder


def test_every_kind_of_import_is_read() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import manga_page_analysis.db\n"
        "from ..errors import ServiceError\n"
        "from . import runner\n"
        "if TYPE_CHECKING:\n"
        "    from manga_page_analysis.config import Settings\n"
        "def later():\n"
        "    from manga_page_analysis.queue.backoff import backoff_seconds\n"
    )
    found = imports_in(source, f"{PACKAGE}.worker.pool")
    assert found == {
        f"{PACKAGE}.db": 2,
        f"{PACKAGE}.errors": 3,
        f"{PACKAGE}.worker.runner": 4,
        f"{PACKAGE}.config": 6,
        f"{PACKAGE}.queue.backoff": 8,
    }


def test_no_folder_holds_more_than_fifteen_modules() -> None:
    crowded = {
        str(folder.relative_to(ROOT.parent)): count
        for folder in [ROOT, *(path.parent for path in ROOT.rglob("*/__init__.py"))]
        if (count := sum(1 for path in folder.glob("*.py") if path.name != "__init__.py"))
        > MAX_MODULES_PER_FOLDER
    }
    assert crowded == {}


SAME_IDEA_NAMES = {
    "__init__.py",
    # The package's tables (SQLAlchemy) and the Django app's models module, which holds
    # none: Django sends `post_migrate` only to apps that have one (web/django/models.py).
    "models.py",
}


def test_no_two_modules_share_a_file_name_unless_they_are_one_idea() -> None:
    rooms_of: dict[str, list[str]] = {}
    for path in MODULES.values():
        rooms_of.setdefault(path.name, []).append(str(path.parent.relative_to(ROOT.parent)))
    shared = {
        name: rooms
        for name, rooms in rooms_of.items()
        if len(rooms) > 1 and name not in SAME_IDEA_NAMES
    }
    assert shared == {}
