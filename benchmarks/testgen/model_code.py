"""Model code: the classes of a repository that derive from torch.nn.Module, and the names each
file's imports bind to torch, torch.nn and torch.nn.functional (the mutation operators use them)."""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from pytpu.engine.rewriter.cst_nodes import dotted_name
from pytpu.engine.testgen import discover


@dataclass
class Aliases:
    """The names one file's imports bind to torch, torch.nn, torch.nn.functional and
    torch.nn.Module (plus the usual spellings), and the names it imports from elsewhere."""

    torch: set[str] = field(default_factory=lambda: {"torch"})
    nn: set[str] = field(default_factory=lambda: {"nn", "torch.nn"})
    functional: set[str] = field(default_factory=lambda: {"F", "nn.functional"})
    module: set[str] = field(default_factory=set)
    imported: dict[str, str] = field(default_factory=dict)  # local name -> imported name

    def complete(self) -> Aliases:
        self.nn |= {f"{t}.nn" for t in self.torch}
        self.functional |= {f"{n}.functional" for n in self.nn}
        self.module |= {f"{n}.Module" for n in self.nn}
        return self


class _ImportCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.aliases = Aliases()

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            if alias.asname is None:  # `import torch.nn` binds `torch`, known anyway
                continue
            name, bound = dotted_name(alias.name), dotted_name(alias.asname.name)
            if bound is None:
                continue
            if name == "torch":
                self.aliases.torch.add(bound)
            elif name == "torch.nn":
                self.aliases.nn.add(bound)
            elif name == "torch.nn.functional":
                self.aliases.functional.add(bound)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = dotted_name(node.module) if node.module else ""
        if isinstance(node.names, cst.ImportStar):
            if module == "torch.nn":
                self.aliases.module.add("Module")
            return
        for alias in node.names:
            name = dotted_name(alias.name) or ""
            bound = dotted_name(alias.asname.name) if alias.asname else name
            if not bound:
                continue
            full = f"{module}.{name}"
            if full == "torch.nn":
                self.aliases.nn.add(bound)
            elif full == "torch.nn.functional":
                self.aliases.functional.add(bound)
            elif full in ("torch.nn.Module", "torch.nn.modules.Module"):
                self.aliases.module.add(bound)
            elif full == "torch.nn.modules.module.Module":
                self.aliases.module.add(bound)
            elif not module.startswith("torch"):
                self.aliases.imported[bound] = name


def import_aliases(module: cst.Module) -> Aliases:
    collector = _ImportCollector()
    module.visit(collector)
    return collector.aliases.complete()


class _ClassCollector(cst.CSTVisitor):
    """(qualified name, name, dotted names of the bases) of every class; qualified names join
    the enclosing classes only, as the site collector does."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.classes: list[tuple[str, str, list[str]]] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.stack.append(node.name.value)
        bases = [name for arg in node.bases if (name := dotted_name(arg.value))]
        self.classes.append((".".join(self.stack), node.name.value, bases))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.stack.pop()


def _as_module(source: str | cst.Module) -> cst.Module:
    return source if isinstance(source, cst.Module) else cst.parse_module(source)


def model_classes(source: str | cst.Module, elsewhere: Collection[str] = ()) -> set[str]:
    """Qualified names of the classes in `source` that derive from torch.nn.Module: through
    `nn.Module`, `torch.nn.Module`, `Module` imported from torch.nn, another such class of the
    same file, or a class named in `elsewhere` (model classes of other files) imported by name."""
    module = _as_module(source)
    aliases = import_aliases(module)
    collector = _ClassCollector()
    module.visit(collector)

    found: set[str] = set()
    local: set[str] = set()
    changed = True
    while changed:  # to a fixpoint: a subclass may come before its base in the file
        changed = False
        for qualname, name, bases in collector.classes:
            if qualname in found:
                continue
            if any(
                base in aliases.module or base in local or aliases.imported.get(base) in elsewhere
                for base in bases
            ):
                found.add(qualname)
                local.add(name)
                changed = True
    return found


def python_files(repo: Path, suite: Path) -> list[Path]:
    """The repository's own .py files as test generation sees them (not in the suite, tests/
    folders, vendored folders or virtualenvs), without conftest.py and hidden folders."""
    return [
        path
        for path in discover.python_files(repo, suite)
        if path.name != "conftest.py"
        and not any(part.startswith(".") for part in path.relative_to(repo).parts)
    ]


def find_model_code(files: Iterable[Path]) -> dict[Path, set[str]]:
    """The files that define nn.Module subclasses, with those classes. Subclasses of model
    classes imported from other files of the repository count too (matched by name)."""
    modules: dict[Path, cst.Module] = {}
    for path in files:
        try:
            modules[path] = cst.parse_module(path.read_bytes())
        except (cst.ParserSyntaxError, RecursionError) as exc:
            print(f"warning: {path} is skipped, libcst cannot parse it: {exc}", file=sys.stderr)
    known: set[str] = set()
    while True:
        found = {path: model_classes(module, known) for path, module in modules.items()}
        names = {q.rsplit(".", 1)[-1] for classes in found.values() for q in classes}
        if names <= known:
            return {path: classes for path, classes in found.items() if classes}
        known |= names
