"""What the repository's code offers to test, read from its source: its files, module classes
and training steps.

Recording (pytpu.runtime.harness) sees what the program really calls; this static view is what it is
checked against, so that the summary can name every module class and training step that got no
test, and why. The command that runs the program is `short_command`'s; the settings a short run
uses (branches, step counts, short-run switches) are `program_settings`'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider

from pytpu.engine.rewriter import sources
from pytpu.engine.rewriter.notebooks import NotebookError
from pytpu.engine.testgen import notebook_code
from pytpu.runtime.cells import split_cell_id


@dataclass(frozen=True)
class Method:
    """A method of a module class as written: what a test needs to call it."""

    name: str
    line: int
    parameters: tuple[tuple[str, bool], ...]  # (name, required), without self
    loop_counts: frozenset[str] = frozenset()  # parameters used as `range(p)`: iteration counts

    @property
    def required(self) -> list[str]:
        return [name for name, required in self.parameters if required]


@dataclass(frozen=True)
class ModuleClass:
    file: str  # relative to the repository root, with /
    name: str
    line: int
    bases: tuple[str, ...] = ()  # as written, last part: ("Block",) for `class A(Block)`
    defines_init: bool = True
    methods: tuple[Method, ...] = ()  # instance methods other than dunders, forward included
    # `hasattr(torch..., "name")` in its code: (the attribute's full path, line); the class has
    # another path for a torch without it
    feature_checks: tuple[tuple[str, int], ...] = ()

    def method(self, name: str) -> Method | None:
        return next((m for m in self.methods if m.name == name), None)


@dataclass(frozen=True)
class TrainingStep:
    """Optimizer steps that belong together: the innermost loop around them, else their function."""

    file: str
    function: str  # enclosing function, or "<module>"
    line: int  # the loop's (or function's) first line
    step_lines: tuple[int, ...]  # optimizer steps; backward calls where there is no optimizer
    kind: str = "optimizer"  # or "backward": parameters updated by hand after loss.backward()

    @property
    def ident(self) -> str:
        return f"{self.file}:{self.line}"

    def owns(self, site: str) -> bool:
        file, _, line = site.rpartition(":")
        return file == self.file and int(line) in self.step_lines


@dataclass
class Inventory:
    module_classes: list[ModuleClass] = field(default_factory=list)
    training_steps: list[TrainingStep] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # class name -> constructor calls in the repository: file, argument sources, keyword sources
    call_sites: dict[str, list[dict]] = field(default_factory=dict)

    def probes(self) -> list[dict]:
        """What the harness needs to call a class the run did not: where it is, how it is built."""
        return [
            {"file": c.file, "class": c.name, "sites": self.call_sites.get(c.name, [])}
            for c in self.module_classes
        ]


TEST_FOLDERS = frozenset({"tests", "test"})


def is_test_file(relative: Path) -> bool:
    """A test of the repository, by pytest's conventions: in a `tests`/`test` folder, or a
    `test_*.py`, `*_test.py` or `conftest.py` file (its functions are no program's code)."""
    name = relative.name
    return (
        bool(TEST_FOLDERS & set(relative.parts[:-1]))
        or name == "conftest.py"
        or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")))
    )


def source_files(root: Path, suite_dir: Path) -> list[Path]:
    """The repository's Python files and Jupyter notebooks, without its tests and this suite."""
    paths, _ = sources.discover(root, notebooks=True)
    suite_dir = suite_dir.resolve()
    return [
        p
        for p in paths
        if suite_dir not in p.resolve().parents and not is_test_file(p.relative_to(root))
    ]


def python_files(root: Path, suite_dir: Path) -> list[Path]:
    return [p for p in source_files(root, suite_dir) if p.suffix == ".py"]


def inventory(root: Path, suite_dir: Path) -> Inventory:
    """The module classes, training steps and constructor calls of the repository's files and
    notebooks (a notebook's named by cell: `nb.ipynb#cell5`)."""
    result = Inventory()
    trees, cells = _read(root, source_files(root, suite_dir), result.errors)
    bases = {relative: _class_bases(relative, tree) for relative, tree in trees.items()}
    module_names: set[str] = set()  # qualified names of module classes, growing to a fixed point
    while True:
        found = [
            ModuleClass(relative, name, line, written, has_init, methods, checks)
            for relative, classes in bases.items()
            for name, line, qualified, written, has_init, methods, checks in classes
            if any(_is_torch_module(q) or q in module_names for q in qualified)
        ]
        names = {f"{_dotted(c.file)}.{c.name}" for c in found}
        names |= {f"{Path(c.file).stem}.{c.name}" for c in found}
        if names <= module_names:
            break
        module_names |= names
    placed = [notebook_code.place_class(c, cells[c.file]) if c.file in cells else c for c in found]
    result.module_classes = sorted(set(placed), key=lambda c: (split_cell_id(c.file), c.line))
    class_names = {c.name for c in result.module_classes}
    for relative, tree in trees.items():
        collector = _StepCollector(relative)
        tree.visit(collector)
        steps = collector.steps
        if relative in cells:
            steps = [each for s in steps for each in notebook_code.place_step(s, cells[relative])]
        result.training_steps.extend(steps)
        _call_sites(relative, tree, class_names, result.call_sites)
    return result


def _read(
    root: Path, paths: list[Path], errors: list[str]
) -> tuple[dict[str, MetadataWrapper], dict[str, notebook_code.NotebookModule]]:
    """Each file's syntax tree (a notebook's cells joined into one), and the notebooks'."""
    trees: dict[str, MetadataWrapper] = {}
    cells: dict[str, notebook_code.NotebookModule] = {}
    for path in paths:
        relative = path.relative_to(root).as_posix()
        try:
            if path.suffix == ".py":
                trees[relative] = MetadataWrapper(cst.parse_module(path.read_bytes()))
            elif (notebook := notebook_code.read(root, path)) is not None:
                trees[relative], cells[relative] = notebook.tree, notebook
        except (cst.ParserSyntaxError, OSError, UnicodeDecodeError, NotebookError) as exc:
            errors.append(f"{relative}: not read ({type(exc).__name__}); no tests for it")
    return trees, cells


def _call_sites(
    relative: str, tree: MetadataWrapper, class_names: set[str], sites: dict[str, list[dict]]
) -> None:
    """Add the constructor calls of `class_names` in `tree` to `sites`."""
    for call in m.findall(tree.module, m.Call()):
        name = _callee_name(call.func)
        if name in class_names and not any(a.star for a in call.args):
            code = cst.Module([]).code_for_node
            site = {
                "file": relative,
                "args": [code(a.value) for a in call.args if a.keyword is None],
                "kwargs": {a.keyword.value: code(a.value) for a in call.args if a.keyword},
            }
            sites.setdefault(name, []).append(site)


def _callee_name(func: cst.BaseExpression) -> str | None:
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return None


def _dotted(relative: str) -> str:
    return relative.removesuffix(".py").replace("/", ".")


def _is_torch_module(qualified: str) -> bool:
    if not qualified.startswith("torch.nn."):
        return False
    import torch.nn  # (here: the rest of the inventory, and its callers, need no torch)

    target: object = torch
    for part in qualified.split(".")[1:]:
        target = getattr(target, part, None)
        if target is None:
            return False
    return isinstance(target, type) and issubclass(target, torch.nn.Module)


def _class_bases(relative: str, tree: MetadataWrapper) -> list[tuple]:
    """Each top-level class: name, line, its bases' qualified names (local ones both ways), the
    bases as written, whether it defines __init__, and its instance methods."""
    names = tree.resolve(QualifiedNameProvider)
    positions = tree.resolve(PositionProvider)
    local = {f"{_dotted(relative)}.", f"{Path(relative).stem}.", "__main__."}
    classes = []
    for node in tree.module.body:
        if not isinstance(node, cst.ClassDef):
            continue
        qualified: set[str] = set()
        for base in node.bases:
            found = names.get(base.value, ())
            found = found() if callable(found) else found
            qualified |= {q.name for q in found}
        qualified |= {prefix + q.rpartition(".")[2] for q in qualified for prefix in local}
        position = positions[node]
        position = position() if callable(position) else position
        written = tuple(
            cst.Module([]).code_for_node(base.value).rpartition(".")[2] for base in node.bases
        )
        has_init = any(
            isinstance(item, cst.FunctionDef) and item.name.value == "__init__"
            for item in node.body.body
        )
        methods = tuple(
            _method(item, positions)
            for item in node.body.body
            if isinstance(item, cst.FunctionDef)
            and not item.name.value.startswith("__")
            and not any(m.matches(d.decorator, _NOT_INSTANCE) for d in item.decorators)
        )
        checks = _feature_checks(node, names, positions)
        classes.append(
            (node.name.value, position.start.line, qualified, written, has_init, methods, checks)
        )
    return classes


def _feature_checks(node: cst.ClassDef, names: Any, positions: Any) -> tuple:
    """`hasattr(torch.nn.functional, "scaled_dot_product_attention")`-style checks in a class
    whose answer is yes on this torch: the other branch is code the program never runs here."""
    checks = []
    pattern = m.Call(func=m.Name("hasattr"), args=[m.Arg(), m.Arg(m.SimpleString())])
    for call in m.findall(node, pattern):
        assert isinstance(call, cst.Call)
        owner = names.get(call.args[0].value, ())
        owner = owner() if callable(owner) else owner
        attribute = call.args[1].value.evaluated_value
        for qualified in sorted(q.name for q in owner):
            path = f"{qualified}.{attribute}"
            if qualified.split(".")[0] == "torch" and _resolves(path):
                position = positions[call]
                position = position() if callable(position) else position
                checks.append((path, position.start.line))
                break
    return tuple(dict.fromkeys(checks))


def _resolves(path: str) -> bool:
    import torch

    target: object = torch
    for part in path.split(".")[1:]:
        target = getattr(target, part, None)
        if target is None:
            return False
    return True


# Decorators after which the first parameter is not the instance.
_NOT_INSTANCE = m.Name("staticmethod") | m.Name("classmethod") | m.Name("property")


def _method(node: cst.FunctionDef, positions: Any) -> Method:
    plain = [*node.params.posonly_params, *node.params.params][1:]  # without self
    parameters = [(p.name.value, p.default is None) for p in plain]
    parameters += [(p.name.value, p.default is None) for p in node.params.kwonly_params]
    names = {name for name, _ in parameters}
    loop_counts = {
        call.args[0].value.value
        for call in m.findall(node, m.Call(func=m.Name("range"), args=[m.Arg(m.Name())]))
        if isinstance(call, cst.Call) and call.args[0].value.value in names
    }
    position = positions[node]
    position = position() if callable(position) else position
    return Method(node.name.value, position.start.line, tuple(parameters), frozenset(loop_counts))


class _StepCollector(cst.CSTVisitor):
    """Optimizer `.step()` calls (not schedulers), grouped by their innermost loop or function."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, relative: str):
        self.relative = relative
        self.scopes: list[tuple[str, int, str]] = [("<module>", 1, "function")]
        self.groups: dict[tuple[str, int], list[int]] = {}
        self.backward_groups: dict[tuple[str, int], list[int]] = {}
        self.steps: list[TrainingStep] = []

    def _line(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.append((node.name.value, self._line(node), "function"))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.pop()

    def visit_For(self, node: cst.For) -> None:
        self.scopes.append((self._function(), self._line(node), "loop"))

    def leave_For(self, original_node: cst.For) -> None:
        self.scopes.pop()

    def visit_While(self, node: cst.While) -> None:
        self.scopes.append((self._function(), self._line(node), "loop"))

    def leave_While(self, original_node: cst.While) -> None:
        self.scopes.pop()

    def _function(self) -> str:
        return next(name for name, _, kind in reversed(self.scopes) if kind == "function")

    def visit_Call(self, node: cst.Call) -> None:
        function, line, _ = self.scopes[-1]
        if _is_optimizer_step(node):
            self.groups.setdefault((function, line), []).append(self._line(node))
        elif m.matches(node.func, m.Attribute(attr=m.Name("backward"))):
            self.backward_groups.setdefault((function, line), []).append(self._line(node))

    def leave_Module(self, original_node: cst.Module) -> None:
        for (function, line), lines in self.groups.items():
            self.steps.append(TrainingStep(self.relative, function, line, tuple(lines)))
        with_optimizer = {function for function, _ in self.groups}
        for (function, line), lines in self.backward_groups.items():
            if function not in with_optimizer:  # else the optimizer's step is the step
                step = TrainingStep(self.relative, function, line, tuple(lines), "backward")
                self.steps.append(step)


def _is_optimizer_step(node: cst.Call) -> bool:
    if m.matches(node.func, m.Attribute(attr=m.Name("optimizer_step"))):
        return True  # xm.optimizer_step(optimizer)
    if not m.matches(node.func, m.Attribute(attr=m.Name("step"))):
        return False
    for argument in node.args:  # scaler.step(optimizer), as GradScaler is used
        if isinstance(argument.value, cst.Name) and "optim" in argument.value.value.lower():
            return True
    receiver = node.func.value
    name = receiver.attr.value if isinstance(receiver, cst.Attribute) else None
    name = receiver.value if isinstance(receiver, cst.Name) else name
    return bool(name) and "optim" in name.lower() or name in ("opt", "opt_g", "opt_d")
