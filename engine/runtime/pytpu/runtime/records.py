"""What the harness writes at a program's exit, one record per process (`harness-PID.pt`, read
back by `program_run.harness_records`): the types both sides agree on.

They are plain dicts on disk (`torch.save`, loaded with `weights_only=True`), typed here so that
the harness that writes them and test generation and the suites that read them name the same
fields; and `UnitUnavailable`, whose message is a skipped unit's reason.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class UnitUnavailable(Exception):
    """The unit cannot be exercised here (the reason is the message)."""


class StepRecord(TypedDict):
    """The first iteration of a training step at one call site: an optimizer step, or (without
    `optimizer`) one of the first two backward passes of a site that updates by hand."""

    site: str  # "train.py:42", where the call is
    key: str  # "train.py::train#step1": the site's function and its rank there (lines move)
    loss: float | None  # the last loss a backward pass was taken of, before this
    optimizer: NotRequired[str]  # the optimizer's class name (steps only)
    # after the step, each parameter's norm (None: recorded when its gradient was only rounding)
    parameter_norms: NotRequired[list[float | None]]


class UnitInputs(TypedDict):
    """A unit's inputs, on the CPU, at most KEPT_SAMPLES rows of a batch."""

    args: list[Any]
    kwargs: dict[str, Any]
    cut: NotRequired[int]  # the rows kept, when the batch was cut ...
    batch: NotRequired[int]  # ... from this many


class UnitRecord(UnitInputs):
    """A module or function of the repository as the program first called it with tensors."""

    kind: str  # "module" or "function"
    file: str  # its file, relative to the repository
    line: int  # where its class or function is defined
    script: bool  # defined in a script or a notebook (its definitions are loaded apart)
    globals: dict[str, Any]  # a script's module-level values its code reads
    constructor: NotRequired[dict[str, Any]]  # a module's constructor arguments, described
    training: NotRequired[bool]  # a module's mode when called
    submodule_of_repo: NotRequired[bool]
    probe: NotRequired[str]  # the class the suite called it for, not the program
    made_for: NotRequired[str]  # a probe's layer it was built for
    pending: NotRequired[int]  # (while a function runs: its frame; never written)


class HarnessRecord(TypedDict):
    """One process of the program, as the harness saw it."""

    steps: list[StepRecord]  # optimizer steps, then backward passes
    files: list[str]  # the repository's files and notebook cells the process ran
    units: dict[str, UnitRecord]  # by name: "model.py::Net", "train.py::loss_fn"
    skipped: dict[str, str]  # units that could not be recorded, and why
    device_executions: int | None  # graphs run on the XLA device (None: not on one)


def steps_of(harness: list[HarnessRecord]) -> list[StepRecord]:
    """The steps of a run's processes, one process after the other."""
    return [step for record in harness for step in record["steps"]]
