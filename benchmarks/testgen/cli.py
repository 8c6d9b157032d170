"""The benchmark's command line: generation, coverage, mutation testing, the report."""

from __future__ import annotations

import argparse
import json
import platform
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from benchmarks.testgen.line_coverage import measure_coverage
from benchmarks.testgen.model_code import python_files
from benchmarks.testgen.mutants import mutation_testing
from benchmarks.testgen.report import print_coverage, print_mutation
from benchmarks.testgen.runs import interrupted, run_command

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


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.testgen",
        description=sys.modules["benchmarks.testgen"].__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    signal.signal(signal.SIGTERM, interrupted)  # clean up (kill the runs) as on Ctrl-C
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
