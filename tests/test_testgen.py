"""`pytpu testgen`: the suite it writes passes on the original code and on the migrated code on
XLA:CPU, catches a changed model, and generation is safe (no secrets, time limit, clear errors)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import pytpu.runtime
from pytpu.engine import processes, pytest_runs
from pytpu.engine.testgen import discover, program_settings, record, short_command
from pytpu.runtime import support

FIXTURE = Path(__file__).parent / "fixtures" / "testgen" / "tiny"
PYTPU = [sys.executable, "-m", "pytpu.engine.cli"]


def _pytpu(*args: str, cwd: Path, env: dict | None = None, timeout: float = 600):
    return subprocess.run(
        [*PYTPU, *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _suite(repo: Path, device: str = "cpu") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTPU_DEVICE": device, "PJRT_DEVICE": "CPU"}
    command = [sys.executable, "-m", "pytest", "tests/pytpu", "-q", "-p", "no:cacheprovider"]
    return subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("tiny") / "repo"
    shutil.copytree(FIXTURE, repo)
    probe = repo.parent / "environment.json"
    result = _pytpu(
        "testgen",
        ".",
        "--run",
        "python train.py --cuda",
        "--json",
        str(repo.parent / "testgen.json"),
        cwd=repo,
        env={"GITHUB_TOKEN": "ghp_secret", "TINY_ENV_PROBE": str(probe)},
    )
    assert result.returncode == 0, result.stderr
    return repo


def _copy(repo: Path, tmp_path: Path) -> Path:
    target = tmp_path / "repo"
    shutil.copytree(repo, target)
    return target


def test_every_unit_the_run_reaches_gets_named_tests(generated):
    report = json.loads((generated.parent / "testgen.json").read_text())
    tested = {entry["name"]: entry["tests"] for entry in report["tested"]}
    # predict(x, samples) takes forward's input and uses samples as a loop count.
    # Classifier asks hasattr(F, "silu"): its other path runs with F.silu hidden.
    assert tested["train.py::Classifier"] == [
        "forward",
        "forward without silu",
        "gradients",
        "predict",
        "rows",
    ]
    untested = {entry["name"]: entry["reason"] for entry in report["untested"]}
    assert "needs temperature" in untested["train.py::Classifier.calibrated"]
    assert tested["train.py::GatedBlock"] == ["forward", "gradients", "rows"]
    assert tested["train.py::normalise"] == ["result"]
    assert tested["train.py:81 (main)"] == ["first iteration"]
    # Block is never constructed itself: it gets GatedBlock's recorded arguments and inputs.
    assert tested["train.py::Block"] == ["forward", "gradients", "rows"]
    source = (generated / "tests/pytpu/test_train_py.py").read_text()
    assert "def test_classifier_forward_matches_recording():" in source
    assert "support.call_method(model.predict, x=args[0], samples=2)" in source
    assert "support.build(train_py.Classifier, width=8, classes=3)" in source
    assert "Re-record with:\n    pytpu testgen . --run 'python train.py --cuda'" in source
    assert 'monkeypatch.delattr("torch.nn.functional.silu")' in source
    program = (generated / "tests/pytpu/test_program.py").read_text()
    assert "def test_training_step_in_main_matches_recording(program_run):" in program
    # main() branches on --init: "resume" is run after the command (it reads its checkpoint);
    # "hub" would download, so it is named, not run.
    assert tested["run with --init=resume"] == ["3 metric lines"]
    assert "would download" in untested["run with --init=hub"]
    assert "def test_program_with_init_resume_metrics_match_recording(program_run):" in program
    # (on XLA, the command PyTPU runs with the accelerator on, with the same setting)
    resume = 'COMMAND + " --init=resume", timeout=300, on_xla=XLA_COMMAND + " --init=resume"'
    assert resume in program


def test_the_suite_holds_its_tests_and_recordings_and_pins_the_runtime(generated):
    suite = generated / "tests" / "pytpu"
    files = {p.relative_to(suite).as_posix() for p in suite.rglob("*") if p.is_file()}
    assert {f for f in files if not f.startswith("data/")} == {
        "conftest.py",
        "requirements.txt",
        "suite.json",
        "test_program.py",
        "test_train_py.py",
    }
    assert pytpu.runtime.REQUIREMENT == "pytpu-runtime==0.1.0"
    assert pytpu.runtime.REQUIREMENT in (suite / "requirements.txt").read_text().splitlines()
    assert "from pytpu.runtime import support" in (suite / "test_train_py.py").read_text()


def test_the_runtime_plugin_names_the_device_and_refuses_an_unknown_one(generated, tmp_path):
    repo = _copy(generated, tmp_path)
    command = [sys.executable, "-m", "pytest", "tests/pytpu", "--collect-only", "-q"]

    def collect(device: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTPU_DEVICE": device}
        return subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)

    assert "pytpu: code under test runs on cpu (PYTPU_DEVICE)" in collect("cpu").stdout
    refused = collect("gpu")
    assert refused.returncode == 4
    assert "PYTPU_DEVICE='gpu': use one of cpu, xla, tpu" in refused.stderr


def test_a_suite_without_the_runtime_says_what_to_install(generated, tmp_path):
    repo = _copy(generated, tmp_path)
    hidden = tmp_path / "hidden" / "pytpu" / "runtime"  # found first: pytpu.runtime fails
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('pytpu-runtime is not installed')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "hidden")}
    command = [sys.executable, "-m", "pytest", "tests/pytpu", "-p", "no:pytpu"]
    result = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)
    assert result.returncode == 4, result.stdout + result.stderr
    assert (
        "ERROR: tests/pytpu needs pytpu-runtime==0.1.0 (tests/pytpu/requirements.txt): install"
        " PyTPU, which brings it, or run `pip install ./engine/runtime` in a PyTPU checkout"
    ) in result.stderr


def test_the_program_never_sees_secrets(generated):
    seen = json.loads((generated.parent / "environment.json").read_text())
    assert "TINY_ENV_PROBE" in seen and "GITHUB_TOKEN" not in seen


def test_suite_passes_on_the_original_code(generated, tmp_path):
    result = _suite(_copy(generated, tmp_path))
    assert result.returncode == 0, result.stdout[-3000:]
    assert "15 passed" in result.stdout


def test_suite_passes_on_the_migrated_code_on_xla(generated, tmp_path):
    repo = _copy(generated, tmp_path)
    suite_before = {p: p.read_bytes() for p in (repo / "tests").rglob("*.py")}
    assert _pytpu("rewrite", ".", "--write", cwd=repo).returncode == 0
    assert "torch_xla" in (repo / "train.py").read_text()
    # The generated suite is PyTPU's own: migrating the repository leaves it as it was.
    assert {p: p.read_bytes() for p in (repo / "tests").rglob("*.py")} == suite_before
    result = _suite(repo, device="xla")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "15 passed" in result.stdout


def test_suite_catches_a_changed_model(generated, tmp_path):
    repo = _copy(generated, tmp_path)
    source = (repo / "train.py").read_text()
    source = source.replace("x + self.scale *", "x - self.scale *")
    # A resumed run that forgets the checkpoint starts from scratch again.
    source = source.replace("model.load_state_dict(torch.load(", "(torch.load(")
    (repo / "train.py").write_text(source)
    result = _suite(repo)
    assert result.returncode == 1
    assert "FAILED tests/pytpu/test_train_py.py::test_classifier_forward_matches_recording" in (
        result.stdout
    )
    assert "FAILED tests/pytpu/test_program.py::test_training_step_in_main" in result.stdout
    assert "FAILED tests/pytpu/test_program.py::test_program_with_init_resume" in result.stdout


def test_a_suite_it_did_not_write_is_left_alone(tmp_path):
    repo = _copy(FIXTURE, tmp_path)
    mine = repo / "tests" / "pytpu" / "test_mine.py"
    mine.parent.mkdir(parents=True)
    mine.write_text("def test_mine():\n    pass\n")
    result = _pytpu("testgen", ".", "--run", "python train.py", cwd=repo)
    assert result.returncode == 2
    assert "was not written by PyTPU; choose another --out" in result.stderr
    assert mine.read_text() == "def test_mine():\n    pass\n"


def test_a_failing_or_endless_program_is_a_clear_error(tmp_path):
    repo = _copy(FIXTURE, tmp_path)
    result = _pytpu("testgen", ".", "--run", "python train.py --no-such-flag", cwd=repo)
    assert result.returncode == 2
    # (run with the accelerator on: the opt-in `--cuda` added, as on both sides)
    assert "`python train.py --no-such-flag --cuda` exited with 2" in result.stderr
    result = _pytpu("testgen", ".", "--run", "sleep 30", "--timeout", "2", cwd=repo)
    assert result.returncode == 2
    assert "`sleep 30` did not finish in 2 s" in result.stderr
    assert not (repo / "tests").exists()


# --- the pieces ------------------------------------------------------------------------------


def test_inventory_finds_module_classes_and_training_steps(tmp_path):
    repo = _copy(FIXTURE, tmp_path)
    (repo / "model.py").write_text(
        "import torch\nimport torch.nn.functional as F\nfrom train import Block\n\n\n"
        "class Wide(Block):\n"
        "    def forward(self, x):\n"
        "        if hasattr(torch.nn.functional, 'no_such_function'):\n"  # never there
        "            return x\n"
        "        return F.gelu(x) if hasattr(F, 'gelu') else x\n\n\n"
        "class Plain:\n    pass\n"
    )
    (repo / "loop.py").write_text(
        "def run_batch(optimizer, scheduler, loss):\n"
        "    loss.backward()\n    optimizer.step()\n    scheduler.step()\n"
    )
    (repo / "manual.py").write_text(
        "def train(model, data):\n    for x in data:\n        model(x).sum().backward()\n"
        "        for p in model.parameters():\n            p.data.add_(p.grad, alpha=-0.1)\n"
    )
    found = discover.inventory(repo, repo / "tests" / "pytpu")
    names = [(c.file, c.name) for c in found.module_classes]
    assert names == [
        ("model.py", "Wide"),
        ("train.py", "Block"),
        ("train.py", "GatedBlock"),
        ("train.py", "Classifier"),
    ]
    # Only a check torch answers yes to has another path to exercise (by hiding the attribute).
    assert found.module_classes[0].feature_checks == (("torch.nn.functional.gelu", 10),)
    assert found.module_classes[3].feature_checks == (("torch.nn.functional.silu", 39),)
    steps = sorted((s.file, s.function, s.line, s.step_lines, s.kind) for s in found.training_steps)
    assert steps == [
        ("loop.py", "run_batch", 1, (3,), "optimizer"),
        ("manual.py", "train", 2, (3,), "backward"),  # parameters updated by hand
        ("train.py", "main", 81, (86,), "optimizer"),
    ]


def test_run_command_is_built_from_the_scripts_own_short_run_flags(tmp_path):
    repo = _copy(FIXTURE, tmp_path)
    command = short_command.run_command(repo, None, repo / "tests" / "pytpu")
    assert command.given == "python train.py --steps 4"
    # Both sides run it with the opt-in `--cuda` (before the migration, its CUDA path on the CPU).
    assert command.command == command.on_xla.command == "python train.py --steps 4 --cuda"
    assert command.accelerator_flag == "--cuda" and command.guessed
    given = short_command.run_command(repo, "cd . && python train.py", repo / "tests" / "pytpu")
    assert given.entry == "train.py" and not given.guessed


def test_settings_the_script_branches_on_give_variants_of_the_command(tmp_path):
    (tmp_path / "main.py").write_text(
        "import argparse\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--model', type=str, default='LSTM')\n"
        "parser.add_argument('--data-set', dest='dataset', default='fake')\n"
        "parser.add_argument('--steps', type=int, default=3)\n"
        "args = parser.parse_args()\n"
        "if args.model == 'Transformer':\n    pass\n"
        "if args.model in ['RNN', 'GRU']:\n    pass\n"
        "if args.model in ['LSTM', 'GRU']:\n    pass\n"  # the default takes it already
        "if args.dataset == 'cifar10':\n    load(download=True)\n"
        "elif args.dataset == 'folder':\n    pass\n"
        "if args.model == 'Transformer':\n    pass\n"  # the same variant again
        "if args.steps == '3':\n    pass\n"  # not a string setting
        "shape = 'square' if args.model == 'CNN' else 'round'\n"  # not a branch of an if
    )

    def variants(command):
        run = short_command.run_command(tmp_path, command, tmp_path / "tests" / "pytpu")
        found, skipped = program_settings.setting_variants(tmp_path, run)
        return (
            [(v.argument, v.line) for v in found],
            [(v.argument, reason) for v, reason in skipped],
        )

    found, skipped = variants("python main.py")
    assert found == [("--model=Transformer", 7), ("--model=RNN", 9), ("--data-set=folder", 15)]
    assert skipped == [("--data-set=cifar10", "its branch (main.py:13) would download")]
    found, _ = variants("python main.py --model Transformer --data-set=folder")
    # The command's values count, not the defaults.
    assert found == [("--model=RNN", 9), ("--model=LSTM", 11)]
    assert variants("python main.py | tee log") == ([], [])  # an option could not be appended

    # Settings as globals the command overrides (nanoGPT's configurator), prefixes compared.
    (tmp_path / "train.py").write_text(
        "init_from = 'scratch'\nsteps = 3\nexec(open('configurator.py').read())\n"
        "if init_from == 'resume':\n    pass\n"
        "elif init_from.startswith('gpt2'):\n    pass\n"
    )
    found, _ = variants("python train.py --steps=2")
    assert found == [("--init_from=resume", 4), ("--init_from=gpt2", 6)]
    found, _ = variants("python train.py --init_from=gpt2-xl --steps=2")
    assert found == [("--init_from=resume", 4)]
    assert variants("python train.py") == ([], [])  # no `--name=value`: not a configurator


def test_xla_runs_get_the_accelerator_flag_and_device(monkeypatch):
    monkeypatch.setenv("PYTPU_DEVICE", "xla")
    assert support.command_for_device("python t.py --device=cpu", "--cuda") == (
        "python t.py --device=xla --cuda"
    )
    assert support.command_for_device("python t.py --cuda", "--cuda") == "python t.py --cuda"
    monkeypatch.setenv("PYTPU_DEVICE", "cpu")
    assert support.command_for_device("python t.py --device=cpu", "--cuda") == (
        "python t.py --device=cpu"
    )


def test_metric_lines_mask_numbers():
    lines = support.metric_lines("epoch 1\nstep   3 loss  2.5000 acc 91%\nsaved\n")
    assert lines == [("step # loss # acc #%", [3.0, 2.5, 91.0])]
    # Padding that depends on a number's width does not change the line's shape.
    assert support.metric_lines("time: 125.43s loss 2")[0][0] == "time: #s loss #"


def test_a_printed_tensor_reads_the_same_on_either_device():
    # A tensor printed on XLA names its device; on the CPU it does not.
    on_xla = "error in w: tensor([0.5000], device='xla:0', grad_fn=<SubBackward0>)"
    on_cpu = "error in w: tensor([0.5000], grad_fn=<SubBackward0>)"
    assert support.metric_lines(on_xla) == support.metric_lines(on_cpu)


def test_cost_lines_are_metrics():
    # nlp-tutorial's scripts print their loss as a cost.
    lines = support.metric_lines("Epoch: 0001 cost = 0.078700\n")
    assert lines == [("Epoch: # cost = #", [1.0, 0.0787])]


def test_a_crashed_programs_row_names_its_exception(tmp_path):
    # The parity table keeps a failure's first line: it must carry the program's exception.
    stderr = (
        'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n'
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied\n"
    )
    (tmp_path / "test_crash.py").write_text(
        "from pytpu.runtime import support\n\n\ndef test_program():\n"
        f"    support.check_program_ran(support.ProgramRun(1, '', {stderr!r}, []))\n"
    )
    [result] = pytest_runs.run(tmp_path, ["test_crash.py"], "cpu", timeout=300).results
    assert result.message == (
        "AssertionError: the program exited with 1: "
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied"
    )


def test_a_test_file_that_cannot_be_imported_does_not_hide_the_others(tmp_path):
    # A repository's test needing a package that is not installed (flax) is its own error.
    (tmp_path / "test_needs_flax.py").write_text("import not_installed_module\n")
    (tmp_path / "test_model.py").write_text("def test_forward():\n    assert True\n")
    run = pytest_runs.run(tmp_path, ["."], "cpu", timeout=300)
    outcomes = {result.id.split("::")[0]: result.outcome for result in run.results}
    assert outcomes == {"test_needs_flax.py": "error", "test_model.py": "passed"}


def test_durations_in_metric_lines_are_never_pinned():
    # Two recordings may print the same time by chance (0.10s twice); it is still not behaviour.
    line = "| end of epoch 1 | time: 0.10s | valid loss 5.61 | ms/batch 12.5 | valid ppl 272.20"
    first = record.Run(0, line + "\n", "", 1.0)
    second = record.Run(0, line + "\n", "", 1.0)
    [[_, numbers]] = record.stable_metrics(first, second)
    assert numbers == [1.0, None, 5.61, None, 272.2]


def test_secrets_stay_out_of_the_programs_environment(monkeypatch):
    for name in ("GITHUB_TOKEN", "INPUT_TOKEN", "AWS_SECRET_ACCESS_KEY", "MY_API_KEY"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    kept = processes.safe_environment()
    assert "PJRT_DEVICE" in kept
    assert not {"GITHUB_TOKEN", "INPUT_TOKEN", "AWS_SECRET_ACCESS_KEY", "MY_API_KEY"} & set(kept)


def test_dropout_on_xla_draws_the_cpus_mask(monkeypatch):
    import torch_xla

    monkeypatch.setenv("PYTPU_DEVICE", "xla")
    x = torch.arange(24.0).reshape(4, 6)
    torch.manual_seed(3)
    expected = torch.nn.functional.dropout(x, 0.5, True)
    torch.manual_seed(3)
    with support.HostRandom():
        moved = torch.nn.functional.dropout(x.to(torch_xla.device()), 0.5, True)
        noise = torch.randn(2, 3, device=torch_xla.device())
    torch.testing.assert_close(moved.cpu(), expected)
    assert noise.device.type == "xla"


def test_a_default_xla_device_draws_from_the_cpus_generator():
    # torch.set_default_device('xla') (the migrated program's) applies below the mode
    torch.manual_seed(5)
    expected = [torch.randn(3), torch.rand(2, 2), torch.randint(0, 9, (4,))]
    torch.manual_seed(5)
    with support.HostRandom():
        torch.set_default_device("xla")
        try:
            drawn = [torch.randn(3), torch.rand(2, 2), torch.randint(0, 9, (4,))]
        finally:
            torch.set_default_device("cpu")
    assert {t.device.type for t in drawn} == {"xla"}
    for got, want in zip(drawn, expected, strict=True):
        torch.testing.assert_close(got.cpu(), want)


def test_a_suite_imports_package_modules_by_their_names(tmp_path, monkeypatch):
    """A src-layout package run as `python -m pkg.train`: its modules and its script import
    their neighbours relatively, which works only under the package's own name."""
    package = tmp_path / "src" / "pytpu_demo_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "layers.py").write_text("def double(x):\n    return 2 * x\n")
    (package / "model.py").write_text(
        "from .layers import double\n\n\ndef forward(x):\n    return double(x) + 1\n"
    )
    (package / "train.py").write_text(
        "from .model import forward\n\n\ndef step(x):\n    return forward(x)\n\n\nprint(step(1))\n"
    )
    suite_dir = tmp_path / "tests" / "pytpu"
    suite_dir.mkdir(parents=True)
    (suite_dir / "suite.json").write_text('{"root": "../..", "command": "python -m x"}')
    monkeypatch.setattr(sys, "path", list(sys.path))
    suite = support.Suite(str(suite_dir / "test_x.py"))
    model = suite.import_file("src/pytpu_demo_pkg/model.py")
    assert model.__name__ == "pytpu_demo_pkg.model"
    assert model.forward(3) == 7
    train = suite.load_script("src/pytpu_demo_pkg/train.py")
    assert train.step(1) == 3
    assert support.package_location(tmp_path / "script.py") == (tmp_path, None)


def test_a_script_whose_name_starts_with_a_digit_gets_a_loader_python_accepts(tmp_path):
    """`302_classification.py` (a tutorial's numbered script) is loaded under a valid name."""
    from pytpu.engine.testgen.suite import _Code

    code = _Code(tmp_path, {})
    names = [code.loader_for(f) for f in ("302_classification.py", "pkg/model.py", "302.py")]
    assert names == ["_302_classification_py", "model_py", "_302_py"]
    assert all(name.isidentifier() for name in names)


def test_a_gradient_norm_keeps_its_gradients_dtype_and_so_its_tolerance():
    # A float32 gradient's norm held in float64 met float64's tolerance: XLA's float32 gradients
    # (1e-6 relative off the CPU's) failed it (pytorch/examples' siamese_network, mnist_rnn).
    module = torch.nn.Linear(3, 2)
    norms = support.gradients(module, torch.ones(1, 3), module(torch.ones(1, 3)))["parameters"]
    assert {norm.dtype for norm in norms.values()} == {torch.float32}
    drifted = {name: norm * (1 + 2e-6) for name, norm in norms.items()}
    support.assert_close(drifted, norms, support.GRADIENT_FACTOR)


def test_a_value_near_zero_is_compared_at_the_scale_of_its_tensor():
    # XLA's train-mode BatchNorm takes the variance as E[x^2] - E[x]^2: an output near zero in a
    # tensor of magnitude 4 was 3.4e-5 off the CPU's (milesial/Pytorch-UNet), rounding, not a
    # behaviour change; a change of the size of the values still fails.
    recorded = torch.tensor([4.0, -3.0, 1e-6])
    support.assert_close(recorded + torch.tensor([0.0, 0.0, 3.4e-5]), recorded)
    with pytest.raises(AssertionError):
        support.assert_close(recorded + torch.tensor([0.0, 0.0, 1e-2]), recorded)
    with pytest.raises(AssertionError):
        support.assert_close(torch.tensor([1.0, float("inf")]), torch.tensor([1.0, 2.0]))


def test_a_bfloat16_migration_is_compared_with_bfloat16_tolerances_on_its_own_side(
    tmp_path, monkeypatch
):
    # `precision: bf16`: the migrated program's loss carries bfloat16's rounding (about 1e-2
    # relative); the original side, still float32, keeps float32's tolerances.
    loss = torch.tensor(2.0)
    rounded = loss * (1 + 5e-3)
    with pytest.raises(AssertionError):
        support.assert_close(rounded, loss, support.GRADIENT_FACTOR)
    support.assert_close(rounded, loss, support.GRADIENT_FACTOR, computed_in=torch.bfloat16)
    with pytest.raises(AssertionError):  # a change beyond bfloat16's rounding still fails
        support.assert_close(loss * 1.5, loss, support.GRADIENT_FACTOR, computed_in=torch.bfloat16)
    assert support.tolerances(torch.int64, torch.bfloat16) == (0.0, 0.0)  # counts stay exact
    assert not support.metric_close(2.04, 2.0213)
    assert support.metric_close(2.04, 2.0213, computed_in=torch.bfloat16)
    assert not support.metric_close(3.0, 2.0213, computed_in=torch.bfloat16)

    suite_dir = tmp_path / "tests" / "pytpu"
    suite_dir.mkdir(parents=True)
    (suite_dir / "suite.json").write_text(
        '{"root": "../..", "command": "python x.py", "precision": "bf16"}'
    )
    suite = support.Suite(str(suite_dir / "test_x.py"))
    monkeypatch.setenv("PYTPU_DEVICE", "cpu")
    assert suite.computed_in is None
    monkeypatch.setenv("PYTPU_DEVICE", "xla")
    assert suite.computed_in is torch.bfloat16


# A training loop that stops when the loss falls under a threshold: rounding decides at which
# batch and with which loss, so the loss printed after it is not behaviour a backend keeps (XLA
# stopped at another batch). The first loss, printed before any update, is.
EARLY_STOP = """
import torch

true_w = torch.randn(4, 1) * 5
model = torch.nn.Linear(4, 1)
first = None
for batch in range(1, 5000):
    x = torch.randn(32)
    x = torch.stack([x ** i for i in range(1, 5)], 1)
    loss = torch.nn.functional.smooth_l1_loss(model(x), x @ true_w)
    first = first if first is not None else loss.item()
    model.zero_grad()
    loss.backward()
    for p in model.parameters():
        p.data.add_(-0.1 * p.grad)
    if loss.item() < 1e-3:
        break
print(f"first loss {first:.4f}")
print(f"loss {loss.item():.6f} after {batch} batches")
"""


def test_a_metric_that_rounding_moves_is_not_pinned(tmp_path):
    (tmp_path / "fit.py").write_text(EARLY_STOP)
    first, second, _ = record.record_twice(tmp_path, "python fit.py", 300, 1 << 20, [])
    assert first.stdout != second.stdout  # the nudged run printed another loss
    shapes = {shape: numbers for shape, numbers in record.stable_metrics(first, second)}
    assert shapes["loss # after # batches"][0] is None
    [kept] = shapes["first loss #"]
    assert kept == pytest.approx(float(first.stdout.split()[2]))
    # unnudged, the two runs agree on every number
    again = record.run_once(tmp_path, "python fit.py", 300, 1 << 20, [])
    assert all(None not in numbers for _, numbers in record.stable_metrics(first, again))


# A convolution's bias before a BatchNorm: the exact gradient is zero (the BatchNorm subtracts the
# bias again), float32 leaves rounding, and Adam's first step turns its signs into +-lr
# (yunjey/pytorch-tutorial's CNN failed its norms after migration).
BIAS_BEFORE_BATCHNORM = """
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.Flatten(), torch.nn.Linear(288, 2)
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
loss = torch.nn.functional.cross_entropy(model(torch.randn(16, 3, 8, 8)), torch.arange(16) % 2)
loss.backward()
optimizer.step()
"""


def test_a_parameter_whose_gradient_is_only_rounding_keeps_its_norm_unpinned(tmp_path):
    (tmp_path / "fit.py").write_text(BIAS_BEFORE_BATCHNORM)
    run = record.run_once(tmp_path, "python fit.py", 300, 1 << 20, [])
    [step] = [event for event in run.steps if "parameter_norms" in event]
    norms = step["parameter_norms"]
    assert norms[1] is None  # the convolution's bias
    assert None not in norms[:1] + norms[2:]
    # another backend's signs move that bias by lr per element: the step still holds
    moved = [norm if norm is not None else 1.0 for norm in norms]
    moved[0] = norms[0]
    again = support.ProgramRun(0, "", "", [])
    again.steps = [{**step, "parameter_norms": moved}]
    support.expect_training_step(again, [step])
    moved[2] *= 1.01  # the BatchNorm's weight, whose gradient is signal, is still pinned
    with pytest.raises(AssertionError, match=r"norms\[2\]"):
        support.expect_training_step(again, [step])


def test_the_repository_s_own_tests_are_no_program_code():
    # facebookresearch/schedule_free keeps `schedulefree/test_schedulefree.py` beside the code:
    # its test functions were listed as ten untested training steps
    from pytpu.engine.testgen.discover import is_test_file

    tests = ["pkg/test_optim.py", "pkg/optim_test.py", "conftest.py", "test/helpers.py",
             "tests/unit/models.py"]  # fmt: skip
    code = ["pkg/optim.py", "test.py", "testing/loop.py", "latest_model.py", "nb/test_run.ipynb"]
    assert [is_test_file(Path(p)) for p in tests] == [True] * len(tests)
    assert [is_test_file(Path(p)) for p in code] == [False] * len(code)
