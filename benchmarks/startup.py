"""How fast `pytpu` starts: `pytpu --help`, `pytpu kb list` and `pytpu rewrite` of one small
file, each as a whole process, against `black --help` timed in the same run.

    .venv/bin/python -m benchmarks.startup [--runs N] [--json FILE]

The goal (issue 12): `pytpu --help` takes at most twice as long as `black --help`.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.processes import Timing, as_installed, time_commands, venv_script

GOAL = 2.0  # pytpu --help / black --help, at most
SMALL_FILE = "import torch\n\nmodel = torch.nn.Linear(4, 2).cuda()\nx = torch.zeros(3, 4).cuda()\n"
METHOD = """\
method:
  commands  the console scripts of this environment, each a whole process (stdout discarded),
            run from a temporary folder holding train.py (four lines of CUDA code) for rewrite
  rounds    every command once per round, N rounds after one that is not counted (it writes
            the bytecode of what each imports, as pip does when it installs a package); the
            best (minimum) wall time of each, and its least CPU time (the child's user + system)
  ratio     best wall time / black --help's best wall time"""


def commands(folder: Path) -> dict[str, list[str]]:
    pytpu, black = venv_script("pytpu"), venv_script("black")
    return {
        "black --help": [black, "--help"],
        "pytpu --help": [pytpu, "--help"],
        "pytpu kb list": [pytpu, "kb", "list"],
        "pytpu rewrite train.py": [pytpu, "rewrite", str(folder / "train.py")],
    }


def heaviest_imports(code: str, count: int = 8) -> list[tuple[str, float]]:
    """The top-level imports of `python -c CODE` that take longest (cumulative ms)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        check=False,
    )
    found = []
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", line)
        if match:  # top level only: a nested import's name starts with spaces
            found.append((match.group(2), int(match.group(1)) / 1000))
    return sorted(found, key=lambda item: -item[1])[:count]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="rounds; the best run counts (5)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the figures here")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="pytpu-startup-") as tmp:
        folder = Path(tmp)
        (folder / "train.py").write_text(SMALL_FILE, encoding="utf-8")
        env = as_installed(folder / "bytecode")
        timings = time_commands(commands(folder), max(args.runs, 1), cwd=folder, env=env)
    imports = heaviest_imports("from pytpu.engine.cli import main; main(['--help'])")
    report = build_report(timings, imports, args.runs)
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"\nwritten: {args.json}")
    return 0 if report["goal_met"] else 1


def build_report(timings: dict[str, Timing], imports: list, runs: int) -> dict:
    black = timings["black --help"].best_wall
    rows = {
        name: {**t.as_dict(), "ratio_to_black": round(t.best_wall / black, 2)}
        for name, t in timings.items()
    }
    ratio = rows["pytpu --help"]["ratio_to_black"]
    return {
        "python": platform.python_version(),
        "runs": runs,
        "commands": rows,
        "help_ratio": ratio,
        "goal": GOAL,
        "goal_met": ratio <= GOAL,
        "heaviest_imports_of_help": [{"module": m, "ms": round(ms, 1)} for m, ms in imports],
    }


def print_report(report: dict) -> None:
    print(f"PyTPU start-up benchmark (python {report['python']}, best of {report['runs']})")
    print(METHOD)
    print()
    print(f"  {'command':26}{'best wall':>11}{'cpu':>9}{'x black':>9}   all runs (wall s)")
    for name, row in report["commands"].items():
        runs = " ".join(f"{s:.3f}" for s in row["wall_seconds"])
        print(
            f"  {name:26}{row['best_wall_seconds']:>10.3f}s{row['best_cpu_seconds']:>8.3f}s"
            f"{row['ratio_to_black']:>9.2f}   {runs}"
        )
    verdict = "met" if report["goal_met"] else "NOT met"
    print(f"\npytpu --help / black --help = {report['help_ratio']:.2f} (goal <= {GOAL}: {verdict})")
    print("heaviest top-level imports of `pytpu --help` (cumulative ms):")
    for item in report["heaviest_imports_of_help"]:
        print(f"  {item['ms']:8.1f}  {item['module']}")


if __name__ == "__main__":
    sys.exit(main())
