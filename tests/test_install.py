"""PyTPU installed the way users get it: both wheels built from a clean copy of this checkout, then
installed (not editable) into a new virtual environment with the torch pair, as action.yml does;
that environment runs the bundled example's main job, whose report must be README's first
command's report (timings, commits and the repository's name aside).

It downloads torch 2.9.0 and torch_xla 2.9.0 once (about 7 GB, two minutes)."""

from __future__ import annotations

import re
import subprocess
import venv
from pathlib import Path

import pytest

from tests.source_tree import ROOT, copy_tracked
from tests.test_packaging import build_wheels

EXAMPLE = ROOT / "examples" / "migrate_example.sh"
# The requirements action.yml installs beside PyTPU's two distributions.
TORCH_PAIR = ("torch==2.9.0", "torch_xla[tpu]==2.9.0")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A new environment (from the base interpreter, not this one) with the wheels in it."""
    root = tmp_path_factory.mktemp("install")
    wheels = build_wheels(copy_tracked(root / "clone"), root / "wheels")
    environment = root / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--progress-bar", "off"]
        + [str(wheels["pytpu_runtime"]), str(wheels["pytpu"]), *TORCH_PAIR],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return environment


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
    (`1 min 5 s` on a busy machine, `48 s` on an idle one), commits, and the warning a busy
    machine's spread of step times adds."""
    report = re.sub(r"\n> ⚠️ \*\*The \w+ side's step times vary widely\*\*[^\n]*\n", "\n", report)
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
    assert "parity N/N" in _shape(reports[0].read_text())
