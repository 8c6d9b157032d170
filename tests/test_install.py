"""PyTPU installed the way users get it: both wheels built from a clean copy of this checkout, then
installed (not editable) into a new virtual environment with the torch pair, as action.yml does;
that environment runs the bundled example's main job, whose report must be README's first
command's report (timings, commits and the repository's name aside). And the wheels alone, as
`pip install pytpu` gets them: no torch, the rewriter and the CLI working, and the main job
building an environment of the torch pair for the programs it runs.

It downloads torch 2.9.0 and torch_xla 2.9.0 (about 7 GB, two minutes) into each of the two."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.source_tree import ROOT, copy_tracked
from tests.test_packaging import build_wheels

EXAMPLE = ROOT / "examples" / "migrate_example.sh"
# The requirements action.yml installs beside PyTPU's two distributions.
TORCH_PAIR = ("torch==2.9.0", "torch_xla[tpu]==2.9.0")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("wheels")
    return build_wheels(copy_tracked(root / "clone"), root / "wheels")


def _environment(folder: Path, wheels: dict[str, Path], *more: str) -> Path:
    """A new environment (from the base interpreter, not this one) with the wheels in it."""
    venv.EnvBuilder(with_pip=True).create(folder)
    python = folder / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--progress-bar", "off"]
        + [str(wheels["pytpu_runtime"]), str(wheels["pytpu"]), *more],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


@pytest.fixture(scope="module")
def installed(tmp_path_factory, wheels) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("install")
    yield _environment(folder / "venv", wheels, *TORCH_PAIR)
    shutil.rmtree(folder)  # about 8 GB: a machine's disk would not hold a few runs' worth


@pytest.fixture(scope="module")
def bare(tmp_path_factory, wheels) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("bare")
    yield _environment(folder / "venv", wheels)
    shutil.rmtree(folder)


def _migrate_example(pytpu: Path, target: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(EXAMPLE), str(target)],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(target.parent), "PYTPU": str(pytpu)},
        capture_output=True,
        text=True,
        timeout=1200,
    )


def _shape(report: str) -> str:
    """The report without what differs between two runs: numbers and their units of time
    (`1 min 5 s` on a busy machine, `48 s` on an idle one), commits, and whether the machine was
    quiet enough for a speedup figure (the benchmark refuses one while other work runs: that is
    the machine's doing, not the installation's)."""
    report = re.sub(r"speedup x[\d.]+|no trustworthy speedup", "SPEEDUP", report)
    headline = r"\n(\*\*Speedup: x|> ⚠️ \*\*No speedup figure can be trusted)[^\n]*\n"
    report = re.sub(headline, "\nSPEEDUP\n", report)
    report = re.sub(r": more than a quarter of the cores, so [^\n]*work\.", ".", report)
    report = re.sub(r"\b[0-9a-f]{7,40}\b", "SHA", report)
    report = re.sub(r"\d[\d,.]*", "N", report)
    report = re.sub(r"N (min N s|ms|s|min)\b", "N TIME", report)
    return re.sub(r"\n{3,}", "\n\n", report)  # (blank lines Markdown does not show)


def test_the_environment_is_whole_and_holds_no_editable_pytpu(installed):
    python = installed / "bin" / "python"
    check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    where = subprocess.run(
        [str(python), "-c", "import pytpu.engine, pytpu.runtime; print(pytpu.engine.__file__)"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert where.stdout.startswith(str(installed)), where.stdout + where.stderr


def test_the_installed_pytpu_migrates_the_example_as_readmes_command_does(installed, tmp_path):
    from_wheels = _migrate_example(installed / "bin" / "pytpu", tmp_path / "wheels" / "example")
    assert from_wheels.returncode == 0, from_wheels.stdout + from_wheels.stderr[-3000:]
    commits = [line for line in from_wheels.stdout.splitlines() if line.startswith("  ")]
    assert len(commits) == 2, from_wheels.stdout
    editable = _migrate_example(ROOT / ".venv" / "bin" / "pytpu", tmp_path / "dev" / "example")
    assert editable.returncode == 0, editable.stdout + editable.stderr[-3000:]
    reports = [tmp_path / side / "example" / ".pytpu" / "report.md" for side in ("wheels", "dev")]
    assert _shape(reports[0].read_text()) == _shape(reports[1].read_text())
    assert "parity N/N SPEEDUP" in _shape(reports[0].read_text())


def test_pytpu_alone_installs_no_torch_its_cli_works_and_the_main_job_builds_the_pair(
    bare, tmp_path
):
    python, pytpu = bare / "bin" / "python", bare / "bin" / "pytpu"
    listed = subprocess.run([str(python), "-m", "pip", "list"], capture_output=True, text=True)
    names = {line.split()[0].lower() for line in listed.stdout.splitlines()[2:]}
    assert {"pytpu", "pytpu-runtime", "libcst"} <= names
    assert not names & {"torch", "torch-xla", "nvidia-cudnn-cu12"}, sorted(names)
    shown = subprocess.run([str(pytpu), "--help"], capture_output=True, text=True)
    assert shown.returncode == 0 and "rewrite" in shown.stdout, shown.stderr
    program = tmp_path / "train.py"
    program.write_text((ROOT / "examples" / "cuda_mnist" / "train.py").read_text())
    diff = subprocess.run([str(pytpu), "rewrite", str(program), "--diff"], capture_output=True,
                          text=True)  # fmt: skip
    assert "+import torch_xla" in diff.stdout, diff.stdout[-2000:] + diff.stderr[-2000:]
    # The main job puts the target's torch pair in an environment of its own, once, and runs
    # the example over it; PyTPU's own environment stays without torch.
    try:
        done = _migrate_example(pytpu, tmp_path / "example")
    finally:
        # The pair's environment (about 8 GB, under the run's HOME) outlives no run.
        shutil.rmtree(tmp_path / ".cache", ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    report = json.loads((tmp_path / "example" / ".pytpu" / "report.json").read_text())
    environment = report["environment"]
    bases = tmp_path / ".cache" / "pytpu" / "bases"
    assert environment["base"] == str(bases / "torch_xla-2.9.0-py311")
    assert environment["own"] is False and report["verdict"]["status"] == "parity"
    page = (tmp_path / "example" / ".pytpu" / "report.md").read_text()
    assert "the torch pair from an environment of its own" in page
    still = subprocess.run([str(python), "-c", "import torch"], capture_output=True)
    assert still.returncode != 0
