"""What the repository's code offers to test, read from its source: module classes, training steps,
and the short command that runs the program.

Recording (pytpu.runtime.harness) sees what the program really calls; this static view is what it is
checked against, so that the summary can name every module class and training step that got no
test, and why.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider

from pytpu.engine import processes
from pytpu.engine.rewriter import sources
from pytpu.engine.rewriter.notebooks import NotebookError
from pytpu.engine.testgen import notebook_code
from pytpu.runtime.cells import split_cell_id
from pytpu.runtime.kernel import RUNNER_MODULE, is_notebook, runner_at

# Flags that make a program's own run short, and the value each gets (None: a switch).
SHORT_RUN_FLAGS = {
    "--dry-run": None, "--dry_run": None,
    "--epochs": "1", "--n_epochs": "1", "--num_epochs": "1", "--max_epochs": "1", "--niter": "1",
    "--max_iters": "4", "--max-iters": "4", "--max_steps": "4", "--max-steps": "4",
    "--steps": "4", "--iterations": "4",
    "--workers": "0", "--num_workers": "0", "--num-workers": "0", "--n_cpu": "0",
}  # fmt: skip
ENTRY_NAMES = ("main.py", "train.py", "run.py", "app.py")


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


# --- the short command ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunCommand:
    given: str  # as the user wrote it (or as PyTPU built it from the entry script)
    entry: str | None  # the script it runs, relative to the root
    on_cpu: SideCommand  # what the original side runs: the accelerator on, its work on the CPU
    on_xla: SideCommand  # what the migrated side runs, with the accelerator on
    guessed: bool

    @property
    def command(self) -> str:
        """The command recorded and run before the migration."""
        return self.on_cpu.command

    @property
    def accelerator_flag(self) -> str | None:
        """The switch that turns the accelerator on, added on both sides (`--cuda`), or None."""
        return next((c.option for c in self.on_xla.changes if c.action == ADD), None)


def entry_script(root: Path, command: str) -> str | None:
    """The script a shell line runs (`program_call`), relative to the root."""
    call = program_call(root, command)
    return call.entry if call else None


# A shell word (its quotes and escapes kept) or an operator: `&&`, `||`, `;`, `|`, `&`, a
# redirection (`>`, `2>&`), a parenthesis.
_SHELL_TOKEN = re.compile(
    r"(?P<operator>&&|\|\||\d*[<>]+&?|[;&|()])"
    r"|(?P<word>(?:[^\s'\"\\;&|<>()]|\\.|'[^']*'|\"(?:[^\"\\]|\\.)*\")+)"
)
_REDIRECTION = re.compile(r"\d*[<>]+&?")
_PYTHON = re.compile(r"python[\d.]*")
# Programs, and Python modules, that run a script given after their own options.
LAUNCHERS = (
    "torchrun",
    "deepspeed",
    "accelerate",
    "torch.distributed.run",
    "torch.distributed.launch",
)
_PYTHON_VALUE_OPTIONS = ("-W", "-X", "--check-hash-based-pycs")  # python options with a value


@dataclass(frozen=True)
class Word:
    """A word of a shell line: where it is in the line, and its value once the shell unquotes it."""

    start: int
    end: int
    value: str


@dataclass(frozen=True)
class ProgramCall:
    """Where a shell line runs the program: the script (or module) Python runs, directly or
    through a launcher, and the program's own arguments after it."""

    entry: str  # the script, relative to the root, with /
    arguments: tuple[Word, ...]  # the words after the script, up to an operator or redirection
    end: int  # where the invocation's last word ends: an argument added there reaches the program

    @property
    def values(self) -> list[str]:
        """The program's arguments as it receives them."""
        return [word.value for word in self.arguments]


def program_call(root: Path, command: str) -> ProgramCall | None:
    """The first invocation in `command` of a Python script or module of the repository:
    `PYTHONPATH=. python train.py`, `env A=1 python3 -u -m pkg.train`, `cd src && python x.py`,
    `torchrun --nproc_per_node=1 train.py`, `accelerate launch x.py`."""
    directory = root
    for words in _simple_commands(command):
        values = [word.value for word in words]
        if values[:1] == ["cd"] and len(values) == 2:
            directory = directory / values[1]
            continue
        found = _script_word(values)
        if found is None:
            continue
        index, module = found
        script = _script_path(directory, values[index], module)
        try:
            entry = script.resolve().relative_to(root.resolve()).as_posix() if script else None
        except ValueError:  # a script outside the repository
            entry = None
        if entry is not None:
            return ProgramCall(entry, tuple(words[index + 1 :]), words[-1].end)
    return None


def _script_path(directory: Path, name: str, module: bool) -> Path | None:
    if module:
        dotted = directory / name.replace(".", "/")
        candidates = [dotted.with_name(f"{dotted.name}.py"), dotted / "__main__.py"]
    else:
        candidates = [directory / name] if name.endswith(_RUNNABLE) else []
    return next((c for c in candidates if c.is_file()), None)


def _simple_commands(command: str) -> list[list[Word]]:
    """The words of each command of a shell line, split at its operators; a redirection ends its
    command's words (the words after it are not looked at)."""
    commands: list[list[Word]] = [[]]
    redirected = False
    for token in _SHELL_TOKEN.finditer(command):
        operator = token["operator"]
        if operator and _REDIRECTION.fullmatch(operator):
            redirected = True
        elif operator:
            commands.append([])
            redirected = False
        elif not redirected:  # the regular expression matched its quotes: shlex reads it
            value = "".join(shlex.split(token["word"]))
            commands[-1].append(Word(token.start(), token.end(), value))
    return [words for words in commands if words]


def _script_word(words: list[str]) -> tuple[int, bool] | None:
    """The index of the script (True: of the module) that a command runs with Python, directly or
    through a launcher, after variables, `env` and options; or of the notebook it runs, bare
    (`train.ipynb`) or through a notebook runner (`jupyter execute train.ipynb`)."""
    index = _command_start(words)
    if index == len(words):
        return None
    if is_notebook(words[index]):
        return index, False
    runner = runner_at(words, index)
    launcher = Path(words[index]).name in LAUNCHERS or runner > 0
    if not (launcher or _PYTHON.fullmatch(Path(words[index]).name)):
        return None
    index += max(runner, 1)
    while index < len(words):
        word = words[index]
        if launcher:
            if word.endswith(_RUNNABLE):
                return index, False
        elif word == "-m" and index + 1 < len(words):
            if words[index + 1] not in LAUNCHERS and not runner_at(words, index + 1):
                return index + 1, True
            launcher, index = True, index + 1  # python -m torch.distributed.run ... x.py
        elif word == "-c":
            return None
        elif word in _PYTHON_VALUE_OPTIONS:
            index += 1
        elif not word.startswith("-"):
            return index, False
        index += 1
    return None


_RUNNABLE = (".py", ".ipynb")  # what a launcher or a notebook runner runs


def _command_start(words: list[str]) -> int:
    """The index of the program a simple command runs, after its variables and `env`."""
    index = 0
    while index < len(words) and (words[index] == "env" or re.fullmatch(r"\w+=.*", words[index])):
        index += 1
    return index


def runnable(command: str) -> str:
    """`command` with each bare notebook it runs (`train.ipynb`, which a shell cannot run) given
    to PyTPU's notebook runner: `python -m pytpu.runtime.notebook train.ipynb`."""
    starts = []
    for words in _simple_commands(command):
        index = _command_start([word.value for word in words])
        if index < len(words) and is_notebook(words[index].value):
            starts.append(words[index].start)
    for start in reversed(starts):
        command = f"{command[:start]}python -m {RUNNER_MODULE} {command[start:]}"
    return command


def _argparse_flags(script: Path) -> dict[str, str | None]:
    """The long options a script's argparse parser declares, each with its action (or None)."""
    try:
        module = cst.parse_module(script.read_bytes())
    except (cst.ParserSyntaxError, OSError, UnicodeDecodeError):
        return {}
    return {
        name: option.action
        for option in declared_options(module)
        for name in option.names
        if name.startswith("--")
    }


def run_command(root: Path, given: str | None, suite_dir: Path) -> RunCommand | None:
    """The given command, or one built from the entry script's own flags for a short run; with
    the commands the two sides run (`accelerator.on_device`)."""
    from pytpu.engine.testgen import accelerator  # it reads commands through this module

    guessed = not given
    if given:
        command = runnable(given)
        entry = entry_script(root, command)
    else:
        candidates = entry_scripts(root, suite_dir)
        if not candidates:
            return None
        entry = candidates[0].relative_to(root).as_posix()
        command = short_command(root, candidates[0])
    # (the migrated side's device: the target's, kb/targets.yaml)
    target = processes.TARGET_DEVICE.get()
    sides = [accelerator.on_device(root, command, device) for device in ("cpu", target)]
    return RunCommand(command, entry, *sides, guessed=guessed)


def entry_scripts(root: Path, suite_dir: Path) -> list[Path]:
    """The scripts a person runs (`if __name__ == '__main__':`, or argparse), the likeliest
    first: the usual entry names, then the shallowest."""
    candidates = [
        p
        for p in python_files(root, suite_dir)
        if "__main__" in (text := p.read_text(encoding="utf-8", errors="replace"))
        or "parse_args(" in text
    ]
    candidates.sort(key=lambda p: (p.name not in ENTRY_NAMES, len(p.parts), p.as_posix()))
    return candidates


def short_command(root: Path, script: Path, given: list[str] | None = None) -> str:
    """A shell line, from the root, that runs `script` (with the arguments `given`, default
    none) and the script's own short-run flags the arguments do not set (`--dry-run`)."""
    flags = _argparse_flags(script)
    words = ["python", script.name, *(given or [])]
    set_already = {w.split("=", 1)[0] for w in words}
    for flag, value in SHORT_RUN_FLAGS.items():
        if flag in set_already or flag not in flags:
            continue
        if (value is None) == (flags[flag] == "store_true"):
            words += [flag] if value is None else [flag, value]
    relative_dir = script.parent.relative_to(root).as_posix()
    command = shlex.join(words)
    if relative_dir != ".":
        command = f"cd {shlex.quote(relative_dir)} && {command}"
    return command


# --- settings the program branches on ------------------------------------------------------------

MAX_VARIANTS = 3  # runs of the program with one setting changed, tried per generation
# A branch that fetches from the network is not run for a variant: generating tests must not
# download models or datasets.
_NETWORK = re.compile(
    r"download\s*=\s*True|from_pretrained|urlopen|urlretrieve|torch\.hub|requests\.(?:get|post)"
    r"|wandb\.init"
)


@dataclass(frozen=True)
class Variant:
    """The program's command with one setting changed to a value the code branches on."""

    setting: str  # the name the code reads: `init_from`, `args.model` -> model
    value: str
    option: str  # the command-line option that sets it: --init_from, --model
    line: int  # the first branch that compares the setting with the value

    @property
    def argument(self) -> str:
        return f"{self.option}={shlex.quote(self.value)}"

    @property
    def title(self) -> str:  # its name in testgen's summary
        return f"run with {self.argument}"


@dataclass(frozen=True)
class _Setting:
    name: str
    option: str
    default: str | int | None
    attribute: bool  # read as `args.name` (argparse) rather than as a global `name`
    kind: type = str  # what the program reads: str, or int (`type=int`, an int global)


def setting_variants(root: Path, command: RunCommand) -> tuple[list[Variant], list[tuple]]:
    """Values the entry script compares a string setting with in an `if`, other than the value
    the command gives it: each is one more run of the program down another branch.

    Returns the variants, and (variant, reason) for those not to run."""
    if command.entry is None or is_notebook(command.entry):  # a notebook takes no options
        return [], []
    if not _ends_with_script(command.command, command.entry):
        return [], []
    path = root / command.entry
    try:
        tree = MetadataWrapper(cst.parse_module(path.read_bytes()))
    except (cst.ParserSyntaxError, OSError, UnicodeDecodeError):
        return [], []
    settings = {n: s for n, s in _settings(tree.module, command.command).items() if s.kind is str}
    call = program_call(root, command.command)
    given = _given_options(call.values if call else [])
    positions = tree.resolve(PositionProvider)
    code = tree.module.code_for_node
    variants: dict[tuple[str, str], Variant] = {}
    skipped: dict[tuple[str, str], tuple[Variant, str]] = {}
    for branch in m.findall(tree.module, m.If()):
        assert isinstance(branch, cst.If)
        for setting, values, prefix in _compared(branch.test, settings):
            current = given.get(setting.option, setting.default) or ""
            if any(current.startswith(v) if prefix else current == v for v in values):
                continue  # the command already takes this branch
            variant = Variant(setting.name, values[0], setting.option, positions[branch].start.line)
            key = (setting.name, variant.value)
            if key in variants or key in skipped:
                continue
            if _NETWORK.search(code(branch.body)):
                where = f"{command.entry}:{variant.line}"
                skipped[key] = (variant, f"its branch ({where}) would download")
            else:
                variants[key] = variant
    return list(variants.values()), list(skipped.values())


def _last_part(command: str) -> str:
    """What runs last in a shell line: after the last `&&`, `;` or `|`."""
    return re.split(r"&&|;|\|", command)[-1]


def _ends_with_script(command: str, entry: str) -> bool:
    """The python invocation ends the command, so an option appended to it reaches the script."""
    last = _last_part(command)
    return Path(entry).name in last and not re.search(r"[<>]", last)


def _settings(module: cst.Module, command: str) -> dict[str, _Setting]:
    """argparse options that take a string or an int, or, where the command sets the script's
    globals (`--name=value`, nanoGPT's configurator), its module-level string and int globals."""
    settings: dict[str, _Setting] = {}
    for option in declared_options(module, command):
        kind = _KINDS.get(option.kind or "")
        if option.long is None or option.action is not None or option.nargs or kind is None:
            continue
        default = option.default
        default = default if isinstance(default, kind) and not isinstance(default, bool) else None
        setting = _Setting(option.dest, option.long, default, option.attribute, kind)
        if option.attribute:
            settings[option.dest] = setting
        else:
            settings.setdefault(option.dest, setting)
    return settings


_KINDS: dict[str, type] = {"str": str, "int": int}


def _literal(node: cst.BaseExpression | None) -> str | int | None:
    """The value of a string or integer literal."""
    if isinstance(node, (cst.SimpleString, cst.Integer)):
        return node.evaluated_value
    return None


def _given_options(words: list[str]) -> dict[str, str]:
    """Options the words give a value: `--name=value` or `--name value`; the last one counts."""
    given = {}
    for index, word in enumerate(words):
        if not word.startswith("--"):
            continue
        name, equals, value = word.partition("=")
        if equals:
            given[name] = value
        elif index + 1 < len(words) and is_value(words[index + 1]):
            given[name] = words[index + 1]
    return given


def is_value(word: str) -> bool:
    """A word that is an option's value rather than another option: `5`, `cpu`, `-1`."""
    return not word.startswith("-") or bool(_NEGATIVE.fullmatch(word))


_NEGATIVE = re.compile(r"-\d+(?:\.\d*)?")


# --- how long the program trains -----------------------------------------------------------------

# Settings that say how long a program trains, by name (`-` read as `_`): epochs, n_epochs,
# max_steps, train_steps, max_iters, num_iters, niter, iterations, num_train_epochs... Not
# eval_iters or warmup_steps: those are parts of a run.
STEP_SETTING_NAMES = re.compile(
    r"(?:(?:max|num|n|total|train)_?)*(?:steps|iters?|iterations|epochs)"
)


@dataclass(frozen=True)
class StepSetting:
    """A number of steps, iterations or epochs that the program reads and the command can set."""

    option: str  # as the command writes it: --epochs, --max_iters, trainer.max_steps
    value: int  # the command's value, else the program's default
    given: bool  # the command gives it


def _entry_script(root: Path, call: ProgramCall) -> cst.Module | None:
    """The invocation's script, parsed; None for a notebook (a command sets none of its
    settings) or a script that cannot be read."""
    if is_notebook(call.entry):
        return None
    try:
        return cst.parse_module((root / call.entry).read_bytes())
    except (cst.ParserSyntaxError, OSError, UnicodeDecodeError):
        return None


def step_settings(root: Path, call: ProgramCall, command: str) -> list[StepSetting]:
    """The entry script's step or epoch settings that have a value: integer argparse options
    (of the script or of the repository's modules it imports) the command gives or that have a
    default, integer globals of such a name where the command sets the script's globals
    (`--max_iters=20`, nanoGPT's configurator), and the overrides of a configuration system the
    command gives (`overrides`). A notebook has none: its settings are in its cells, which a
    command does not set."""
    if _entry_script(root, call) is None:
        return []
    given = _given_options(call.values)
    found: dict[str, StepSetting] = {}
    for option in program_options(root, call, command):
        takes_int = option.kind == "int" and option.action is None and not option.nargs
        if not (takes_int and option.long and _counts_steps(option.dest)):
            continue
        written = given.get(option.long)
        if written is not None and not written.isdigit():
            continue  # a value the shell makes (`$EPOCHS`), not one to scale
        value = int(written) if written else option.default
        if isinstance(value, int) and not isinstance(value, bool):
            found.setdefault(option.long, StepSetting(option.long, value, written is not None))
    for option, value in overrides(call.values):
        if option not in found and value.isdigit() and _counts_steps(option.split(".")[-1]):
            found[option] = StepSetting(option, int(value), given=True)
    return list(found.values())


def _counts_steps(name: str) -> bool:
    return bool(STEP_SETTING_NAMES.fullmatch(name.lstrip("-+").lower().replace("-", "_")))


# A configuration system's key: Hydra's `trainer.max_steps` (`+` adds one), yacs' `SOLVER.MAX_ITER`.
_KEY = re.compile(r"\+{0,2}[A-Za-z_][\w-]*(?:\.[\w-]+)*")
_DOTTED_KEY = re.compile(r"[A-Za-z_][\w-]*(?:\.[\w-]+)+")
_UPPER_KEY = re.compile(r"[A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*")


def overrides(words: list[str]) -> list[tuple[str, str]]:
    """(key, value) for each setting the program's arguments give, as the command writes the
    key: options (`--epochs 5`, `--max_iters=5`, jsonargparse's and CfgNode's dotted
    `--trainer.max_iters=5`), Hydra's and mmcv's `key=value` words (`trainer.max_steps=5`,
    `+x.y=5`), and yacs' `KEY VALUE` pairs after `--opts` or at the end (`SOLVER.MAX_ITER 5`)."""
    found = []
    index = 0
    while index < len(words):
        word = words[index]
        key, equals, value = word.partition("=")
        if word.startswith("--") and equals:
            found.append((key, value))
        elif word.startswith("--") and _valued(words, index) and not _key_pair(words, index + 1):
            found.append((word, words[index + 1]))
            index += 1
        elif not word.startswith("-") and equals and _KEY.fullmatch(key):
            found.append((key, value))
        elif _key_pair(words, index):
            found.append((word, words[index + 1]))
            index += 1
        index += 1
    return found


def _valued(words: list[str], index: int) -> bool:
    """The word at `index` is followed by a value."""
    return index + 1 < len(words) and is_value(words[index + 1])


def _key_pair(words: list[str], index: int) -> bool:
    """yacs' `KEY VALUE`: a dotted or upper-case key, then its value."""
    word = words[index] if index < len(words) else ""
    key = _DOTTED_KEY.fullmatch(word) or _UPPER_KEY.fullmatch(word)
    return bool(key) and _valued(words, index)


# Switches that cut a run short on purpose (one batch, one step): `--dry-run` in pytorch/examples,
# `--smoke-test`, Lightning's `--fast_dev_run`. A benchmark drops them to time more steps.
SHORT_RUN_SWITCH_NAMES = re.compile(r"dry_?run|smoke_?test|fast_?dev_?run|quick_?test")


def short_run_switches(root: Path, call: ProgramCall) -> list[str]:
    """The program's switches (argparse `store_true` options) named like `--dry-run` that the
    command gives, as it writes them."""
    switches = {
        name
        for option in program_options(root, call, "")
        if option.action == "store_true"
        for name in option.names
        if name.startswith("--")
        and SHORT_RUN_SWITCH_NAMES.fullmatch(name[2:].lower().replace("-", "_"))
    }
    return [word for word in dict.fromkeys(call.values) if word in switches]


def _compared(test: cst.BaseExpression, settings: dict[str, _Setting]) -> list[tuple]:
    """(setting, the values that take the branch) for each comparison of a setting with strings
    in a branch's test: `x == 'a'`, `x in ['a', 'b']`, `x.startswith('a')`, `args.x != 'a'`."""

    def setting_of(node: cst.BaseExpression) -> _Setting | None:
        if isinstance(node, cst.Name) and node.value in settings:
            found = settings[node.value]
            return None if found.attribute else found
        if isinstance(node, cst.Attribute) and node.attr.value in settings:
            found = settings[node.attr.value]
            return found if found.attribute else None
        return None

    def strings(node: cst.BaseExpression) -> list[str]:
        if isinstance(node, cst.SimpleString):
            return [node.evaluated_value]
        if isinstance(node, (cst.List, cst.Tuple, cst.Set)):
            items = [e.value for e in node.elements]
            if all(isinstance(i, cst.SimpleString) for i in items):
                return [i.evaluated_value for i in items]
        return []

    found = []
    for comparison in m.findall(test, m.Comparison()):
        assert isinstance(comparison, cst.Comparison)
        setting = setting_of(comparison.left)
        if setting is None or len(comparison.comparisons) != 1:
            continue
        values = [v for v in strings(comparison.comparisons[0].comparator) if v.strip()]
        if values:
            found.append((setting, values, False))
    prefix = m.Call(func=m.Attribute(attr=m.Name("startswith")), args=[m.Arg(m.SimpleString())])
    for call in m.findall(test, prefix):
        assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
        setting = setting_of(call.func.value)
        value = call.args[0].value
        if setting is not None and isinstance(value, cst.SimpleString):
            found.append((setting, [value.evaluated_value], True))
    return found


# --- the program's options, as its parser declares them ------------------------------------------


@dataclass(frozen=True)
class Option:
    """An option the program declares: an argparse `add_argument`, or a module-level global that
    a configurator sets from `--name=value` (nanoGPT's)."""

    names: tuple[str, ...]  # as the command writes it: --no-cuda, -n
    dest: str  # the name the program reads: no_cuda
    action: str | None  # store_true, store_false, BooleanOptionalAction...; None: takes a value
    kind: str | None  # the type's name (str when none is given); None: not a plain name
    default: Any = None  # a literal default; None when there is none or it is not a literal
    choices: tuple | None = None
    nargs: bool = False  # declares nargs
    attribute: bool = True  # read as `args.dest` (argparse) rather than as a global

    @property
    def long(self) -> str | None:
        return next((n for n in self.names if n.startswith("--")), None)

    @property
    def takes_value(self) -> bool:
        return self.action in (None, "store", "append")


_OPTION_CALL = m.Call(func=m.Attribute(attr=m.Name("add_argument")))
_VALUE_ACTIONS = {"store_true": True, "store_false": False}  # a switch's value when given


def declared_options(module: cst.Module, command: str = "") -> list[Option]:
    """The options `module`'s argparse parsers declare; and, where `command` sets the script's
    globals (`--name=value`, nanoGPT's configurator), its module-level literal globals."""
    options = [_option(call) for call in m.findall(module, _OPTION_CALL)]
    found = [option for option in options if option is not None]
    globals_ = _literal_globals(module)
    if any(f"--{name}=" in command for name in globals_):
        declared = {option.dest for option in found}
        for name, value in globals_.items():
            if value is not None and name not in declared:
                kind = type(value).__name__
                found.append(Option((f"--{name}",), name, None, kind, value, attribute=False))
    return found


def _option(call: cst.CSTNode) -> Option | None:
    """The option an `add_argument` call declares; None without a name written as a string."""
    assert isinstance(call, cst.Call)
    names = tuple(
        a.value.evaluated_value
        for a in call.args
        if a.keyword is None and isinstance(a.value, cst.SimpleString)
    )
    names = tuple(n for n in names if isinstance(n, str))
    if not names:
        return None
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword}
    action = keywords.get("action")
    if isinstance(action, cst.SimpleString):
        action = action.evaluated_value
    elif isinstance(action, (cst.Attribute, cst.Name)):  # argparse.BooleanOptionalAction
        action = (action.attr if isinstance(action, cst.Attribute) else action).value
    elif action is not None:
        action = "?"  # an action PyTPU cannot read: not taken for a value
    if action == "BooleanOptionalAction":  # it declares `--no-x` beside `--x`
        names += tuple(f"--no-{n[2:]}" for n in names if n.startswith("--"))
    written_type = keywords.get("type", cst.Name("str") if action is None else None)
    kind = written_type.value if isinstance(written_type, cst.Name) else None
    long = next((n for n in names if n.startswith("--")), None)
    dest = _literal(keywords.get("dest"))
    if not isinstance(dest, str):
        dest = (long or names[0]).lstrip("-").replace("-", "_")
    choices = _constant(keywords.get("choices"))
    choices = tuple(choices) if isinstance(choices, (list, tuple)) else None
    default = _constant(keywords.get("default"))
    if "default" not in keywords and action in _VALUE_ACTIONS:
        default = not _VALUE_ACTIONS[action]
    return Option(names, dest, action, kind, default, choices, "nargs" in keywords)


def _literal_globals(module: cst.Module) -> dict[str, Any]:
    """Module-level names assigned once at the top -> their value, if a literal (else None)."""
    found: dict[str, Any] = {}
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if m.matches(small, m.Assign(targets=[m.AssignTarget(m.Name())])):
                found[small.targets[0].target.value] = _literal(small.value)
            elif m.matches(small, m.AnnAssign(target=m.Name())) and small.value is not None:
                found[small.target.value] = _literal(small.value)
    return found


def _constant(node: cst.BaseExpression | None) -> Any:
    """The value of a literal expression (`-1`, `True`, `['cpu', 'cuda']`); None otherwise."""
    if node is None:
        return None
    try:
        return ast.literal_eval(cst.Module([]).code_for_node(node))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def program_options(root: Path, call: ProgramCall, command: str) -> list[Option]:
    """The options of the invocation's script, with those of the repository's modules it
    imports (a parser built in `options.py`); none for a notebook or a script not read."""
    module = _entry_script(root, call)
    if module is None:
        return []
    options = declared_options(module, command)
    for path in _imported_files(root, root / call.entry, module):
        try:
            options += declared_options(cst.parse_module(path.read_bytes()))
        except (cst.ParserSyntaxError, OSError, UnicodeDecodeError):
            continue
    return options


def _imported_files(root: Path, script: Path, module: cst.Module) -> list[Path]:
    """The repository's files that `module` (the file `script`) imports by name: beside the
    script, or from the root."""
    names = []
    for node in m.findall(module, m.Import() | m.ImportFrom()):
        if isinstance(node, cst.Import):
            names += [cst.Module([]).code_for_node(a.name) for a in node.names]
        elif node.module is not None:  # `from .options import parse` too: beside the script
            names.append(cst.Module([]).code_for_node(node.module))
    found = []
    for name in dict.fromkeys(names):
        for folder in dict.fromkeys((script.parent, root)):
            base = folder / name.replace(".", "/")
            candidates = (base.with_name(f"{base.name}.py"), base / "__init__.py")
            path = next((p for p in candidates if p.is_file()), None)
            if path is not None and path.resolve() != script.resolve():
                found.append(path)
                break
    return found


# --- a command changed for one side --------------------------------------------------------------

DROP, SET, ADD = "drop", "set", "add"


@dataclass(frozen=True)
class Change:
    """One change of a command: an argument of the program's invocation left out (with its
    value when it takes one), given another value (in place, else added as `option=value`), or
    a switch added; or a variable the line sets for the program left out."""

    action: str  # drop | set | add
    option: str  # as the command writes it: --no-cuda, --device, SOLVER.MAX_ITER, a variable
    value: str | None = None  # the value `set` gives it
    was: str | None = None  # the value the command gave it; None: a switch, or not given
    takes_value: bool = False  # `drop`: the word after the option is its value (`--gpu -1`)
    variable: bool = False  # an environment variable set before the program

    @property
    def written(self) -> str:
        """The option as the command gave it: `--no-cuda`, `--gpu -1`, `CUDA_VISIBLE_DEVICES=`."""
        if self.variable:
            return f"{self.option}={shlex.quote(self.was) if self.was else ''}"
        return shlex.join([self.option, self.was]) if self.was is not None else self.option

    @property
    def said(self) -> str:
        """The change in words, for the report and the tests' comments: without `--no-cuda`."""
        if self.action == DROP:
            return f"without `{self.written}`"
        if self.action == ADD:
            return f"with `{self.option}`"
        return f"with `{shlex.join([self.option, self.value or ''])}` rather than `{self.was}`"

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "option": self.option, "written": self.written,
                "value": self.value, "said": self.said}  # fmt: skip


@dataclass(frozen=True)
class SideCommand:
    """The command one side runs: the given one with `changes` made."""

    command: str
    changes: tuple[Change, ...] = ()


def changed(root: Path, command: str, changes: list[Change] | tuple[Change, ...]) -> str:
    """`command` with `changes` made to the program's invocation (`program_call`) and to the
    variables its line sets; the rest of the line is left as written. An option given twice is
    changed twice; one the command does not give is added after its last argument."""
    call = program_call(root, command)
    arguments = call.arguments if call else ()
    edits: list[tuple[int, int, str]] = []
    added = []
    for change in changes:
        if change.variable:
            named = [w for w in assignments(command) if w.value.split("=")[0] == change.option]
            edits += [(w.start, w.end, "") for w in named]
            continue
        found = False
        for index, word in enumerate(arguments):
            following = arguments[index + 1] if index + 1 < len(arguments) else None
            if word.value.startswith(f"{change.option}="):
                text = f"{change.option}={shlex.quote(change.value or '')}"
                edits.append((word.start, word.end, "" if change.action == DROP else text))
            elif word.value == change.option:
                if change.action == DROP:
                    end = following.end if following and change.takes_value else word.end
                    edits.append((word.start, end, ""))
                elif change.action == SET and following is not None:
                    edits.append((following.start, following.end, shlex.quote(change.value)))
                elif change.action == SET:
                    edits.append((word.start, word.end, f"{change.option}={change.value}"))
            else:
                continue
            found = True
        if not found and call is not None and change.action != DROP:
            value = f"={shlex.quote(change.value)}" if change.action == SET else ""
            added.append(f" {change.option}{value}")
    if added:
        edits.append((call.end, call.end, "".join(added)))
    for start, end, text in sorted(edits, reverse=True):
        if not text and command[start - 1 : start] == " ":  # a word left out takes its space
            start -= 1
        elif not text and command[end : end + 1] == " ":  # the line's first word: the one after
            end += 1
        command = command[:start] + text + command[end:]
    return command


def assignments(command: str) -> list[Word]:
    """The variables each command of a shell line sets for the program it runs: `A=1 python`,
    `env A=1 python`."""
    found = []
    for words in _simple_commands(command):
        start = _command_start([word.value for word in words])
        found += [word for word in words[:start] if word.value != "env"]
    return found
