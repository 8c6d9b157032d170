"""The step benchmark of `pytpu migrate`: the training step timed on each side of the migration.

The user's command runs as it is, in a child process (`processes`), with a small timer injected at
start-up by the test runtime's bootstrap (`pytpu.runtime.bootstrap`, `pytpu.runtime.timer`): the
original code on the CPU, its CUDA calls mapped there at run time as test generation does, and the
migrated code on the XLA device. Timing follows PyTorch/XLA's guidance: warm-up steps first, the
device waited for before each stop of the clock, several timed steps, their median and spread,
compile time apart. On XLA it also records the evidence of a good migration: graphs compiled,
compilations after warm-up (zero in the steady state), device-to-host transfers per step and ops
that fell back to the CPU.

A short run command (test generation's) may run too few steps to time: `run` then raises the
program's own step or epoch setting (`--epochs`, `--max-steps`, nanoGPT's `--max_iters=N`, a
configuration system's `trainer.max_steps=N`), as test generation's discovery finds it, and runs
the longer command instead. Both that lengthening and the sides' commands with the accelerator
on (`accelerator.on_device`: without `--no-cuda`) are changes of the one command
(`invocation.Change`), made by `invocation.changed` on the command as `pytpu.runtime.command`
reads it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import msgspec

from pytpu.engine import processes
from pytpu.engine.testgen import accelerator, invocation, program_settings, workspace
from pytpu.engine.verify import measured, speedup_estimate
from pytpu.engine.verify.measured import Side, StepBenchmark
from pytpu.runtime import launch

DEVICES = ("cpu", "cuda", *processes.ACCELERATORS)
MIN_TIMED = 2  # a median and a spread need at least two steps
# Quick steps are timed until they last this long in all, up to MOST_TIMED steps: a median of ten
# 8 ms steps moved by a third between rounds on an idle machine (README's example).
LEAST_TIMED_SECONDS = 0.5
MOST_TIMED = 200
ROUNDS = 5  # each side's runs, alternating (five give a 94% interval for the median ratio)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # set alike on both sides
LENGTHENINGS = 2  # longer commands tried after one that ran too few steps
LIMIT_SHARE = 0.8  # of the time limit, the most a longer command is planned to take
# Steps planned beyond those needed: settings rarely count steps exactly (`range(1, n)`,
# `while i <= n`), and the timer ends the program once its steps are timed.
MARGIN = 1.25
ASK = "give a longer `benchmark` command"
LOOKED_FOR = (
    "an integer argparse option named like --epochs, --max-steps, --max_iters, --num-iters,"
    " --steps or --iterations that the command gives or that has a default, such a global"
    " when the command sets the script's globals as `--name=value`, or such a setting of a"
    " configuration system that the command gives (`--trainer.max_iters=5`, Hydra's"
    " `trainer.max_steps=5`, yacs' `SOLVER.MAX_ITER 5`)"
)

METHOD = (
    "Each side runs the benchmark command with a timer inside it; a training step ends at each "
    "optimizer step (or backward pass, when parameters are updated by hand), where the migrated "
    "side first waits for its device (torch_xla.sync(wait=True) on XLA, torch.tpu.synchronize() on"
    " TorchTPU). After the first step and the warm-up steps, the timed steps ({timed}) give each "
    "run's median step time. The sides run in alternating rounds (before, after, before, after...)"
    " with the same thread settings, so that each round's ratio (the median step before over the "
    "median step after) compares them under the same load; the speedup is the median of the "
    "rounds' ratios, with an order-statistic confidence interval for it. Before each round PyTPU "
    "runs nothing for a second and measures how much CPU other processes use; no figure is claimed"
    " when they kept the machine busy or when the interval is too wide. XLA's compile time, "
    "compilations after warm-up, device-to-host transfers and CPU fallbacks are reported apart."
)


def method(steps: int, least_seconds: float = 0.0, fewest: int | None = None) -> str:
    """METHOD with the timed steps a run takes; `fewest`: the fewest a run timed, when the
    program ended before it had them (no setting to raise, or not raised enough)."""
    timed = f"{steps}"
    if least_seconds:
        timed += f" or more, until they last {least_seconds:g} s in all, at most {MOST_TIMED}"
    if fewest is not None and fewest < steps:
        timed += (
            f" asked for; the program ended after {fewest} timed"
            f" {'step' if fewest == 1 else 'steps'} in its shortest run, so its medians are of"
            " fewer steps"
        )
    return METHOD.format(timed=timed)


def measure(
    root: Path,
    command: str,
    device: str,
    warmup: int = 3,
    steps: int = 10,
    timeout: float = 600,
    least_seconds: float = 0.0,
) -> Side:
    """Run `command` in `root` with the step timer on `device` and summarise its steps: `steps`
    timed steps, and more while they last less than `least_seconds` in all (up to MOST_TIMED)."""
    if device not in DEVICES:
        raise ValueError(f"device {device!r}: use one of {', '.join(DEVICES)}")
    if warmup < 0 or steps < MIN_TIMED:
        raise ValueError(f"warmup {warmup}, steps {steps}: need warmup >= 0, steps >= {MIN_TIMED}")
    root = Path(root).resolve()
    with tempfile.TemporaryDirectory(prefix="pytpu-benchmark-") as out:
        settings = {"root": str(root), "out": out, "warmup": warmup, "steps": steps,
                    "device": device, "least_ms": least_seconds * 1000,
                    "most_steps": max(steps, MOST_TIMED)}  # fmt: skip
        # With a GPU present torch would report it; the baseline runs on the CPU all the same.
        env = processes.program_environment(
            device if device in processes.ACCELERATORS else "cpu",
            processes.TIMER_ENV, settings, device == "cpu",
        )  # fmt: skip
        env.update(thread_settings(env))
        done = processes.run(command, root, env, timeout)
        record = _first_process(Path(out))
    if device == "xla":  # (named so even when the program never synced on XLA)
        fallback_name = f"XLA:{env['PJRT_DEVICE'].split('_')[0]}"
    else:  # (no step was timed on TorchTPU)
        fallback_name = "TPU stand-in (CPU)" if processes.STAND_IN.get() else "TPU"
    result = _summary(record, device, fallback_name, done.returncode, done.seconds)
    if done.timed_out and not (record and record.complete):
        result.error = _timeout_error(record, result, command, warmup, timeout)
    else:
        output = done.stderr or done.stdout
        result.error = _error(record, result, command, warmup, done.returncode, output)
    return result


def thread_settings(env: dict[str, str]) -> dict[str, str]:
    """The same CPU thread counts for both sides: the user's own (in `env`), else one thread per
    core PyTPU may use (torch's default, written out so that neither side differs)."""
    cores = str(speedup_estimate.cores())
    return {name: env.get(name) or cores for name in THREAD_VARIABLES}


def run(
    sides: tuple[tuple[Path, str], tuple[Path, str]],
    command: str,
    warmup: int = 3,
    steps: int = 10,
    timeout: float = 600,
    lengthen: bool = True,
    checkouts: dict[Path, set[str]] | None = None,
    rounds: int = ROUNDS,
    least_seconds: float = 0.0,
) -> StepBenchmark:
    """`command` timed on the baseline's (root, device), then on the target's, compared.

    Every run starts from each root's files as `checkouts` lists them (`workspace.snapshot`;
    by default, as they are now): what an earlier run wrote (a checkpoint it would resume
    from, a results folder it refuses to overwrite) is removed first.

    Each side runs it with the accelerator on (`accelerator.on_device`, read from the
    baseline's program, as the generated suite's program tests do). With `lengthen`, a command
    that runs too few steps is made longer (`longer`), at most LENGTHENINGS times, and both sides
    run the longer one; the section names the command that ran, and what was raised from the
    given one.

    The first round settles the command; `rounds` - 1 more rounds follow, each side in turn,
    while both sides' runs succeed (`compare` turns the rounds into the speedup)."""
    tried = _Lengthening(command)
    if checkouts is None:
        checkouts = {root: workspace.snapshot(root) for root, _ in sides}
    target = sides[1][1]
    while True:
        on_device = {d: accelerator.on_device(sides[0][0], command, d) for d in ("cpu", target)}
        commands = [on_device[device].command for _, device in sides]
        others = [speedup_estimate.others_share()]
        results: list[Side] = []
        plan: Longer | str | None = None
        for (root, device), side_command in zip(sides, commands, strict=True):
            workspace.remove_created(root, checkouts[root])
            side = measure(root, side_command, device, warmup, steps, timeout, least_seconds)
            results.append(side)
            if lengthen and _too_short(side):
                plan = tried.plan(
                    side,
                    partial(longer, root, command, side, warmup, steps, timeout, least_seconds),
                )
                if isinstance(plan, Longer):
                    break  # the other side runs the longer command
                if not results[-1].steps_timed:  # (some timed steps: the figures stand)
                    results[-1].error = _too_few(results[-1].steps_ran, warmup, plan)
        if not isinstance(plan, Longer):
            break
        command = plan.command
    runs = [[result] for result in results]
    while len(runs[0]) < rounds and all(r[-1].median_ms and not r[-1].error for r in runs):
        others.append(speedup_estimate.others_share())
        for (root, device), side_command, side_runs in zip(sides, commands, runs, strict=True):
            workspace.remove_created(root, checkouts[root])
            side_runs.append(
                measure(root, side_command, device, warmup, steps, timeout, least_seconds)
            )
    section = compare(
        command, *runs, warmup, steps, tried.summary(), others, least_seconds=least_seconds
    )
    on_xla = accelerator.section(on_device["cpu"], on_device[target])
    section.on_xla = msgspec.convert(on_xla, measured.OnDevice | None)
    return section


class _Lengthening:
    """The longer commands tried after the given one: at most LENGTHENINGS, each running more
    steps than the one before."""

    def __init__(self, given: str):
        self.given = given
        self.raised: dict[str, tuple[int, int]] = {}  # option -> (the given value, the latest)
        self.dropped: list[str] = []  # switches left out (`--dry-run`)
        self.ran: list[int] = []  # the steps each command too short ran
        self.dropped_last = False  # the last longer command only left switches out

    def plan(self, result: Side, lengthen: Callable[[], Longer | str]) -> Longer | str:
        """A longer command than the one that ran too few steps (`result`), as `lengthen` makes
        it (`longer`), unless the last one gave no more steps or too many were tried; else why
        not."""
        ran = result.steps_ran
        # (leaving out `--dry-run` may give no more steps when the command also runs one epoch:
        # raising the epochs comes next)
        if self.ran and ran <= self.ran[-1] and not self.dropped_last:
            return f"{self._described()} gave no more steps; {ASK}"
        if len(self.ran) == LENGTHENINGS:
            return f"too few still after {self._described()}; {ASK}"
        plan = lengthen()
        if isinstance(plan, Longer):
            self.dropped_last = bool(plan.dropped)
            self.ran.append(ran)
            for option, (old, new) in plan.raised.items():
                self.raised[option] = (self.raised.get(option, (old, new))[0], new)
            self.dropped.extend(plan.dropped)
        return plan

    def summary(self) -> measured.Lengthened | None:
        """The report's `lengthened`: the given command, the steps it ran, what was raised."""
        if not self.raised and not self.dropped:
            return None
        settings = [
            measured.RaisedSetting(option=o, was=a, to=b) for o, (a, b) in self.raised.items()
        ]
        return measured.Lengthened(
            given=self.given, steps_ran=self.ran[0], settings=settings, dropped=self.dropped
        )

    def _described(self) -> str:
        left_out = [f"leaving out {switch}" for switch in self.dropped]
        raised = [f"raising {o} from {a} to {b}" for o, (a, b) in self.raised.items()]
        return ", ".join(left_out + raised)


@dataclass(frozen=True)
class Longer:
    """A command made longer by `changes`: the switches that cut the run short left out, else
    each step or epoch setting raised."""

    command: str
    changes: tuple[invocation.Change, ...]

    @property
    def raised(self) -> dict[str, tuple[int, int]]:
        """Each setting raised: (its value, the new value)."""
        return {
            c.option: (int(c.was), int(c.value))
            for c in self.changes
            if c.action == invocation.SET and c.was and c.value
        }

    @property
    def dropped(self) -> tuple[str, ...]:
        return tuple(c.option for c in self.changes if c.action == invocation.DROP)


def longer(
    root: Path,
    command: str,
    result: Side,
    warmup: int,
    steps: int,
    timeout: float,
    least_seconds: float = 0.0,
) -> Longer | str:
    """`command`, which ran too few steps (`result`), with the program's step or epoch settings
    raised in proportion to the steps the benchmark needs, within the time limit; else why not.

    A switch that cuts the run short (`--dry-run`) is left out first. The settings the command
    gives are raised (else those with a default): each by the factor of planned steps over the
    steps that ran, so that epochs scale by the steps per epoch seen."""
    call = invocation.program_call(root, command)
    if call is None:
        return (
            "PyTPU found no Python script in the command to raise a step or epoch setting of"
            f" (it reads `python x.py`, `python -m module`, `torchrun x.py`); {ASK}"
        )
    switches = program_settings.short_run_switches(root, call)
    if switches:
        changes = tuple(invocation.Change(invocation.DROP, switch) for switch in switches)
        return Longer(invocation.changed(root, command, changes), changes)
    found = [s for s in program_settings.step_settings(root, call, command) if s.value > 0]
    if not found:
        return (
            f"PyTPU found no step or epoch setting in {call.entry} to raise ({LOOKED_FOR}); {ASK}"
        )
    ran, least = result.steps_ran, 1 + warmup + MIN_TIMED
    later = result.warmup_ms[1:] or result.warmup_ms  # the first step includes start-up
    step_ms = result.median_ms or statistics.median(later)
    step_seconds = max(step_ms / 1000, 1e-3)
    fits = ran + int((LIMIT_SHARE * timeout - result.seconds) / step_seconds)
    timed = _timed_needed(steps, least_seconds, step_seconds)
    planned = min(math.ceil((1 + warmup + timed) * MARGIN), fits)
    if planned < least:
        return (
            f"at {step_seconds:.2f} s a step, {least} steps do not fit in the time limit"
            f" ({timeout:.0f} s): raise `timeout`, or give a `benchmark` command with quicker steps"
        )
    chosen = [s for s in found if s.given] or found
    changes = tuple(
        invocation.Change(
            invocation.SET, s.option, str(math.ceil(s.value * planned / ran)), was=str(s.value)
        )
        for s in chosen
    )
    return Longer(invocation.changed(root, command, changes), changes)


def _timed_needed(steps: int, least_seconds: float, step_seconds: float) -> int:
    """The timed steps that last `least_seconds` at `step_seconds` each: `steps` or more, at
    most MOST_TIMED."""
    lasting = math.ceil(least_seconds / step_seconds) if least_seconds else 0
    return max(steps, min(lasting, MOST_TIMED))


def _too_short(result: Side) -> bool:
    """The program ended by itself after some steps, before the timer had the steps it wanted
    (the timer ends the program once it has them, or once every step recompiles)."""
    return result.exit_code == 0 and bool(result.steps_ran) and not result.timed_all


def compare(
    command: str,
    baseline: list[Side],
    target: list[Side],
    warmup: int,
    steps: int,
    lengthened: measured.Lengthened | None = None,
    others: list[float | None] | None = None,
    least_seconds: float = 0.0,
) -> StepBenchmark:
    """Both sides over their rounds (`measure`'s results, in the order they ran), and the
    speedup: the median of the rounds' ratios, the baseline's median step over the target's.
    `lengthened`: the command given, its steps and the settings raised when `command` is a
    longer one; `others`: the CPU cores other processes used before each round."""
    others = others or [None] * len(baseline)
    rounds = [
        measured.Round(
            baseline_ms=b.median_ms,
            target_ms=t.median_ms,
            ratio=float(f"{b.median_ms / t.median_ms:.3g}"),
            others_cores=share,
        )
        for b, t, share in zip(baseline, target, others, strict=False)
        if b.median_ms and t.median_ms and not b.error and not t.error
    ]
    cores = speedup_estimate.cores()
    estimate = speedup_estimate.estimate(
        [r.ratio for r in rounds], [r.others_cores for r in rounds], cores
    )
    problems = [
        f"{side} ({result.device_name}){f' in round {n}' if n > 1 else ''}: {result.error}"
        for side, results in (("baseline", baseline), ("target", target))
        for n, result in enumerate(results, 1)
        if result.error
    ]
    interval = estimate.interval
    counts = [len(r.step_ms) for r in (*baseline, *target) if r.step_ms and not r.error]
    return StepBenchmark(
        command=command,
        method=method(steps, least_seconds, min(counts, default=None)),
        warmup=warmup,
        steps=steps,
        least_seconds=least_seconds,
        baseline=_pooled(baseline),
        target=_pooled(target),
        speedup=estimate.speedup,
        interval=interval and measured.Interval(**dataclasses.asdict(interval)),
        refused=estimate.refused,
        rounds=rounds,
        machine=measured.BenchmarkMachine(cores=cores, threads=thread_settings(dict(os.environ))),
        error="\n".join(problems) or None,
        lengthened=lengthened,
    )


def _pooled(results: list[Side]) -> Side | None:
    """One side over its rounds: the first run's account (warm-up, compilation, evidence) with
    the median, spread and throughput of every round's timed steps."""
    if not results:
        return None
    first, timed = results[0], [ms for result in results for ms in result.step_ms]
    if len(results) == 1 or len(timed) < MIN_TIMED:
        return first
    median, spread = _median_spread(timed)
    return msgspec.structs.replace(
        first,
        steps_timed=len(timed),
        median_ms=median,
        spread_ms=spread,
        step_ms=timed,
        throughput=_throughput(first.samples_per_step, median, first.devices),
        seconds=round(sum(result.seconds for result in results), 3),
        runs=len(results),
    )


def nothing_on_xla(section: StepBenchmark) -> bool:
    """The XLA side ran its steps but compiled no graph: the program placed nothing on the
    device, so both sides timed the host."""
    measured_side = section.target
    return bool(
        measured_side
        and measured_side.device == "xla"
        and measured_side.steps_ran
        and not measured_side.compile.graphs
    )


def skipped(command: str, reason: str, warmup: int, steps: int) -> StepBenchmark:
    """The section of a benchmark that was not run, and why."""
    return msgspec.structs.replace(compare(command, [], [], warmup, steps), not_run=reason)


# --- the timer's records -------------------------------------------------------------------------


class Evidence(msgspec.Struct):
    """XLA's counters at a step boundary (`pytpu.runtime.timer.xla_evidence`)."""

    graphs: int
    compile_seconds: float
    transfers: int
    fallbacks: dict[str, int]


class TimerRecord(msgspec.Struct):
    """What the step timer wrote of one process (`pytpu.runtime.timer.StepTimer.write`)."""

    pid: int
    rank: int
    complete: bool
    boundary: str | None
    steps_ran: int
    warmup_ms: list[float]
    step_ms: list[float]
    device_name: str | None = None
    evidence_start: Evidence | None = None
    evidence: Evidence | None = None
    graphs_at_boundaries: list[int] = msgspec.field(default_factory=list)
    samples: list[int | None] = msgspec.field(default_factory=list)
    devices: int = 1
    devices_present: int | None = None


def _first_process(out: Path) -> TimerRecord | None:
    """The timer's record of the first rank, or of the process that ran the most steps."""
    records = []
    for path in out.glob("timer-*.json"):
        try:
            records.append(msgspec.json.decode(path.read_bytes(), type=TimerRecord))
        except (OSError, msgspec.DecodeError):
            continue
    if not records:
        return None
    return min(records, key=lambda r: (-len(r.step_ms), -r.steps_ran, r.rank, r.pid))


# --- the summary ------------------------------------------------------------------------------


def _summary(
    record: TimerRecord | None, device: str, fallback_name: str, exit_code: int, seconds: float
) -> Side:
    """One run's side: its timed steps' median and spread, throughput and XLA's evidence."""
    record = record or TimerRecord(0, 0, False, None, 0, [], [])
    timed = record.step_ms if len(record.step_ms) >= MIN_TIMED else []
    median, spread = _median_spread(timed) if timed else (None, None)
    samples = record.samples[: len(timed)]
    per_step = (
        int(statistics.median(samples)) if samples and None not in samples else None
    )  # (a batch size the loader reported for every timed step)
    named = record.device_name if device in processes.ACCELERATORS else _host_name(device)
    result = Side(
        device=device,
        device_name=named or fallback_name,
        steps_ran=record.steps_ran,
        steps_timed=len(timed),
        median_ms=median,
        spread_ms=spread,
        warmup_ms=[_ms(ms) for ms in record.warmup_ms],
        boundary=record.boundary or "none",
        compile=None,
        transfers_per_step=None,
        cpu_fallbacks=None,
        exit_code=exit_code,
        seconds=round(seconds, 3),
        error=None,
        step_ms=[_ms(ms) for ms in timed],
        devices=record.devices,
        devices_present=record.devices_present,
        samples_per_step=per_step,
        throughput=_throughput(per_step, median, record.devices),
        timed_all=record.complete,
    )
    if device == "xla":
        _add_xla_evidence(result, record, len(timed))
    return result


def _add_xla_evidence(result: Side, record: TimerRecord, timed: int) -> None:
    end, start = record.evidence, record.evidence_start
    if end is None:
        result.compile = measured.Compile(graphs=0, seconds=0.0, after_warmup=0, settled=True)
        result.cpu_fallbacks = {}
        return
    # Without timed steps there is nothing after warm-up to count.
    after = end.graphs - start.graphs if start and timed else 0
    transfers = (end.transfers - start.transfers) / timed if start and timed else None
    result.compile = measured.Compile(
        graphs=end.graphs,
        seconds=round(end.compile_seconds, 3),
        after_warmup=after,
        settled=_settled(record.graphs_at_boundaries, timed, after),
    )
    result.transfers_per_step = round(transfers, 3) if transfers is not None else None
    result.cpu_fallbacks = dict(sorted(end.fallbacks.items()))


def _median_spread(timed: list[float]) -> tuple[float, measured.Spread]:
    p25, _, p75 = statistics.quantiles(timed, n=4, method="inclusive")
    spread = measured.Spread(p25=_ms(p25), p75=_ms(p75), min=_ms(min(timed)), max=_ms(max(timed)))
    return _ms(statistics.median(timed)), spread


def _throughput(
    samples: int | None, median_ms: float | None, devices: int
) -> measured.Throughput | None:
    """Samples per second at the median step, in all and per device."""
    if not samples or not median_ms:
        return None
    total = samples / (median_ms / 1000)
    return measured.Throughput(
        samples_per_second=round(total, 1), per_device=round(total / devices, 1)
    )


def _settled(graphs: list[int], timed: int, after_warmup: int) -> bool:
    """The compilations after warm-up stopped: the later half of the timed steps compiled
    nothing, or they all came at one point: one step's interval (an evaluation pass between
    epochs), or an epoch's end over two (its last partial batch compiles in its own step, the
    evaluation after it in the next) with a later step compiling nothing. Graphs compiled once
    (a part the warm-up had not reached) are no recompilation; a graph per step (a shape or a
    Python value that changes) comes step after step."""
    if not after_warmup:
        return True
    if len(graphs) <= timed:
        return False  # (a record without the counts: not shown settled)
    # (the count before the later half of the timed steps, and at its end)
    if graphs[-1] == graphs[-(timed - timed // 2) - 1]:
        return True
    window = graphs[-(timed + 1) :]  # the counts at the boundaries of the timed steps
    rises = [
        step
        for step, (before, after) in enumerate(zip(window, window[1:], strict=False))
        if after > before
    ]
    if len(rises) == 1:
        return True
    return len(rises) == 2 and rises[1] == rises[0] + 1 and rises[1] < timed - 1


def _host_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "CUDA"
    return "CPU"


def _ms(value: float) -> float:
    return round(value, 3)


def _timeout_error(
    record: TimerRecord | None, result: Side, command: str, warmup: int, timeout: float
) -> str:
    ran = record.steps_ran if record else 0
    graphs = result.compile.graphs if result.compile else None
    seen = f" (it ran {ran} steps" + (f" and compiled {graphs} graphs)" if graphs else ")")
    return (
        f"`{command}` did not finish its first {warmup + 1 + MIN_TIMED} steps in"
        f" {timeout:.0f} s{seen}; give a shorter `benchmark` command (a smaller model or"
        " batch), and check for recompilation: a graph per step means shapes or constants"
        " change between steps"
    )


def _error(
    record: TimerRecord | None,
    result: Side,
    command: str,
    warmup: int,
    exit_code: int,
    output: str,
) -> str | None:
    if exit_code != 0 and not (record and record.complete):
        return launch.exit_message(f"`{command}`", exit_code, output)
    if record is None:
        return processes.ran_without_pytpu(command, "the step timer", output)
    if not result.steps_timed:
        return _too_few(record.steps_ran, warmup, ASK)
    if result.device == "xla" and not result.compile.graphs:
        return "the program compiled no graph for the XLA device: its steps did not run there"
    return None


def _too_few(ran: int, warmup: int, advice: str) -> str:
    return (
        f"only {ran} steps ran; the benchmark needs {warmup} warm-up + at least {MIN_TIMED} timed"
        f" steps (after the first step, which includes start-up): {advice}"
    )
