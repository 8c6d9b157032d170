"""Run commands as users mean them: a short command that turns the GPU off for a CI without one
(`--no-cuda`, `--cpu`, `--device cpu`, `--gpu -1`, `CUDA_VISIBLE_DEVICES=`) or leaves out the
switch that turns it on (`--cuda`) runs with the accelerator on, on both sides: the migrated code
on XLA, and the original code's accelerator path on the CPU (so both compare the same path). The
program's own parser decides what turns it on; recording, the generated suite and the benchmark
take both commands from the same description, and the report names the change."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import git
import pytest

from pytpu.engine.testgen import accelerator, short_command
from pytpu.runtime import support

FIXTURE = Path(__file__).parent / "fixtures" / "no_cuda"

PARSER = """
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    {declared}
    args = parser.parse_args()
"""


def _script(tmp_path: Path, *declared: str, name: str = "train.py") -> Path:
    lines = "\n    ".join(declared)
    (tmp_path / name).write_text(textwrap.dedent(PARSER.format(declared=lines)))
    return tmp_path


def _on_xla(root: Path, command: str) -> tuple[str, list[str]]:
    side = accelerator.on_device(root, command, "xla")
    return side.command, [change.said for change in side.changes]


# --- the XLA side's command, from the program's parser --------------------------------------------


@pytest.mark.parametrize(
    ("declared", "command", "expected", "said"),
    [
        # Switches that turn the accelerator off are left out, whatever their spelling.
        (
            '"--no-cuda", action="store_true", default=False',
            "python train.py --no-cuda --epochs 1",
            "python train.py --epochs 1",
            ["without `--no-cuda`"],
        ),
        (
            '"--no_cuda", action="store_true"',
            "python train.py --epochs 1 --no_cuda",
            "python train.py --epochs 1",
            ["without `--no_cuda`"],
        ),
        ('"--cpu", action="store_true"', "python train.py --cpu", "python train.py",
         ["without `--cpu`"]),
        ('"--no-accel", action="store_true"', "python train.py --no-accel > log",
         "python train.py > log", ["without `--no-accel`"]),
        # store_false: what giving it does is read from its dest.
        (
            '"--disable-gpu", action="store_false", dest="cuda"',
            "python train.py --disable-gpu --epochs 1",
            "python train.py --epochs 1",
            ["without `--disable-gpu`"],
        ),
        # An inverted switch: `--cuda` that stores False turns CUDA off.
        ('"--cuda", action="store_false"', "python train.py --cuda", "python train.py",
         ["without `--cuda`"]),
        # argparse.BooleanOptionalAction, on by default.
        (
            '"--cuda", action=argparse.BooleanOptionalAction, default=True',
            "python train.py --no-cuda",
            "python train.py",
            ["without `--no-cuda`"],
        ),
        # An opt-in switch left out is added.
        ('"--accel", action="store_true"', "python train.py --epochs 1",
         "python train.py --epochs 1 --accel", ["with `--accel`"]),
        ('"--cuda", action="store_true"', "python train.py --cuda", "python train.py --cuda", []),
        ('"--use-cuda", action="store_true"', "cd . && python train.py && echo done",
         "cd . && python train.py --use-cuda && echo done", ["with `--use-cuda`"]),
        # A device's name: 'xla' where the parser takes it, else the default, which the
        # migration makes 'xla' (choices are kept).
        ('"--device", default="cuda"', "python train.py --device cpu",
         "python train.py --device xla", ["with `--device xla` rather than `cpu`"]),
        ('"--device", default="cuda"', "python train.py --device=cpu --epochs 1",
         "python train.py --device=xla --epochs 1", ["with `--device xla` rather than `cpu`"]),
        ('"-d", "--device", default="cuda", choices=["cpu", "cuda"]',
         "python train.py -d cpu", "python train.py", ["without `-d cpu`"]),
        # A GPU id of -1 means the CPU: back to the default id, or the first GPU.
        ('"--gpu", type=int, default=0, help="-1 for the CPU"', "python train.py --gpu -1",
         "python train.py", ["without `--gpu -1`"]),
        ('"--gpu_ids", default="-1"', "python train.py --gpu_ids -1",
         "python train.py --gpu_ids 0", ["with `--gpu_ids 0` rather than `-1`"]),
        # A GPU count of 0, and a boolean setting of the wrong sign.
        ('"--ngpu", type=int, default=1', "python train.py --ngpu 0", "python train.py",
         ["without `--ngpu 0`"]),
        ('"--use_gpu", type=int, default=0', "python train.py --use_gpu=0",
         "python train.py --use_gpu=1", ["with `--use_gpu 1` rather than `0`"]),
        ('"--cuda", type=str, default="True"', "python train.py --cuda False",
         "python train.py", ["without `--cuda False`"]),
    ],
)  # fmt: skip
def test_the_xla_side_runs_with_the_accelerator_on(tmp_path, declared, command, expected, said):
    root = _script(tmp_path, f"parser.add_argument({declared})")
    assert _on_xla(root, command) == (expected, said)


@pytest.mark.parametrize(
    "command",
    [
        "python train.py --gpu 0 --device cuda:0",  # on already
        "python train.py --cpu-threads 4 --data-device cpu",  # not the accelerator's settings
    ],
)
def test_settings_that_leave_the_accelerator_on_are_kept(tmp_path, command):
    root = _script(
        tmp_path,
        'parser.add_argument("--gpu", type=int, default=0)',
        'parser.add_argument("--device", default="cuda")',
        'parser.add_argument("--cpu-threads", type=int, default=1)',
        'parser.add_argument("--data-device", default="cuda")',
    )
    assert _on_xla(root, command) == (command, [])


def test_a_variable_that_hides_the_gpu_is_left_out(tmp_path):
    root = _script(tmp_path, 'parser.add_argument("--no-cuda", action="store_true")')
    assert _on_xla(root, 'CUDA_VISIBLE_DEVICES="" python train.py --no-cuda') == (
        "python train.py",
        ["without `CUDA_VISIBLE_DEVICES=`", "without `--no-cuda`"],
    )
    assert _on_xla(root, "env CUDA_VISIBLE_DEVICES=-1 PYTHONPATH=. python train.py") == (
        "env PYTHONPATH=. python train.py",
        ["without `CUDA_VISIBLE_DEVICES=-1`"],
    )
    # A GPU chosen is no GPU hidden.
    assert _on_xla(root, "CUDA_VISIBLE_DEVICES=0 python train.py")[1] == []


def test_the_parser_decides_not_the_name(tmp_path):
    # `--no-cuda` that this program does not declare (it reads sys.argv itself) is left alone;
    # a `--cpu` that takes a value is not a switch to leave out.
    (tmp_path / "train.py").write_text("import sys\nprint(sys.argv)\n")
    assert _on_xla(tmp_path, "python train.py --no-cuda") == ("python train.py --no-cuda", [])
    _script(tmp_path, 'parser.add_argument("--cpu", type=int, default=2, help="CPU workers")')
    assert _on_xla(tmp_path, "python train.py --cpu 4")[1] == []
    # Without a parser only a device's name is known: 'cpu' becomes 'xla' (as torch reads it).
    (tmp_path / "train.py").write_text("import sys\nprint(sys.argv)\n")
    assert _on_xla(tmp_path, "python train.py --device cpu")[0] == "python train.py --device xla"
    # Before the migration the accelerator is CUDA, which PyTPU's runtime runs on the CPU.
    cpu = accelerator.on_device(tmp_path, "python train.py --device cpu", "cpu")
    assert cpu.command == "python train.py --device cuda"


def test_a_parser_in_an_imported_module_counts(tmp_path):
    (tmp_path / "options.py").write_text(
        "def parse(parser):\n    parser.add_argument('--no-cuda', action='store_true')\n"
        "    return parser.parse_args()\n"
    )
    (tmp_path / "train.py").write_text("import argparse\nfrom options import parse\n")
    assert _on_xla(tmp_path, "python train.py --no-cuda") == (
        "python train.py",
        ["without `--no-cuda`"],
    )


def test_nanogpt_globals_name_their_device(tmp_path):
    (tmp_path / "train.py").write_text(
        "device = 'cuda'\ncompile = True\nexec(open('configurator.py').read())\n"
    )
    assert _on_xla(tmp_path, "python train.py --device=cpu --compile=False")[0] == (
        "python train.py --device=xla --compile=False"
    )


def test_both_sides_run_the_command_with_the_accelerator_on(tmp_path):
    root = _script(tmp_path, 'parser.add_argument("--no-cuda", action="store_true")')
    run = short_command.run_command(root, "python train.py --no-cuda --epochs 1", root / "tests")
    assert run.given == "python train.py --no-cuda --epochs 1"
    assert run.command == run.on_cpu.command == "python train.py --epochs 1"  # recorded so
    assert run.on_xla.command == "python train.py --epochs 1"
    assert run.accelerator_flag is None


def test_the_original_side_takes_its_accelerator_path_on_the_cpu(tmp_path):
    """What the CPU side runs without `--no-accel`: PyTPU's runtime answers torch.accelerator
    and torch.cuda as one GPU would, and the work stays on the CPU."""
    (tmp_path / "train.py").write_text(
        "import argparse, torch\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--no-accel', action='store_true')\n"
        "args = parser.parse_args()\n"
        "use = not args.no_accel and torch.accelerator.is_available()\n"
        "device = torch.accelerator.current_accelerator() if use else torch.device('cpu')\n"
        "loader = {'shuffle': True} if use else {}\n"
        "print('path', use, device, torch.randn(2, device=device).device, loader)\n"
    )
    command = short_command.run_command(tmp_path, "python train.py --no-accel", tmp_path / "t")
    run = support.run_program(tmp_path, command.command, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "path True cuda cpu {'shuffle': True}" in run.stdout


def _output_on_the_cpu_side(folder, *lines: str) -> str:
    """What the program of `lines` prints, run as the original side runs it (on the CPU)."""
    (folder / "train.py").write_text("".join(f"{line}\n" for line in lines))
    run = support.run_program(folder, "python train.py", timeout=300)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_the_cuda_generator_s_state_is_saved_and_restored_on_the_cpu(tmp_path):
    # (a fixed-seed validation sample between a save and a restore of the CUDA state)
    assert "restored cpu 1 True" in _output_on_the_cpu_side(
        tmp_path,
        "import torch",
        "if torch.cuda.is_available():",
        "    saved, every = torch.cuda.get_rng_state(), torch.cuda.get_rng_state_all()",
        "    torch.cuda.manual_seed(1)",
        "    sample = torch.randn(2, device='cuda')",
        "    torch.cuda.set_rng_state(saved)",
        "    torch.cuda.set_rng_state_all(every)",
        "    print('restored', sample.device, len(every), torch.cuda.initial_seed() >= 0)",
    )


def test_bfloat16_autocast_on_cuda_starts_on_the_cpu(tmp_path):
    # (nanoGPT: `dtype = 'bfloat16' if ... torch.cuda.is_bf16_supported()`, then CUDA autocast,
    # which asks torch.cuda.is_bf16_supported() itself before it starts)
    assert "autocast torch.bfloat16 cpu" in _output_on_the_cpu_side(
        tmp_path,
        "import torch",
        "dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16",
        "with torch.amp.autocast(device_type='cuda', dtype=dtype):",
        "    y = torch.ones(2, device='cuda') * 2",
        "print('autocast', dtype, y.device)",
    )


# --- the generated suite's program tests run the XLA command ------------------------------------


def test_the_suite_s_program_run_takes_the_xla_command_on_xla(tmp_path, monkeypatch):
    (tmp_path / "argv.py").write_text("import sys\nprint('argv', sys.argv[1:])\n")
    for device, expected in (("cpu", "['--no-cuda']"), ("xla", "[]")):
        monkeypatch.setenv("PYTPU_DEVICE", device)
        run = support.run_program(
            tmp_path, "python argv.py --no-cuda", timeout=300, on_xla="python argv.py"
        )
        assert run.returncode == 0, run.stderr
        assert f"argv {expected}" in run.stdout


# --- the report -----------------------------------------------------------------------------------


def test_the_report_names_the_change_and_both_sides_commands():
    from pytpu.engine.reporting import markdown
    from tests.test_reporting import load, section

    command = "python train.py --no-cuda --epochs 1"
    on_xla = accelerator.section(
        *(accelerator.on_device(FIXTURE, command, device) for device in ("cpu", "xla"))
    )
    document = load("regressed")
    document["programs"][0]["on_xla"] = on_xla
    document["benchmark"]["on_xla"] = document["benchmarks"][0]["on_xla"] = on_xla
    page = markdown.render(document)  # checked against the schema first
    said = "with the accelerator on, without `--no-cuda`"
    assert f"Both sides ran it {said}" in section(page, "Benchmark")
    parity = section(page, "Test parity")
    assert f"tests ran the run command `{document['programs'][0]['command']}` {said}" in parity
    assert "so both sides take the same path" in parity


# --- end to end ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The `--no-cuda` program through `pytpu migrate`, its command as its CI would run it."""
    folder = Path(shutil.copytree(FIXTURE, tmp_path_factory.mktemp("no_cuda") / "repo"))
    (folder / ".github").mkdir()
    (folder / ".github" / "pytpu.yml").write_text("run: python train.py --no-cuda --epochs 1\n")
    repo = git.Repo.init(folder, initial_branch="main")
    repo.git.add("--all")
    person = git.Actor("A Person", "person@example.invalid")
    repo.index.commit("A GPU program run on the CPU", author=person, committer=person)
    done = subprocess.run(
        [sys.executable, "-m", "pytpu.engine.cli", "migrate", str(folder)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return folder, json.loads((folder / ".pytpu" / "report.json").read_text())


def test_a_no_cuda_program_reaches_parity_on_the_xla_device(migrated):
    folder, document = migrated
    verdict = document["verdict"]
    assert verdict["status"] == "parity" and verdict["passed_both"] == verdict["total"] > 0
    # The program's own tests ran on the XLA device (check_program_ran: it executed there).
    program_tests = [row for row in document["parity"]["tests"] if "test_program" in row["id"]]
    assert program_tests and all(row["target"] == "passed" for row in program_tests)
    [program] = document["programs"]
    assert program["on_xla"]["command"] == "python train.py --epochs 1"
    assert program["on_xla"]["before"] == "python train.py --epochs 1"
    # The suite recorded and runs the command with the accelerator on, and says why.
    tests = git.Repo(folder).commit("pytpu/migrate~1").tree / "tests/pytpu/test_program.py"
    source = tests.data_stream.read().decode()
    assert 'COMMAND = "python train.py --epochs 1"' in source
    assert "python train.py --no-cuda --epochs 1 with the accelerator on" in source
    assert "suite.run_program(COMMAND, timeout=300, on_xla=XLA_COMMAND)" in source


def test_its_benchmark_times_the_xla_device_and_the_report_names_the_change(migrated):
    folder, document = migrated
    bench = document["benchmark"]
    assert bench["error"] is None, bench["error"]
    assert bench["target"]["compile"]["graphs"] >= 1 and bench["speedup"] > 0
    assert not bench["nothing_on_xla"]
    assert bench["on_xla"]["changes"][0]["said"] == "without `--no-cuda`"
    page = (folder / ".pytpu" / "report.md").read_text()
    assert "without `--no-cuda`" in page.split("## Benchmark")[1]
    assert "without `--no-cuda`" in page.split("## Test parity")[1].split("## ")[0]
