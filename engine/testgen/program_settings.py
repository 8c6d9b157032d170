"""The settings a short run of the program uses, read from its source: the settings it branches on
(a run per value, `Variant`), how long it trains (`StepSetting`: `--epochs`, `trainer.max_steps=`),
and its own short-run switches (`--dry-run`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

from pytpu.engine.testgen.invocation import ProgramCall, program_call
from pytpu.engine.testgen.options import declared_options, is_value, program_options, script_module
from pytpu.runtime import command as shell
from pytpu.runtime.command import is_notebook

if TYPE_CHECKING:
    from pytpu.engine.testgen.short_command import RunCommand

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
