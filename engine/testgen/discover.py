"""What the repository's code offers to test, read from its source: module classes, training steps,
the short command that runs the program, the settings it branches on, its step settings and the
options its parser declares.

Recording (pytpu.runtime.harness) sees what the program really calls; this static view is what it is
checked against, so that the summary can name every module class and training step that got no
test, and why. The run command's shell line is read by `pytpu.runtime.command`, its program in the
repository found and the command changed for a side by `invocation`.
"""

from __future__ import annotations

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
from pytpu.engine.testgen import accelerator, notebook_code
from pytpu.engine.testgen.invocation import (
    ADD,
    ProgramCall,
    SideCommand,
    entry_script,
    program_call,
)
from pytpu.engine.testgen.options import (
    declared_options,
    is_value,
    program_options,
    script_module,
)
from pytpu.runtime import command as shell
from pytpu.runtime.cells import split_cell_id
from pytpu.runtime.command import is_notebook, runnable

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


def short_run_flags(script: Path, given: list[str]) -> list[str]:
    """The words of the script's own short-run flags (`SHORT_RUN_FLAGS`: `--dry-run`,
    `--epochs 1`) that its parser declares and the arguments `given` do not set."""
    flags = _argparse_flags(script)
    set_already = {w.split("=", 1)[0] for w in ["python", script.name, *given]}
    words: list[str] = []
    for flag, value in SHORT_RUN_FLAGS.items():
        if flag in set_already or flag not in flags:
            continue
        if (value is None) == (flags[flag] == "store_true"):
            words += [flag] if value is None else [flag, value]
    return words


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
    words = ["python", script.name, *(given or []), *short_run_flags(script, given or [])]
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


def _ends_with_script(command: str, entry: str) -> bool:
    """The python invocation ends the command, so an option appended to it reaches the script."""
    line = shell.parse(command)
    last = line.appendable
    return last is not None and Path(entry).name in line.text_of(last)


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


def step_settings(root: Path, call: ProgramCall, command: str) -> list[StepSetting]:
    """The entry script's step or epoch settings that have a value: integer argparse options
    (of the script or of the repository's modules it imports) the command gives or that have a
    default, integer globals of such a name where the command sets the script's globals
    (`--max_iters=20`, nanoGPT's configurator), and the overrides of a configuration system the
    command gives (`overrides`). A notebook has none: its settings are in its cells, which a
    command does not set."""
    if script_module(root, call) is None:
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
