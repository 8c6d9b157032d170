"""`pytpu testgen`: record the program, write the suite, record its expectations, keep what holds.

1. Read what the code offers (discover), run the program's short command twice with the harness
   (record), and plan a test for each module class, function and training step it exercised.
2. Write the suite beside the final location, run it once in baseline mode (the tests record their
   expected values on the CPU), then once more as tests: a test that fails either time is dropped
   or skipped with the reason, never kept as a test that cannot pass. The old suite, if any, is
   replaced only at the end, so a failed generation leaves it as it was.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from pytpu.engine import pytest_runs
from pytpu.engine.testgen import (
    discover,
    invocation,
    program_settings,
    record,
    short_command,
    suite,
    workspace,
)

DEFAULT_OUT = "tests/pytpu"
MAX_TOTAL_BYTES = 8 << 20  # recorded data per repository
OTHER_PROGRAM = (
    "not loaded by the recorded program (another program: record it with its own --run and --out)"
)


class TestgenError(Exception):
    """A problem the user must fix; the message says what to do."""


class Tested(NamedTuple):
    """A unit with tests: its kind (module, function, method, program, training step), its
    name (`file::qualname`, or a program's check) and its tests' names."""

    kind: str
    name: str
    tests: list[str]


class Untested(NamedTuple):
    """A unit without a test, and why."""

    kind: str
    name: str
    reason: str


@dataclass
class GenerationResult:
    """What `pytpu testgen` made: the units with tests, those without and why, its timings."""

    tested: list[Tested] = field(default_factory=list)
    untested: list[Untested] = field(default_factory=list)
    command: str = ""  # as recorded and run before the migration
    # The two sides' commands (with the accelerator on: `--no-cuda` left out), when they are not
    # the given one.
    on_cpu: invocation.SideCommand | None = None
    on_xla: invocation.SideCommand | None = None
    out: Path | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    data_bytes: int = 0
    errors: list[str] = field(default_factory=list)
    trains: bool = False  # the recorded run took optimizer steps (or backward passes)

    def as_dict(self) -> dict:
        return {
            "run": self.command,
            "out": str(self.out),
            "tested": [unit._asdict() for unit in self.tested],
            "untested": [unit._asdict() for unit in self.untested],
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
            "data_bytes": self.data_bytes,
            "errors": self.errors,
        }


def generate(
    root: Path,
    run: str | None = None,
    out: str = DEFAULT_OUT,
    timeout: float = 300,
    max_unit_bytes: int = 1 << 20,
    stage: Callable[[str], None] = lambda _: None,
    tolerance: float = 1.0,
    precision: str = "fp32",
    prefix: str = "",
    order: int = 0,
    rerecord: str | None = None,
) -> GenerationResult:
    """One program's suite in `out`. `prefix` starts its test modules' names after `test_` and
    `order` is its place among several programs (`programs.generate_programs`); `rerecord` is
    the command that writes it again, shown in its tests."""
    root = root.resolve()
    out_dir = (root / out).resolve()
    if root not in out_dir.parents:
        raise TestgenError(f"--out {out}: the suite must live inside the repository")
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / "suite.json").exists():
        raise TestgenError(f"{out_dir}: exists and was not written by PyTPU; choose another --out")
    result = GenerationResult(out=out_dir)
    started = time.perf_counter()
    inventory = discover.inventory(root, out_dir)
    result.errors.extend(inventory.errors)
    command = short_command.run_command(root, run, out_dir)
    if command is None:
        raise TestgenError(f"{root}: no script to run found; give the short command with --run")
    result.command = command.command
    result.on_cpu, result.on_xla = command.on_cpu, command.on_xla
    before = workspace.snapshot(root)  # each run starts from these files, as in the suite
    variants = _variants_to_try(root, command, result)
    runs = f" and {len(variants)} variant(s)" if variants else ""
    stage(f"recording `{command.command}`{runs} twice")
    try:
        first, second, variant_runs = record.record_twice(
            root,
            command.command,
            timeout,
            max_unit_bytes,
            inventory.probes(),
            tuple(variants),
            before,
        )
    except record.RecordingFailed as exc:
        raise TestgenError(str(exc)) from None
    result.seconds["record"] = max(first.seconds, second.seconds)
    result.trains = bool(first.steps)
    plan = _plan(root, out_dir, command, timeout, first, second, inventory, result)
    plan.tolerance, plan.precision = tolerance, precision
    plan.prefix, plan.order = prefix, order
    plan.rerecord = rerecord or plan.rerecord
    plan.variants = _variant_plans(variant_runs, result)

    stage("recording expected values and checking them")
    with _folders_for(root, out_dir):
        _build(plan, out_dir, timeout, max_unit_bytes, result, before)
    result.data_bytes = sum(p.stat().st_size for p in (out_dir / "data").glob("*"))
    _summarise(plan, inventory, first, result)
    result.seconds["total"] = time.perf_counter() - started
    return result


def _variants_to_try(
    root: Path, command: short_command.RunCommand, result: GenerationResult
) -> list[program_settings.Variant]:
    """The command with one setting changed, up to MAX_VARIANTS; the others are named untested."""
    variants, not_run = program_settings.setting_variants(root, command)
    for variant in variants[program_settings.MAX_VARIANTS :]:
        not_run.append(
            (variant, f"not tried (at most {program_settings.MAX_VARIANTS} per generation)")
        )
    for variant, reason in not_run:
        result.untested.append(Untested("program", variant.title, reason))
    return variants[: program_settings.MAX_VARIANTS]


@contextmanager
def _folders_for(root: Path, out_dir: Path) -> Iterator[None]:
    """Make the folders `out_dir` goes into; those made here go again if the suite is not
    written."""
    created = [p for p in reversed(out_dir.parents) if root in p.parents and not p.exists()]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield
    finally:
        for folder in reversed(created):
            if folder.exists() and not any(folder.iterdir()):
                folder.rmdir()


def _build(
    plan: suite.SuitePlan,
    out_dir: Path,
    timeout: float,
    max_unit_bytes: int,
    result: GenerationResult,
    before: set[str],
) -> None:
    with tempfile.TemporaryDirectory(prefix=".pytpu-suite-", dir=out_dir.parent) as building:
        directory = Path(building)
        (directory / "data").mkdir()
        _save_inputs(plan, directory, result)
        index = suite.write(plan, directory)
        failures = _pytest(plan.root, directory, baseline=True, timeout=timeout * 2)
        _drop(plan, index, failures, "its generated test fails on the original code", result)
        _drop_oversized(plan, directory, max_unit_bytes, result)
        index = suite.write(plan, directory)
        workspace.remove_created(plan.root, before, keep=out_dir)  # the program starts afresh
        failures = _pytest(plan.root, directory, baseline=False, timeout=timeout * 2)
        _drop(
            plan,
            index,
            failures,
            "its generated test is not reproducible on the original code",
            result,
        )
        for unit in plan.units:
            if not unit.tests:
                (directory / "data" / f"{unit.slug}.pt").unlink(missing_ok=True)
        for stale in directory.glob("test_*.py"):
            stale.unlink()
        suite.write(plan, directory)
        _replace(out_dir, directory)


def _plan(root, out_dir, command, timeout, first, second, inventory, result) -> suite.SuitePlan:
    units = []
    for name, captured in first.units.items():
        file, _, qualname = name.partition("::")
        units.append(suite.Unit(captured["kind"], file, qualname, captured))
    units += _borrowed_units(inventory, units)
    units.sort(key=lambda u: (u.file, u.record.get("line", 0)))
    classes = {(c.file, c.name): c for c in inventory.module_classes}
    for unit in units:
        if unit.kind == "function":
            unit.tests = {"result"}
            continue
        unit.tests = {"forward", "gradients"}
        rows = _rows(unit.record)
        if rows > 1:
            unit.tests.add("rows")
            unit.record["rows"] = rows
        if (unit.file, unit.name) in classes:
            unit.calls = _method_calls(classes[unit.file, unit.name], unit, result)
            unit.tests |= set(unit.calls)
    steps_seen, unstable = record.stable_steps(first, second)
    steps = []
    for step in inventory.training_steps:
        events = [e for e in steps_seen if step.owns(e["site"])]
        if not events:
            continue
        skip = None
        if any(e["key"] in unstable for e in events):
            skip = (
                "not reproducible: a second recorded run, its parameters moved by a rounding "
                "error after each backward pass, gave other losses or parameters"
            )
        steps.append(suite.StepPlan(step, events, skip))
    metrics = record.stable_metrics(first, second)
    printed = record.stable_metrics(first, first)  # (every line with a number that is no time)
    if printed and not metrics:
        result.untested.append(
            Untested(
                "program",
                "reported metrics",
                f"the {len(printed)} metric lines it printed change when its parameters move by "
                "a rounding error (a second, nudged recording): XLA would print other numbers",
            )
        )
    rerecord = f"pytpu testgen . --run {shlex.quote(command.given)}"
    if out_dir != root / DEFAULT_OUT:
        rerecord += f" --out {shlex.quote(out_dir.relative_to(root).as_posix())}"
    return suite.SuitePlan(
        root=root,
        out=out_dir,
        command=command,
        timeout=timeout,
        units=units,
        steps=steps,
        metrics=metrics,
        rerecord=rerecord,
    )


def _variant_plans(
    variant_runs: list[record.VariantRuns], result: GenerationResult
) -> list[suite.VariantPlan]:
    plans = []
    for each in variant_runs:
        if each.failure:
            result.untested.append(Untested("program", each.variant.title, each.failure))
            continue
        metrics = record.stable_metrics(*each.runs)
        if metrics:
            plans.append(suite.VariantPlan(each.variant, metrics))
        else:
            reason = "prints no metric line that two runs agree on"
            result.untested.append(Untested("program", each.variant.title, reason))
    return plans


# A parameter only used as `range(p)` is an iteration count: two iterations exercise the loop.
LOOP_COUNT = "2"


def _method_calls(cls: discover.ModuleClass, unit: suite.Unit, result: GenerationResult) -> dict:
    """Calls that reach code forward's recorded call does not: forward with its optional
    arguments left out (the inference path), and each public method that takes forward's inputs
    (`generate(idx, max_new_tokens)`), its other required parameters filled where the code says
    how they are used."""
    forward = cls.method("forward")
    if forward is None:
        return {}
    recorded = _recorded_sources(forward, unit.record)
    calls = {}
    passed_optional = [
        n
        for n, required in forward.parameters
        if not required and n in recorded and recorded[n][1] is not None
    ]
    if passed_optional and all(n in recorded for n in forward.required):
        behaviour = "forward_without_" + "_and_".join(passed_optional)
        arguments = {n: recorded[n][0] for n in forward.required}
        origin = f"the recorded inputs of {cls.name}, without {', '.join(passed_optional)}"
        calls[f"call:{behaviour}"] = suite.MethodCall("forward", behaviour, arguments, origin)
    for path, line in cls.feature_checks:
        attribute = path.rpartition(".")[2]
        behaviour = f"forward_without_{suite.snake(attribute)}"
        arguments = {n: source for n, (source, _) in recorded.items()}
        origin = (
            f"the recorded inputs of {cls.name}; built and called with {path} hidden, as on a"
            f" torch without it ({cls.file}:{line} checks for it)"
        )
        calls[f"call:{behaviour}"] = suite.MethodCall(
            "forward", behaviour, arguments, origin, hidden=path
        )
    for method in cls.methods:
        if method.name.startswith("_") or method.name == "forward":
            continue
        shared = [n for n in method.required if n in recorded]
        if not shared:
            continue  # not a method on the module's inputs; the program's run exercises it
        missing = [n for n in method.required if n not in recorded and n not in method.loop_counts]
        if missing:
            reason = f"needs {', '.join(missing)}, which no recorded call shows"
            name = f"{cls.file}::{cls.name}.{method.name}"
            result.untested.append(Untested("method", name, reason))
            continue
        arguments = {n: recorded[n][0] if n in recorded else LOOP_COUNT for n in method.required}
        counts = [n for n in method.required if n not in recorded]
        origin = f"{', '.join(shared)} from the recorded inputs of {cls.name}"
        if counts:
            origin += f"; {', '.join(counts)}={LOOP_COUNT} (used as a loop count)"
        calls[f"call:{method.name}"] = suite.MethodCall(
            method.name, suite.snake(method.name), arguments, origin
        )
    return calls


def _recorded_sources(forward: discover.Method, record: dict) -> dict[str, tuple[str, Any]]:
    """forward's parameter -> where the recorded inputs hold it (`args[0]`, ...), and its value."""
    names = [name for name, _ in forward.parameters]
    args, kwargs = record["args"], record["kwargs"]
    sources = {names[i]: (f"args[{i}]", args[i]) for i in range(min(len(names), len(args)))}
    sources |= {k: (f"kwargs[{k!r}]", v) for k, v in kwargs.items() if k in names}
    return sources


def _borrowed_units(inventory: discover.Inventory, units: list[suite.Unit]) -> list[suite.Unit]:
    """A module class the run never called directly gets the recording of a subclass that keeps
    its constructor (the subclass's inputs are valid inputs of the base class too)."""
    captured = {(u.file, u.name): u for u in units if u.kind == "module"}
    classes = {(c.file, c.name): c for c in inventory.module_classes}
    borrowed = []
    for cls in inventory.module_classes:
        if (cls.file, cls.name) in captured:
            continue
        for (file, name), unit in captured.items():
            sub = classes.get((file, name))
            if sub and file == cls.file and cls.name in sub.bases and not sub.defines_init:
                record = {**unit.record, "line": cls.line, "borrowed_from": name}
                borrowed.append(suite.Unit("module", cls.file, cls.name, record))
                break
    return borrowed


def _rows(captured: dict) -> int:
    tensors = [t for t in captured["args"] if hasattr(t, "dim") and t.dim()]
    return min(tensors[0].shape[0], suite.MAX_ROWS) if tensors else 0


def _save_inputs(plan: suite.SuitePlan, directory: Path, result: GenerationResult) -> None:
    total = 0
    for unit in plan.units:
        size = suite.save_inputs(unit, directory / "data")
        if total + size > MAX_TOTAL_BYTES:
            (directory / "data" / f"{unit.slug}.pt").unlink()
            unit.tests.clear()
            name = f"{unit.file}::{unit.name}"
            result.untested.append(Untested(unit.kind, name, "over the suite's recorded-data cap"))
            continue
        total += size


def _pytest(root: Path, directory: Path, baseline: bool, timeout: float) -> dict:
    """Run the suite on the CPU; returns (module, test) -> first line of its failure."""
    arguments = [str(directory), *(["-m", "not pytpu_program"] if baseline else [])]
    done = pytest_runs.run(root, arguments, "cpu", timeout, baseline=baseline)
    if done.returncode is None:
        raise TestgenError(f"the generated suite did not finish in {timeout:.0f} s")
    if not done.reported:
        raise TestgenError(
            f"the generated suite did not run (pytest wrote no report): {done.output}"
        )
    return {
        (case.module, case.name): case.message or "failed"
        for case in done.results
        if case.outcome in (pytest_runs.FAILED, pytest_runs.ERROR)
    }


def _drop(
    plan: suite.SuitePlan, index: dict, failures: dict, why: str, result: GenerationResult
) -> None:
    for key, message in failures.items():
        if key not in index:
            continue
        target, kind = index[key]
        if isinstance(target, suite.Unit):
            target.tests.discard(kind)
            if kind != "rows":  # a batch-size property that does not hold is not a finding
                name = f"{target.file}::{target.name} ({kind})"
                result.untested.append(Untested(target.kind, name, f"{why}: {message}"))
        elif isinstance(target, suite.StepPlan):
            target.skip = f"{why}: {message}"
        elif isinstance(target, suite.VariantPlan):
            plan.variants.remove(target)
            result.untested.append(Untested("program", target.variant.title, f"{why}: {message}"))
        elif kind == "runs":
            plan.runs_test = False
            result.untested.append(Untested("program", "runs to completion", f"{why}: {message}"))
        else:
            plan.metrics = []
            result.untested.append(Untested("program", "reported metrics", f"{why}: {message}"))


def _drop_oversized(
    plan: suite.SuitePlan, directory: Path, limit: int, result: GenerationResult
) -> None:
    """Recorded inputs and outputs of one unit stay under the limit, or the unit gets no test."""
    for unit in plan.units:
        path = directory / "data" / f"{unit.slug}.pt"
        size = path.stat().st_size if path.exists() else 0
        if unit.tests and size > limit:
            unit.tests.clear()
            path.unlink()
            reason = (
                f"its recorded data take {size // 1024} KiB, over the {limit // 1024} KiB a unit"
                " may record; raise --max-unit-kib"
            )
            result.untested.append(Untested(unit.kind, f"{unit.file}::{unit.name}", reason))


def _replace(out_dir: Path, built: Path) -> None:
    """Swap the new suite in; the previous one is removed only once the new one is in place."""
    (built / "junit.xml").unlink(missing_ok=True)
    final = Path(tempfile.mkdtemp(prefix=".pytpu-suite-", dir=out_dir.parent))
    shutil.copytree(built, final, dirs_exist_ok=True)
    if out_dir.exists():
        old = out_dir.with_name(out_dir.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out_dir, old)
        os.replace(final, out_dir)
        shutil.rmtree(old)
    else:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        os.replace(final, out_dir)
    for cache in out_dir.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)


def _summarise(plan, inventory, run: record.Run, result: GenerationResult) -> None:
    for unit in plan.units:
        if unit.tests:
            tests = sorted(kind.removeprefix("call:").replace("_", " ") for kind in unit.tests)
            result.tested.append(Tested(unit.kind, f"{unit.file}::{unit.name}", tests))
    captured = {(u.file, u.name) for u in plan.units if u.tests}
    skipped = run.skipped
    for cls in inventory.module_classes:
        if (cls.file, cls.name) in captured:
            continue
        reason = skipped.get(f"{cls.file}::{cls.name}", "not called by the recorded run")
        if cls.file not in run.files:
            reason = OTHER_PROGRAM
        if not any(name.startswith(f"{cls.file}::{cls.name} (") for _, name, _ in result.untested):
            result.untested.append(Untested("module", f"{cls.file}::{cls.name}", reason))
    planned = {s.step.ident: s for s in plan.steps}
    for step in inventory.training_steps:
        where = f"{step.ident} ({step.function})"
        chosen = planned.get(step.ident)
        if chosen is None:
            reason = "not reached by the recorded run"
            reason = reason if step.file in run.files else OTHER_PROGRAM
            result.untested.append(Untested("training step", where, reason))
        elif chosen.skip:
            result.untested.append(Untested("training step", where, chosen.skip))
        else:
            what = "first iteration" if step.kind == "optimizer" else "first two losses"
            result.tested.append(Tested("training step", where, [what]))
    if plan.metrics:
        result.tested.append(Tested("program", "reported metrics", [f"{len(plan.metrics)} lines"]))
    if plan.runs_test and not (plan.steps or plan.metrics or plan.variants):
        result.tested.append(Tested("program", "runs to completion", ["exit status 0"]))
    for variant in plan.variants:
        tests = [f"{len(variant.metrics)} metric lines"]
        result.tested.append(Tested("program", variant.variant.title, tests))
