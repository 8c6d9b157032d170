"""Mutation testing: the candidate mutants of the model code, a seeded sample of them, each run
against the suite in a copy of the repository, and the scores."""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import libcst as cst
from rich.console import Console
from rich.markup import escape

from benchmarks.testgen.model_code import find_model_code
from benchmarks.testgen.operators import OPERATORS, find_sites, mutate
from benchmarks.testgen.runs import Run, copy_repo, pytest_command, run_command, stop_all, suite_env


@dataclass
class Mutant:
    operator: str
    path: str  # relative to the repository, POSIX
    line: int
    column: int
    cls: str
    description: str
    site_index: int  # index of the site in find_sites() of its file
    id: int = 0
    outcome: str = "not run"  # killed | survived
    reason: str = ""  # why it was killed: tests failed, timeout, exit code
    exit_code: int | None = None
    seconds: float = 0.0
    summary: str = ""  # pytest's last summary line


def round_robin(groups: Sequence[Sequence[Any]]) -> list[Any]:
    marker = object()
    rows = itertools.zip_longest(*groups, fillvalue=marker)
    return [item for row in rows for item in row if item is not marker]


def sample(candidates: Sequence[Mutant], limit: int, seed: int) -> list[Mutant]:
    """Up to `limit` candidates, deterministic for a seed: each (file, class) group shuffled,
    the groups of an operator interleaved, then the operators interleaved."""
    rng = random.Random(seed)
    per_operator = []
    for operator in OPERATORS:
        groups: dict[tuple[str, str], list[Mutant]] = defaultdict(list)
        for candidate in candidates:
            if candidate.operator == operator:
                groups[(candidate.path, candidate.cls)].append(candidate)
        for key in sorted(groups):
            rng.shuffle(groups[key])
        per_operator.append(round_robin([groups[key] for key in sorted(groups)]))
    chosen = round_robin(per_operator)[: max(limit, 0)]
    return sorted(chosen, key=lambda c: (c.path, c.line, c.column, OPERATORS.index(c.operator)))


def candidate_mutants(repo: Path, model_code: dict[Path, set[str]]) -> list[Mutant]:
    candidates = []
    for path, classes in sorted(model_code.items()):
        source = cst.parse_module(path.read_bytes()).code
        relative = path.relative_to(repo).as_posix()
        for index, site in enumerate(find_sites(source, classes)):
            candidates.append(Mutant(path=relative, site_index=index, **asdict(site)))
    return candidates


def run_mutant(
    mutant: Mutant,
    repo: Path,
    classes: Collection[str],
    suite_arg: str,
    timeout: float,
) -> Mutant:
    original = cst.parse_module((repo / mutant.path).read_bytes())
    mutated = mutate(original.code, mutant.site_index, classes)
    with tempfile.TemporaryDirectory(prefix="pytpu-mutant-", ignore_cleanup_errors=True) as tmp:
        copy = copy_repo(repo, Path(tmp))
        (copy / mutant.path).write_bytes(mutated.encode(original.encoding))
        run = run_command(
            [sys.executable, *pytest_command(suite_arg, stop_first=True)],
            cwd=copy,
            env=suite_env(repo),
            timeout=timeout,
        )
    mutant.exit_code = run.returncode
    mutant.seconds = round(run.seconds, 2)
    mutant.summary = run.summary
    if run.returncode is None:
        mutant.outcome, mutant.reason = "killed", f"timeout ({timeout:g} s)"
    elif run.returncode == 1:
        mutant.outcome, mutant.reason = "killed", "tests failed"
    elif run.returncode != 0:
        mutant.outcome, mutant.reason = "killed", f"pytest exit code {run.returncode}"
    else:
        mutant.outcome = "survived"
    return mutant


def scores(mutants: Sequence[Mutant]) -> dict[str, Any]:
    def score(group: Sequence[Mutant]) -> dict[str, Any]:
        killed = sum(1 for x in group if x.outcome == "killed")
        total = len(group)
        return {
            "killed": killed,
            "total": total,
            "score": round(killed / total, 3) if total else None,
        }

    by_operator = {
        op: score([x for x in mutants if x.operator == op])
        for op in OPERATORS
        if any(x.operator == op for x in mutants)
    }
    return {"by_operator": by_operator, "overall": score(mutants)}


def mutation_testing(
    repo: Path,
    suite: Path,
    suite_arg: str,
    files: list[Path],
    args: argparse.Namespace,
    console: Console,
) -> dict[str, Any]:
    model_code = find_model_code(files)
    candidates = candidate_mutants(repo, model_code)
    chosen = sample(candidates, args.max_mutants, args.seed)
    for number, mutant in enumerate(chosen, 1):
        mutant.id = number
    result: dict[str, Any] = {
        "model_code": {
            path.relative_to(repo).as_posix(): sorted(classes)
            for path, classes in sorted(model_code.items())
        },
        "sites": dict(Counter(c.operator for c in candidates)),
        "seed": args.seed,
        "max_mutants": args.max_mutants,
        "timeout_seconds": args.timeout,
        "jobs": args.jobs,
    }
    if not chosen:
        reason = "--max-mutants is 0" if candidates else "no mutation site in nn.Module code"
        console.print(f"no mutants: {reason}")
        return {**result, "baseline_seconds": None, "mutants": [], "score": scores([])}

    baseline = run_baseline(repo, suite_arg, args.timeout * 3, console)
    console.print(
        f"baseline (unmutated, in a copy): {escape(baseline.summary)} "
        f"[{baseline.seconds:.1f} s]; running {len(chosen)} of {len(candidates)} mutants "
        f"with {args.jobs} job(s)"
    )
    classes_of = {path.relative_to(repo).as_posix(): c for path, c in model_code.items()}
    run_all(chosen, repo, classes_of, suite_arg, args, console)
    return {
        **result,
        "baseline_seconds": round(baseline.seconds, 2),
        "mutants": [asdict(mutant) for mutant in chosen],
        "score": scores(chosen),
    }


def run_baseline(repo: Path, suite_arg: str, timeout: float, console: Console) -> Run:
    """The suite on the unmutated code, in a copy; the benchmark stops unless it passes."""
    with tempfile.TemporaryDirectory(prefix="pytpu-baseline-", ignore_cleanup_errors=True) as tmp:
        copy = copy_repo(repo, Path(tmp))
        baseline = run_command(
            [sys.executable, *pytest_command(suite_arg, stop_first=False)],
            cwd=copy,
            env=suite_env(repo),
            timeout=timeout,
        )
    if baseline.returncode != 0:
        console.print(escape(baseline.tail()))
        state = "timed out" if baseline.returncode is None else f"exit {baseline.returncode}"
        sys.exit(
            f"error: the suite does not pass on the unmutated code in a copy of the repository "
            f"({state}); mutation testing needs a passing suite"
        )
    return baseline


def run_all(
    chosen: Sequence[Mutant],
    repo: Path,
    classes_of: dict[str, set[str]],
    suite_arg: str,
    args: argparse.Namespace,
    console: Console,
) -> None:
    """Run the mutants, `args.jobs` at a time, printing each outcome as it comes."""
    done = 0
    with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        futures = [
            pool.submit(run_mutant, mutant, repo, classes_of[mutant.path], suite_arg, args.timeout)
            for mutant in chosen
        ]
        try:
            for future in as_completed(futures):
                mutant = future.result()
                done += 1
                colour = "green" if mutant.outcome == "killed" else "red"
                console.print(
                    f"  [{done:>2}/{len(chosen)}] [{colour}]{mutant.outcome:8}[/] "
                    f"{mutant.operator:10} {escape(mutant.path)}:{mutant.line}  "
                    f"{escape(mutant.description)}  ({mutant.seconds:.1f} s)"
                )
        except BaseException:
            for future in futures:
                future.cancel()
            stop_all()
            raise
