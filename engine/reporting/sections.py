"""The report's sections: each one registered builder (the stages' typed results in, the
section's typed model out) and, when the page shows it, one template in `templates/`.

    @section("timings", template="footer.md.j2")
    def timings(stages: Stages) -> model.Timings: ...

The document holds the registered sections in this order, and the page renders their templates
in the same order (`report.md.j2`); the builder's return annotation is the section's model, from
which `report.schema.json` is generated (`schema.py`). A section that only arranges other
sections' data on the page (the introduction) registers a template and no builder.

A new section: a builder here and its template; then `python -m pytpu.engine.reporting.schema`
writes the schema again (a test fails while it is stale).
"""

from __future__ import annotations

import statistics
import sys
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import msgspec

from pytpu.engine.reporting import model
from pytpu.engine.reporting import review as review_items
from pytpu.engine.rewriter import kbdocs
from pytpu.engine.rewriter.checkout import RunResult
from pytpu.engine.rewriter.findings import CONVERTED, FLAGGED, NOTED, UNKNOWN
from pytpu.engine.stages import BenchmarkRun, Stages
from pytpu.engine.testgen import ProgramsResult, accelerator
from pytpu.engine.verify import speedup_estimate
from pytpu.engine.verify.parity import Comparison

# Where the rule pages generated from the KB are published (docs/kb.md of PyTPU's repository).
DOCS_URL = "https://github.com/pytpu/pytpu/blob/main/docs/kb.md"
# The report's three counts, as HIPIFY counts converted and unconverted: unknown sites are flagged.
COUNTED = {CONVERTED: "converted", NOTED: "noted", FLAGGED: "flagged", UNKNOWN: "flagged"}


@dataclass(frozen=True)
class Section:
    """A part of the report: its key in the document and its model (None: the page only), its
    builder, and its template (None: the document only)."""

    name: str
    doc: str
    kind: Any
    build: Callable[[Stages], Any] | None
    template: str | None


SECTIONS: dict[str, Section] = {}


def section(
    name: str, template: str | None = None
) -> Callable[[Callable[[Stages], Any]], Callable[[Stages], Any]]:
    """Register a builder as the document's section `name`, shown on the page by `template`."""

    def register(build: Callable[[Stages], Any]) -> Callable[[Stages], Any]:
        kind = typing.get_type_hints(build, globals()).get("return")
        if kind is None:
            raise TypeError(f"report section {name!r}: {build.__name__} has no return annotation")
        msgspec.json.schema(kind)  # (raises TypeError for a type the schema cannot describe)
        _add(Section(name, (build.__doc__ or "").strip(), kind, build, template))
        return build

    return register


def page_only(name: str, template: str, doc: str) -> None:
    """Register a part of the page that shows other sections' data."""
    _add(Section(name, doc, None, None, template))


def _add(entry: Section) -> None:
    if entry.name in SECTIONS:
        raise ValueError(f"report section {entry.name!r} is registered twice")
    SECTIONS[entry.name] = entry


# --- the run ------------------------------------------------------------------------------------


def tool_version() -> str:
    try:
        return version("pytpu")
    except PackageNotFoundError:
        return "unknown"


@section("version")
def document_version(stages: Stages) -> typing.Literal[1]:
    """The document's format."""
    return 1


@section("tool")
def tool(stages: Stages) -> model.Tool:
    """What made the report."""
    return model.Tool(name="PyTPU", version=tool_version())


@section("repository")
def repository(stages: Stages) -> model.Repository:
    """The repository migrated, where it was checked out."""
    return model.Repository(name=stages.start.root.name, path=str(stages.start.root))


@section("base")
def base(stages: Stages) -> model.Base:
    """The commit the migration starts from."""
    start = stages.start
    return model.Base(rev=start.base.hexsha, short=start.base.hexsha[:7], branch=start.branch)


@section("branch")
def branch(stages: Stages) -> model.Text:
    """The branch that holds the migration."""
    return stages.branch.name


@section("commits")
def commits(stages: Stages) -> list[model.CommitRef]:
    """The branch's commits: the tests, then the migration."""
    return [model.CommitRef(sha=c.hexsha, message=c.summary) for c in stages.branch.commits]


@section("target")
def target(stages: Stages) -> model.Text:
    """What the code was migrated to."""
    return stages.start.settings.target


@section("target_reason")
def target_reason(stages: Stages) -> model.Text:
    """Why the migration goes to its target: the settings say so, or PyTPU's default."""
    settings = stages.start.settings
    if "target" in settings.given:
        return f"set by `target` in {settings.source}"
    if settings.target_source:
        return f"set by {settings.target_source} (the Action's `target` input)"
    return "PyTPU's default target, which `target` in its settings changes"


@section("devices")
def devices(stages: Stages) -> model.Devices:
    """How the report names the two sides' devices."""
    return model.Devices(**asdict(stages.parity.devices))


@section("verdict")
def verdict(stages: Stages) -> model.Verdict:
    """The parity counts and the speedup the headline states."""
    return model.Verdict(**asdict(stages.verdict))


page_only("intro", "intro.md.j2", "What the pull request does, and where each side ran.")


# --- the programs and the tests -----------------------------------------------------------------


@section("programs", template="programs.md.j2")
def programs(stages: Stages) -> list[model.ProgramRow]:
    """Each program: how it was found, whether it was recorded (or why not), and whether its
    training step was timed (or why not)."""
    generated, benchmarks = stages.tests.generated, stages.benchmark
    timed = {run.program for run in benchmarks.runs if not run.section.not_run}
    not_timed = dict(benchmarks.not_run)
    rows = []
    for p in generated.programs:
        status = "recorded" if p.generated else ("failed" if p.tried else "not tried")
        on_xla = (
            accelerator.section(p.generated.on_cpu, p.generated.on_xla) if p.generated else None
        )
        rows.append(
            model.ProgramRow(
                name=p.name,
                command=p.command,
                origin=p.origin,
                status=status,
                error=p.error,
                tests=sum(len(unit.tests) for unit in p.generated.tested) if p.generated else 0,
                benchmarked=p.name in timed,
                not_benchmarked=not_timed.get(p.name),
                on_xla=msgspec.convert(on_xla, model.OnDevice | None),
            )
        )
    return rows


@section("parity", template="parity.md.j2")
def parity(stages: Stages) -> model.Parity:
    """Every test on both sides, regressions first, each generated test with its program."""
    generated = stages.tests.generated
    folders = {generated.suite_of(p.name): p.name for p in generated.recorded}

    def program(test_id: str) -> str | None:
        return next((n for folder, n in folders.items() if test_id.startswith(folder + "/")), None)

    return parity_table(stages.parity.comparison, program, stages.start.settings.precision)


def parity_table(
    comparison: Comparison,
    program: Callable[[str], str | None] = lambda _: None,
    precision: str = "fp32",
) -> model.Parity:
    """The parity section of `comparison`, each test with the program whose suite holds it."""
    tests = [model.ParityTest(**asdict(row), program=program(row.id)) for row in comparison.rows]
    return model.Parity(
        tests=tests,
        counts=msgspec.convert(comparison.counts, model.SideCounts),
        commands=model.SideCommands(**comparison.commands),
        precision="bf16" if precision == "bf16" else "fp32",
    )


# --- the benchmark ------------------------------------------------------------------------------


def benchmark(run: BenchmarkRun) -> model.Benchmark:
    """A program's benchmark section with the speedup the verdict counts, and whether nothing
    ran on XLA."""
    measured = {field: getattr(run.section, field) for field in run.section.__struct_fields__}
    return model.Benchmark(
        **{**measured, "speedup": run.measured_speedup},
        program=run.program,
        nothing_on_xla=run.nothing_on_xla,
        on_stand_in=run.on_stand_in,
    )


@section("benchmark")
def first_benchmark(stages: Stages) -> model.Benchmark:
    """The first timed program's section (the first of `benchmarks`)."""
    return benchmark(stages.benchmark.runs[0])


@section("benchmarks", template="benchmark.md.j2")
def benchmarks(
    stages: Stages,
) -> typing.Annotated[list[model.Benchmark], msgspec.Meta(min_length=1)]:
    """One section per program whose training step was timed, in the programs' order."""
    return [benchmark(run) for run in stages.benchmark.runs]


@section("environment", template="environment.md.j2")
def environment(stages: Stages) -> model.Environment:
    """Where the programs ran."""
    env = stages.environment
    return model.Environment(
        own=env.scripts is None,
        python=env.python,
        python_version=".".join(map(str, sys.version_info[:3])),  # (the same interpreter)
        torch=env.torch,
        backend=env.backend,
        installed=[model.Installed(name=name, version=version) for name, version in env.installed],
        cached=env.cached,
        base=env.base,
        left_out=list(env.left_out),
        device=env.device,
        stand_in=None if env.stand_in is None else msgspec.convert(env.stand_in, model.StandIn),
        seconds=round(env.seconds, 1),
        declared=msgspec.convert(env.declared, model.Declared, from_attributes=True),
    )


@section("machine", template="machine.md.j2")
def machine(stages: Stages) -> model.Machine:
    """The machine's cores and what other processes used of them while the benchmark ran (its
    probes, not a load average taken afterwards, which would count PyTPU's own work)."""
    cores = speedup_estimate.cores()
    probed = [
        r.others_cores
        for run in stages.benchmark.runs
        for r in run.section.rounds
        if r.others_cores is not None
    ]
    if not probed:
        return model.Machine(cores=cores, other_work=None)
    mean = statistics.mean(probed)
    return model.Machine(
        cores=cores,
        other_work=model.OtherWork(
            probes=len(probed),
            mean_cores=round(mean, 2),
            most_cores=round(max(probed), 2),
            busy=mean > speedup_estimate.BUSY_SHARE * cores,
        ),
    )


page_only("evidence", "evidence.md.j2", "What the XLA device did in the benchmark.")


# --- the changes --------------------------------------------------------------------------------


def rule_link(code: str) -> str:
    return f"{DOCS_URL}#{kbdocs.anchor(code)}"


@section("changes", template="changes.md.j2")
def changes(stages: Stages) -> model.Changes:
    """Every change grouped by file, with its rule IDs and counts."""
    files = []
    totals = dict.fromkeys(("converted", "noted", "flagged"), 0)
    for result in sorted(stages.migration.run.files, key=lambda r: r.path):
        if not result.findings:
            continue
        rules: dict[str, dict[str, Any]] = {}
        for finding in result.findings:
            entry = rules.setdefault(
                finding.rule.id,
                {"id": finding.rule.id, "code": finding.code, **dict.fromkeys(totals, 0)},
            )
            entry[COUNTED[finding.kind]] += 1
        counts = {key: sum(r[key] for r in rules.values()) for key in totals}
        for key, n in counts.items():
            totals[key] += n
        ordered = [model.RuleCount(**rules[rule]) for rule in sorted(rules)]
        files.append(model.FileChanges(path=result.path, rules=ordered, **counts))
    return model.Changes(files=files, totals=model.Counted(**totals))


@section("review", template="review.md.j2")
def review_section(stages: Stages) -> list[model.ReviewItem]:
    """The items a person must look at."""
    return review(stages.migration.run)


def review(run: RunResult) -> list[model.ReviewItem]:
    """The items a person must look at, at the line of their `# PYTPUnnn:` comment in the
    migrated file (what the reviewer sees in the diff), else at the original line; in a
    notebook, with the cell that line counts in."""
    comments = _comment_lines(run)
    out = []
    for item in review_items.estimate(run).items:
        cell, line = (comments.get((item.path, item.code)) or [(item.cell, item.line)]).pop(0)
        out.append(
            model.ReviewItem(
                code=item.code,
                rule=item.rule,
                file=item.path,
                cell=msgspec.UNSET if cell is None else cell,
                line=line,
                message=item.message,
                link=rule_link(item.code),
                effort=item.effort,
            )
        )
    return out


def _comment_lines(run: RunResult) -> dict[tuple[str, str], list[tuple[int | None, int]]]:
    """(file, code) -> the (cell, line) of that code's review comments in the migrated file, in
    order, as the rewriter recorded them (the cell is None but in a notebook)."""
    found: dict[tuple[str, str], list[tuple[int | None, int]]] = {}
    for result in run.files:
        for comment in result.comments:
            if comment.needs_review:
                where = (comment.cell, comment.line)
                found.setdefault((result.path, comment.code), []).append(where)
    return found


@section("tests_generated", template="tests_generated.md.j2")
def tests_generated(stages: Stages) -> model.TestsGenerated:
    """The units that have tests, and those without one and why, with the program of each."""
    generated: ProgramsResult = stages.tests.generated
    tested = [model.TestedUnit(**unit._asdict()) for unit in generated.tested]
    untested = [model.UntestedUnit(**unit._asdict()) for unit in generated.untested]
    return model.TestsGenerated(tested=tested, untested=untested)


# --- how to check it, and what went wrong -------------------------------------------------------


@section("reproduce", template="reproduce.md.j2")
def reproduce(stages: Stages) -> list[str]:
    """Shell lines."""
    return stages.reproduce


@section("problems", template="problems.md.j2")
def problems(stages: Stages) -> list[model.Text]:
    """Errors that did not stop the run."""
    return stages.problems


@section("timings", template="footer.md.j2")
def timings(stages: Stages) -> model.Timings:
    """Seconds per stage of the run."""
    return model.Timings(**{k: round(v, 1) for k, v in stages.timings.items()})
