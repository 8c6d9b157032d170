"""A run command too short for the benchmark is lengthened by the program's own step or epoch
setting (an argparse option, or a global nanoGPT's configurator sets), within the time limit, in
every form a command takes; the report names the command that ran. Without such a setting, the
error says what was looked for."""

from __future__ import annotations

import copy
import textwrap
from pathlib import Path

import msgspec
import pytest

from pytpu.engine.reporting import markdown
from pytpu.engine.verify import benchmark
from pytpu.engine.verify.measured import Side, StepBenchmark
from tests.test_reporting import load, section
from tests.test_step_benchmark import STEPS, WARMUP, _copy, _program, migrated  # noqa: F401

# Three optimizer steps an epoch.
EPOCHS = """
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--name", default="run")
    parser.add_argument("--eval-iters", type=int, default=2)  # not a length of the run
    args = parser.parse_args()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [torch.randn(8, 4) for _ in range(3)]
    for epoch in range(args.epochs):
        for x in batches:
            optimizer.zero_grad()
            model(x).pow(2).mean().backward()
            optimizer.step()
"""
# nanoGPT's style: settings are globals, which `--name=value` sets through a configurator; like
# nanoGPT, it runs max_iters + 1 steps.
GLOBALS = """
    import torch

    max_iters = 3
    batch_size = 8
    exec(open("configurator.py").read())
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for iter_num in range(max_iters + 1):
        optimizer.zero_grad()
        model(torch.randn(batch_size, 4)).pow(2).mean().backward()
        optimizer.step()
"""
CONFIGURATOR = """
    import sys
    from ast import literal_eval

    for arg in sys.argv[1:]:
        key, value = arg[2:].split("=")
        assert key in globals(), key
        globals()[key] = literal_eval(value)
"""
# pytorch/examples' style: `--dry-run` stops after one step, whatever the epochs.
DRY_RUN = """
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--dry-run", action="store_true", help="one step only")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        for step in range(20):
            optimizer.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            optimizer.step()
            if args.dry_run:
                break
"""
# A fixed number of steps, whatever the options say.
FIXED = """
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=3)  # read, and ignored
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for step in range(3):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
"""


def _short(ran: int, step_ms: float = 10.0, seconds: float = 2.0) -> Side:
    """What measure gives for a run of `ran` steps, the first with start-up."""
    return Side(
        device="cpu", device_name="CPU", steps_ran=ran, steps_timed=0, median_ms=None,
        spread_ms=None, warmup_ms=[500.0] + [step_ms] * (ran - 1), boundary="optimizer step",
        compile=None, transfers_per_step=None, cpu_fallbacks=None, exit_code=0, seconds=seconds,
        error=None,
    )  # fmt: skip


def _longer(root: Path, command: str, result: Side, timeout: float = 300):
    return benchmark.longer(root, command, result, WARMUP, STEPS, timeout)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The epochs program at the root, in a package and in a folder."""
    root = _program(tmp_path, EPOCHS)
    for folder in ("pkg", "src"):
        (root / folder).mkdir()
        (root / folder / "train.py").write_text((root / "train.py").read_text())
    (root / "pkg" / "__init__.py").write_text("")
    return root


# --- the longer command, in each form a command takes --------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("python train.py --epochs 1", "python train.py --epochs 5"),
        ("PYTHONPATH=. python train.py --epochs=2", "PYTHONPATH=. python train.py --epochs=10"),
        ("python -m pkg.train --max-steps 2", "python -m pkg.train --max-steps 10"),
        (
            "env A=1 python3 -u -m pkg.train --max-steps 2 --max-steps 2",
            "env A=1 python3 -u -m pkg.train --max-steps 10 --max-steps 10",
        ),
        (
            "accelerate launch --cpu train.py --epochs 2",
            "accelerate launch --cpu train.py --epochs 10",
        ),
        (
            "torchrun --nproc_per_node=1 train.py --max-steps=2 | tee log",
            "torchrun --nproc_per_node=1 train.py --max-steps=10 | tee log",
        ),
        # No step setting in the command: the default is raised, added after the last argument,
        # before the redirection; quoted words stay as written.
        (
            "cd src && python train.py --name 'a b' > log 2>&1",
            "cd src && python train.py --name 'a b' --epochs=100 > log 2>&1",
        ),
        (
            "python -m torch.distributed.run --nproc_per_node 1 train.py && echo done",
            "python -m torch.distributed.run --nproc_per_node 1 train.py --epochs=100 && echo done",
        ),
    ],
)
def test_the_setting_is_raised_on_the_program_s_invocation(repo, command, expected):
    # Two steps ran: each setting is scaled by the 10 steps planned over those 2.
    plan = _longer(repo, command, _short(2))
    assert isinstance(plan, benchmark.Longer), plan
    assert plan.command == expected


def _benchmark_section(bench: StepBenchmark) -> str:
    """The report's Benchmark section for this result (checked against the schema first)."""
    document = copy.deepcopy(load("parity"))
    document["benchmark"] = msgspec.to_builtins(bench)
    return section(markdown.render(document), "Benchmark")


def test_epochs_scale_by_the_steps_an_epoch_ran(repo):
    plan = _longer(repo, "python train.py --epochs 1", _short(3))
    assert plan.raised == {"--epochs": (1, 4)}  # 3 steps an epoch: 4 epochs give the 10 planned


def test_the_time_limit_caps_the_steps_planned(repo):
    # 2 s a step after 10 s for 2 steps: in 80% of 20 s, 3 more steps fit; 5 are the fewest
    # the benchmark takes (1 + 2 warm-up + 2 timed), so it plans 5 rather than 10.
    plan = _longer(repo, "python train.py --max-steps 2", _short(2, 2000, 10), timeout=20)
    assert plan.raised == {"--max-steps": (2, 5)}
    why = _longer(repo, "python train.py --max-steps 2", _short(2, 2000, 10), timeout=15)
    assert why == (
        "at 2.00 s a step, 5 steps do not fit in the time limit (15 s): raise `timeout`, or give"
        " a `benchmark` command with quicker steps"
    )


def test_without_a_python_script_the_error_says_what_was_read(repo):
    (repo / "run.sh").write_text("python train.py --epochs 1\n")
    why = _longer(repo, "bash run.sh", _short(3))
    assert why.startswith("PyTPU found no Python script in the command to raise a step or epoch")
    assert why.endswith("(it reads `python x.py`, `python -m module`, `torchrun x.py`);"
                        " give a longer `benchmark` command")  # fmt: skip


def test_a_run_that_ends_before_its_timed_steps_are_done_is_too_short(tmp_path):
    # cure-lab/LTSF-Linear's one epoch ran 13 steps: the first, 3 warm-up and 9 of the 10 timed;
    # the timer ends a program itself once it has its steps, and says so (`timed_all`)
    root = _program(tmp_path, EPOCHS)
    ended = benchmark.measure(root, "python train.py --epochs 1", "cpu", WARMUP, STEPS)
    assert ended.steps_ran == 3 and not ended.timed_all and benchmark._too_short(ended)
    enough = benchmark.measure(root, "python train.py --epochs 10", "cpu", WARMUP, STEPS)
    assert enough.timed_all and not benchmark._too_short(enough)
    # ten quick steps are not enough when they must last a second in all: the program ran out
    quick = benchmark.measure(root, "python train.py --epochs 10", "cpu", WARMUP, STEPS, 60, 1.0)
    assert quick.steps_timed >= STEPS and not quick.timed_all and benchmark._too_short(quick)
    failed = msgspec.structs.replace(ended, exit_code=1)
    assert not benchmark._too_short(failed)  # a failure is no short run
    assert not benchmark._too_short(_short(0))  # the timer saw no step


def test_quick_steps_are_planned_to_last_the_least_time(tmp_path):
    root = _program(tmp_path, EPOCHS)
    short = benchmark.measure(root, "python train.py --epochs 1", "cpu", WARMUP, STEPS)
    quick = msgspec.structs.replace(short, warmup_ms=[500.0, 2.0, 2.0])  # 3 steps an epoch
    plan = benchmark.longer(root, "python train.py --epochs 1", quick, WARMUP, STEPS, 300, 0.1)
    # 0.1 s at 2 ms a step: 50 timed steps, 1 + 2 + 50 with the margin, 3 steps an epoch
    assert plan.command == "python train.py --epochs 23"
    capped = benchmark.longer(root, "python train.py --epochs 1", quick, WARMUP, STEPS, 300, 9.0)
    # 9 s would take 4,500 steps: at most MOST_TIMED (200), so 1 + 2 + 200 with the margin
    assert benchmark.MOST_TIMED == 200 and capped.command == "python train.py --epochs 85"


# --- the benchmark with the longer command ------------------------------------------------------


def test_an_epochs_program_is_timed_with_more_epochs(tmp_path):
    root = _program(tmp_path, EPOCHS)
    short = benchmark.measure(root, "python train.py --epochs 1", "cpu", WARMUP, STEPS)
    assert short.steps_ran == 3 and short.steps_timed == 0
    plan = _longer(root, "python train.py --epochs 1", short)
    assert plan.command == "python train.py --epochs 4"
    result = benchmark.measure(root, plan.command, "cpu", WARMUP, STEPS)
    assert result.error is None, result.error
    assert result.steps_timed == STEPS  # 12 steps planned; the timer ended the run at 8


def test_a_configurator_global_is_set_as_name_equals_value(tmp_path):
    root = _program(tmp_path, GLOBALS)
    (root / "configurator.py").write_text(textwrap.dedent(CONFIGURATOR))
    command = "python train.py --batch_size=4"  # the command sets globals: max_iters can be set
    short = benchmark.measure(root, command, "cpu", WARMUP, STEPS)
    assert short.steps_ran == 4  # max_iters + 1
    plan = _longer(root, command, short)
    assert plan.command == "python train.py --batch_size=4 --max_iters=8"
    result = benchmark.measure(root, plan.command, "cpu", WARMUP, STEPS)
    assert result.error is None, result.error
    assert result.steps_timed == STEPS


def test_the_run_command_is_lengthened_and_the_report_says_what_ran(tmp_path, migrated):  # noqa: F811
    # The CUDA program on the CPU and, migrated, on XLA: `--steps 4` is too short for both.
    sides = ((_copy(tmp_path), "cpu"), (migrated, "xla"))
    bench = benchmark.run(sides, "python train.py --steps 4", WARMUP, STEPS, 300, rounds=1)
    assert bench.error is None, bench.error
    assert bench.command == "python train.py --steps 10"
    assert msgspec.to_builtins(bench.lengthened) == {
        "from": "python train.py --steps 4",
        "steps_ran": 4,
        "settings": [{"option": "--steps", "from": 4, "to": 10}],
        "dropped": [],
    }
    assert bench.baseline.steps_timed == bench.target.steps_timed == STEPS
    assert bench.target.compile.graphs >= 1 and bench.speedup > 0

    text = _benchmark_section(bench)
    assert (
        "Command: `python train.py --steps 10`, not the run command `python train.py --steps 4`:"
        f" that ran 4 steps, too few for the first step, {WARMUP} warm-up and {STEPS} timed steps,"
        " so PyTPU raised `--steps` from 4 to 10."
    ) in text


def test_without_a_step_setting_the_error_says_what_was_looked_for(tmp_path):
    root = _program(tmp_path, FIXED.replace('"--max-steps"', '"--repeats"'))
    bench = benchmark.run(
        ((root, "cpu"), (root, "cpu")), "python train.py", WARMUP, STEPS, rounds=1
    )
    assert bench.command == "python train.py" and bench.lengthened is None
    assert bench.baseline.error == (
        "only 3 steps ran; the benchmark needs 2 warm-up + at least 2 timed steps (after the"
        " first step, which includes start-up): PyTPU found no step or epoch setting in train.py"
        f" to raise ({benchmark.LOOKED_FOR}); give a longer `benchmark` command"
    )
    assert "an integer argparse option named like --epochs, --max-steps" in benchmark.LOOKED_FOR


def test_a_setting_that_gives_no_more_steps_is_raised_once(tmp_path):
    root = _program(tmp_path, FIXED)
    bench = benchmark.run(
        ((root, "cpu"), (root, "cpu")), "python train.py --max-steps 3", WARMUP, STEPS, rounds=1
    )
    assert bench.command == "python train.py --max-steps 10"  # the command that ran last
    assert msgspec.to_builtins(bench.lengthened.settings) == [
        {"option": "--max-steps", "from": 3, "to": 10}
    ]
    assert bench.baseline.error.endswith(
        ": raising --max-steps from 3 to 10 gave no more steps; give a longer `benchmark` command"
    )
    assert bench.speedup is None


def test_a_configured_benchmark_command_is_timed_as_written(tmp_path):
    root = _program(tmp_path, EPOCHS)
    bench = benchmark.run(
        ((root, "cpu"), (root, "cpu")), "python train.py --epochs 1", WARMUP, STEPS,
        lengthen=False, rounds=1,
    )  # fmt: skip
    assert bench.command == "python train.py --epochs 1" and bench.lengthened is None
    assert bench.baseline.error.endswith(": give a longer `benchmark` command")


def test_a_dry_run_switch_is_left_out_before_any_setting_is_raised(tmp_path):
    root = _program(tmp_path, DRY_RUN)
    command = "python train.py --verbose --dry-run --epochs 1 > log"
    plan = _longer(root, command, _short(1))
    assert plan.command == "python train.py --verbose --epochs 1 > log"  # --verbose is no switch
    assert plan.dropped == ("--dry-run",) and plan.raised == {}


def test_the_benchmark_times_a_dry_run_program_without_its_switch(tmp_path):
    root = _program(tmp_path, DRY_RUN)
    sides = ((root, "cpu"), (root, "cpu"))
    bench = benchmark.run(sides, "python train.py --dry-run", WARMUP, STEPS, rounds=1)
    assert bench.error is None, bench.error
    assert bench.command == "python train.py"
    assert msgspec.to_builtins(bench.lengthened) == {
        "from": "python train.py --dry-run",
        "steps_ran": 1,
        "settings": [],
        "dropped": ["--dry-run"],
    }
    assert bench.baseline.steps_timed == STEPS
    text = _benchmark_section(bench)
    assert (
        "that ran 1 step, too few for the first step, "
        f"{WARMUP} warm-up and {STEPS} timed steps, so PyTPU left out `--dry-run`, which cuts the"
        " run short."
    ) in text


# Full-batch training (pytorch/examples' gat and gcn): one step an epoch, `--dry-run` or not.
FULL_BATCH = """
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
        if args.dry_run:
            break
"""


def test_epochs_are_raised_when_leaving_out_dry_run_gave_no_more_steps(tmp_path):
    root = _program(tmp_path, FULL_BATCH)
    sides = ((root, "cpu"), (root, "cpu"))
    bench = benchmark.run(sides, "python train.py --epochs 1 --dry-run", WARMUP, STEPS, rounds=1)
    assert bench.error is None, bench.error
    assert bench.lengthened.dropped == ["--dry-run"]
    [raised] = bench.lengthened.settings
    assert raised.option == "--epochs" and raised.was == 1 and raised.to > STEPS
    assert bench.baseline.steps_timed == STEPS


# --- settings of a configuration system ----------------------------------------------------------

# A configuration system in small: dotted keys set by Hydra's `key=value` words (`+` adds a key),
# jsonargparse's and CfgNode's `--a.b=value` options, and yacs' `KEY VALUE` pairs after `--opts`.
CONFIGURED = """
    import sys
    import torch

    config = {"trainer.max_steps": 100, "data.batch": 8, "solver.base_lr": 0.1}
    words, index = sys.argv[1:], 0
    while index < len(words):
        word = words[index]
        if word == "--opts" or word == "--config-file":
            index += 1 if word == "--opts" else 2
            continue
        if "=" in word:
            key, value = word.lstrip("-+").split("=", 1)
        else:
            key, value = word.lstrip("-"), words[index + 1]
            index += 1
        config[key.lower()] = float(value) if "." in value else int(value)
        index += 1
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=config["solver.base_lr"])
    for step in range(config["trainer.max_steps"]):
        optimizer.zero_grad()
        model(torch.randn(config["data.batch"], 4)).pow(2).mean().backward()
        optimizer.step()
"""


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("python train.py --trainer.max_steps=2", "python train.py --trainer.max_steps=10"),
        ("python train.py --trainer.max_steps 2", "python train.py --trainer.max_steps 10"),
        (
            "python train.py trainer.max_steps=2 data.batch=4",
            "python train.py trainer.max_steps=10 data.batch=4",
        ),
        ("python train.py +trainer.max_steps=2", "python train.py +trainer.max_steps=10"),
        (
            "python train.py --config-file a.yaml --opts TRAINER.MAX_STEPS 2 SOLVER.BASE_LR 0.1",
            "python train.py --config-file a.yaml --opts TRAINER.MAX_STEPS 10 SOLVER.BASE_LR 0.1",
        ),
        ("python train.py TRAINER.MAX_STEPS 2", "python train.py TRAINER.MAX_STEPS 10"),
        # nanoGPT's configurator, the setting not a literal global of the script: given, it counts.
        ("python train.py --max_iters=2 --eval_iters=2",
         "python train.py --max_iters=10 --eval_iters=2"),
    ],
)  # fmt: skip
def test_a_configuration_system_s_step_setting_is_raised(tmp_path, command, expected):
    root = _program(tmp_path, CONFIGURED)
    plan = _longer(root, command, _short(2))
    assert isinstance(plan, benchmark.Longer), plan
    assert plan.command == expected


@pytest.mark.parametrize(
    "command",
    ["python train.py trainer.max_steps=3", "python train.py --opts TRAINER.MAX_STEPS 3"],
)
def test_the_benchmark_lengthens_a_configured_run(tmp_path, command):
    # Before, these ran 3 steps and failed: no step setting was found to raise.
    root = _program(tmp_path, CONFIGURED)
    bench = benchmark.run(((root, "cpu"), (root, "cpu")), command, WARMUP, STEPS, rounds=1)
    assert bench.error is None, bench.error
    assert bench.lengthened.steps_ran == 3
    [setting] = bench.lengthened.settings
    assert setting.was == 3 and setting.to > 3
    assert bench.baseline.steps_timed == bench.target.steps_timed == STEPS
