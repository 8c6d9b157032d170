"""Running the user's program with the harness inside it (`pytpu.runtime.bootstrap`), and the
checks of a program test: it ran on the device, its training steps and printed metrics agree with
the recording."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch

from pytpu.runtime import channel, launch
from pytpu.runtime import command as shell
from pytpu.runtime.channel import MIGRATED_DEVICES
from pytpu.runtime.comparison import (
    GRADIENT_FACTOR,
    assert_close,
    line_shape,
    metric_close,
    metric_lines,
)
from pytpu.runtime.placement import device_kind
from pytpu.runtime.records import HarnessRecord, StepRecord, steps_of


class ProgramRun:
    def __init__(self, returncode: int, stdout: str, stderr: str, harness: list[HarnessRecord]):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.steps = steps_of(harness)
        self.executions = sum(record.get("device_executions") or 0 for record in harness)


def command_for_device(command: str, accelerator_flag: str | None, kind: str | None = None) -> str:
    """On the migrated side (xla, tpu), a `--device cpu` argument names its device, and an
    accelerator flag is passed."""
    kind = kind or device_kind()
    if kind not in MIGRATED_DEVICES:
        return command
    command = shell.parse(command).replace_value(("--device", "--device_type"), "cpu", kind)
    if accelerator_flag and not shell.parse(command).has_flag(accelerator_flag):
        command = f"{command} {accelerator_flag}"  # the python invocation ends the line
    return command


def run_program(
    root: Path,
    command: str,
    timeout: float,
    accelerator_flag: str | None = None,
    on_xla: str | None = None,
) -> ProgramRun:
    """Run the program's short command in `root` with the harness inside it, on this device;
    this environment's secrets stay out. On the migrated side (xla, tpu: the name is older than
    TorchTPU) `on_xla` runs instead, as written: the command with the accelerator on, which test
    generation wrote (a suite written before it passes `accelerator_flag`, and
    `command_for_device` makes that command)."""
    if on_xla is not None and device_kind() in MIGRATED_DEVICES:
        command = on_xla
    else:
        command = command_for_device(command, None if on_xla is not None else accelerator_flag)
    with tempfile.TemporaryDirectory(prefix="pytpu-run-") as out:
        settings = {"root": str(root), "out": out, "device": device_kind()}
        env = launch.program_environment(channel.HARNESS_ENV, settings)
        done = launch.run(command, root, env, timeout)  # (what it leaves behind is killed)
        if done.timed_out:
            raise subprocess.TimeoutExpired(command, timeout, done.stdout, done.stderr)
        harness = harness_records(Path(out))
    return ProgramRun(done.returncode, done.stdout, done.stderr, harness)


def harness_records(out: Path) -> list[HarnessRecord]:
    """What the harness wrote into `out`, one record per process of the program."""
    return [torch.load(path, weights_only=True) for path in sorted(out.glob("harness-*.pt"))]


def check_program_ran(run: ProgramRun, on_device: bool = True) -> None:
    """The program exited with 0 and, with `on_device` on the XLA side, ran something there (a
    test comparing its numbers would compare the host with itself otherwise)."""
    if run.returncode != 0:
        # (reports keep a failure's first line: it names the exception)
        output = run.stderr or run.stdout
        raise AssertionError(launch.exit_message("the program", run.returncode, output))
    kind = device_kind()
    if on_device and kind in MIGRATED_DEVICES and not run.executions:
        raise AssertionError(
            f"PYTPU_DEVICE={kind} but the program ran nothing on the {kind.upper()} device"
        )


def expect_training_step(
    run: ProgramRun,
    recorded: list[StepRecord],
    tolerance: float = 1.0,
    computed_in: torch.dtype | None = None,
) -> None:
    """The first iteration of a training step: each optimizer step's loss and parameter norms
    (`tolerance`: a factor on the tolerances; `computed_in`: the dtype the migrated step
    computes in, bfloat16 under `precision: bf16`)."""
    check_program_ran(run)
    keys = {step["key"] for step in recorded}
    actual = [step for step in run.steps if step["key"] in keys][: len(recorded)]
    if len(actual) < len(recorded):
        raise AssertionError(f"the program made {len(actual)} of the {len(recorded)} steps")
    factor = GRADIENT_FACTOR * tolerance
    for index, (got, want) in enumerate(zip(actual, recorded, strict=True)):
        what = f"step {index + 1} ({want.get('optimizer', 'backward')} at {want['site']})"
        if want.get("loss") is not None:
            assert_close(got["loss"], want["loss"], factor, f"{what}: loss", computed_in)
        if want.get("parameter_norms") is not None:
            got_norms, want_norms = got["parameter_norms"], want["parameter_norms"]
            if len(got_norms) != len(want_norms):
                raise AssertionError(
                    f"{what}: {len(got_norms)} parameters, recorded {len(want_norms)}"
                )
            pairs = zip(got_norms, want_norms, strict=True)
            for position, (norm, recorded_norm) in enumerate(pairs):
                if recorded_norm is not None:  # None: its gradient was only rounding
                    assert_close(
                        norm, recorded_norm, factor, f"{what}: norms[{position}]", computed_in
                    )


def expect_metrics(
    run: ProgramRun,
    recorded: list[list[Any]],
    tolerance: float = 1.0,
    computed_in: torch.dtype | None = None,
) -> None:
    """Each recorded metric line appears again, in order, with the same numbers (None: unstable;
    `tolerance`: a factor on the tolerance; `computed_in` as for `expect_training_step`)."""
    check_program_ran(run)
    remaining = iter(metric_lines(run.stdout))
    for pattern, numbers in recorded:
        found = next((got for shape, got in remaining if shape == line_shape(pattern)), None)
        if found is None:
            raise AssertionError(f"no printed line like {pattern!r}")
        for want, got in zip(numbers, found, strict=True):
            if want is not None and not metric_close(got, want, tolerance, computed_in):
                raise AssertionError(f"{pattern!r}: printed {got}, recorded {want}")
