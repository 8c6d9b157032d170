"""Does the benchmark's figure survive a noisy machine? The bundled example's step benchmark,
run on the machine as it is, then beside CPU-bound processes that use every core.

    .venv/bin/python -m benchmarks.benchmark_method [--rounds N] [--json FILE]

The check (issue 25): the busy run's interval contains the idle run's figure, or the busy run
refuses to give a figure. Exits 1 when neither holds.
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
from rich.console import Console
from rich.table import Table

from benchmarks.processes import venv_script
from pytpu.engine.verify import benchmark, speedup_estimate
from pytpu.engine.verify.measured import StepBenchmark

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "cuda_mnist"
COMMAND = "python train.py --steps 16"
METHOD = """\
method:
  sides     examples/cuda_mnist on the CPU, and the same copy rewritten by `pytpu rewrite`
            on XLA (PJRT_DEVICE=CPU), each run with PyTPU's step timer (3 warm-up, 10 or
            more timed, lasting half a second in all, as `pytpu migrate` times them)
  rounds    the two sides alternate; the speedup is the median of the rounds' ratios with an
            order-statistic interval (engine/verify/speedup_estimate.py)
  idle      the machine as it is (run this on an idle machine)
  busy      one CPU-bound process per core running all along"""


def _burn() -> None:
    while True:
        pass


@contextmanager
def busy_machine(processes: int) -> Iterator[None]:
    """`processes` CPU-bound processes, running until the block ends."""
    burners = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(processes)]
    for burner in burners:
        burner.start()
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.join()


def sides(folder: Path) -> tuple[tuple[Path, str], tuple[Path, str]]:
    original, migrated = folder / "original", folder / "migrated"
    shutil.copytree(EXAMPLE, original)
    shutil.copytree(EXAMPLE, migrated)
    rewrite = [venv_script("pytpu"), "rewrite", ".", "--write"]
    subprocess.run(rewrite, cwd=migrated, check=True, capture_output=True)
    return (original, "cpu"), (migrated, "xla")


def held(idle: StepBenchmark, busy: StepBenchmark) -> tuple[bool, str]:
    """The check, and what it found."""
    if idle.refused:
        return False, f"the idle run refused a figure: {idle.refused}"
    if busy.refused:
        return True, f"the busy run refused a figure: {busy.refused}"
    interval, figure = busy.interval, idle.speedup
    if interval is None or figure is None:
        return False, "a run gave neither a figure with an interval nor a refusal"
    inside = interval.low <= figure <= interval.high
    where = "contains" if inside else "does not contain"
    return inside, (
        f"the busy run's interval x{interval.low}-x{interval.high} {where} the idle"
        f" figure x{figure}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=benchmark.ROUNDS)
    parser.add_argument("--json", type=Path, help="write both benchmark sections here")
    options = parser.parse_args(argv)
    console = Console(width=120)
    results: dict[str, StepBenchmark] = {}
    with tempfile.TemporaryDirectory(prefix="pytpu-method-") as folder:
        pair = sides(Path(folder))
        for condition in ("idle", "busy"):
            console.print(f"[bold]{condition}[/]: {options.rounds} rounds...")
            cores = speedup_estimate.cores() if condition == "busy" else 0
            with busy_machine(cores):
                results[condition] = benchmark.run(
                    pair,
                    COMMAND,
                    rounds=options.rounds,
                    least_seconds=benchmark.LEAST_TIMED_SECONDS,
                )
    table = Table("machine", "speedup", "interval", "ratios", "others' CPU (cores)", "figure")
    for condition, section in results.items():
        interval = section.interval
        table.add_row(
            condition,
            f"x{section.speedup}" if section.speedup else "-",
            f"x{interval.low}-x{interval.high} ({interval.confidence:.1%})" if interval else "-",
            " ".join(f"{r.ratio}" for r in section.rounds),
            " ".join(f"{r.others_cores}" for r in section.rounds),
            "refused" if section.refused else "given",
        )
    console.print(table)
    console.print(METHOD)
    ok, found = held(results["idle"], results["busy"])
    console.print(f"{'held' if ok else 'FAILED'}: {found}")
    if options.json:
        options.json.write_bytes(msgspec.json.format(msgspec.json.encode(results)))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
