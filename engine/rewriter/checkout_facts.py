"""What the other files of a checkout say about each file, gathered before any file is migrated:
a file alone cannot see how the scripts that import it call its functions.

Two facts: the names a file binds to another file's batcher (a function that lays a corpus out
in columns on the device), and the parameters another file passes such a corpus to.
salesforce's awd-lstm-lm lays its corpus out in utils.py's `batchify` and slices it in utils.py's
`get_batch`; both are called from main.py (`get_batch(train_data, i, args)`), so utils.py alone
shows no corpus reaching `get_batch`, and R-SLICE-01 would leave its slices compiling a graph per
step. Only files that could take part are parsed: those that lay a corpus out in columns
(`.view(bsz, -1).t()`), then those that name a batcher found."""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Mapping
from contextlib import suppress
from pathlib import Path

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary.contract import CheckoutFacts
from pytpu.engine.rewriter.vocabulary.facts.column_batchers import batchers_in
from pytpu.engine.rewriter.vocabulary.facts.corpus_slicers import follow, positional_names

# what a file that lays a corpus out in columns contains: `.view(bsz, -1).t()` (`.T`); most
# files that use torch contain `.T` (`torch.Tensor`), and a parse is what the run saves
_COLUMNS = re.compile(r"-1\s*\)\s*\.(?:t\(\s*\)|T\b)")


def gather(
    files: Iterable[Path], root: Path, read: Callable[[Path], str | None]
) -> dict[Path, CheckoutFacts]:
    """The checkout facts of each file of `files` (Python files under `root`; `read` gives a
    file's text, None when it cannot be read) that another file says something about."""
    texts = {path: text for path in files if (text := read(path)) is not None}
    modules: dict[Path, cst.Module | None] = {}

    def parsed(path: Path) -> cst.Module | None:
        if path not in modules:
            try:
                modules[path] = cst.parse_module(texts[path])
            except Exception:  # (the file's own run reports its syntax error)
                modules[path] = None
        return modules[path]

    # (a file whose facts cannot be gathered, an engine bug, gives none: the run goes on, and
    # the file is migrated as it would be alone)
    batchers: dict[Path, frozenset[str]] = {}
    for path, text in texts.items():
        if _COLUMNS.search(text) and (module := parsed(path)) is not None:
            with suppress(Exception):
                if names := batchers_in(module):
                    batchers[path] = names
    words = {name for names in batchers.values() for name in names}
    passed: dict[Path, dict[str, set[str]]] = {}
    imported: dict[Path, frozenset[str]] = {}
    for path, text in texts.items():
        if any(word in text for word in words) and (module := parsed(path)) is not None:
            with suppress(Exception):
                _follow_file(path, module, root, texts, batchers, parsed, passed, imported)
    return {
        path: CheckoutFacts(
            corpus_parameters={f: frozenset(names) for f, names in passed.get(path, {}).items()},
            batchers=imported.get(path, frozenset()),
        )
        for path in passed.keys() | imported.keys()
    }


def _follow_file(
    path: Path,
    module: cst.Module,
    root: Path,
    texts: Mapping[Path, str],
    batchers: Mapping[Path, frozenset[str]],
    parsed: Callable[[Path], cst.Module | None],
    passed: dict[Path, dict[str, set[str]]],
    imported: dict[Path, frozenset[str]],
) -> None:
    """Add what `module` says about the files it imports: into `imported`, the names it binds
    to their batchers; into `passed`, their functions' parameters it passes a corpus to."""
    imports = _Imports(module, path, root, texts)
    if bound := imports.bound_to(batchers):
        imported[path] = bound
    own = batchers.get(path, frozenset())

    def is_batcher(func: cst.BaseExpression) -> bool:
        if cst_nodes.dotted_name(func) in own:
            return True
        target = imports.callee(func)
        return target is not None and target[1] in batchers.get(target[0], ())

    for target, position in follow(module, is_batcher, callee=imports.callee).passed_out:
        target_path, function = target  # type: ignore[misc]
        other = parsed(target_path)
        names = positional_names(other, function) if other is not None else None
        if names is not None and position < len(names):
            passed.setdefault(target_path, {}).setdefault(function, set()).add(names[position])


class _Imports:
    """The functions and modules of the checkout a module imports, by the names it binds
    (`from utils import get_batch`, `import utils`, `from . import utils`)."""

    def __init__(self, module: cst.Module, path: Path, root: Path, texts: Mapping[Path, str]):
        self.names: dict[str, tuple[Path, str]] = {}
        self.modules: dict[str, Path] = {}
        for node in cst_nodes.walk(module):
            if type(node) is cst.ImportFrom and not isinstance(node.names, cst.ImportStar):
                dotted = cst_nodes.dotted_name(node.module) if node.module is not None else ""
                level = len(node.relative)
                for alias in node.names:
                    name = cst_nodes.dotted_name(alias.name) or ""
                    bound = _bound_name(alias) or name
                    submodule = _resolve(f"{dotted}.{name}".strip("."), level, path, root, texts)
                    if submodule is not None:
                        self.modules[bound] = submodule
                    elif (source := _resolve(dotted, level, path, root, texts)) is not None:
                        self.names[bound] = (source, name)
            elif type(node) is cst.Import:
                for alias in node.names:
                    dotted = cst_nodes.dotted_name(alias.name) or ""
                    target = _resolve(dotted, 0, path, root, texts)
                    if target is not None:
                        self.modules[_bound_name(alias) or dotted] = target

    def bound_to(self, functions: Mapping[Path, frozenset[str]]) -> frozenset[str]:
        """The names (dotted: `utils.batchify`) this module calls `functions` by."""
        names = {
            bound for bound, (path, name) in self.names.items() if name in functions.get(path, ())
        }
        for bound, path in self.modules.items():
            names |= {f"{bound}.{name}" for name in functions.get(path, ())}
        return frozenset(names)

    def callee(self, func: cst.BaseExpression) -> Hashable | None:
        """(file, function) of another file a call of `func` reaches, or None."""
        if type(func) is cst.Name:
            return self.names.get(func.value)
        if type(func) is cst.Attribute:
            owner = self.modules.get(cst_nodes.dotted_name(func.value) or "")
            return None if owner is None else (owner, func.attr.value)
        return None


def _bound_name(alias: cst.ImportAlias) -> str | None:
    if alias.asname is not None and type(alias.asname.name) is cst.Name:
        return alias.asname.name.value
    return None


def _resolve(
    dotted: str, level: int, path: Path, root: Path, texts: Mapping[Path, str]
) -> Path | None:
    """The checkout's file of module `dotted` imported from `path`: relative to its package
    (`level` dots), else beside it (a script's folder is on `sys.path`) or under a folder
    between it and `root`."""
    parts = dotted.split(".") if dotted else []
    if level:
        base = path.parent
        for _ in range(level - 1):
            base = base.parent
        bases = [base]
    else:
        bases = [p for p in (path.parent, *path.parent.parents) if p == root or root in p.parents]
    for base in bases:
        candidate = base.joinpath(*parts)
        files = [candidate / "__init__.py"]
        if parts:
            files.insert(0, candidate.parent / f"{parts[-1]}.py")
        for file in files:
            if file in texts:
                return file
    return None
