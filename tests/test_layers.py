"""The architecture as a check, not only as prose: the layers of docs/architecture.md kept
(import-linter's contracts in pyproject.toml), no circle of imports between modules, and every
module the document names present."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import grimp

from tests.source_tree import ROOT

PACKAGES = ("pytpu.bot", "pytpu.engine", "pytpu.runtime")
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def test_the_layers_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"Contracts: \d+ kept, 0 broken", done.stdout), done.stdout[-2000:]


def import_circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected groups of two or more modules (Tarjan's algorithm): each holds
    a circle of imports, type-checking and function-level imports included."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return circles


def test_no_module_imports_itself_through_others() -> None:
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    assert import_circles(graph) == []


def test_the_circle_finder_finds_a_circle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(module)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.z", imported="a.x")
    assert import_circles(graph) == [["a.x", "a.y"]]


def _named_paths(text: str) -> set[str]:
    """The files and folders (`engine/migrate.py`, `rewriter/checkout.py`, `vocabulary/`,
    `processes.py`) and modules (`pytpu.engine.stages`) the document names in code spans."""
    named = set()
    for span in re.findall(r"`([^`\s]+)`", text):
        span = span.rstrip(".,;:")
        if span.startswith((".", "tests/pytpu/")):
            continue  # in the user's repository (`.pytpu/report.md`, the generated suite)
        if re.fullmatch(r"[\w./-]*\w\.(py|yaml|json|j2|md)|[\w./-]*\w/", span):
            named.add(span)
        elif re.fullmatch(r"pytpu\.(engine|bot|runtime)(\.\w+)*", span):
            named.add(span)
    return named


# Where a path the document gives relative to a part of the project is looked for.
_SOURCES = [ROOT / "engine", ROOT / "bot", ROOT / "engine" / "runtime" / "pytpu" / "runtime"]


def _exists(name: str) -> bool:
    if name.startswith("pytpu."):  # a module, or a name in one (`pytpu.runtime.kernel.hand_over`)
        parts = name.split(".")
        base = {"engine": ROOT / "engine", "bot": ROOT / "bot"}.get(parts[1], _SOURCES[2])
        for end in range(len(parts), 1, -1):
            path = base.joinpath(*parts[2:end])
            if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
                return end >= len(parts) - 1
        return False
    if (ROOT / name).exists():
        return True
    relative = name.rstrip("/")
    return any(
        found.as_posix().endswith("/" + relative)
        for source in _SOURCES
        for found in source.rglob(Path(relative).name)
        if "build" not in found.parts
    )


def test_every_module_the_architecture_names_exists() -> None:
    named = _named_paths(ARCHITECTURE.read_text())
    assert len(named) > 60, sorted(named)  # (the document names its modules)
    missing = sorted(name for name in named if not _exists(name))
    assert missing == [], f"docs/architecture.md names what is not there: {missing}"
