"""Benchmark `pytpu testgen` on one repository: how long generation takes, how much of the program
the generated suite runs, and how many seeded bugs in the model code it catches.

    .venv/bin/python benchmarks/testgen.py REPO --run "python train.py" [--out tests/pytpu]
        [--max-mutants N] [--timeout S] [--jobs J] [--seed N] [--json FILE] [--skip-generate]

The suite is the directory OUT inside REPO (relative paths are taken from REPO). It must pass on
the unmutated code, and it must find the program relative to its own location (mutants run in
copies of REPO).
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider
from rich.console import Console
from rich.markup import escape
from rich.table import Table

METHOD = """\
method:
  generation  `python -m pytpu.engine.cli testgen REPO [--run CMD] --out OUT` (cwd REPO), wall time
  coverage    `coverage run -m pytest OUT` in REPO with PYTPU_DEVICE=cpu, parallel mode, source
              REPO, the suite, tests/ folders and conftest.py files omitted; subprocesses are
              measured through COVERAGE_PROCESS_START; then `coverage combine` and `coverage json`.
              Files: the repository's .py files outside OUT, tests/, hidden folders and
              virtualenvs; the total is over the files executed at least once
  mutation    model code = classes deriving (directly or not) from torch.nn.Module; in their
              methods, one libcst node replaced per mutant by one of the operators below;
              sampled with a seeded shuffle, round-robin over operators and classes. Each mutant
              runs `pytest OUT -q -x` in a fresh copy of REPO with PYTPU_DEVICE=cpu; killed =
              pytest exits non-zero or times out. The unmutated suite must pass in a copy first.
  operators   activation  F.relu <-> F.gelu, torch.tanh -> torch.sigmoid, nn.ReLU -> nn.GELU, ...
              constant    int n -> n + 1, float x -> 1.5 x (0.0 -> 0.5)
              binop       + <-> -, * <-> /  (also +=, -=, *=, /=)
              residual    x = x + f(x) -> x = f(x); x += f(x) -> x = f(x)
              transpose   a @ b -> a.transpose(-2, -1) @ b; torch.matmul/bmm likewise"""

OPERATORS = ("activation", "constant", "binop", "residual", "transpose")

# Activation swaps: each maps to a different member of its family. Functionals keep their input
# (and `inplace=` when both accept it); constructors keep only `inplace=`, when the new one has it.
FUNCTIONAL_SWAPS = {
    "relu": "gelu",
    "gelu": "relu",
    "leaky_relu": "relu",
    "silu": "relu",
    "elu": "relu",
    "tanh": "sigmoid",
    "sigmoid": "tanh",
}
FUNCTIONAL_INPLACE = {"relu", "leaky_relu", "silu", "elu"}
TORCH_SWAPS = {"relu": "tanh", "tanh": "sigmoid", "sigmoid": "tanh"}
MODULE_SWAPS = {
    "ReLU": "GELU",
    "GELU": "ReLU",
    "LeakyReLU": "ReLU",
    "SiLU": "ReLU",
    "ELU": "ReLU",
    "Tanh": "Sigmoid",
    "Sigmoid": "Tanh",
}
MODULE_INPLACE = {"ReLU", "LeakyReLU", "SiLU", "ELU"}
MATMUL_FUNCTIONS = {"matmul", "bmm"}

BINOP_FLIPS: dict[type, type] = {
    cst.Add: cst.Subtract,
    cst.Subtract: cst.Add,
    cst.Multiply: cst.Divide,
    cst.Divide: cst.Multiply,
}
AUGOP_FLIPS: dict[type, type] = {
    cst.AddAssign: cst.SubtractAssign,
    cst.SubtractAssign: cst.AddAssign,
    cst.MultiplyAssign: cst.DivideAssign,
    cst.DivideAssign: cst.MultiplyAssign,
}
NOT_NUMERIC = (
    cst.SimpleString,
    cst.ConcatenatedString,
    cst.FormattedString,
    cst.List,
    cst.Tuple,
    cst.ListComp,
)
ATOMIC = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)

SKIPPED_DIRS = {"__pycache__", "node_modules", "site-packages"}
COPY_IGNORED = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox"}


# --------------------------------------------------------------------------- model-code detection


def dotted_name(node: cst.CSTNode) -> str | None:
    """`a.b.c` for a chain of names and attributes, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


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
    """The repository's own .py files: not in the suite, tests/ folders, hidden folders or
    virtualenvs, and not conftest.py."""
    files = []
    for folder, dirs, names in os.walk(repo):
        here = Path(folder)
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".")
            and d not in SKIPPED_DIRS
            and d != "tests"
            and (here / d).resolve() != suite
            and not (here / d / "pyvenv.cfg").exists()
        )
        files += [here / n for n in sorted(names) if n.endswith(".py") and n != "conftest.py"]
    return files


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


# ----------------------------------------------------------------------------- mutation operators


@dataclass(frozen=True)
class Site:
    """One place a mutant can be made: the operator, where (1-based line and column), the model
    class whose method holds it, and what changes."""

    operator: str
    line: int
    column: int
    cls: str
    description: str


def _short(code: str, width: int = 48) -> str:
    code = " ".join(code.split())
    return code if len(code) <= width else code[: width - 3] + "..."


def _minus(value: str) -> cst.UnaryOperation:
    return cst.UnaryOperation(operator=cst.Minus(), expression=cst.Integer(value))


def transposed(expr: cst.BaseExpression) -> cst.Call:
    """`expr.transpose(-2, -1)`, with `expr` parenthesised where needed."""
    if not isinstance(expr, ATOMIC) and not expr.lpar:
        expr = expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(
        func=cst.Attribute(value=expr, attr=cst.Name("transpose")),
        args=[cst.Arg(_minus("2")), cst.Arg(_minus("1"))],
    )


def _activation_args(
    args: Sequence[cst.Arg], keep_input: bool, keep_inplace: bool
) -> list[cst.Arg] | None:
    """The arguments that still make sense after an activation swap; None when the input (for a
    functional) cannot be told."""
    kept: list[cst.Arg] = []
    if keep_input:
        first = args[0] if args else None
        if first is None or (first.keyword is not None and first.keyword.value != "input"):
            return None
        kept.append(first)
    if keep_inplace:
        kept += [a for a in args if a.keyword is not None and a.keyword.value == "inplace"]
    if kept:
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return kept


def _has_call(expr: cst.CSTNode) -> bool:
    return bool(m.findall(expr, m.Call()))


class _SiteCollector(cst.CSTVisitor):
    """Visits a module once and records every mutation site inside the methods of the given
    model classes, with the node to replace and its replacement."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, module: cst.Module, classes: Collection[str]) -> None:
        super().__init__()
        self.module = module
        self.classes = classes
        self.aliases = import_aliases(module)
        self.scope: list[tuple[str, str]] = []  # ("class", qualified name) or ("def", name)
        self.class_stack: list[str] = []
        self.assign_targets: dict[int, str] = {}  # id(assigned value) -> code of the target
        self.found: list[tuple[Site, cst.CSTNode, cst.CSTNode]] = []

    # scope ---------------------------------------------------------------------------------

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.class_stack.append(node.name.value)
        self.scope.append(("class", ".".join(self.class_stack)))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.class_stack.pop()
        self.scope.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scope.append(("def", node.name.value))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scope.pop()

    def current_class(self) -> str | None:
        """The model class whose method (or a function nested in it) is being visited."""
        in_function = False
        for kind, name in reversed(self.scope):
            if kind == "def":
                in_function = True
            else:
                return name if in_function and name in self.classes else None
        return None

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def add(self, operator: str, node: cst.CSTNode, replacement: cst.CSTNode) -> None:
        cls = self.current_class()
        before, after = self.code(node), self.code(replacement)
        if cls is None or before == after:
            return
        start = self.get_metadata(PositionProvider, node).start
        description = f"{_short(before)} -> {_short(after)}"
        site = Site(operator, start.line, start.column + 1, cls, description)
        self.found.append((site, node, replacement))

    # operators -------------------------------------------------------------------------------

    def visit_Call(self, node: cst.Call) -> None:
        if self.current_class() is None or not isinstance(node.func, cst.Attribute):
            return
        prefix, attr = dotted_name(node.func.value), node.func.attr.value
        if prefix is None:
            return
        new_name, args = None, None
        if prefix in self.aliases.functional and attr in FUNCTIONAL_SWAPS:
            new_name = FUNCTIONAL_SWAPS[attr]
            both_inplace = attr in FUNCTIONAL_INPLACE and new_name in FUNCTIONAL_INPLACE
            args = _activation_args(node.args, keep_input=True, keep_inplace=both_inplace)
        elif prefix in self.aliases.torch and attr in TORCH_SWAPS:
            new_name = TORCH_SWAPS[attr]
            args = _activation_args(node.args, keep_input=True, keep_inplace=False)
        elif prefix in self.aliases.nn and attr in MODULE_SWAPS:
            new_name = MODULE_SWAPS[attr]
            args = _activation_args(
                node.args, keep_input=False, keep_inplace=new_name in MODULE_INPLACE
            )
        elif prefix in self.aliases.torch and attr in MATMUL_FUNCTIONS and len(node.args) >= 2:
            first = node.args[0]
            if first.keyword is None and not first.star:
                first = first.with_changes(value=transposed(first.value))
                self.add("transpose", node, node.with_changes(args=[first, *node.args[1:]]))
        if new_name is not None and args is not None:
            func = node.func.with_changes(attr=cst.Name(new_name))
            self.add("activation", node, node.with_changes(func=func, args=args))

    def visit_Integer(self, node: cst.Integer) -> None:
        if self.current_class() is not None:
            value = ast.literal_eval(node.value)
            self.add("constant", node, node.with_changes(value=str(value + 1)))

    def visit_Float(self, node: cst.Float) -> None:
        if self.current_class() is not None:
            value = ast.literal_eval(node.value)
            new = 0.5 if value == 0 else value * 1.5
            # 12 significant digits: 0.2 * 1.5 gives 0.3, not 0.30000000000000004
            if math.isfinite(new):
                self.add("constant", node, node.with_changes(value=repr(float(f"{new:.12g}"))))

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1:
            self.assign_targets[id(node.value)] = self.code(node.targets[0].target)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if self.current_class() is None:
            return
        flip = BINOP_FLIPS.get(type(node.operator))
        if (
            flip
            and not isinstance(node.left, NOT_NUMERIC)
            and not isinstance(node.right, NOT_NUMERIC)
        ):
            operator = flip(
                whitespace_before=node.operator.whitespace_before,
                whitespace_after=node.operator.whitespace_after,
            )
            self.add("binop", node, node.with_changes(operator=operator))
        if isinstance(node.operator, cst.Add):
            kept = self.residual_branch(node)
            if kept is not None:
                if node.lpar and not kept.lpar:
                    kept = kept.with_changes(lpar=node.lpar, rpar=node.rpar)
                self.add("residual", node, kept)
        if isinstance(node.operator, cst.MatrixMultiply):
            self.add("transpose", node, node.with_changes(left=transposed(node.left)))

    def residual_branch(self, node: cst.BinaryOperation) -> cst.BaseExpression | None:
        """For `x + f(...)` (either order), where `x` is a name or attribute that is the target
        of the assignment or appears in `f(...)`: the branch `f(...)`."""
        target = self.assign_targets.get(id(node))
        for skip, kept in ((node.left, node.right), (node.right, node.left)):
            if not isinstance(skip, (cst.Name, cst.Attribute)) or not _has_call(kept):
                continue
            skip_code = self.code(skip)
            mentioned = {self.code(n) for n in m.findall(kept, m.Name() | m.Attribute())}
            if skip_code == target or skip_code in mentioned:
                return kept
        return None

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if self.current_class() is None:
            return
        flip = AUGOP_FLIPS.get(type(node.operator))
        if flip:
            operator = flip(
                whitespace_before=node.operator.whitespace_before,
                whitespace_after=node.operator.whitespace_after,
            )
            self.add("binop", node, node.with_changes(operator=operator))
        if isinstance(node.operator, cst.AddAssign) and _has_call(node.value):
            assign = cst.Assign(
                targets=[cst.AssignTarget(target=node.target)],
                value=node.value,
                semicolon=node.semicolon,
            )
            self.add("residual", node, assign)


def _collect(
    source: str, classes: Collection[str] | None
) -> tuple[cst.Module, list[tuple[Site, cst.CSTNode, cst.CSTNode]]]:
    wrapper = MetadataWrapper(cst.parse_module(source))
    if classes is None:
        classes = model_classes(wrapper.module)
    collector = _SiteCollector(wrapper.module, classes)
    wrapper.visit(collector)
    return wrapper.module, collector.found


def find_sites(source: str, classes: Collection[str] | None = None) -> list[Site]:
    """Every mutation site in the methods of `classes` (default: the file's model classes)."""
    return [site for site, _, _ in _collect(source, classes)[1]]


def mutate(source: str, index: int, classes: Collection[str] | None = None) -> str:
    """`source` with the `index`-th site of find_sites(source, classes) applied: one node
    replaced, everything else byte for byte the same."""
    module, found = _collect(source, classes)
    _, node, replacement = found[index]
    return module.deep_replace(node, replacement).code


# -------------------------------------------------------------------------------------- sampling


@dataclass
class Mutant:
    operator: str
    path: str  # relative to the repository, POSIX
    line: int
    column: int
    cls: str
    description: str
    site_index: int  # index of the site in find_sites() of its file
    id: int = 0
    outcome: str = "not run"  # killed | survived
    reason: str = ""  # why it was killed: tests failed, timeout, exit code
    exit_code: int | None = None
    seconds: float = 0.0
    summary: str = ""  # pytest's last summary line


def round_robin(groups: Sequence[Sequence[Any]]) -> list[Any]:
    marker = object()
    rows = itertools.zip_longest(*groups, fillvalue=marker)
    return [item for row in rows for item in row if item is not marker]


def sample(candidates: Sequence[Mutant], limit: int, seed: int) -> list[Mutant]:
    """Up to `limit` candidates, deterministic for a seed: each (file, class) group shuffled,
    the groups of an operator interleaved, then the operators interleaved."""
    rng = random.Random(seed)
    per_operator = []
    for operator in OPERATORS:
        groups: dict[tuple[str, str], list[Mutant]] = defaultdict(list)
        for candidate in candidates:
            if candidate.operator == operator:
                groups[(candidate.path, candidate.cls)].append(candidate)
        for key in sorted(groups):
            rng.shuffle(groups[key])
        per_operator.append(round_robin([groups[key] for key in sorted(groups)]))
    chosen = round_robin(per_operator)[: max(limit, 0)]
    return sorted(chosen, key=lambda c: (c.path, c.line, c.column, OPERATORS.index(c.operator)))


# ----------------------------------------------------------------------------------- processes


@dataclass
class Run:
    returncode: int | None  # None: timed out
    seconds: float
    output: str

    @property
    def summary(self) -> str:
        """pytest's final summary line (e.g. `3 passed in 1.20s`), else the last line."""
        lines = [line.strip(" =") for line in self.output.splitlines() if line.strip(" =")]
        for line in reversed(lines):
            if re.search(r"\b(passed|failed|errors?|skipped|no tests ran)\b", line):
                return line
        return lines[-1] if lines else ""

    def tail(self, count: int = 25) -> str:
        return "\n".join(self.output.rstrip().splitlines()[-count:])


_ACTIVE: set[subprocess.Popen] = set()
_ACTIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()  # set on Ctrl-C: no new process starts


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_command(
    cmd: Sequence[str], cwd: Path, env: dict[str, str] | None = None, timeout: float | None = None
) -> Run:
    """Run `cmd` in its own process group, output to a file (no pipe for stray grandchildren to
    hold open); on timeout the whole group is killed, and so are leftovers after a normal exit."""
    start = time.perf_counter()
    if _STOPPING.is_set():
        raise KeyboardInterrupt
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        with _ACTIVE_LOCK:
            _ACTIVE.add(process)
        try:
            returncode: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            _kill_group(process)
            process.wait()
            with _ACTIVE_LOCK:
                _ACTIVE.discard(process)
        log.seek(0)
        output = log.read().decode("utf-8", errors="replace")
    return Run(returncode, time.perf_counter() - start, output)


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def stop_all() -> None:
    _STOPPING.set()
    with _ACTIVE_LOCK:
        for process in list(_ACTIVE):
            _kill_group(process)


def suite_env(repo: Path, coverage_rc: Path | None = None) -> dict[str, str]:
    """The environment of a suite run: PYTPU_DEVICE=cpu, no inherited coverage request, and no
    PYTHONPATH entry inside the original repository (copies must import their own code)."""
    env = dict(os.environ)
    env.pop("COVERAGE_PROCESS_START", None)
    env.pop("COVERAGE_PROCESS_CONFIG", None)
    env["PYTPU_DEVICE"] = "cpu"
    if coverage_rc is not None:
        env["COVERAGE_PROCESS_START"] = str(coverage_rc)
    if env.get("PYTHONPATH"):
        entries = [e for e in env["PYTHONPATH"].split(os.pathsep) if e]
        kept = [e for e in entries if not Path(e).resolve().is_relative_to(repo)]
        if kept:
            env["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            env.pop("PYTHONPATH")
    return env


def pytest_command(suite: str, stop_first: bool) -> list[str]:
    cmd = ["-m", "pytest", suite, "-q", "-p", "no:cacheprovider"]
    return cmd + ["-x"] if stop_first else cmd


def _ignore_for_copy(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if n in COPY_IGNORED or (Path(folder, n, "pyvenv.cfg")).is_file()}


def copy_repo(repo: Path, parent: Path) -> Path:
    """A copy of the repository under `parent`, with the same folder name; .git, caches and
    virtualenvs left out."""
    destination = parent / repo.name
    shutil.copytree(repo, destination, symlinks=True, ignore=_ignore_for_copy)
    return destination


# ------------------------------------------------------------------------------------ the steps


def generate(repo: Path, run_cmd: str | None, out: str, console: Console) -> float:
    cmd = [sys.executable, "-m", "pytpu.engine.cli", "testgen", str(repo), "--out", out]
    if run_cmd:
        cmd += ["--run", run_cmd]
    console.print(f"generating: {escape(' '.join(cmd[1:]))}")
    run = run_command(cmd, cwd=repo)
    if run.returncode != 0:
        console.print(escape(run.tail()))
        sys.exit(f"error: testgen failed with exit code {run.returncode}")
    return run.seconds


def coveragerc(repo: Path, suite: Path, data_file: Path) -> str:
    omit = [f"{suite}/*", f"{repo}/**/tests/*", f"{repo}/.*/*", "*/conftest.py"]
    omit_lines = "".join(f"\n    {pattern}" for pattern in omit)
    settings = ["[run]", "parallel = True", f"source = {repo}", f"data_file = {data_file}"]
    return "\n".join([*settings, f"omit ={omit_lines}", ""])


def _ranges(lines: Iterable[int]) -> str:
    spans: list[list[int]] = []
    for line in sorted(lines):
        if spans and line == spans[-1][1] + 1:
            spans[-1][1] = line
        else:
            spans.append([line, line])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def measure_coverage(
    repo: Path, suite: Path, suite_arg: str, files: list[Path], timeout: float
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pytpu-coverage-") as tmp:
        rc = Path(tmp) / "coveragerc"
        rc.write_text(coveragerc(repo, suite, Path(tmp) / ".coverage"), encoding="utf-8")
        coverage = [sys.executable, "-m", "coverage"]
        run = run_command(
            [*coverage, "run", f"--rcfile={rc}", *pytest_command(suite_arg, stop_first=False)],
            cwd=repo,
            env=suite_env(repo, rc),
            timeout=timeout,
        )
        plain_env = suite_env(repo)
        run_command([*coverage, "combine", f"--rcfile={rc}", "-q"], cwd=repo, env=plain_env)
        report_path = Path(tmp) / "coverage.json"
        report = run_command(
            [*coverage, "json", f"--rcfile={rc}", "-i", "-q", "-o", str(report_path)],
            cwd=repo,
            env=plain_env,
        )
        data = json.loads(report_path.read_text()) if report_path.exists() else {"files": {}}
        if report.returncode != 0:
            print(f"warning: coverage json: {report.tail(3)}", file=sys.stderr)

    measured = {(repo / name).resolve(): info for name, info in data.get("files", {}).items()}
    executed, unexecuted, empty = [], [], []
    for path in files:
        info = measured.get(path.resolve())
        relative = path.relative_to(repo).as_posix()
        if info is not None and info["summary"]["num_statements"] == 0:
            empty.append(relative)  # e.g. an empty __init__.py: nothing to execute
            continue
        if info is None or not info.get("executed_lines"):
            unexecuted.append(relative)
            continue
        summary = info["summary"]
        executed.append(
            {
                "path": relative,
                "statements": summary["num_statements"],
                "covered": summary["covered_lines"],
                "percent": round(100 * summary["covered_lines"] / summary["num_statements"], 1),
                "missing": _ranges(info.get("missing_lines", [])),
            }
        )
    statements = sum(f["statements"] for f in executed)
    covered = sum(f["covered"] for f in executed)
    return {
        "suite": {
            "exit_code": run.returncode,
            "timed_out": run.returncode is None,
            "seconds": round(run.seconds, 2),
            "summary": run.summary,
        },
        "files": executed,
        "unexecuted": unexecuted,
        "no_statements": empty,
        "total": {
            "files": len(executed),
            "statements": statements,
            "covered": covered,
            "percent": round(100 * covered / statements, 1) if statements else None,
        },
    }


def candidate_mutants(repo: Path, model_code: dict[Path, set[str]]) -> list[Mutant]:
    candidates = []
    for path, classes in sorted(model_code.items()):
        source = cst.parse_module(path.read_bytes()).code
        relative = path.relative_to(repo).as_posix()
        for index, site in enumerate(find_sites(source, classes)):
            candidates.append(Mutant(path=relative, site_index=index, **asdict(site)))
    return candidates


def run_mutant(
    mutant: Mutant,
    repo: Path,
    classes: Collection[str],
    suite_arg: str,
    timeout: float,
) -> Mutant:
    original = cst.parse_module((repo / mutant.path).read_bytes())
    mutated = mutate(original.code, mutant.site_index, classes)
    with tempfile.TemporaryDirectory(prefix="pytpu-mutant-", ignore_cleanup_errors=True) as tmp:
        copy = copy_repo(repo, Path(tmp))
        (copy / mutant.path).write_bytes(mutated.encode(original.encoding))
        run = run_command(
            [sys.executable, *pytest_command(suite_arg, stop_first=True)],
            cwd=copy,
            env=suite_env(repo),
            timeout=timeout,
        )
    mutant.exit_code = run.returncode
    mutant.seconds = round(run.seconds, 2)
    mutant.summary = run.summary
    if run.returncode is None:
        mutant.outcome, mutant.reason = "killed", f"timeout ({timeout:g} s)"
    elif run.returncode == 1:
        mutant.outcome, mutant.reason = "killed", "tests failed"
    elif run.returncode != 0:
        mutant.outcome, mutant.reason = "killed", f"pytest exit code {run.returncode}"
    else:
        mutant.outcome = "survived"
    return mutant


def scores(mutants: Sequence[Mutant]) -> dict[str, Any]:
    def score(group: Sequence[Mutant]) -> dict[str, Any]:
        killed = sum(1 for x in group if x.outcome == "killed")
        total = len(group)
        return {
            "killed": killed,
            "total": total,
            "score": round(killed / total, 3) if total else None,
        }

    by_operator = {
        op: score([x for x in mutants if x.operator == op])
        for op in OPERATORS
        if any(x.operator == op for x in mutants)
    }
    return {"by_operator": by_operator, "overall": score(mutants)}


def mutation_testing(
    repo: Path,
    suite: Path,
    suite_arg: str,
    files: list[Path],
    args: argparse.Namespace,
    console: Console,
) -> dict[str, Any]:
    model_code = find_model_code(files)
    candidates = candidate_mutants(repo, model_code)
    chosen = sample(candidates, args.max_mutants, args.seed)
    for number, mutant in enumerate(chosen, 1):
        mutant.id = number
    result: dict[str, Any] = {
        "model_code": {
            path.relative_to(repo).as_posix(): sorted(classes)
            for path, classes in sorted(model_code.items())
        },
        "sites": dict(Counter(c.operator for c in candidates)),
        "seed": args.seed,
        "max_mutants": args.max_mutants,
        "timeout_seconds": args.timeout,
        "jobs": args.jobs,
    }
    if not chosen:
        reason = "--max-mutants is 0" if candidates else "no mutation site in nn.Module code"
        console.print(f"no mutants: {reason}")
        return {**result, "baseline_seconds": None, "mutants": [], "score": scores([])}

    with tempfile.TemporaryDirectory(prefix="pytpu-baseline-", ignore_cleanup_errors=True) as tmp:
        copy = copy_repo(repo, Path(tmp))
        baseline = run_command(
            [sys.executable, *pytest_command(suite_arg, stop_first=False)],
            cwd=copy,
            env=suite_env(repo),
            timeout=args.timeout * 3,
        )
    if baseline.returncode != 0:
        console.print(escape(baseline.tail()))
        state = "timed out" if baseline.returncode is None else f"exit {baseline.returncode}"
        sys.exit(
            f"error: the suite does not pass on the unmutated code in a copy of the repository "
            f"({state}); mutation testing needs a passing suite"
        )
    console.print(
        f"baseline (unmutated, in a copy): {escape(baseline.summary)} "
        f"[{baseline.seconds:.1f} s]; running {len(chosen)} of {len(candidates)} mutants "
        f"with {args.jobs} job(s)"
    )

    classes_of = {path.relative_to(repo).as_posix(): c for path, c in model_code.items()}
    done = 0
    with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        futures = [
            pool.submit(run_mutant, mutant, repo, classes_of[mutant.path], suite_arg, args.timeout)
            for mutant in chosen
        ]
        try:
            for future in as_completed(futures):
                mutant = future.result()
                done += 1
                colour = "green" if mutant.outcome == "killed" else "red"
                console.print(
                    f"  [{done:>2}/{len(chosen)}] [{colour}]{mutant.outcome:8}[/] "
                    f"{mutant.operator:10} {escape(mutant.path)}:{mutant.line}  "
                    f"{escape(mutant.description)}  ({mutant.seconds:.1f} s)"
                )
        except BaseException:
            for future in futures:
                future.cancel()
            stop_all()
            raise
    return {
        **result,
        "baseline_seconds": round(baseline.seconds, 2),
        "mutants": [asdict(mutant) for mutant in chosen],
        "score": scores(chosen),
    }


# -------------------------------------------------------------------------------------- report


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def print_coverage(coverage: dict[str, Any], console: Console) -> None:
    suite = coverage["suite"]
    state = "timed out" if suite["timed_out"] else f"exit {suite['exit_code']}"
    console.print(
        f"suite under coverage: {escape(suite['summary'])} ({state}, {suite['seconds']:.1f} s)"
    )
    table = Table(title="line coverage (files executed at least once)")
    table.add_column("file")
    table.add_column("statements", justify="right")
    table.add_column("covered", justify="right")
    table.add_column("coverage", justify="right")
    table.add_column("missing lines", overflow="fold")
    for row in coverage["files"]:
        table.add_row(
            escape(row["path"]),
            str(row["statements"]),
            str(row["covered"]),
            _percent(row["percent"]),
            escape(row["missing"]),
        )
    total = coverage["total"]
    table.add_row(
        f"[b]total ({total['files']} files)[/]",
        str(total["statements"]),
        str(total["covered"]),
        f"[b]{_percent(total['percent'])}[/]",
        "",
        end_section=True,
    )
    console.print(table)
    if coverage["unexecuted"]:
        console.print("not executed by the suite (not in the total):")
        for path in coverage["unexecuted"]:
            console.print(f"  {escape(path)}")
    if coverage["no_statements"]:
        console.print(
            f"no statements (not counted): {escape(', '.join(coverage['no_statements']))}"
        )


def print_mutation(mutation: dict[str, Any], console: Console) -> None:
    for path, classes in mutation["model_code"].items():
        console.print(f"model code: {escape(path)}: {escape(', '.join(classes))}")
    sites = ", ".join(f"{op} {mutation['sites'].get(op, 0)}" for op in OPERATORS)
    console.print(f"mutation sites: {sites}")
    if not mutation["mutants"]:
        return
    table = Table(title="mutants")
    table.add_column("#", justify="right")
    table.add_column("operator")
    table.add_column("location")
    table.add_column("class")
    table.add_column("change", overflow="fold")
    table.add_column("outcome")
    table.add_column("s", justify="right")
    for mutant in mutation["mutants"]:
        killed = mutant["outcome"] == "killed"
        outcome = f"[green]killed[/] ({mutant['reason']})" if killed else "[red]survived[/]"
        table.add_row(
            str(mutant["id"]),
            mutant["operator"],
            escape(f"{mutant['path']}:{mutant['line']}"),
            escape(mutant["cls"]),
            escape(mutant["description"]),
            outcome,
            f"{mutant['seconds']:.1f}",
        )
    console.print(table)

    table = Table(title="mutation score")
    table.add_column("operator")
    table.add_column("killed", justify="right")
    table.add_column("total", justify="right")
    table.add_column("score", justify="right")
    score = mutation["score"]
    for operator, row in score["by_operator"].items():
        table.add_row(operator, str(row["killed"]), str(row["total"]), f"{row['score']:.0%}")
    overall = score["overall"]
    table.add_row(
        "[b]overall[/]",
        str(overall["killed"]),
        str(overall["total"]),
        f"[b]{overall['score']:.0%}[/]",
        end_section=True,
    )
    console.print(table)


# ---------------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("repo", type=Path, help="the repository (the program) to benchmark")
    parser.add_argument("--run", metavar="CMD", help="command that runs the program (testgen)")
    parser.add_argument(
        "--out", default="tests/pytpu", help="the suite folder, relative to REPO (tests/pytpu)"
    )
    parser.add_argument("--max-mutants", type=int, default=40, help="mutants to run (40)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=300,
        help="seconds per mutant run, a timeout kills the mutant (300); the coverage and "
        "baseline runs get three times as long",
    )
    parser.add_argument("--jobs", type=int, default=1, help="mutants run in parallel (1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the mutant sample (0)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write figures to FILE")
    parser.add_argument("--skip-generate", action="store_true", help="use the suite already in OUT")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)  # clean up (kill the runs) as on Ctrl-C
    console = Console(width=None if sys.stdout.isatty() else 160, highlight=False)
    repo = args.repo.resolve()
    if not repo.is_dir():
        sys.exit(f"error: {args.repo} is not a directory")
    suite = (repo / args.out).resolve()  # an absolute --out stays as it is
    if not suite.is_relative_to(repo) or suite == repo:
        sys.exit(f"error: the suite folder {suite} must be inside {repo}")
    suite_arg = suite.relative_to(repo).as_posix()

    console.print(f"PyTPU testgen benchmark: {repo}  (suite {suite_arg})")
    console.print(f"python {platform.python_version()} ({sys.executable})")
    console.print(METHOD, markup=False)
    console.print()

    generation_seconds = None
    if args.skip_generate:
        console.print("generation: skipped (--skip-generate)")
    else:
        generation_seconds = generate(repo, args.run, args.out, console)
        console.print(f"generation: {generation_seconds:.2f} s")
    if not suite.is_dir():
        sys.exit(f"error: there is no suite at {suite}")
    if any(str(repo) in p.read_text(errors="replace") for p in suite.rglob("*.py") if p.is_file()):
        console.print(
            f"[yellow]warning:[/] the suite names {escape(str(repo))} literally; mutants run in "
            "copies and may end up testing the original code"
        )

    files = python_files(repo, suite)
    console.print()
    coverage = measure_coverage(repo, suite, suite_arg, files, args.timeout * 3)
    print_coverage(coverage, console)

    console.print()
    mutation = mutation_testing(repo, suite, suite_arg, files, args, console)
    console.print()
    print_mutation(mutation, console)

    report = {
        "repo": str(repo),
        "suite": suite_arg,
        "python": platform.python_version(),
        "generation_seconds": None if generation_seconds is None else round(generation_seconds, 2),
        "coverage": coverage,
        "mutation": mutation,
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        console.print(f"\nwritten: {escape(str(args.json))}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit("interrupted: the running suites were stopped")
