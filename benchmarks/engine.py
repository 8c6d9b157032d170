"""Benchmark the rewrite engine on real code, as whole processes: `pytpu rewrite TREE` (a dry run,
nothing is written) against a process that only reads, parses and regenerates the same files with
libcst (the floor), on torch's `nn/` + `optim/` sources and on the whole installed torch tree.

    .venv/bin/python -m benchmarks.engine [--tree nn-optim|torch|PATH ...] [--runs N]
        [--profile] [--json FILE]

The goal (issue 12): the engine at most 1.5x the floor on both trees.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import platform
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.processes import Timing, as_installed, time_commands, venv_script
from pytpu.engine.rewriter import checkout
from pytpu.engine.rewriter.kb import kb_dir
from pytpu.engine.rewriter.sources import discover

GOAL = 1.5  # engine / floor, at most
TREES = ("nn-optim", "torch")
FLOOR = """\
import sys
import libcst

for path in open(sys.argv[1], encoding="utf-8").read().splitlines():
    try:
        libcst.parse_module(open(path, "rb").read()).code
    except (libcst.ParserSyntaxError, RecursionError):
        pass
"""
METHOD = """\
method:
  trees     nn-optim: torch/nn and torch/optim of the installed torch, copied into one temporary
            folder; torch: the installed torch package as it is
  engine    `pytpu rewrite TREE` (dry run: discovery, KB, pre-filter, parse, transform, black on
            changed files, re-parse checks, summary), a whole process
  floor     `python -c FLOOR LIST`: import libcst, then libcst.parse_module(bytes).code for each
            file the engine discovers (the list computed beforehand), a whole process
  rounds    engine and floor alternate, N rounds after one that is not counted (it writes the
            bytecode of what each imports, as pip does when it installs a package); the best
            (minimum) wall time of each counts, and its least CPU time (the child's user +
            system)
  figures   files/s = files discovered / best wall seconds; ratio = engine / floor"""


def torch_root() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        sys.exit("torch is not installed in this environment")
    return Path(spec.origin).parent


def engine_fingerprint() -> str:
    """A short hash of the engine's code and KB, to tie the figures to one state of them."""
    digest = hashlib.sha256()
    for package in (Path(checkout.__file__).parent, Path(kb_dir())):
        for path in sorted(package.glob("*")):
            if path.suffix in (".py", ".yaml", ".json"):
                digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def prepare(tree: str, scratch: Path) -> Path:
    """The folder a tree names: nn-optim copied under `scratch`, torch as installed, or a path."""
    if tree == "torch":
        return torch_root()
    if tree == "nn-optim":
        root = scratch / "nn-optim"
        for part in ("nn", "optim"):
            shutil.copytree(
                torch_root() / part, root / part, ignore=shutil.ignore_patterns("*.pyc")
            )
        return root
    root = Path(tree).resolve()
    if not root.is_dir():
        sys.exit(f"error: {tree} is neither nn-optim, torch nor a folder")
    return root


def measure(tree: str, root: Path, runs: int, scratch: Path) -> dict[str, Any]:
    files, skipped = discover(root)
    listing = scratch / f"{tree.replace('/', '_')}.files"
    listing.write_text("".join(f"{p}\n" for p in files), encoding="utf-8")
    commands = {
        "engine": [venv_script("pytpu"), "rewrite", str(root)],
        "floor": [sys.executable, "-c", FLOOR, str(listing)],
    }
    timings = time_commands(commands, runs, env=as_installed(scratch / "bytecode"))
    engine, floor = timings["engine"], timings["floor"]
    return {
        "tree": tree,
        "root": str(root),
        "files": len(files),
        "megabytes": round(sum(p.stat().st_size for p in files) / 1e6, 2),
        "discovery_skipped": len(skipped),
        "engine": _figures(engine, len(files)),
        "floor": _figures(floor, len(files)),
        "ratio_wall": round(engine.best_wall / floor.best_wall, 2),
        "ratio_cpu": round(engine.best_cpu / floor.best_cpu, 2),
        "engine_summary": engine.stderr.strip().splitlines()[-2:],
    }


def _figures(timing: Timing, files: int) -> dict[str, Any]:
    return {**timing.as_dict(), "files_per_second": round(files / timing.best_wall, 1)}


# Frames of the command line and the interpreter, above the engine: left out of the profile.
WRAPPERS = re.compile(r"typer/|click/|runpy|<string>|<frozen|built-in method builtins.exec|cli\.py")


def profile(root: Path, top: int, scratch: Path) -> list[str]:
    """cProfile of one `pytpu rewrite ROOT` process: its `top` functions by cumulative time,
    below the command line (typer, click and the CLI's own frames left out)."""
    out = scratch / "rewrite.prof"
    command = [sys.executable, "-m", "cProfile", "-o", str(out), "-m", "pytpu.engine.cli"]
    subprocess.run([*command, "rewrite", str(root)], capture_output=True, check=True)
    stats = pstats.Stats(str(out)).stats  # type: ignore[attr-defined]
    rows = []
    for (file, line, function), (_, calls, own, cumulative, _) in stats.items():
        name = f"{_short_path(file)}:{line}({function})" if line else function
        if not WRAPPERS.search(name):
            rows.append((cumulative, own, calls, name))
    rows.sort(reverse=True)
    lines = [f"  {'cumulative':>10} {'own':>8} {'calls':>8}  function"]
    lines += [f"  {c:>9.2f}s {o:>7.2f}s {n:>8}  {name}" for c, o, n, name in rows[:top]]
    return lines


def _short_path(file: str) -> str:
    """site-packages/libcst/_parser.py -> libcst/_parser.py; the project's files from its root."""
    for marker in ("site-packages/", f"{Path.cwd()}/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tree",
        action="append",
        metavar="TREE",
        help="nn-optim, torch or a folder; repeat for several (default: nn-optim and torch)",
    )
    parser.add_argument("--runs", type=int, default=3, help="rounds; the best run counts (3)")
    parser.add_argument(
        "--profile", action="store_true", help="also profile `pytpu rewrite` on the first tree"
    )
    parser.add_argument("--top", type=int, default=15, help="functions the profile shows (15)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the figures here")
    args = parser.parse_args(argv)

    report: dict[str, Any] = {
        "python": platform.python_version(),
        "libcst": _version("libcst"),
        "engine_sources_sha256": engine_fingerprint(),
        "runs": args.runs,
        "goal": GOAL,
        "trees": [],
    }
    print_header(report)
    with tempfile.TemporaryDirectory(prefix="pytpu-engine-bench-") as tmp:
        scratch = Path(tmp)
        roots = {tree: prepare(tree, scratch) for tree in args.tree or TREES}
        for tree, root in roots.items():
            result = measure(tree, root, max(args.runs, 1), scratch)
            report["trees"].append(result)
            print_tree(result)
        if args.profile:
            tree, root = next(iter(roots.items()))
            report["profile"] = profile(root, args.top, scratch)
            print(f"\nprofile of `pytpu rewrite` on {tree} (top {args.top}, cumulative):")
            print("\n".join(report["profile"]))
    report["goal_met"] = all(t["ratio_wall"] <= GOAL for t in report["trees"])
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"\nwritten: {args.json}")
    return 0 if report["goal_met"] else 1


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def print_header(report: dict[str, Any]) -> None:
    print(
        f"PyTPU engine benchmark: python {report['python']}, libcst {report['libcst']}, "
        f"engine+KB sources sha256 {report['engine_sources_sha256']}, best of {report['runs']}"
    )
    print(METHOD)


def print_tree(r: dict[str, Any]) -> None:
    engine, floor = r["engine"], r["floor"]
    print(
        f"\n{r['tree']}: {r['root']}\n  {r['files']} files ({r['megabytes']:.1f} MB), "
        f"{r['discovery_skipped']} skipped by discovery"
    )
    for name, row in (("engine", engine), ("floor", floor)):
        runs = " ".join(f"{s:.2f}" for s in row["wall_seconds"])
        print(
            f"  {name:8}{row['best_wall_seconds']:>8.2f} s wall"
            f"{row['best_cpu_seconds']:>8.2f} s cpu"
            f"{row['files_per_second']:>9.1f} files/s   (runs: {runs})"
        )
    verdict = "met" if r["ratio_wall"] <= GOAL else "NOT met"
    print(
        f"  engine / floor: {r['ratio_wall']:.2f} wall, {r['ratio_cpu']:.2f} cpu "
        f"(goal <= {GOAL}: {verdict})"
    )
    for line in r["engine_summary"]:
        print(f"  pytpu: {line}")


if __name__ == "__main__":
    sys.exit(main())
