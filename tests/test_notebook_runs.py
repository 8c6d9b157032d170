"""A Jupyter notebook as the run command, executed headless in a kernel: `pytpu testgen` tests
the module classes and functions of its cells, its training step and its printed metrics; the
suite passes on the CPU and, after `pytpu rewrite`, on XLA:CPU; the benchmark times its steps.
The harness and the timer run in the kernel (the process that runs the notebook takes none)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat import v4

from pytpu.engine.testgen import invocation, program_settings, record, short_command
from pytpu.engine.verify import benchmark
from pytpu.runtime import kernel, support
from pytpu.runtime.command import runnable

PYTPU = [sys.executable, "-m", "pytpu.engine.cli"]
RUNNER = "python -m pytpu.runtime.notebook train.ipynb"
STEP = "train.ipynb#cell6::<module>#step1"  # the harness's key of the training cell's step

# A notebook as people write it for a GPU: its kernelspec names the author's environment, the
# classes are in one cell (a dataclass among them), the training cell is timed (`%%time`: IPython
# compiles its body apart), a line magic sets a parameter, a shell cell ends it.
DEFINITIONS = """
@dataclasses.dataclass
class Config:
    hidden: int = 8


class Net(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc = nn.Linear(4, config.hidden)
        self.out = nn.Linear(config.hidden, 1)

    def forward(self, x):
        return self.out(torch.relu(self.fc(x)) * SCALE)


class Probe(nn.Module):
    def __init__(self, width=4):
        super().__init__()
        self.fc = nn.Linear(width, 2)

    def forward(self, x):
        return self.fc(x).tanh()


SCALE = 2.0


def mse(pred, target):
    return ((pred - target) ** 2).mean()
"""
DEVICE = "device = 'cuda' if torch.cuda.is_available() else 'cpu'"
TRAINING = """%%time
torch.manual_seed(0)
model = Net(Config()).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 4, device=device)
y = torch.randn(16, 1, device=device)
for step in range(STEPS):
    optimizer.zero_grad()
    loss = mse(model(x), y)
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
"""


def _notebook(steps: int = 8) -> nbformat.NotebookNode:
    notebook = v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "conda-env-torch-py", "language": "python",
                                       "display_name": "torch"}  # fmt: skip
    notebook.cells = [
        v4.new_markdown_cell("# A tiny regression, trained on the GPU"),
        v4.new_code_cell("import dataclasses\n\nimport torch\nimport torch.nn as nn"),
        v4.new_code_cell(f"%time STEPS = {steps}\n{DEVICE}"),
        v4.new_code_cell(DEFINITIONS),
        v4.new_markdown_cell("Train it; each step prints its loss."),
        v4.new_code_cell(TRAINING),
        v4.new_code_cell("%%bash\necho trained"),
    ]
    return notebook


def _repo(folder: Path, steps: int = 8) -> Path:
    folder.mkdir(parents=True)
    nbformat.write(_notebook(steps), folder / "train.ipynb")
    return folder


def _pytpu(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*PYTPU, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def _suite(repo: Path, device: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTPU_DEVICE": device, "PJRT_DEVICE": "CPU"}
    command = [sys.executable, "-m", "pytest", "tests/pytpu", "-q", "-p", "no:cacheprovider"]
    return subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = _repo(tmp_path_factory.mktemp("notebook") / "repo")
    report = repo.parent / "testgen.json"
    done = _pytpu("testgen", ".", "--run", "train.ipynb", "--json", str(report), cwd=repo)
    assert done.returncode == 0, done.stderr
    return repo


# --- the command ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "train.ipynb",
        RUNNER,
        "jupyter execute --kernel_name=python3 train.ipynb",
        "jupyter-execute train.ipynb",
        "jupyter nbconvert --to notebook --execute train.ipynb",
        "papermill train.ipynb out.ipynb",
        "cd . && PYTHONPATH=. train.ipynb",
    ],
)
def test_a_command_that_runs_a_notebook_names_it_as_its_entry(tmp_path, command):
    repo = _repo(tmp_path / "repo")
    given = short_command.run_command(repo, command, repo / "tests" / "pytpu")
    assert given.entry == "train.ipynb"
    # A notebook has no command-line flags or step settings: those degrade to none.
    assert given.accelerator_flag is None
    assert program_settings.setting_variants(repo, given) == ([], [])
    assert (
        program_settings.step_settings(repo, invocation.program_call(repo, given.command), command)
        == []
    )
    # A bare notebook, which a shell cannot run, is given to PyTPU's runner.
    assert runnable("train.ipynb") == RUNNER
    assert runnable("cd nb && A=1 train.ipynb") == f"cd nb && A=1 {RUNNER}"


def test_the_runner_s_process_hands_over_to_its_kernel(monkeypatch):
    monkeypatch.delenv(kernel.NOTEBOOK_ENV, raising=False)
    argv: list[str] = []
    assert kernel.hand_over(["/env/bin/python3", "/env/bin/jupyter", "execute", "a.ipynb"], argv)
    assert os.environ[kernel.NOTEBOOK_ENV] == os.path.abspath("a.ipynb")
    launcher = ["/env/bin/python", "-m", "ipykernel_launcher", "-f", "kernel.json"]
    assert not kernel.hand_over(launcher, argv)
    assert argv == [kernel.ECHO]  # the kernel echoes what the cells print
    assert not kernel.hand_over(["python", "train.py", "--data", "x.ipynb"], [])


def test_a_failing_cell_ends_the_run_with_its_error(tmp_path):
    repo = _repo(tmp_path / "repo")
    notebook = nbformat.read(repo / "train.ipynb", as_version=4)
    notebook.cells[2].source += "\nraise ValueError('no data here')"
    nbformat.write(notebook, repo / "train.ipynb")
    command = [sys.executable, *RUNNER.split()[1:]]
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == "ValueError: no data here"
    assert "\x1b[" not in done.stderr  # IPython's colours are gone


# --- the kernel with the harness inside ---------------------------------------------------------


def test_jupyter_execute_records_in_the_kernel_and_its_output(tmp_path):
    repo = _repo(tmp_path / "repo", steps=2)
    command = "jupyter execute --kernel_name=python3 train.ipynb"
    run = record.run_once(repo, command, 120, 1 << 20, [])
    assert run.returncode == 0, run.stderr
    assert len(run.harness) == 1  # the kernel's: the process that runs the notebook takes none
    assert STEP in {step["key"] for step in run.steps}
    assert {"train.ipynb#cell4::Net", "train.ipynb#cell4::mse"} <= set(run.units)
    assert {"train.ipynb#cell2", "train.ipynb#cell6"} <= run.files
    assert [line for line in run.stdout.splitlines() if line.startswith("step")] == [
        "step 0 loss 1.0802",
        "step 1 loss 0.9345",
    ]


def test_load_notebook_keeps_the_definitions_of_the_code_cells(tmp_path, monkeypatch):
    repo = _repo(tmp_path / "repo")
    notebook = nbformat.read(repo / "train.ipynb", as_version=4)
    notebook.cells[1].source = "!pip install torch\n" + notebook.cells[1].source
    nbformat.write(notebook, repo / "train.ipynb")
    suite_dir = repo / "tests" / "pytpu"
    suite_dir.mkdir(parents=True)
    (suite_dir / "suite.json").write_text(json.dumps({"root": "../..", "command": RUNNER}))
    monkeypatch.setattr(sys, "path", list(sys.path))
    module = support.Suite(suite_dir / "test_x.py").load_notebook("train.ipynb", SCALE=3.0)
    assert sys.modules[module.__name__] is module
    assert {"Config", "Net", "Probe", "mse", "torch", "nn"} <= set(vars(module))
    assert "STEPS" not in vars(module) and "model" not in vars(module)  # the cells did not run
    assert module.SCALE == 3.0 and str(repo) in sys.path
    assert module.Net(module.Config()).fc.out_features == 8


# --- test generation, the suite on both sides, the benchmark ------------------------------------


def test_testgen_tests_the_cells_units_step_and_metrics(generated):
    report = json.loads((generated.parent / "testgen.json").read_text())
    tested = {entry["name"]: entry["tests"] for entry in report["tested"]}
    assert tested["train.ipynb#cell4::Net"] == ["forward", "gradients", "rows"]
    assert tested["train.ipynb#cell4::Probe"] == ["forward", "gradients", "rows"]  # probed
    assert tested["train.ipynb#cell4::mse"] == ["result"]
    assert tested["train.ipynb#cell6:7 (<module>)"] == ["first iteration"]
    assert tested["reported metrics"] == ["8 lines"]
    assert report["untested"] == []
    units = (generated / "tests" / "pytpu" / "test_train_ipynb.py").read_text()
    assert 'suite.load_notebook("train.ipynb", SCALE=2.0)' in units
    assert "config=train_ipynb.Config(hidden=8)" in units  # the cell's dataclass, by its notebook
    program = (generated / "tests" / "pytpu" / "test_program.py").read_text()
    assert f"COMMAND = {RUNNER!r}" in program.replace('"', "'")


def test_the_suite_passes_on_the_cpu_and_after_rewrite_on_xla(generated, tmp_path):
    repo = Path(shutil.copytree(generated, tmp_path / "repo"))
    result = _suite(repo, "cpu")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "9 passed" in result.stdout
    assert _pytpu("rewrite", ".", "--write", cwd=repo).returncode == 0
    assert "torch_xla" in (repo / "train.ipynb").read_text()
    again = _pytpu("rewrite", ".", "--check", cwd=repo)
    assert again.returncode == 0, again.stdout + again.stderr  # a second rewrite changes nothing
    result = _suite(repo, "xla")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "9 passed" in result.stdout


def test_the_benchmark_times_the_steps_in_the_kernel(tmp_path):
    original = _repo(tmp_path / "original", steps=12)
    migrated = Path(shutil.copytree(original, tmp_path / "migrated"))
    assert _pytpu("rewrite", ".", "--write", cwd=migrated).returncode == 0
    sides = ((original, "cpu"), (migrated, "xla"))
    section = benchmark.run(sides, RUNNER, warmup=2, steps=3, timeout=300, rounds=1)
    assert section.error is None, section.error
    for side in (section.baseline, section.target):
        assert side.exit_code == 0  # the timer ended the kernel: the run ends as a script's
        assert side.boundary == "optimizer step" and side.steps_timed == 3
    assert section.target.compile.after_warmup == 0
    assert section.speedup is not None
