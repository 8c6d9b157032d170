"""Run commands as a shell user writes them: with their own PYTHONPATH and other variables, `env`,
`cd`, `python -m`, `python3`, a shell script, torchrun and accelerate's launcher, the harness
records the training step (test generation, and the generated suite's own runs) and the step timer
times it (the benchmark). A command whose Python cannot take PyTPU says why."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from pytpu.engine import processes
from pytpu.engine.testgen import record
from pytpu.engine.verify import benchmark
from pytpu.runtime import support
from tests.test_step_benchmark import STEPS, WARMUP, _copy

VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"
# The tiny program's training step, as the harness keys it.
STEP = "train.py::main#step1"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny program, with an entry point in a package that imports it from the root (so it
    needs the root on sys.path) and a shell script that exports PYTHONPATH."""
    root = _copy(tmp_path_factory.mktemp("commands"))
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "run.py").write_text("from train import main\n\nmain()\n")
    (root / "run.sh").write_text('export PYTHONPATH=.\npython pkg/run.py "$@"\n')
    return root


def _needs(module: str):
    found = importlib.util.find_spec(module) is not None
    return pytest.mark.skipif(not found, reason=f"{module} is not installed")


COMMANDS = [
    "PYTHONPATH=. python pkg/run.py",
    "CUDA_VISIBLE_DEVICES=0 python train.py --cuda",
    "env TINY=1 PYTHONPATH=. python pkg/run.py",
    "cd pkg && PYTHONPATH=.. python run.py",
    "python -m pkg.run",
    "python3 train.py",
    f"{VERSION} train.py",
    "bash run.sh",
    "torchrun --nproc_per_node=1 train.py",
    # Its workers are started as sys.executable, with the PYTHONPATH torchrun's shim set (on a
    # free port: the one above takes torchrun's fixed one).
    "PYTHONPATH=. torchrun --standalone --nproc_per_node=1 pkg/run.py",
    pytest.param("accelerate launch --cpu train.py", marks=_needs("accelerate")),
]


@pytest.mark.parametrize("command", COMMANDS)
def test_recording_takes_the_command_as_written(repo, command):
    run = record.run_once(repo, f"{command} --steps 2", 120, 1 << 20, [])
    assert run.returncode == 0, run.stderr
    assert STEP in {step["key"] for step in run.steps}, run.stderr


def test_the_generated_suite_runs_the_command_as_written(repo, monkeypatch):
    monkeypatch.setenv("PYTPU_DEVICE", "cpu")
    run = support.run_program(repo, "PYTHONPATH=. python pkg/run.py --steps 2", timeout=120)
    support.check_program_ran(run)
    assert STEP in {step["key"] for step in run.steps}, run.stderr


@pytest.mark.parametrize(
    "command",
    [
        "PYTHONPATH=. python pkg/run.py",
        "PYTHONPATH=. torchrun --standalone --nproc_per_node=1 pkg/run.py",
    ],
)
def test_the_step_timer_takes_the_command_as_written(repo, command):
    result = benchmark.measure(repo, f"{command} --cuda --steps 12", "cpu", WARMUP, STEPS)
    assert result.error is None, result.error
    assert result.steps_timed == STEPS


def test_isolated_mode_is_an_error_that_says_it_cannot_take_the_harness(repo):
    with pytest.raises(record.RecordingFailed) as failed:
        record.record_twice(repo, "python -I train.py --steps 1", 120, 1 << 20, [])
    message = str(failed.value)
    assert message.startswith("`python -I train.py --steps 1` ran without the harness. ")
    assert f"runs {sys.executable} by a name PATH finds" in message
    assert "isolated mode cannot take the harness (it ignores PYTHONPATH" in message


def test_a_start_up_file_that_fails_is_named_in_the_error():
    output = (
        "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
        "ModuleNotFoundError: No module named 'pytpu'\n"
    )
    message = processes.ran_without_pytpu("/usr/bin/python3 train.py", "the step timer", output)
    assert message.startswith(
        "`/usr/bin/python3 train.py` ran without the step timer: PyTPU's start-up file failed in"
        " a Python it started (ModuleNotFoundError: No module named 'pytpu'). "
    )


def test_large_settings_reach_the_program_through_a_file(tmp_path):
    """A library with hundreds of module classes gives the harness more probes than one
    environment variable may hold (128 KiB): they travel in a file."""
    from pytpu.runtime import channel, launch

    settings = {"probes": ["x" * 100] * 2000}
    env = launch.program_environment(channel.HARNESS_ENV, settings)
    value = env[channel.HARNESS_ENV]
    assert value.startswith("@") and len(value) < 4096
    assert json.loads(channel.settings_text(value)) == settings
    small = launch.program_environment(channel.HARNESS_ENV, {"probes": []})
    assert json.loads(small[channel.HARNESS_ENV]) == {"probes": []}


def test_a_failure_is_summed_up_by_the_exception_its_last_traceback_ends_with():
    from pytpu.runtime.launch import failure_summary

    listing = "\n".join(
        f"Backend{i}: registered at kernel.cpp:{i} [backend fallback]" for i in range(9)
    )
    output = (
        'Traceback (most recent call last):\n  File "a.py", line 1, in <module>\n'
        "KeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\n"
        'Traceback (most recent call last):\n  File "train.py", line 66, in train\n'
        "    output = model(features, adj)\n             ^^^^^^^^^^^^^^^^^^^^\n"
        "NotImplementedError: Could not run 'aten::addmm' with arguments from the 'SparseXLA'"
        f" backend.\n{listing}\n"
    )
    assert failure_summary(output) == (
        "NotImplementedError: Could not run 'aten::addmm' with arguments from the 'SparseXLA'"
        " backend."
    )
    assert failure_summary("step 1\nkilled\n") == "killed"  # no traceback: the last line
    assert failure_summary("") == "no output"
    assert failure_summary("Traceback (most recent call last):\nE: " + "x" * 400).endswith("x…")


def test_a_crash_with_no_traceback_is_summed_up_by_its_known_cause():
    # milesial/Pytorch-UNet on XLA's CPU: per-parameter host reads after the step, each compiling
    # the step again, until LLVM could map no more memory and the process died of SIGSEGV
    from pytpu.runtime.launch import exit_message

    output = "epoch 1\nLLVM compilation error: Cannot allocate memory\nLLVM ERROR: out of memory\n"
    message = exit_message("the program", 139, output)
    assert message.startswith("the program exited with 139 (a segmentation fault): XLA's CPU")
    assert "vm.max_map_count" in message.splitlines()[0]
    assert exit_message("the program", 1, "step 1\nkilled\n").startswith(
        "the program exited with 1: killed"
    )
    # gordicaleksa/pytorch-GAT: an epoch loop whose step is in a closure got no barrier; the
    # graphs grew every epoch until LLVM aborted the process
    output = (
        "epoch 9\nallocateMappedMemory failed with error: Cannot allocate memory\n"
        "LLVM ERROR: Unable to allocate section memory!\n"
    )
    message = exit_message("the program", 134, output).splitlines()[0]
    assert message.startswith("the program exited with 134 (an abort): XLA's CPU compiler")
    assert "no barrier" in message
