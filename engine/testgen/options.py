"""The program's options, as its parser declares them: its argparse `add_argument` calls, of the
entry script and of the repository's modules it imports, and the module-level globals a
configurator sets from `--name=value` (nanoGPT's); and which of a command's words are an option's
value.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libcst as cst
import libcst.matchers as m

from pytpu.engine.testgen.invocation import ProgramCall
from pytpu.runtime.command import is_notebook


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
    module = script_module(root, call)
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


def _literal(node: cst.BaseExpression | None) -> str | int | None:
    """The value of a string or integer literal."""
    if isinstance(node, (cst.SimpleString, cst.Integer)):
        return node.evaluated_value
    return None


def script_module(root: Path, call: ProgramCall) -> cst.Module | None:
    """The invocation's script, parsed; None for a notebook (a command sets none of its
    settings) or a script that cannot be read."""
    if is_notebook(call.entry):
        return None
    try:
        return cst.parse_module((root / call.entry).read_bytes())
    except (cst.ParserSyntaxError, OSError, UnicodeDecodeError):
        return None


def is_value(word: str) -> bool:
    """A word that is an option's value rather than another option: `5`, `cpu`, `-1`."""
    return not word.startswith("-") or bool(_NEGATIVE.fullmatch(word))


_NEGATIVE = re.compile(r"-\d+(?:\.\d*)?")
