"""The step benchmark of `pytpu migrate`: the training step timed on each side of the migration.

The user's command runs as it is, in a child process (`processes`), with a small timer injected at
start-up by the test runtime's bootstrap (`pytpu.runtime.bootstrap`, `pytpu.runtime.timer`): the
original code on the CPU, its CUDA calls mapped there at run time as test generation does, and the
migrated code on the XLA device. Timing follows PyTorch/XLA's guidance: warm-up steps first, the
device waited for before each stop of the clock, several timed steps, their median and spread,
compile time apart. On XLA it also records the evidence of a good migration: graphs compiled,
compilations after warm-up (zero in the steady state), device-to-host transfers per step and ops
that fell back to the CPU.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from pytpu.engine import processes

DEVICES = ("cpu", "cuda", "xla")
MIN_TIMED = 2  # a median and a spread need at least two steps

METHOD = (
    "Each side runs the benchmark command with a timer inside it; a training step ends at each "
    "optimizer step (or backward pass, when parameters are updated by hand), where the XLA side "
    "first waits for the device with torch_xla.sync(wait=True). After the first step and the "
    "warm-up steps, the timed steps give the median step time and its spread; XLA's compile time, "
    "compilations after warm-up, device-to-host transfers and CPU fallbacks are reported apart."
)


def measure(
    root: Path, command: str, device: str, warmup: int = 3, steps: int = 10, timeout: float = 600
) -> dict[str, Any]:
    """Run `command` in `root` with the step timer on `device` and summarise its steps."""
    if device not in DEVICES:
        raise ValueError(f"device {device!r}: use one of {', '.join(DEVICES)}")
    if warmup < 0 or steps < MIN_TIMED:
        raise ValueError(f"warmup {warmup}, steps {steps}: need warmup >= 0, steps >= {MIN_TIMED}")
    root = Path(root).resolve()
    with tempfile.TemporaryDirectory(prefix="pytpu-benchmark-") as out:
        settings = {"root": str(root), "out": out, "warmup": warmup, "steps": steps,
                    "device": device}  # fmt: skip
        # With a GPU present torch would report it; the baseline runs on the CPU all the same.
        env = processes.program_environment(
            "xla" if device == "xla" else "cpu", processes.TIMER_ENV, settings, device == "cpu"
        )
        done = processes.run(command, root, env, timeout)
        record = _first_process(Path(out))
    result = _summary(record, device)
    if device == "xla" and result["device_name"] is None:  # the program never synced on XLA
        result["device_name"] = f"XLA:{env['PJRT_DEVICE'].split('_')[0]}"
    result.update(exit_code=done.returncode, seconds=round(done.seconds, 3))
    if done.timed_out and not (record and record["complete"]):
        result["error"] = _timeout_error(record, result, command, warmup, timeout)
    else:
        output = done.stderr or done.stdout
        result["error"] = _error(record, result, command, warmup, done.returncode, output)
    return result


def compare(
    command: str, baseline: dict[str, Any], target: dict[str, Any], warmup: int, steps: int
) -> dict[str, Any]:
    """Both sides, and the speedup: the baseline's median step over the target's."""
    speedup = None
    if baseline.get("median_ms") and target.get("median_ms"):
        # Three significant digits: a slow target (x0.0042) must not round to zero.
        speedup = float(f"{baseline['median_ms'] / target['median_ms']:.3g}")
    problems = [
        f"{side} ({result.get('device_name') or result.get('device')}): {result['error']}"
        for side, result in (("baseline", baseline), ("target", target))
        if result.get("error")
    ]
    return {
        "command": command,
        "method": METHOD,
        "warmup": warmup,
        "steps": steps,
        "baseline": baseline,
        "target": target,
        "speedup": speedup,
        "error": "\n".join(problems) or None,
    }


# --- the timer's records -------------------------------------------------------------------------


def _first_process(out: Path) -> dict[str, Any] | None:
    """The timer's record of the first rank, or of the process that ran the most steps."""
    records = []
    for path in out.glob("timer-*.json"):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    if not records:
        return None
    return min(records, key=lambda r: (-len(r["step_ms"]), -r["steps_ran"], r["rank"], r["pid"]))


# --- the summary ------------------------------------------------------------------------------


def _summary(record: dict[str, Any] | None, device: str) -> dict[str, Any]:
    record = record or {"boundary": None, "warmup_ms": [], "step_ms": [], "steps_ran": 0}
    timed = record["step_ms"] if len(record["step_ms"]) >= MIN_TIMED else []
    median = spread = None
    if timed:
        p25, _, p75 = statistics.quantiles(timed, n=4, method="inclusive")
        median = _ms(statistics.median(timed))
        spread = {"p25": _ms(p25), "p75": _ms(p75), "min": _ms(min(timed)), "max": _ms(max(timed))}
    result = {
        "device": device,
        "device_name": record.get("device_name") if device == "xla" else _host_name(device),
        "steps_timed": len(timed),
        "median_ms": median,
        "spread_ms": spread,
        "warmup_ms": [_ms(ms) for ms in record["warmup_ms"]],
        "boundary": record["boundary"] or "none",
        "compile": None,
        "transfers_per_step": None,
        "cpu_fallbacks": None,
    }
    if device == "xla":
        result.update(_xla_summary(record, len(timed)))
    return result


def _xla_summary(record: dict[str, Any], timed: int) -> dict[str, Any]:
    end, start = record.get("evidence"), record.get("evidence_start")
    if end is None:
        return {"compile": {"graphs": 0, "seconds": 0.0, "after_warmup": 0}, "cpu_fallbacks": {}}
    # Without timed steps there is nothing after warm-up to count.
    after = end["graphs"] - start["graphs"] if start and timed else 0
    transfers = (end["transfers"] - start["transfers"]) / timed if start and timed else None
    return {
        "compile": {
            "graphs": end["graphs"],
            "seconds": round(end["compile_seconds"], 3),
            "after_warmup": after,
        },
        "transfers_per_step": round(transfers, 3) if transfers is not None else None,
        "cpu_fallbacks": dict(sorted(end["fallbacks"].items())),
    }


def _host_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "CUDA"
    return "CPU"


def _ms(value: float) -> float:
    return round(value, 3)


def _timeout_error(
    record: dict[str, Any] | None, result: dict[str, Any], command: str, warmup: int, timeout: float
) -> str:
    ran = record["steps_ran"] if record else 0
    graphs = (result.get("compile") or {}).get("graphs")
    seen = f" (it ran {ran} steps" + (f" and compiled {graphs} graphs)" if graphs else ")")
    return (
        f"`{command}` did not finish its first {warmup + 1 + MIN_TIMED} steps in"
        f" {timeout:.0f} s{seen}; give a shorter `benchmark` command (a smaller model or"
        " batch), and check for recompilation: a graph per step means shapes or constants"
        " change between steps"
    )


def _error(
    record: dict[str, Any] | None,
    result: dict[str, Any],
    command: str,
    warmup: int,
    exit_code: int,
    output: str,
) -> str | None:
    if exit_code != 0 and not (record and record["complete"]):
        tail = "\n".join(output.splitlines()[-15:])
        return f"`{command}` exited with {exit_code}:\n{tail}"
    if record is None:
        return processes.ran_without_pytpu(command, "the step timer", output)
    if not result["steps_timed"]:
        return (
            f"only {record['steps_ran']} steps ran; the benchmark needs {warmup} warm-up + at"
            f" least {MIN_TIMED} timed steps (after the first step, which includes start-up):"
            " give a longer `benchmark` command"
        )
    if result["device"] == "xla" and not result["compile"]["graphs"]:
        return "the program compiled no graph for the XLA device: its steps did not run there"
    return None
