"""The step benchmark: the CUDA program timed on the CPU, the migrated one on XLA:CPU with XLA's
evidence (graphs compiled, none after warm-up, host transfers, fallbacks), and its failure modes:
too few steps, a program that fails or hangs, a program the timer never saw."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from pytpu.engine.testgen import workspace
from pytpu.engine.verify import benchmark
from pytpu.engine.verify.measured import Side

FIXTURE = Path(__file__).parent / "fixtures" / "testgen" / "tiny"
PYTPU = [sys.executable, "-m", "pytpu.engine.cli"]
TINY = "python train.py --cuda --steps {steps}"
WARMUP, STEPS = 2, 5


def _copy(tmp_path: Path, name: str = "repo") -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / name))


def _side(median_ms: float) -> Side:
    """A side that timed its steps at `median_ms`."""
    return Side(
        device="cpu", device_name="CPU", steps_timed=2, median_ms=median_ms, spread_ms=None,
        warmup_ms=[], boundary="optimizer step", compile=None, transfers_per_step=None,
        cpu_fallbacks=None, exit_code=0, seconds=1.0, error=None,
    )  # fmt: skip


def _program(tmp_path: Path, source: str) -> Path:
    repo = tmp_path / "program"
    repo.mkdir()
    (repo / "train.py").write_text(textwrap.dedent(source))
    return repo


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = _copy(tmp_path_factory.mktemp("migrated"))
    done = subprocess.run(
        [*PYTPU, "rewrite", ".", "--write"], cwd=repo, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "torch_xla" in (repo / "train.py").read_text()
    return repo


@pytest.fixture(scope="module")
def on_xla(migrated: Path) -> dict:
    return benchmark.measure(migrated, TINY.format(steps=12), "xla", WARMUP, STEPS, timeout=300)


# --- the original program on the CPU ------------------------------------------------------------


def test_cpu_side_times_the_cuda_program_with_cuda_mapped_to_the_cpu(tmp_path, monkeypatch):
    repo = _copy(tmp_path)
    probe = tmp_path / "environment.json"
    monkeypatch.setenv("TINY_ENV_PROBE", str(probe))
    monkeypatch.setenv("GITHUB_TOKEN", "secret")
    result = benchmark.measure(repo, TINY.format(steps=12), "cpu", WARMUP, STEPS, timeout=120)
    assert result.error is None, result.error
    assert result.exit_code == 0  # `.to(torch.device('cuda'))` ran: CUDA went to the CPU
    assert result.device == "cpu" and result.device_name == "CPU"
    assert result.steps_timed == STEPS
    assert result.boundary == "optimizer step"
    assert result.median_ms > 0
    spread = result.spread_ms
    assert spread.min <= spread.p25 <= result.median_ms <= spread.p75 <= spread.max
    assert len(result.warmup_ms) == WARMUP + 1  # the first step, then the warm-up steps
    assert result.compile is None and result.transfers_per_step is None
    assert result.cpu_fallbacks is None
    assert result.samples_per_step is None and result.throughput is None  # no DataLoader
    names = json.loads(probe.read_text())
    assert "GITHUB_TOKEN" not in names and "PYTPU_BENCHMARK" in names


def test_the_program_ends_once_the_steps_are_timed(tmp_path):
    # A million steps would take many minutes; the timer ends the program after 1 + 2 + 5.
    result = benchmark.measure(
        _copy(tmp_path), TINY.format(steps=1_000_000), "cpu", WARMUP, STEPS, timeout=120
    )
    assert result.error is None, result.error
    assert result.steps_timed == STEPS and result.seconds < 60


def test_quick_steps_are_timed_on_until_they_last_the_least_time(tmp_path):
    # A median of a few millisecond steps moves with every hiccup of the machine: they are timed
    # until they last 0.3 s in all, up to MOST_TIMED, and then the program ends.
    result = benchmark.measure(
        _copy(tmp_path), TINY.format(steps=1_000_000), "cpu", WARMUP, STEPS, 120, 0.3
    )
    assert result.error is None, result.error
    assert STEPS < result.steps_timed <= benchmark.MOST_TIMED
    lasted = sum(result.step_ms)
    assert lasted >= 300 or result.steps_timed == benchmark.MOST_TIMED, lasted
    assert sum(result.step_ms[:-1]) < 300  # (it stopped at the first step past the mark)
    assert result.steps_ran == 1 + WARMUP + result.steps_timed and result.timed_all


def test_too_few_steps_is_an_error_that_says_what_to_do(tmp_path):
    result = benchmark.measure(_copy(tmp_path), TINY.format(steps=4), "cpu", WARMUP, STEPS)
    assert result.exit_code == 0
    assert result.steps_timed == 0 and result.median_ms is None
    assert result.spread_ms is None
    assert result.error == (
        "only 4 steps ran; the benchmark needs 2 warm-up + at least 2 timed steps (after the"
        " first step, which includes start-up): give a longer `benchmark` command"
    )


def test_a_program_that_stops_early_keeps_the_steps_it_timed(tmp_path):
    # 1 + 2 warm-up + 3 timed of the 5 asked for: reported, without an error.
    result = benchmark.measure(_copy(tmp_path), TINY.format(steps=6), "cpu", WARMUP, STEPS)
    assert result.error is None, result.error
    assert result.steps_timed == 3 and result.median_ms > 0


def test_manual_updates_are_timed_at_the_end_of_backward(tmp_path):
    repo = _program(
        tmp_path,
        """
        import torch

        w = torch.zeros(8, 1, requires_grad=True)
        x, y = torch.randn(32, 8), torch.randn(32, 1)
        for step in range(10):
            loss = (x @ w - y).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
                w.grad.zero_()
        """,
    )
    result = benchmark.measure(repo, "python train.py", "cpu", WARMUP, STEPS)
    assert result.error is None, result.error
    assert result.boundary == "backward"
    assert result.steps_timed == STEPS


def test_backward_ends_give_way_to_optimizer_steps(tmp_path):
    # Two backward passes per optimizer step (gradient accumulation): steps are the boundary, so
    # 7 iterations give 1 + 2 warm-up + 4 timed steps; counting the 14 backward ends as well (or
    # the first iteration's) would time all 5.
    repo = _program(
        tmp_path,
        """
        import torch

        model = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(32, 8)
        for step in range(7):
            for micro in range(2):
                model(x).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        """,
    )
    result = benchmark.measure(repo, "python train.py", "cpu", WARMUP, STEPS)
    assert result.error is None, result.error
    assert result.boundary == "optimizer step" and result.steps_timed == 4


def test_a_failing_program_reports_its_exit_code_and_stderr(tmp_path):
    repo = _program(tmp_path, "raise SystemExit('the data folder is missing')\n")
    result = benchmark.measure(repo, "python train.py", "cpu", WARMUP, STEPS)
    assert result.exit_code == 1
    assert result.error.startswith("`python train.py` exited with 1:")
    assert "the data folder is missing" in result.error


def test_a_program_that_hangs_is_stopped_at_the_timeout(tmp_path):
    # The sleeping grandchild (the shell's background job) must not hold the run open either.
    repo = _program(tmp_path, "import time\ntime.sleep(120)\n")
    result = benchmark.measure(repo, "sleep 120 & python train.py", "cpu", timeout=5)
    assert result.seconds < 30
    assert "did not finish its first 6 steps in 5 s" in result.error


def test_a_command_without_python_has_no_timer(tmp_path):
    result = benchmark.measure(tmp_path, "true", "cpu")
    assert result.exit_code == 0 and result.steps_timed == 0
    assert "ran without the step timer" in result.error


def test_the_environment_s_own_sitecustomize_still_runs(tmp_path, monkeypatch):
    own = tmp_path / "site"
    own.mkdir()
    marker = tmp_path / "marker"
    (own / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.setenv("PYTHONPATH", str(own))
    result = benchmark.measure(_copy(tmp_path), TINY.format(steps=12), "cpu", WARMUP, STEPS)
    assert result.error is None, result.error
    assert marker.exists()


def test_throughput_counts_the_dataloader_s_batches(tmp_path):
    repo = _program(
        tmp_path,
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        data = TensorDataset(torch.randn(96, 3), torch.randn(96, 1))
        model = torch.nn.Linear(3, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in DataLoader(data, batch_size=6):
            loss = (model(x) - y).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
    )
    result = benchmark.measure(repo, "python train.py", "cpu", WARMUP, STEPS, timeout=120)
    assert result.error is None, result.error
    assert result.samples_per_step == 6 and result.devices == 1
    per_second = 6 / (result.median_ms / 1000)
    assert result.throughput.samples_per_second == pytest.approx(per_second, abs=0.1)
    assert result.throughput.per_device == result.throughput.samples_per_second


# --- the migrated program on XLA ---------------------------------------------------------------


def test_xla_side_times_the_migrated_program_with_xla_evidence(on_xla):
    assert on_xla.error is None, on_xla.error
    assert on_xla.exit_code == 0
    assert on_xla.device == "xla" and on_xla.device_name == "XLA:CPU"
    assert on_xla.steps_timed == STEPS and on_xla.median_ms > 0
    assert on_xla.boundary == "optimizer step"
    assert on_xla.compile.graphs >= 1 and on_xla.compile.seconds > 0
    assert on_xla.compile.after_warmup == 0  # the steady state compiles nothing
    # The program prints loss.item() every step: one read of the device per step, and that read
    # is a transfer, not a CPU fallback.
    assert on_xla.transfers_per_step == 1.0
    assert on_xla.cpu_fallbacks == {}
    assert on_xla.devices == on_xla.devices_present == 1


def test_the_devices_left_idle_are_counted(migrated, monkeypatch):
    # Four XLA devices on the CPU; the migrated program places its work on one.
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")
    result = benchmark.measure(migrated, TINY.format(steps=12), "xla", WARMUP, STEPS, timeout=300)
    assert result.error is None, result.error
    assert (result.devices, result.devices_present) == (1, 4)


SPMD_PROGRAM = """
import torch
import torch_xla
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr

if __name__ == "__main__":
    xr.use_spmd()
    device = torch_xla.device()
    model = torch.nn.Linear(3, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(12):
        x, y = torch.randn(8, 3).to(device), torch.randn(8, 1).to(device)
        if SHARDED:
            xs.mark_sharding(x, xs.get_1d_mesh(), (0, None))
        loss = (model(x) - y).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch_xla.sync()
"""


@pytest.mark.parametrize("sharded", [True, False])
def test_under_spmd_the_devices_are_used_when_a_batch_is_split(tmp_path, monkeypatch, sharded):
    # One SPMD program over four devices: a batch split over the mesh uses them all; with
    # nothing split, every device computes the whole step (one device's work, counted as 1).
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")
    repo = _program(tmp_path, SPMD_PROGRAM.replace("SHARDED", str(sharded)))
    result = benchmark.measure(repo, "python train.py", "xla", WARMUP, STEPS, timeout=300)
    assert result.error is None, result.error
    assert (result.devices, result.devices_present) == ((4, 4) if sharded else (1, 4))


def test_compare_gives_the_speedup_of_the_median_step(on_xla, tmp_path):
    baseline = benchmark.measure(
        _copy(tmp_path), TINY.format(steps=12), "cpu", WARMUP, STEPS, timeout=120
    )
    compared = benchmark.compare("python train.py", [baseline], [on_xla], WARMUP, STEPS)
    assert compared.error is None
    assert compared.method == benchmark.method(STEPS) and compared.steps == STEPS
    assert compared.speedup == pytest.approx(baseline.median_ms / on_xla.median_ms, 1e-2)


def test_the_method_says_when_a_program_ended_before_its_timed_steps():
    """A program with no step setting to raise times fewer steps than asked: the method says
    how few, not the number asked for (a report once said 10 of a run that timed 3)."""
    asked = 10
    full = msgspec.structs.replace(_side(100.0), steps_timed=asked, step_ms=[100.0] * asked)
    short = msgspec.structs.replace(_side(50.0), steps_timed=3, step_ms=[50.0] * 3)
    compared = benchmark.compare("python train.py", [full], [short], WARMUP, asked)
    assert "the program ended after 3 timed steps in its shortest run" in compared.method
    assert "(10 asked for;" in compared.method
    whole = benchmark.compare("python train.py", [full], [full], WARMUP, asked)
    assert whole.method == benchmark.method(asked)


def test_compare_without_a_median_has_no_speedup_and_names_the_side(on_xla):
    failed = msgspec.structs.replace(
        on_xla, device="cpu", device_name="CPU", median_ms=None, error="only 1 steps ran"
    )
    compared = benchmark.compare("python train.py", [failed], [on_xla], WARMUP, STEPS)
    assert compared.speedup is None
    assert compared.error == "baseline (CPU): only 1 steps ran"


def test_a_training_step_that_changes_shape_recompiles_after_warm_up(tmp_path):
    repo = _program(
        tmp_path,
        """
        import torch
        import torch_xla

        device = torch_xla.device()
        model = torch.nn.Linear(8, 1).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(12):
            x = torch.randn(4 + step, 8).to(device)  # a new batch size each step: a new graph
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            torch_xla.sync()
        """,
    )
    result = benchmark.measure(repo, "python train.py", "xla", WARMUP, STEPS, timeout=300)
    assert result.error is None, result.error
    # Every step compiled: timing stops after the fewest timed steps, with a graph for each.
    assert result.steps_timed == benchmark.MIN_TIMED
    assert result.compile.after_warmup >= benchmark.MIN_TIMED


def test_graphs_compiled_once_after_warm_up_are_a_steady_state():
    warm_up = [5, 6, 6, 6]  # graphs compiled by each boundary of the first step and warm-up
    # an evaluation pass between the 4th and 5th timed steps compiled 3 graphs, once
    once = warm_up + [6, 6, 6, 9, 9, 9, 9, 9, 9, 9]
    assert benchmark._settled(once, 10, 3)
    every_step = warm_up + list(range(7, 17))
    assert not benchmark._settled(every_step, 10, 10)
    at_the_end = warm_up + [6] * 8 + [7, 8]
    assert not benchmark._settled(at_the_end, 10, 2)
    # pytorch/examples' mnist on 20 steps: the evaluation after the first epoch (10 steps)
    # compiled its 4 graphs between the 6th and 7th timed steps, in the later half, at one point
    between_epochs = warm_up + [6] * 6 + [10] * 4
    assert benchmark._settled(between_epochs, 10, 4)
    twice = warm_up + [6] * 5 + [8, 8, 10, 10, 10]  # at two points: not one part compiled once
    assert not benchmark._settled(twice, 10, 4)
    # word_language_model: an epoch's last, shorter bptt slice compiled its step's graph, and
    # the evaluation after it its own in the next step's interval; the later steps, nothing
    epoch_end = warm_up + [6] * 5 + [7, 8, 8, 8, 8]
    assert benchmark._settled(epoch_end, 10, 2)
    assert not benchmark._settled(warm_up + [6] * 5 + [7, 8, 9, 9, 9], 10, 3)  # three in a row
    assert not benchmark._settled(warm_up + [6] * 5 + [7, 7, 8, 8, 8], 10, 2)  # not adjacent
    assert not benchmark._settled([], 10, 2)  # (a record without the counts: not shown settled)
    assert benchmark._settled(warm_up + [6] * 10, 10, 0)


def test_manual_updates_on_xla_reach_a_steady_state(tmp_path):
    # The program never syncs: the timer's sync at each backward end runs the steps (without it,
    # nothing would run before the program ends, and no graph would be compiled).
    repo = _program(
        tmp_path,
        """
        import torch
        import torch_xla

        device = torch_xla.device()
        w = torch.zeros(8, 1, device=device, requires_grad=True)
        x, y = torch.randn(32, 8).to(device), torch.randn(32, 1).to(device)
        for step in range(12):
            loss = (x @ w - y).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
                w.grad.zero_()
        """,
    )
    result = benchmark.measure(repo, "python train.py", "xla", WARMUP, STEPS, timeout=300)
    assert result.error is None, result.error
    assert result.boundary == "backward" and result.steps_timed == STEPS
    assert result.compile.graphs >= 1 and result.compile.after_warmup == 0
    assert result.transfers_per_step == 0


def test_a_program_that_stays_on_the_cpu_is_not_an_xla_measurement(tmp_path):
    # The original, unmigrated program without --cuda: it never touches the XLA device.
    result = benchmark.measure(
        _copy(tmp_path), "python train.py --steps 12", "xla", WARMUP, STEPS, timeout=300
    )
    assert result.steps_timed == STEPS
    assert result.compile.graphs == 0
    assert result.error == (
        "the program compiled no graph for the XLA device: its steps did not run there"
    )


def test_a_much_slower_target_keeps_a_nonzero_speedup():
    # The report's schema requires a positive speedup: x0.0002 must not round to 0.
    compared = benchmark.compare(
        "python train.py", [_side(1.0)], [_side(5000.0)], warmup=3, steps=10
    )
    assert compared.speedup == 0.0002


def test_one_backward_pass_is_one_boundary_when_cuda_is_mapped(tmp_path):
    # On the CPU side CUDA is mapped by a TorchFunctionMode, through which Tensor.backward calls
    # itself again; counted twice, half the "steps" would last a few microseconds. 9 iterations
    # are 1 + WARMUP + 6 steps: more than the timed steps only if each is counted once.
    repo = _program(
        tmp_path,
        """
        import time
        import torch

        w = torch.zeros(8, 1, requires_grad=True, device="cuda")
        x, y = torch.randn(32, 8).cuda(), torch.randn(32, 1).cuda()
        for step in range(9):
            time.sleep(0.02)
            loss = (x @ w - y).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
                w.grad.zero_()
        """,
    )
    result = benchmark.measure(repo, "python train.py", "cpu", WARMUP, STEPS)
    assert result.error is None, result.error
    assert result.boundary == "backward"
    assert result.spread_ms.min >= 15  # every timed step includes its 20 ms sleep


def test_each_run_starts_from_the_checkout_not_from_an_earlier_run_s_files(tmp_path):
    # A program that refuses to run over its own results (a solver resuming a saved run did:
    # "Mismatch in device: saved cuda, input cpu"): the tests' runs leave them behind.
    repo = _program(
        tmp_path,
        """
        import os, torch
        os.makedirs("results")  # fails when a run before this one made it
        model = torch.nn.Linear(3, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(16):
            loss = model(torch.randn(4, 3)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
    )
    checkout = workspace.snapshot(repo)
    (repo / "results").mkdir()  # what the tests' run wrote
    sides = ((repo, "cpu"), (repo, "cpu"))
    section = benchmark.run(
        sides, "python train.py", WARMUP, STEPS, 300, checkouts={repo: checkout}, rounds=2
    )
    assert len(section.rounds) == 2  # the second round, too, started from the files
    for side in ("baseline", "target"):
        assert getattr(section, side).error is None, getattr(section, side).error
