"""`pytpu migrate` with `target: torch_tpu` on a machine without a TPU: the program is migrated to
the device 'tpu', both sides' tests run (the migrated one on PyTPU's strict CPU stand-in for
TorchTPU), and the report says which target, on what, and claims no speedup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytpu.engine import environment, migrate
from pytpu.engine.rewriter.checkout import migrate_text, rule_index
from tests.test_migrate import _pytpu, _repository

CONFIG = "target: torch_tpu\nrun: python train.py --cuda --steps 16\ntolerance: 2.0\n"


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("torch_tpu") / "tiny"
    repo = _repository(folder)
    (folder / ".github" / "pytpu.yml").write_text(CONFIG)
    repo.git.add("--all")
    repo.index.commit("Target TorchTPU")
    return folder, repo, _pytpu("migrate", str(folder))


def test_the_branch_migrates_to_the_tpu_device(migrated):
    folder, repo, result = migrated
    assert result.returncode == 0, result.stderr[-3000:]
    commits = list(repo.iter_commits("main..pytpu/migrate"))
    assert commits[0].summary == "Migrate to TorchTPU (PyTPU)"
    code = (commits[0].tree / "train.py").data_stream.read().decode()
    assert 'torch.device("tpu" if args.cuda else "cpu")' in code
    assert "torch_xla" not in code


def test_the_report_names_the_stand_in_and_claims_no_speedup(migrated):
    folder, _, _ = migrated
    document = json.loads((folder / ".pytpu" / "report.json").read_text())
    assert document["verdict"]["status"] == "parity"
    assert document["verdict"]["passed_both"] == document["verdict"]["total"] >= 5
    assert document["verdict"]["speedup"] is None
    assert document["environment"]["device"] == "tpu"
    assert document["environment"]["stand_in"]["module"] == "pytpu.runtime.tpu_standin"
    assert "stand-in" in document["devices"]["target"]
    assert "set by `target` in .github/pytpu.yml" == document["target_reason"]
    bench = document["benchmark"]
    assert bench["on_stand_in"] and bench["target"]["device"] == "tpu"
    assert bench["target"]["median_ms"] > 0 and bench["target"]["device_name"].startswith("TPU")
    assert document["reproduce"][-1].startswith("PYTPU_DEVICE=tpu python -m pytest")
    page = (folder / ".pytpu" / "report.md").read_text()
    assert "no speedup on the CPU stand-in" in page.splitlines()[0]
    assert "## XLA evidence" not in page


def test_the_reproduce_command_runs_the_migrated_tests_on_the_stand_in(migrated, tmp_path):
    folder, repo, _ = migrated
    checkout = tmp_path / "migrated"
    repo.git.worktree("add", "--detach", str(checkout), "pytpu/migrate")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTPU_")}
    run = [sys.executable, "-m", "pytest", "tests/pytpu", "-q", "-p", "no:cacheprovider"]
    on_tpu = subprocess.run(
        run, cwd=checkout, env={**env, "PYTPU_DEVICE": "tpu"}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert on_tpu.returncode == 0, on_tpu.stdout[-3000:]
    assert "runs on tpu" in on_tpu.stdout
    # The suite's program test checks that the program ran something on the device: the original
    # code, which names the GPU, cannot pass it there.
    repo.git.worktree("add", "--detach", str(tmp_path / "original"), "pytpu/migrate~1")
    original = subprocess.run(
        run, cwd=tmp_path / "original", env={**env, "PYTPU_DEVICE": "tpu"}, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert original.returncode != 0


def test_without_a_tpu_the_target_runs_on_its_stand_in(monkeypatch) -> None:
    wanted = environment.target("torch_tpu")
    monkeypatch.setattr(environment, "tpu_present", lambda: False)
    chosen, stand_in = environment.runs_on(wanted)
    assert chosen.name == "torch_xla" and stand_in["module"] == "pytpu.runtime.tpu_standin"
    assert chosen.reason("torch") == (
        "TorchTPU's stand-in runs in PyTorch/XLA's environment, and torch-xla 2.9.0 is built for"
        " torch 2.9.0 only"
    )
    monkeypatch.setattr(environment, "tpu_present", lambda: True)
    assert environment.runs_on(wanted) == (wanted, None)
    assert environment.runs_on(environment.target("torch_xla"))[1] is None


def test_the_commit_message_names_the_target() -> None:
    assert migrate.migration_message("torch_xla") == migrate.MIGRATION_MESSAGE
    assert migrate.migration_message("torch_tpu==0.2.0") == "Migrate to TorchTPU (PyTPU)"


def test_the_same_program_migrates_differently_per_target() -> None:
    text = Path(__file__).parent.joinpath("fixtures/testgen/tiny/train.py").read_text()
    to_xla, _ = migrate_text(text, rule_index("torch_xla"))
    to_tpu, _ = migrate_text(text, rule_index("torch_tpu"))
    assert "torch_xla" in to_xla and "torch_xla" not in to_tpu and '"tpu"' in to_tpu
