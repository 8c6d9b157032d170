"""`pytpu migrate` end to end on a small CUDA program in a git repository of its own, and
`pytpu verify`: the branch, the parity table, the benchmark, the report, and the bad paths."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import git
import pytest
from markdown_it import MarkdownIt

from pytpu.engine import migrate, testgen
from pytpu.engine.rewriter import checkout
from pytpu.engine.verify import parity

FIXTURE = Path(__file__).parent / "fixtures" / "testgen" / "tiny"
CONFIG = "run: python train.py --cuda --steps 16\ntolerance: 2.0\nbenchmark_rounds: 3\n"
PERSON = git.Actor("A Person", "person@example.invalid")


def _pytpu(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTPU_")}
    return subprocess.run(
        [sys.executable, "-m", "pytpu.engine.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _repository(folder: Path) -> git.Repo:
    shutil.copytree(FIXTURE, folder)
    # As in many ML repositories: checkpoints are ignored, and so would be the suite's recordings.
    (folder / ".gitignore").write_text("*.pt\n")
    (folder / ".github").mkdir()
    (folder / ".github" / "pytpu.yml").write_text(CONFIG)
    repo = git.Repo.init(folder, initial_branch="main")
    repo.git.add("--all")
    repo.index.commit("A CUDA program", author=PERSON, committer=PERSON)
    return repo


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of the checkout except git's own and PyTPU's ignored output."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and ".git" not in p.parts and ".pytpu" not in p.parts
    }


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("migrate") / "tiny"
    repo = _repository(folder)
    before = {"head": repo.head.commit.hexsha, "files": _snapshot(folder)}
    result = _pytpu("migrate", str(folder))
    return folder, repo, before, result


def test_first_run_makes_the_branch_with_two_commits(migrated):
    folder, repo, before, result = migrated
    assert result.returncode == 0, result.stderr[-3000:]
    # The starting branch and the checkout are exactly as they were.
    assert repo.active_branch.name == "main"
    assert repo.heads.main.commit.hexsha == before["head"]
    assert _snapshot(folder) == before["files"]
    assert not repo.is_dirty(untracked_files=True)
    commits = list(repo.iter_commits("main..pytpu/migrate"))
    assert [c.summary for c in commits] == [migrate.MIGRATION_MESSAGE, migrate.TESTS_MESSAGE]
    tests_commit, migration_commit = commits[1], commits[0]
    assert tests_commit.parents[0].hexsha == before["head"]
    added = {d.b_path for d in tests_commit.parents[0].diff(tests_commit)}
    assert added and all(p.startswith("tests/pytpu/") for p in added)
    # The recordings are committed though `*.pt` is ignored: the pushed suite runs as it is.
    assert any(p.startswith("tests/pytpu/data/") and p.endswith(".pt") for p in added)
    # The configuration reaches the suite: its tolerance factor is recorded beside the tests.
    suite = json.loads((tests_commit.tree / "tests/pytpu/suite.json").data_stream.read())
    assert suite["tolerance"] == 2.0
    changed = {d.b_path for d in tests_commit.diff(migration_commit)}
    assert changed == {"train.py"}
    assert "torch_xla" in (migration_commit.tree / "train.py").data_stream.read().decode()


def test_report_has_parity_benchmark_and_evidence(migrated):
    folder, repo, _, result = migrated
    document = json.loads((folder / ".pytpu" / "report.json").read_text())
    verdict = document["verdict"]
    assert verdict["status"] == "parity"
    assert verdict["total"] >= 10 and verdict["passed_both"] == verdict["total"]
    assert all(row["baseline"] == row["target"] == "passed" for row in document["parity"]["tests"])
    bench = document["benchmark"]
    assert bench["error"] is None, bench
    assert bench["baseline"]["median_ms"] > 0 and bench["target"]["median_ms"] > 0
    assert bench["target"]["compile"]["graphs"] >= 1
    assert bench["target"]["compile"]["after_warmup"] == 0
    assert bench["speedup"] > 0  # (the median ratio: the headline may still refuse it)
    assert len(bench["rounds"]) == 3 and bench["interval"]["confidence"] == 0.75
    assert bench["baseline"]["runs"] == bench["target"]["runs"] == 3
    assert bench["machine"]["threads"]["OMP_NUM_THREADS"]
    assert {f["path"] for f in document["changes"]["files"]} == {"train.py"}
    # Review items point at their comment in the migrated file, as the reviewer sees it.
    migrated = repo.heads["pytpu/migrate"].commit.tree / "train.py"
    lines = migrated.data_stream.read().decode().splitlines()
    assert document["review"]
    for item in document["review"]:
        assert f"# {item['code']}:" in lines[item["line"] - 1], item
    # The verdict line the command prints is the report's first line.
    assert result.stdout.strip().splitlines()[-1].startswith("PyTPU: parity")
    page = (folder / ".pytpu" / "report.md").read_text()
    tokens = MarkdownIt("commonmark").enable("table").parse(page)
    assert any(t.type == "table_open" for t in tokens)
    assert "XLA on the CPU" in page


def test_second_run_with_nothing_new_keeps_the_branch(migrated):
    folder, repo, _, _ = migrated
    tip = repo.heads["pytpu/migrate"].commit.hexsha
    result = _pytpu("migrate", str(folder))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "unchanged" in result.stderr
    assert repo.heads["pytpu/migrate"].commit.hexsha == tip


def test_a_persons_commit_on_the_branch_is_never_overwritten(migrated, tmp_path):
    folder, _, _, _ = migrated
    clone = git.Repo.clone_from(folder, tmp_path / "clone")
    clone.create_head("pytpu/migrate", clone.remotes.origin.refs["pytpu/migrate"])
    clone.heads["pytpu/migrate"].checkout()
    (tmp_path / "clone" / "NOTES.md").write_text("my review notes\n")
    clone.index.add(["NOTES.md"])
    mine = clone.index.commit("Review notes", author=PERSON, committer=PERSON)
    clone.heads.main.checkout()
    result = _pytpu("migrate", str(tmp_path / "clone"))
    assert result.returncode == 2
    assert "did not make" in result.stderr and mine.hexsha[:7] in result.stderr
    assert clone.heads["pytpu/migrate"].commit.hexsha == mine.hexsha


def test_dirty_tree_is_refused_and_nothing_changes(tmp_path):
    repo = _repository(tmp_path / "repo")
    (tmp_path / "repo" / "train.py").write_text("# work in progress\n")
    result = _pytpu("migrate", str(tmp_path / "repo"))
    assert result.returncode == 2
    assert "working tree has changes (train.py)" in result.stderr
    assert "pytpu/migrate" not in repo.heads
    assert (tmp_path / "repo" / "train.py").read_text() == "# work in progress\n"


def test_not_a_repository_is_refused(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "plain")
    result = _pytpu("migrate", str(tmp_path / "plain"))
    assert result.returncode == 2
    assert "not a git repository" in result.stderr
    assert not (tmp_path / "plain" / ".pytpu").exists()


def test_a_migration_that_breaks_a_test_is_named_with_exit_code_1(tmp_path, monkeypatch):
    repo = _repository(tmp_path / "repo")
    real_run = checkout.run

    def breaking_run(root, **kwargs):
        result = real_run(root, **kwargs)
        train = Path(root) / "train.py"  # on purpose: the residual of Block changes sign
        train.write_text(train.read_text().replace("x + self.scale *", "x - self.scale *"))
        return result

    monkeypatch.setattr(migrate.checkout, "run", breaking_run)
    result = migrate.migrate(tmp_path / "repo")
    assert result.exit_code == 1
    assert result.verdict.status == "regressed" and result.verdict.regressions >= 1
    assert result.document["verdict"] == asdict(result.verdict)  # the report says the same
    rows = result.document["parity"]["tests"]
    flags = [row["regression"] for row in rows]
    assert flags == sorted(flags, reverse=True)  # regressions first
    broken = [row for row in rows if row["regression"]]
    assert any("test_block_forward" in row["id"] and row["target"] == "failed" for row in broken)
    assert result.regressed_tests == [row["id"] for row in broken]
    assert result.headline == result.markdown.splitlines()[0].strip("*")
    assert "regression" in result.markdown.lower()
    assert repo.heads.main.commit.summary == "A CUDA program"


class _Stop(Exception):
    """Ends a run once a stage has seen what it was given."""


def test_both_sides_run_from_clean_checkouts_of_the_two_commits(tmp_path, monkeypatch):
    _repository(tmp_path / "repo")

    def generate(work, **_):  # a recording the user's `*.pt` ignores, and a checkpoint left over
        (work / "tiny.pt").write_bytes(b"checkpoint")
        (work / "tests" / "pytpu" / "data").mkdir(parents=True)
        (work / "tests" / "pytpu" / "data" / "unit.pt").write_bytes(b"recording")
        return testgen.GenerationResult(command="python train.py")

    seen = {}

    def parity_stage(settings, original, migrated):
        for side, root in (("original", original), ("migrated", migrated)):
            checkout = git.Repo(root)
            seen[side] = (
                checkout.head.commit.summary,
                checkout.git.status("--porcelain", "--ignored"),  # nothing but the commit
                (root / "tests" / "pytpu" / "data" / "unit.pt").read_bytes(),
            )
        raise _Stop

    monkeypatch.setattr(testgen.programs, "generate", generate)
    monkeypatch.setattr(migrate, "_parity", parity_stage)
    with pytest.raises(_Stop):
        migrate.migrate(tmp_path / "repo")
    assert seen == {
        "original": (migrate.TESTS_MESSAGE, "", b"recording"),
        "migrated": (migrate.MIGRATION_MESSAGE, "", b"recording"),
    }


# TCN's add_test.py: a training script that pytest would import for its name.
SCRIPT_NAMED_LIKE_A_TEST = """import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, required=True)
args = parser.parse_args()


def test():  # its evaluation loop
    pass
"""
UNITTEST_CASES = """import unittest


class Cases(unittest.TestCase):
    def test_one(self):
        pass
"""


def test_only_files_that_define_tests_run_as_the_repositorys_tests(tmp_path):
    (tmp_path / "add_test.py").write_text(SCRIPT_NAMED_LIKE_A_TEST)
    (tmp_path / "test_model.py").write_text("def test_shapes():\n    pass\n")
    (tmp_path / "cases_test.py").write_text(UNITTEST_CASES)
    (tmp_path / "test_helpers.py").write_text("def helper():\n    pass\n")
    found = parity.own_test_files(tmp_path, "tests/pytpu")
    assert sorted(p.name for p in found) == ["cases_test.py", "test_model.py"]
    side = parity.run_side(tmp_path, "tests/pytpu", "cpu", timeout=300)
    files = {test_id.split("::")[0] for test_id in side.results}
    assert files == {"cases_test.py", "test_model.py"}
    assert {outcome for outcome, _ in side.results.values()} == {"passed"}
    assert side.commands[-1].split(" -q ")[0].endswith("pytest cases_test.py test_model.py")


def test_a_pytest_internal_error_is_a_problem_not_a_test(tmp_path):
    # A real test file that exits while pytest imports it.
    (tmp_path / "test_cli.py").write_text(
        SCRIPT_NAMED_LIKE_A_TEST + "\n\ndef test_cli():\n    pass\n"
    )
    side = parity.run_side(tmp_path, "tests/pytpu", "cpu", timeout=300)
    assert side.results == {}  # no `pytest.py::internal` row
    assert "repository tests on cpu: pytest stopped (INTERNALERROR): SystemExit: 2" in side.problems
