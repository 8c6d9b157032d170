"""The benchmark's tables: line coverage, the mutants and the mutation score."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from benchmarks.testgen.operators import OPERATORS


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def print_coverage(coverage: dict[str, Any], console: Console) -> None:
    suite = coverage["suite"]
    state = "timed out" if suite["timed_out"] else f"exit {suite['exit_code']}"
    console.print(
        f"suite under coverage: {escape(suite['summary'])} ({state}, {suite['seconds']:.1f} s)"
    )
    table = Table(title="line coverage (files executed at least once)")
    table.add_column("file")
    table.add_column("statements", justify="right")
    table.add_column("covered", justify="right")
    table.add_column("coverage", justify="right")
    table.add_column("missing lines", overflow="fold")
    for row in coverage["files"]:
        table.add_row(
            escape(row["path"]),
            str(row["statements"]),
            str(row["covered"]),
            _percent(row["percent"]),
            escape(row["missing"]),
        )
    total = coverage["total"]
    table.add_row(
        f"[b]total ({total['files']} files)[/]",
        str(total["statements"]),
        str(total["covered"]),
        f"[b]{_percent(total['percent'])}[/]",
        "",
        end_section=True,
    )
    console.print(table)
    if coverage["unexecuted"]:
        console.print("not executed by the suite (not in the total):")
        for path in coverage["unexecuted"]:
            console.print(f"  {escape(path)}")
    if coverage["no_statements"]:
        console.print(
            f"no statements (not counted): {escape(', '.join(coverage['no_statements']))}"
        )


def print_mutation(mutation: dict[str, Any], console: Console) -> None:
    for path, classes in mutation["model_code"].items():
        console.print(f"model code: {escape(path)}: {escape(', '.join(classes))}")
    sites = ", ".join(f"{op} {mutation['sites'].get(op, 0)}" for op in OPERATORS)
    console.print(f"mutation sites: {sites}")
    if not mutation["mutants"]:
        return
    table = Table(title="mutants")
    table.add_column("#", justify="right")
    table.add_column("operator")
    table.add_column("location")
    table.add_column("class")
    table.add_column("change", overflow="fold")
    table.add_column("outcome")
    table.add_column("s", justify="right")
    for mutant in mutation["mutants"]:
        killed = mutant["outcome"] == "killed"
        outcome = f"[green]killed[/] ({mutant['reason']})" if killed else "[red]survived[/]"
        table.add_row(
            str(mutant["id"]),
            mutant["operator"],
            escape(f"{mutant['path']}:{mutant['line']}"),
            escape(mutant["cls"]),
            escape(mutant["description"]),
            outcome,
            f"{mutant['seconds']:.1f}",
        )
    console.print(table)

    table = Table(title="mutation score")
    table.add_column("operator")
    table.add_column("killed", justify="right")
    table.add_column("total", justify="right")
    table.add_column("score", justify="right")
    score = mutation["score"]
    for operator, row in score["by_operator"].items():
        table.add_row(operator, str(row["killed"]), str(row["total"]), f"{row['score']:.0%}")
    overall = score["overall"]
    table.add_row(
        "[b]overall[/]",
        str(overall["killed"]),
        str(overall["total"]),
        f"[b]{overall['score']:.0%}[/]",
        end_section=True,
    )
    console.print(table)
