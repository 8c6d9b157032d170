"""torch's device API against the KB's table of it, kb/device_api.yaml.

Every public name of the installed torch's device modules, device classes, Tensor device members
and distributed backends has an entry (a new torch release shows what is new, and what is gone);
every rule an entry names exists; and the rule does to the name what the entry says. For that,
each section's names are used once each in one generated file (a call with the required
arguments, an attribute read, or the entry's own `use`), the file goes through the rewriter once,
and each use must carry a finding of its rule, of its kind (rewrite, note or flag), while a
"nothing to do" use must come out unchanged and unflagged.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import shutil
import textwrap
import types
import warnings
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
import torch
import torch.distributed
import yaml

from pytpu.engine.rewriter import kb
from pytpu.engine.rewriter.checkout import migrate_text, rule_index
from pytpu.engine.rewriter.findings import CONVERTED, FLAGGED, NOTED, UNKNOWN

TABLE = kb.default().tables["device_api"]
SECTIONS = TABLE["sections"]
# The finding kinds each of the table's words accepts.
KINDS = {"rewrite": {CONVERTED}, "note": {NOTED}, "flag": {FLAGGED, UNKNOWN}}
# The sections the table must have (issue 22): a section cannot be dropped silently.
REQUIRED = {
    "torch.cuda",
    "torch.accelerator",
    "torch.backends.cuda",
    "torch.backends.cudnn",
    "torch.backends.mps",
    "torch.mps",
    "torch.xpu",
    "torch.amp",
    "torch.cuda.amp",
    "torch",
    "torch.Stream",
    "torch.Event",
    "torch.Generator",
    "torch.Tensor",
    "torch.distributed.Backend",
}
# Tensor members about devices: a name (split at '_') holding a device type torch knows or one
# of these placement words, and `to`.
PLACEMENT_WORDS = {"device", "pin", "pinned", "share", "shared", "stream"}


# --- the public names of the installed torch ------------------------------------------------------


def _obj(dotted: str) -> Any:
    """A module, or an attribute of one (`torch.Stream`, `torch.distributed.Backend`)."""
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError:
        parent, _, name = dotted.rpartition(".")
        return getattr(_obj(parent), name)


def _original_module(module: types.ModuleType) -> types.ModuleType:
    """The module object its source defines (torch.backends.cudnn replaces itself in
    sys.modules by a wrapper that keeps the original as an attribute)."""
    return next(
        (
            value
            for value in vars(module).values()
            if isinstance(value, types.ModuleType)
            and value is not module
            and value.__name__ == module.__name__
        ),
        module,
    )


def _foreign_imports(module: types.ModuleType) -> set[str]:
    """Names the module's source binds by importing them from outside the module (`import os`,
    `from typing import Optional`): re-exports of other modules, not its own names."""
    tree = ast.parse(inspect.getsource(_original_module(module)))
    own = module.__name__
    package = own if hasattr(module, "__path__") else own.rpartition(".")[0]
    foreign = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not alias.name.startswith(own + "."):
                    foreign.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base != own and not base.startswith(own + "."):
                foreign.update(alias.asname or alias.name for alias in node.names)
    return foreign


def _module_dir(module: types.ModuleType) -> set[str]:
    """`dir()` without a leading underscore, less what the module imported from elsewhere and
    modules that are not its submodules; a module that replaced itself by a wrapper class also
    has the class's properties and the original module's names."""
    names = set(dir(module))
    if type(module) is not types.ModuleType:
        names |= set(dir(type(module))) - set(dir(types.ModuleType))
        names |= set(dir(_original_module(module)))
    foreign = _foreign_imports(module)
    public = set()
    for name in names - foreign:
        if name.startswith("_"):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (reading cudnn.allow_tf32 warns it is deprecated)
            value = getattr(module, name)
        if value is type(module) or value is _original_module(module):
            continue  # the module itself
        if isinstance(value, types.ModuleType) and not value.__name__.startswith(
            module.__name__ + "."
        ):
            continue
        public.add(name)
    return public


@cache
def _layouts() -> frozenset[str]:
    """Tensor layouts (`strided`, `sparse_coo`, `_mkldnn` ...), by name without underscores."""
    return frozenset(
        name.strip("_") for name in dir(torch) if isinstance(getattr(torch, name), torch.layout)
    )


def _is_device_type(word: str) -> bool:
    """A device type torch parses; 'mkldnn' parses too, but it names a layout (torch warns
    that it is no longer a device type)."""
    if word in _layouts():
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.device(word)
        except RuntimeError:
            return False
    return True


def _tensor_device_members() -> set[str]:
    names = set()
    for name in dir(torch.Tensor):
        if name.startswith("_"):
            continue
        words = set(name.strip("_").split("_"))
        if name == "to" or words & PLACEMENT_WORDS or any(_is_device_type(w) for w in words):
            names.add(name)
    return names


def _backend_names() -> set[str]:
    return {name for name in torch.distributed.Backend.backend_list if name != "undefined"}


def public_names(section: str) -> set[str]:
    """The installed torch's public names of one section, by the section's `public` rule."""
    how = SECTIONS[section]["public"]
    target = _obj(section)
    if how == "__all__":
        return set(target.__all__)
    if how == "dir":
        assert not hasattr(target, "__all__"), f"{section} has __all__ now"
        return _module_dir(target)
    if how == "members":
        if target is torch.Tensor:
            return _tensor_device_members()
        return {name for name in dir(target) if not name.startswith("_")}
    if how == "values":
        assert section == "torch.distributed.Backend"
        return _backend_names()
    raise AssertionError(f"{section}: unknown rule {how!r}")


# --- the uses the rewriter is run on -------------------------------------------------------------


def _required_arguments(value: Any, method: bool) -> str:
    try:
        parameters = list(inspect.signature(value).parameters.values())
    except (TypeError, ValueError):
        return ""  # (a builtin without a signature: called without arguments)
    if method and parameters and parameters[0].name == "self":
        parameters = parameters[1:]
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return ", ".join(p.name for p in parameters if p.default is p.empty and p.kind in positional)


def default_use(section: str, name: str) -> str:
    """A call with the required arguments (named after the parameters), else an attribute read."""
    body = SECTIONS[section]
    if "use" in body:
        return body["use"].format(name=name)
    target = _obj(section)
    receiver = body.get("receiver", section)
    value = inspect.getattr_static(target, name, None)
    if isinstance(value, (staticmethod, classmethod)):
        value = getattr(target, name)
    elif not isinstance(target, types.ModuleType) and isinstance(value, property):
        return f"value = {receiver}.{name}"
    else:
        value = getattr(target, name)
    if callable(value) and not isinstance(value, types.ModuleType):
        method = not isinstance(target, types.ModuleType)
        return f"{receiver}.{name}({_required_arguments(value, method)})"
    return f"value = {receiver}.{name}"


@dataclass
class Use:
    section: str
    name: str
    entry: dict[str, Any]
    code: str
    first: int = 0  # the use's lines in the generated file (not its setup's)
    last: int = 0


def generated_file(section: str) -> tuple[str, list[Use]]:
    """One function per name: its section's (or its own) setup, then its use."""
    body = SECTIONS[section]
    lines = ["import torch", "import torch.distributed", ""]
    uses = []
    for number, (name, entry) in enumerate(body["names"].items()):
        use = Use(section, name, entry, entry.get("use") or default_use(section, name))
        setup = entry.get("setup", body.get("setup", ""))
        lines += ["", f"def use_{number}():"]
        lines += [textwrap.indent(line, "    ") for line in setup.splitlines()]
        use.first = len(lines) + 1
        lines += [textwrap.indent(line, "    ") for line in use.code.splitlines()]
        use.last = len(lines)
        uses.append(use)
    return "\n".join(lines) + "\n", uses


@cache
def run(section: str) -> tuple[str, str, list[Use], list[Any]]:
    source, uses = generated_file(section)
    after, findings = migrate_text(source, rule_index(), f"{section}.py")
    return source, after, uses, findings


# --- the tests ----------------------------------------------------------------------------------


def test_the_table_was_made_from_this_torch():
    assert torch.__version__.split("+")[0] == TABLE["torch"], (
        f"torch {torch.__version__} is installed; the table lists {TABLE['torch']}'s names: "
        "review the differences the other tests report, then update `torch:`"
    )


def test_every_section_the_issue_names_is_there():
    assert REQUIRED <= set(SECTIONS), sorted(REQUIRED - set(SECTIONS))


@pytest.mark.parametrize("section", sorted(set(SECTIONS) - {"torch"}))
def test_every_public_name_has_an_entry(section):
    listed = set(SECTIONS[section]["names"])
    public = public_names(section)
    assert not public - listed, f"{section}: public names with no entry: {sorted(public - listed)}"
    assert not listed - public, f"{section}: entries torch no longer has: {sorted(listed - public)}"


def test_listed_classes_exist():
    assert all(isinstance(getattr(torch, name, None), type) for name in SECTIONS["torch"]["names"])


def test_every_named_rule_exists():
    for section, name, entry in kb.device_api_entries(TABLE):
        _, rule_id = kb.device_api_rule(entry)
        assert rule_id is None or kb.default().find(rule_id), f"{section}.{name}: {rule_id}"


def _functions(text: str) -> dict[str, str]:
    """The generated file's functions (one per use), by name, as source text."""
    tree = ast.parse(text)
    return {
        node.name: ast.get_source_segment(text, node) or ""
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
    }


def _problems(section: str) -> list[str]:
    source, after, uses, findings = run(section)
    before_functions, after_functions = _functions(source), _functions(after)
    problems = []
    for number, use in enumerate(uses):
        found = [f for f in findings if use.first <= f.line <= use.last]
        what, rule_id = kb.device_api_rule(use.entry)
        label = f"{section}.{use.name} ({use.code!r})"
        if rule_id is None:
            function = f"use_{number}"
            if found:
                problems.append(f"{label}: nothing to do, but {[f.rule.id for f in found]} act")
            elif before_functions[function] != after_functions.get(function):
                problems.append(f"{label}: nothing to do, but the code changed")
            continue
        kinds = {f.kind for f in found if f.rule.id == rule_id}
        if not kinds & KINDS[what]:
            seen = sorted({(f.rule.id, f.kind) for f in found})
            problems.append(f"{label}: wants {rule_id} to {what}, found {seen}")
    return problems


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_the_named_rule_acts_on_each_use(section):
    problems = _problems(section)
    assert not problems, "\n".join(problems)


def test_a_rule_that_does_not_act_is_caught(monkeypatch):
    """The check above fails for a name whose rule does something else, or nothing."""
    names = dict(SECTIONS["torch.cuda"]["names"])
    names["is_available"] = {"rewrite": "R-CUDA-07"}  # synchronize's rule
    names["FloatStorage"] = {"nothing": "no: R-GEN-01 flags it"}
    monkeypatch.setitem(SECTIONS, "torch.cuda", {**SECTIONS["torch.cuda"], "names": names})
    run.cache_clear()
    try:
        problems = _problems("torch.cuda")
    finally:
        run.cache_clear()
    assert len(problems) == 2
    wrong_rule = next(p for p in problems if p.startswith("torch.cuda.is_available "))
    assert "wants R-CUDA-07 to rewrite, found [('R-CUDA-01', 'converted')]" in wrong_rule
    not_nothing = next(p for p in problems if p.startswith("torch.cuda.FloatStorage "))
    assert "nothing to do, but ['R-GEN-01'] act" in not_nothing


def test_an_entry_naming_a_missing_rule_does_not_load(tmp_path):
    directory = tmp_path / "kb"
    shutil.copytree(kb.kb_dir(), directory, ignore=shutil.ignore_patterns("__pycache__"))
    path = directory / "device_api.yaml"
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    document["sections"]["torch.cuda"]["names"]["is_available"] = {"rewrite": "R-CUDA-99"}
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    with pytest.raises(kb.KBError, match=r"torch\.cuda/names/is_available: no rule R-CUDA-99"):
        kb.load(directory)


def test_an_entry_with_two_answers_fails_the_schema(tmp_path):
    document = yaml.safe_load((kb.kb_dir() / "device_api.yaml").read_text(encoding="utf-8"))
    document["sections"]["torch.cuda"]["names"]["is_available"] = {
        "rewrite": "R-CUDA-01",
        "nothing": "both a rule and nothing to do",
    }
    with pytest.raises(kb.KBError, match="device_api.yaml"):
        kb.validate_document(document, str(tmp_path / "device_api.yaml"))
