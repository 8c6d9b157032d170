"""Writing the suite: test files rendered from the package's Jinja templates, formatted by black,
with the recorded inputs beside them and the pinned requirement of the test runtime they import
(`requirements.txt`: pytpu-runtime, the distribution in engine/runtime; not copied in).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import black
import jinja2

import pytpu.runtime
from pytpu.engine.testgen import accelerator, discover, program_settings, short_command
from pytpu.runtime.cells import source_file
from pytpu.runtime.command import is_notebook

TEMPLATES = Path(__file__).resolve().parent / "templates"
REQUIREMENTS = """\
# PyTPU's test runtime: installed with PyTPU, or in a PyTPU checkout by
# pip install ./engine/runtime
{}
"""
# The hypothesis batch-size test varies at most this many rows (each size is another XLA graph).
MAX_ROWS = 4


def snake(name: str) -> str:
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return re.sub(r"\W+", "_", name).strip("_").lower()


def file_slug(relative: str) -> str:
    """`pkg/model.py` -> pkg_model_py; `nb.ipynb` -> nb_ipynb, its cell `nb.ipynb#cell5` ->
    nb_ipynb_cell5."""
    if relative.endswith(".py"):
        return snake(relative.removesuffix(".py").replace("/", "_")) + "_py"
    return snake(relative.replace("/", "_"))


@dataclass
class Unit:
    """One module class or function with recorded inputs, and the tests it gets."""

    kind: str  # "module" or "function"
    file: str
    name: str
    record: dict[str, Any]
    tests: set[str] = field(default_factory=set)
    calls: dict[str, MethodCall] = field(default_factory=dict)  # test kind -> the call it makes

    @property
    def slug(self) -> str:
        return f"{file_slug(self.file)}__{snake(self.name)}"

    @property
    def test_names(self) -> dict[str, str]:
        base = snake(self.name)
        if self.kind == "function":
            return {"result": f"test_{base}_matches_recording"}
        names = {
            "forward": f"test_{base}_forward_matches_recording",
            "gradients": f"test_{base}_gradients_match_recording",
            "rows": f"test_{base}_output_rows_follow_input_rows",
        }
        for kind, call in self.calls.items():
            names[kind] = f"test_{base}_{call.behaviour}_matches_recording"
        return names


@dataclass
class MethodCall:
    """A call of a module's method (or of forward with fewer arguments) on recorded inputs."""

    method: str
    behaviour: str  # "generate", "forward_without_targets": names the test
    arguments: dict[str, str]  # parameter -> source: "args[0]", "kwargs['x']", "2"
    origin: str  # where the arguments come from, for the test's comment
    hidden: str | None = None  # a torch attribute the test hides: the code's fallback path


@dataclass
class StepPlan:
    step: discover.TrainingStep
    events: list[dict[str, Any]]
    skip: str | None = None

    @property
    def test_name(self) -> str:
        return f"test_training_step_in_{self.snake}_matches_recording"

    @property
    def snake(self) -> str:
        if self.step.function == "<module>":
            return file_slug(self.step.file)
        return snake(self.step.function)


@dataclass
class VariantPlan:
    """The program run with one setting changed: the metric lines it prints."""

    variant: program_settings.Variant
    metrics: list[list[Any]]

    @property
    def test_name(self) -> str:
        what = f"{snake(self.variant.setting)}_{snake(self.variant.value)}"
        return f"test_program_with_{what}_metrics_match_recording"


@dataclass
class SuitePlan:
    """Everything the suite's files are written from."""

    root: Path
    out: Path
    command: short_command.RunCommand
    timeout: float
    units: list[Unit]
    steps: list[StepPlan]
    metrics: list[list[Any]]
    rerecord: str
    tolerance: float = 1.0  # the repository's factor on the dtype tolerances
    precision: str = "fp32"  # "bf16": the migrated side trains in bfloat16 (its tolerances)
    variants: list[VariantPlan] = field(default_factory=list)
    prefix: str = ""  # of the test modules' names, after `test_`: one program of several
    runs_test: bool = True  # with no step, metric or variant to test: that the program runs
    order: int = 0  # this program's place among several: their tests run in this order

    @property
    def program_module(self) -> str:
        return f"test_{self.prefix}program"


class _Code:
    """Turns the harness's value descriptions into source, collecting the loaders and imports."""

    def __init__(self, root: Path, loaders: dict[str, str]):
        self.root = root
        self.loaders = loaders  # file -> variable name
        self.imports: set[str] = set()

    def loader_for(self, relative: str) -> str:
        """The test module's name for the file of `relative` (a notebook for its cells)."""
        relative = source_file(relative)
        if relative not in self.loaders:
            name = file_slug(Path(relative).name)
            if not name.isidentifier():
                name = "_" + name  # `302_classification.py`: a name may not start with a digit
            taken = set(self.loaders.values()) | {"support", "suite", "torch", "pytest", "st"}
            while name in taken:
                name = "_" + name
            self.loaders[relative] = name
        return self.loaders[relative]

    def value(self, desc: dict[str, Any], device: str) -> str:
        if "literal" in desc:
            return repr(desc["literal"])
        if "sequence" in desc:
            items = [self.value(d, device) for d in desc["items"]]
            if desc["sequence"] == "tuple":
                return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
            return f"[{', '.join(items)}]"
        if "mapping" in desc:
            mapping = desc["mapping"]
            pairs = (f"{self.value(k, device)}: {self.value(v, device)}" for k, v in mapping)
            return "{" + ", ".join(pairs) + "}"
        if "device" in desc:
            return device
        if "code" in desc:
            self.imports.update(desc.get("imports", ()))
            return desc["code"]
        if "call" in desc or "class" in desc:
            target = desc.get("call") or self._class(desc["class"])
            if "call" in desc:
                self.imports.update(desc.get("imports", ()))
            if "member" in desc:
                return f"{target}.{desc['member']}"
            arguments = ", ".join(f"{k}={self.value(v, device)}" for k, v in desc["kwargs"].items())
            return f"{target}({arguments})"
        raise ValueError(f"no code for {desc!r}")

    def _class(self, reference: dict[str, str]) -> str:
        path = Path(reference["file"]) if reference["file"] else None
        if path and path.is_absolute() and self.root in path.resolve().parents:
            relative = path.resolve().relative_to(self.root).as_posix()
            return f"{self.loader_for(relative)}.{reference['qualname']}"
        self.imports.add(reference["module"])
        return f"{reference['module']}.{reference['qualname']}"


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.filters["pyrepr"] = repr  # Python literals; black normalises the quotes
    return environment


def _format(source: str) -> str:
    return black.format_str(source, mode=black.Mode(line_length=100))


def save_inputs(unit: Unit, data_dir: Path) -> int:
    """Write the unit's recorded inputs; returns the bytes written."""
    import torch  # (the recordings' tensors: only here, where PyTPU's environment has torch)

    path = data_dir / f"{unit.slug}.pt"
    torch.save({"args": unit.record["args"], "kwargs": unit.record["kwargs"]}, path)
    return path.stat().st_size


Index = dict[tuple[str, str], tuple[Any, str]]  # (module, test name) -> what it tests, kind


def write(plan: SuitePlan, directory: Path) -> Index:
    """Write the suite's files into `directory`; returns (module, test name) -> what it tests."""
    environment = _environment()
    _write_settings(plan, directory, environment)
    header = {"command": plan.command.command, "rerecord": plan.rerecord}
    index: Index = {}
    by_file: dict[str, list[Unit]] = {}  # a notebook's cells' units together
    for unit in plan.units:
        if unit.tests:
            by_file.setdefault(source_file(unit.file), []).append(unit)
    for relative, units in sorted(by_file.items()):
        index |= _write_unit_tests(plan, relative, units, directory, environment, header)
    if plan.steps or plan.metrics or plan.variants or plan.runs_test:
        index |= _write_program_tests(plan, directory, environment, header)
    return index


def _write_settings(plan: SuitePlan, directory: Path, environment: jinja2.Environment) -> None:
    """suite.json (where the repository is, the command, the tolerance factor, the migrated
    side's precision), the pinned requirement of the test runtime, and the conftest that names
    it when it is missing."""
    suite = {
        "root": Path(os.path.relpath(plan.root, plan.out)).as_posix(),
        "command": plan.command.command,
        "tolerance": plan.tolerance,
        **({"precision": plan.precision} if plan.precision != "fp32" else {}),
        **({"order": plan.order} if plan.prefix else {}),
    }
    (directory / "suite.json").write_text(json.dumps(suite, indent=2) + "\n")
    (directory / "requirements.txt").write_text(REQUIREMENTS.format(pytpu.runtime.REQUIREMENT))
    conftest = environment.get_template("conftest.py.j2").render(
        suite=plan.out.relative_to(plan.root).as_posix(), requirement=pytpu.runtime.REQUIREMENT
    )
    (directory / "conftest.py").write_text(_format(conftest))


def _write_unit_tests(
    plan: SuitePlan,
    relative: str,
    units: list[Unit],
    directory: Path,
    environment: jinja2.Environment,
    header: dict[str, str],
) -> Index:
    """test_<file>.py: the tests of the units one file of the repository defines."""
    module_name = f"test_{plan.prefix}{file_slug(relative)}"
    code = _Code(plan.root, {})
    rendered_units = [_render_unit(unit, code) for unit in units]
    loaders = _loaders(units, code)  # after the units, whose code names the loaders
    imports = [f"import {name}" for name in sorted(code.imports)]
    if any("rows" in unit.tests for unit in units):
        imports.append("from hypothesis import given, settings")
        imports.append("from hypothesis import strategies as st")
    source = environment.get_template("test_units.py.j2").render(
        subject=relative,
        imports=imports,
        loaders=loaders,
        units=rendered_units,
        **header,
    )
    (directory / f"{module_name}.py").write_text(_format(source))
    return {
        (module_name, unit.test_names[kind]): (unit, kind) for unit in units for kind in unit.tests
    }


def _loaders(units: list[Unit], code: _Code) -> list[dict[str, Any]]:
    """How the test module loads each file its units come from: a script or a notebook with the
    module-level values its definitions read, or a module by import."""
    globals_by_file: dict[str, dict[str, Any]] = {}
    for unit in units:
        if unit.record.get("script"):
            file = source_file(unit.file)
            globals_by_file.setdefault(file, {}).update(unit.record.get("globals", {}))
    loaders = []
    for file, name in list(code.loaders.items()):
        entries = sorted(globals_by_file.get(file, {}).items())
        kind = "script" if file in globals_by_file else "module"
        kind = "notebook" if is_notebook(file) else kind
        loaders.append(
            {
                "file": file,
                "name": name,
                "kind": kind,
                "globals": [(k, code.value(v, "support.device()")) for k, v in entries],
            }
        )
    return loaders


def _write_program_tests(
    plan: SuitePlan, directory: Path, environment: jinja2.Environment, header: dict[str, str]
) -> Index:
    """test_program.py and data/program.json: the training steps, the metric lines and the
    variants of the program as a whole."""
    data = {
        "steps": {s.step.ident: s.events for s in plan.steps},
        "metrics": plan.metrics,
        "variants": {v.variant.argument: v.metrics for v in plan.variants},
    }
    (directory / "data").mkdir(exist_ok=True)
    (directory / "data" / "program.json").write_text(json.dumps(data, indent=1) + "\n")
    source = environment.get_template("test_program.py.j2").render(
        subject="the program as a whole",
        timeout=round(plan.timeout),
        given=plan.command.given,
        xla_command=plan.command.on_xla.command,
        xla_changes=accelerator.described(plan.command.on_xla.changes),
        steps=[_render_step(s) for s in plan.steps],
        metrics=len(plan.metrics),
        variants=[_render_variant(v, plan.command.entry) for v in plan.variants],
        runs_only=_runs_only(plan),
        **header,
    )
    module = plan.program_module
    (directory / f"{module}.py").write_text(_format(source))
    index: Index = {(module, step.test_name): (step, "step") for step in plan.steps}
    if plan.metrics:
        index[(module, "test_program_reported_metrics_match_recording")] = (plan, "metrics")
    for variant in plan.variants:
        index[(module, variant.test_name)] = (variant, "variant")
    if _runs_only(plan):
        index[(module, "test_program_runs_to_completion")] = (plan, "runs")
    return index


def _runs_only(plan: SuitePlan) -> bool:
    return plan.runs_test and not (plan.steps or plan.metrics or plan.variants)


def _render_step(step: StepPlan) -> dict[str, Any]:
    where = "top level" if step.step.function == "<module>" else f"in {step.step.function}()"
    return {
        "snake": step.snake,
        "ident": step.step.ident,
        "where": where,
        "skip": step.skip,
        "kind": step.step.kind,
    }


def _render_variant(variant: VariantPlan, entry: str) -> dict[str, Any]:
    return {
        "test_name": variant.test_name,
        "argument": variant.variant.argument,
        "setting": variant.variant.setting,
        "value": variant.variant.value,
        "where": f"{entry}:{variant.variant.line}",
        "metrics": len(variant.metrics),
    }


def _render_unit(unit: Unit, code: _Code) -> dict[str, Any]:
    target = f"{code.loader_for(unit.file)}.{unit.name}"
    rendered = {
        "kind": unit.kind,
        "slug": unit.slug,
        "snake": snake(unit.name),
        "title": unit.name,
        "target": target,
        "tests": unit.tests,
    }
    if unit.kind == "module":
        arguments = unit.record["constructor"]
        on_cpu = 'torch.device("cpu")'  # modules are built on the CPU, then moved
        constructor = ", ".join(f"{k}={code.value(v, on_cpu)}" for k, v in arguments.items())
        if "torch.device" in constructor:
            code.imports.add("torch")
        rendered.update(
            constructor=f", {constructor}" if constructor else "",
            training=unit.record["training"],
            rows=unit.record.get("rows", MAX_ROWS),
            cut=_cut_note(unit.record),
            borrowed=unit.record.get("borrowed_from"),
            made_for=unit.record.get("made_for"),
            probe=unit.record.get("probe"),
            calls=[
                {
                    "behaviour": call.behaviour,
                    "key": kind,
                    "method": call.method,
                    "origin": call.origin,
                    "hidden": call.hidden,
                    "arguments": ", ".join(f"{k}={v}" for k, v in call.arguments.items()),
                }
                for kind, call in sorted(unit.calls.items())
                if kind in unit.tests
            ],
        )
    return rendered


def _cut_note(record: dict[str, Any]) -> str:
    if "cut" not in record:
        return ""
    return f", cut to its first {record['cut']} of {record['batch']} samples"
