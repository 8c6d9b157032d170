"""The `pytpu` command line: migrate (the main job), verify, rewrite, analyze, testgen, and the
knowledge-base commands.

Exit codes follow black and ruff: 0 when there is nothing to do, 1 under `--check` when there is,
2 for a usage error, a malformed knowledge base or an internal error. Other packages add commands
through the `pytpu.commands` entry-point group, so the engine never imports them.

Start-up is kept short: importing this module loads typer and the standard library only; each
command imports what it uses (the rewriter, the test generator, torch, rich) when it runs.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.core
import typer.main

if TYPE_CHECKING:
    from importlib import metadata

    from rich.console import Console

    from pytpu.engine.config import Config
    from pytpu.engine.rewriter.checkout import RunResult

PLUGIN_GROUP = "pytpu.commands"
# Below this many files a run is quick enough that a progress bar would only flicker.
PROGRESS_MIN_FILES = 20
# Defaults shown in --help, written here so that --help imports neither the test generator nor
# the KB: testgen.DEFAULT_OUT and kbdocs.DEFAULT_OUTPUT (a test keeps them equal).
TESTS_OUT = "tests/pytpu"
KB_DOCS_OUTPUT = Path("docs/kb.md")

app = typer.Typer(
    name="pytpu",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help and errors, as black and ruff print them
)
kb_app = typer.Typer(
    help="Browse the knowledge base: the rules, their PYTPU codes and the reference page.",
    no_args_is_help=True,
)
app.add_typer(kb_app, name="kb")


# --- shared options and helpers --------------------------------------------------------------


def _check_target(value: str | None) -> str | None:
    from pytpu.engine.rewriter import checkout

    if value is None:
        return None  # the repository's settings say, or the default
    try:
        checkout.parse_target(value)
    except ValueError as exc:  # packaging's InvalidVersion is a ValueError too
        raise typer.BadParameter(str(exc)) from None
    return value


PathArgument = Annotated[
    Path,
    typer.Argument(
        exists=True,
        metavar="PATH",
        help="A Python file or a directory (searched recursively; .gitignore is honoured).",
        show_default=False,
    ),
]
JsonOption = Annotated[
    Path | None,
    typer.Option("--json", metavar="FILE", help="Also write the machine-readable report to FILE."),
]
TargetOption = Annotated[
    str | None,
    typer.Option(
        "--target",
        metavar="TARGET",
        callback=_check_target,
        help=(
            "What to migrate to: torch_xla (PyTorch/XLA) or torch_tpu (TorchTPU), with"
            " ==VERSION for the rules valid there. Default: the `target` of the repository's"
            " settings (.github/pytpu.yml), else PYTPU_TARGET, else torch_xla."
        ),
        show_default=False,
    ),
]


@functools.cache
def _settings_schema() -> dict[str, Any]:
    """engine/config.schema.json, read once (not imported: --help stays quick)."""
    return json.loads(Path(__file__).with_name("config.schema.json").read_text("utf-8"))


def _setting_option(name: str, help: str) -> Any:
    """A `--name` option for a rule-choosing setting, its values those of the setting in
    engine/config.schema.json, its default the repository's."""
    setting = _settings_schema()["properties"][name]
    values = enum.StrEnum(f"{name}_values", {v.upper(): v for v in setting["enum"]})
    default = f"Default: the `{name}` of the repository's settings, else {setting['default']}."
    return Annotated[
        values | None,
        typer.Option(
            f"--{name.replace('_', '-')}",
            case_sensitive=False,
            help=f"{help} {default}",
            show_default=False,
        ),
    ]


DataParallelOption = _setting_option(
    "data_parallel",
    "spmd: shard each training batch over every XLA device (one program, SPMD); none: one"
    " device; auto: spmd when the settings give the migrated side several devices"
    " (virtual_devices).",
)
PrecisionOption = _setting_option(
    "precision",
    "bf16: each training step's forward pass and loss run under bfloat16 autocast; fp32: the"
    " program's own precision.",
)
BatchOption = _setting_option(
    "batch",
    "Under SPMD, per_device: the program's batch size is each device's share (the loader's"
    " batch is multiplied by the devices); global: it is the whole step's batch.",
)
CheckOption = Annotated[
    bool,
    typer.Option("--check", help="Exit with 1 when there is something to do (see above)."),
]


def _err(message: str) -> None:
    typer.echo(message, err=True)


def _repository_settings(path: Path) -> Config:
    """The settings of the repository PATH is in (the nearest folder up with
    `.github/pytpu.yml`, or the git root), as `migrate` would use them; the defaults (with a
    message) when they cannot be read."""
    from pytpu.engine import config

    folder = path.resolve() if path.is_dir() else path.resolve().parent
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists() or any(
            (candidate / f).is_file() for f in config.YAML_FILES
        ):
            try:
                return config.load(candidate)
            except config.ConfigError as exc:
                _err(f"{exc}; this run uses the default target, torch_xla, and default settings")
                return config.Config()
    return config.load(folder)  # (no repository: PYTPU_TARGET, else the default)


def _choices(
    path: Path, target: str | None, **options: enum.StrEnum | None
) -> tuple[str, dict[str, str]]:
    """The target and the settings that choose rules: the options given (`data_parallel=`,
    `precision=`, `batch=`), else the repository's."""
    settings = _repository_settings(path)
    given = {name: value.value for name, value in options.items() if value is not None}
    settings = dataclasses.replace(settings, **given)
    return (target if target is not None else settings.target), settings.rule_settings


def _stdout() -> Console:
    """Rich output for stdout; piped or captured, wide enough that table rows stay whole."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=160)
    return console


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"pytpu {version('pytpu')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Migrate PyTorch code written for CUDA GPUs to TPUs through PyTorch/XLA.

    Exit codes: 0 nothing to do, 1 something to do (with --check), 2 usage or internal error.
    """


def _progress(label: str) -> Callable[[Iterable[Path], int], Iterable[Path]]:
    """The engine's progress hook: a transient bar on stderr for long runs in a terminal."""

    def wrap(paths: Iterable[Path], total: int) -> Iterable[Path]:
        if total < PROGRESS_MIN_FILES or not sys.stderr.isatty():
            return paths
        return _track(paths, total, label)

    return wrap


def _track(paths: Iterable[Path], total: int, label: str) -> Iterator[Path]:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(label, total=total)
        for path in paths:
            yield path
            progress.advance(task)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    import json

    try:
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as exc:
        message = f"cannot write {path}: {exc.strerror}"
        raise typer.BadParameter(message, param_hint="--json") from None
    _err(f"JSON report written to {path}")


def _print_errors(run: RunResult) -> None:
    for result in run.errors:
        _err(f"error: {result.error}")
    for result in run.files:  # a notebook's cells that are Python but could not be read
        for note in result.notebook.notes if result.notebook else ():
            _err(f"warning: {result.path} {note}")
    if not run.files:
        _err(f"warning: no Python files found under {run.root}")


# --- rewrite and analyze ---------------------------------------------------------------------


@app.command("rewrite")
def rewrite_command(
    ctx: typer.Context,
    path: PathArgument,
    diff: Annotated[
        bool, typer.Option("--diff", help="Print the changes as unified diffs; write nothing.")
    ] = False,
    write: Annotated[
        bool, typer.Option("--write", help="Write the migrated files in place.")
    ] = False,
    check: CheckOption = False,
    json_file: JsonOption = None,
    target: TargetOption = None,
    data_parallel: DataParallelOption = None,
    precision: PrecisionOption = None,
    batch: BatchOption = None,
) -> None:
    """Migrate the Python files under PATH to torch_xla (or --target's backend).

    Without --diff or --write this is a dry run that lists the files that would change. The
    summary goes to stderr; files that cannot be migrated are reported there and skipped.
    With --check the exit code is 1 when a file would change (or was skipped with an error).
    """
    if diff and write:
        ctx.fail("--diff and --write cannot be used together: --diff only shows the changes.")
    from pytpu.engine.reporting import review
    from pytpu.engine.rewriter import checkout

    target, chosen = _choices(
        path, target, data_parallel=data_parallel, precision=precision, batch=batch
    )
    run = checkout.run(
        path, target=target, write=write, progress=_progress("Rewriting"), settings=chosen
    )
    _print_errors(run)
    for result in run.changed:
        if diff:
            typer.echo(result.diff(), nl=False)
        else:
            _err(f"{'changed' if write else 'would change'} {result.label()}")
    _err(review.summary_line(run, wrote=write))
    _err(review.counts_line(run.totals()))
    if json_file is not None:
        mode = "write" if write else "diff" if diff else "dry-run"
        _write_json(json_file, {"command": "rewrite", "mode": mode, **run.as_dict()})
    if check and (run.changed or run.errors):
        raise typer.Exit(1)


@app.command("analyze")
def analyze_command(
    path: PathArgument,
    check: CheckOption = False,
    json_file: JsonOption = None,
    target: TargetOption = None,
    data_parallel: DataParallelOption = None,
    precision: PrecisionOption = None,
    batch: BatchOption = None,
) -> None:
    """Report what migrating PATH would convert and what a person must review; change nothing.

    Prints a table per file (converted, converted with a review note, flagged only, unknown
    CUDA-specific sites), the estimated review effort, and the review items as file:line:col.
    With --check the exit code is 1 when anything was found (or a file was skipped with an error).
    """
    from pytpu.engine.reporting import review
    from pytpu.engine.rewriter import checkout

    target, chosen = _choices(
        path, target, data_parallel=data_parallel, precision=precision, batch=batch
    )
    run = checkout.run(
        path, target=target, write=False, progress=_progress("Analyzing"), settings=chosen
    )
    _print_errors(run)
    review.print_analysis(run, _stdout())
    if json_file is not None:
        _write_json(json_file, {"command": "analyze", **review.analysis_dict(run)})
    found = any(result.findings for result in run.files)
    if check and (found or run.changed or run.errors):
        raise typer.Exit(1)


# --- test generation -------------------------------------------------------------------------


@app.command("testgen")
def testgen_command(
    path: Annotated[
        Path,
        typer.Argument(
            exists=True, file_okay=False, metavar="PATH", help="The repository.", show_default=False
        ),
    ],
    run: Annotated[
        list[str] | None,
        typer.Option(
            "--run",
            metavar="CMD",
            help="A program's short command, a shell line run from PATH, optionally named "
            "('train: python train.py'); repeat it for several programs (default: the `run` "
            "of the configuration, else the commands PyTPU finds: README code blocks, console "
            "scripts, entry scripts with their own short-run flags, e.g. --epochs 1).",
        ),
    ] = None,
    out: Annotated[
        str, typer.Option("--out", metavar="DIR", help="Where the suite goes, inside PATH.")
    ] = TESTS_OUT,
    timeout: Annotated[
        float, typer.Option("--timeout", metavar="S", help="Time limit of each program run.")
    ] = 300,
    max_unit_kib: Annotated[
        int,
        typer.Option("--max-unit-kib", metavar="KIB", help="Recorded inputs per unit, at most."),
    ] = 1024,
    json_file: JsonOption = None,
) -> None:
    """Write characterisation tests for PATH that pin down what its code does today.

    Runs the program's short command (twice, in a child process with a time limit and without
    secrets in its environment), records the first inputs of each module class and tensor
    function the repository defines and the first iteration of each training step, and writes a
    pytest suite with that data into PATH/tests/pytpu. The suite passes on the original code on
    the CPU, and after migration with PYTPU_DEVICE=xla. Prints what got tests and what did not.
    """
    from dataclasses import replace

    from pytpu.engine import config, environment, testgen

    console = _stdout()
    started = time.perf_counter()
    with console.status("") as status:
        try:
            programs = _programs(path, run)
            # (the programs run in the environment of what the repository declares)
            settings = replace(config.load(path), run=programs)
            with environment.using(environment.prepare(path, settings)):
                outcome = testgen.generate_programs(
                    path,
                    programs,
                    out=out,
                    timeout=timeout,
                    max_unit_bytes=max_unit_kib * 1024,
                    stage=lambda text: status.update(text),
                )
        except (
            testgen.TestgenError,
            config.ConfigError,
            environment.EnvironmentSetupError,
            ValueError,
        ) as exc:
            _err(f"pytpu testgen: error: {exc}")
            raise typer.Exit(2) from None
    for error in outcome.errors:
        _err(f"warning: {error}")
    for program in outcome.programs:
        _print_tests_table(program, console, several=outcome.several)
    tested, untested = len(outcome.tested), len(outcome.untested)
    _err(
        f"wrote {outcome.out} in {time.perf_counter() - started:.0f} s: {tested} units tested, "
        f"{untested} without a test, {outcome.data_bytes / 1024:.0f} KiB of recorded data"
    )
    if json_file is not None:
        _write_json(json_file, {"command": "testgen", **outcome.as_dict()})


def _programs(path: Path, given: list[str] | None) -> tuple[Any, ...]:
    """The `--run` options, else the configuration's `run` (none: PyTPU finds programs)."""
    from pytpu.engine import config

    if given:
        return tuple(config.program_option(text) for text in given)
    return config.load(path).run


def _print_tests_table(program: Any, console: Console, several: bool) -> None:
    """A program's tests (and which) and what did not get one (and why), one row per unit; or
    why the program could not be recorded."""
    from rich.table import Table
    from rich.text import Text

    title = f"{program.name}: `{program.command}`" if several else f"`{program.command}`"
    if program.generated is None:
        why = program.error or "not tried: list it in `run` to record it"
        console.print(Text(f"{title}: no tests: {why}", style="yellow"))
        return
    table = Table(title=f"Tests for {title}", title_justify="left")
    for column in ("unit", "name", "tests or reason"):
        table.add_column(column)
    for unit in program.generated.tested:
        table.add_row(unit.kind, unit.name, ", ".join(unit.tests))
    for unit in program.generated.untested:
        table.add_row(unit.kind, unit.name, Text(f"no test: {unit.reason}", style="yellow"))
    console.print(table)


# --- the main job ----------------------------------------------------------------------------

RepositoryArgument = Annotated[
    Path,
    typer.Argument(metavar="PATH", help="The git repository (its top folder).", show_default=False),
]


def _stage_printer(console: Console) -> Callable[[str, str, float | None], None]:
    """Each stage on its own line with its time, as it finishes (a spinner while it runs; in a
    log, where no spinner shows, a line as it starts: a CI log tells what a long stage is)."""
    status = console.status("")

    def on_stage(name: str, event: str, seconds: float | None) -> None:
        if event == "start" and not console.is_terminal:
            console.print(f"{name}...")
        elif event == "start":
            status.update(f"{name}...")
            status.start()
        else:
            status.stop()
            console.print(f"[green]done[/green] {name:<10} {seconds:6.1f} s")

    return on_stage


@app.command("migrate")
def migrate_command(path: RepositoryArgument = Path(".")) -> None:
    """The main job: tests, migration, parity, benchmark and report, on the branch pytpu/migrate.

    On a git repository with a clean working tree, creates the branch pytpu/migrate from HEAD with
    two commits: the generated behaviour tests, then the migration. Runs the tests on the
    original code (CPU) and on the migrated code (XLA), times the training step on both, and
    writes the report to .pytpu/report.md and .pytpu/report.json. The branch you are on, and your
    working tree, are never changed. Exit code 0 on parity, 1 when a test regressed, 2 on errors.
    """
    from rich.console import Console

    from pytpu.engine import migrate

    console = Console(stderr=True)
    try:
        result = migrate.migrate(path, on_stage=_stage_printer(console))
    except migrate.MigrateError as exc:
        _err(f"pytpu migrate: error: {exc}")
        raise typer.Exit(2) from None
    words = {
        "created": "created",
        "updated": "updated with new commits",
        "unchanged": "unchanged (nothing new)",
    }
    _err(f"branch {migrate.gitrepo.BRANCH}: {words[result.status]}")
    _err(f"report: {result.report_dir / 'report.md'}")
    typer.echo(result.headline)
    raise typer.Exit(result.exit_code)


@app.command("verify")
def verify_command(
    path: RepositoryArgument = Path("."),
    base: Annotated[
        str, typer.Option("--base", metavar="REV", help="The original code's revision.")
    ] = "HEAD~1",
    json_file: JsonOption = None,
) -> None:
    """Run the generated suite on the original code (REV, on the CPU) and on PATH (on XLA).

    Prints the parity table, regressions first. Exit code 1 when a test that passes on the
    original code does not pass on the migrated code.
    """
    from rich.table import Table
    from rich.text import Text

    from pytpu.engine import migrate

    try:
        outcome = migrate.verify(path, base)
    except migrate.MigrateError as exc:
        _err(f"pytpu verify: error: {exc}")
        raise typer.Exit(2) from None
    checked = outcome.parity
    for problem in checked.problems:
        _err(f"warning: {problem}")
    devices = checked.devices
    table = Table(title_justify="left", title=f"Parity: {devices.baseline} vs {devices.target}")
    for column in ("test", "before", "after"):
        table.add_column(column)
    for row in checked.rows:
        style = "red" if row.regression else None
        table.add_row(row.id, row.baseline, Text(row.target, style=style or ""))
    _stdout().print(table)
    verdict = checked.counts
    _err(f"parity {verdict.fraction}, {verdict.regressions} regression(s)")
    if json_file is not None:
        _write_json(json_file, {"command": "verify", **outcome.as_dict()})
    raise typer.Exit(1 if verdict.regressions else 0)


# --- the knowledge base ----------------------------------------------------------------------


@kb_app.command("list")
def kb_list() -> None:
    """List every rule: ID, PYTPU code, family, applicability and title."""
    from rich.table import Table
    from rich.text import Text

    from pytpu.engine.rewriter import kb

    knowledge = kb.default()
    table = Table(title=f"{len(knowledge.rules)} rules")
    for header in ("ID", "Code", "Family", "Applicability", "Title"):
        table.add_column(header, no_wrap=header != "Title")
    for rule in sorted(knowledge.rules, key=lambda r: r.diagnostic.code):
        diag = rule.diagnostic
        table.add_row(rule.id, diag.code, rule.family, rule.applicability, Text(rule.title))
    _stdout().print(table)


@kb_app.command("show")
def kb_show(
    key: Annotated[
        str, typer.Argument(metavar="ID|CODE", help="A rule ID (R-DEV-04) or code (PYTPU104).")
    ],
) -> None:
    """Show one rule: what it matches, what it does, why, what to do, and its examples."""
    import difflib

    from rich.console import Console
    from rich.markdown import Markdown

    from pytpu.engine.rewriter import kb, kbdocs

    knowledge = kb.default()
    rule = knowledge.find(key) or knowledge.find(key.upper())
    if rule is None:
        known = [r.id for r in knowledge.rules] + [r.diagnostic.code for r in knowledge.rules]
        close = difflib.get_close_matches(key.strip().upper(), known, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        _err(f"error: no rule with ID or code {key!r}{hint}; `pytpu kb list` lists them all")
        raise typer.Exit(2)
    text = kbdocs.rule_markdown(rule, level=1, with_anchor=False)
    console = Console()
    if console.is_terminal:
        console.print(Markdown(text))
    else:  # piped: plain Markdown, as `ruff rule` prints it
        typer.echo(text, nl=False)


@kb_app.command("docs")
def kb_docs(
    output: Annotated[
        Path, typer.Option("--output", "-o", metavar="FILE", help="Where the reference page goes.")
    ] = KB_DOCS_OUTPUT,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit with 1 if the page is out of date.")
    ] = False,
) -> None:
    """Generate the knowledge-base reference page (docs/kb.md) from kb/*.yaml, and the
    vocabulary's parts of kb/schema.json from the rule vocabulary."""
    from pytpu.engine.rewriter import kb, kbdocs

    for path, make in kbdocs.generated_files(output):
        text = make()
        if kbdocs.is_current(path, text):
            _err(f"{path} is up to date")
            continue
        if check:
            again = "pytpu kb docs" + (f" --output {output}" if output != KB_DOCS_OUTPUT else "")
            _err(f"{path} is out of date with the knowledge base; run `{again}`")
            raise typer.Exit(1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="\n")
        kb.schema.cache_clear()  # the page is made with the schema just written
        _err(f"wrote {path}")


# --- commands from other packages ------------------------------------------------------------

# The command class of the click that typer runs on (its own copy in recent typer versions).
_COMMAND_BASE = typer.core.TyperCommand.__bases__[0]


def _forwarding_command(name: str, command: Any) -> Any:
    """Wrap a command of another click installation: it parses its own arguments."""
    forward = typer.Typer()

    @forward.command(
        name=name,
        help=getattr(command, "help", None),
        add_help_option=False,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def run(ctx: typer.Context) -> None:
        command.main(args=list(ctx.args), prog_name=f"pytpu {name}")

    return typer.main.get_command(forward)


def _plugin_command(entry: metadata.EntryPoint) -> Any | None:
    obj = entry.load()
    if isinstance(obj, typer.Typer):
        return typer.main.get_command(obj)
    if isinstance(obj, _COMMAND_BASE):
        return obj
    if callable(getattr(obj, "main", None)) and hasattr(obj, "params"):
        return _forwarding_command(entry.name, obj)
    return None


def register_plugins(command: Any) -> None:
    """Add the `pytpu.commands` entry points. A broken plugin costs a warning, never the CLI."""
    from importlib import metadata

    try:
        entries = sorted(metadata.entry_points(group=PLUGIN_GROUP), key=lambda e: e.name)
    except Exception as exc:  # broken installed metadata must not break the built-in commands
        _err(f"warning: could not read the {PLUGIN_GROUP} entry points: {exc}")
        return
    for entry in entries:
        where = f"command plugin {entry.name!r} ({entry.value})"
        if entry.name in command.commands:
            _err(f"warning: skipped {where}: `pytpu {entry.name}` is already a command")
            continue
        try:
            plugin = _plugin_command(entry)
        except Exception as exc:
            _err(f"warning: skipped {where}: it failed to load: {type(exc).__name__}: {exc}")
            continue
        if plugin is None:
            _err(f"warning: skipped {where}: it is not a typer app or a click command")
            continue
        command.add_command(plugin, entry.name)


def build_cli(argv: Sequence[str] | None = None) -> Any:
    """The root click command: the built-in commands plus the installed plugins. A built-in
    command named first in `argv` runs without them: finding and loading the plugins costs a
    few hundredths of a second at every start."""
    command = typer.main.get_command(app)
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in command.commands:
        register_plugins(command)
    return command


def _fail(message: str) -> None:
    _err(f"pytpu: error: {message}")
    sys.exit(2)


def _is_kb_error(exc: Exception) -> bool:
    """A malformed knowledge base; only possible once a command has loaded it."""
    kb = sys.modules.get("pytpu.engine.rewriter.kb")
    return kb is not None and isinstance(exc, kb.KBError)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        args = list(argv) if argv is not None else None
        build_cli(args).main(args=args, prog_name="pytpu")
    except Exception as exc:
        if _is_kb_error(exc):
            _fail(f"the knowledge base cannot be used: {exc}")
        if os.environ.get("PYTPU_DEBUG"):
            raise
        _fail(
            f"internal error: {type(exc).__name__}: {exc}. "
            "Please report it; PYTPU_DEBUG=1 shows the traceback."
        )


if __name__ == "__main__":
    main()
