"""Several programs in one repository: each recorded into a suite of its own, run in their order;
one that cannot be recorded is reported and the others go on; without configuration, the
programs a README shows and the entry scripts are proposed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytpu.engine import pytest_runs, testgen
from pytpu.engine.config import Program
from pytpu.engine.testgen import generate_programs, programs, proposals

FIXTURE = Path(__file__).parent / "fixtures" / "programs"


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """train.py writes a checkpoint that sample.py reads; broken.py exits with an error."""
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(FIXTURE, root, dirs_exist_ok=True)
    listed = (
        Program("python train.py --steps 2", "train"),
        Program("python sample.py"),
        Program("python broken.py"),
    )
    return root, generate_programs(root, listed, timeout=120)


def test_each_program_gets_a_suite_of_its_own(generated):
    root, result = generated
    assert [(p.name, p.generated is not None) for p in result.programs] == [
        ("train", True),
        ("sample", True),
        ("broken", False),
    ]
    assert "exited with 1" in result.programs[2].error
    assert "needs a dataset" in result.programs[2].error
    suite = root / "tests" / "pytpu"
    assert sorted(p.name for p in suite.glob("*/test_*.py")) == [
        "test_sample_program.py",  # sample.py prints no metric: that it runs is its test
        "test_sample_train_py.py",
        "test_train_program.py",
        "test_train_train_py.py",
    ]
    assert result.programs[0].trains and not result.programs[1].trains
    assert ("program", "runs to completion", ["exit status 0"], "sample") in result.tested
    assert (
        "--run 'train: python train.py --steps 2'"
        in (suite / "train" / "test_train_program.py").read_text()
    )


def test_the_programs_tests_run_in_the_programs_order(generated):
    """sample.py reads the checkpoint train.py writes: with none on disk, its test passes only
    because train's tests run first (pytest alone would take sample/ before train/)."""
    root, _ = generated
    (root / "ckpt.pt").unlink(missing_ok=True)
    run = pytest_runs.run(root, ["tests/pytpu"], "cpu", timeout=300)
    assert run.results and all(r.outcome == "passed" for r in run.results), run.output
    order = [r.id.split("/")[2] for r in run.results]
    assert order == sorted(order, key=["train", "sample"].index)


def test_nothing_recorded_is_an_error_naming_each_program(tmp_path):
    shutil.copy(FIXTURE / "broken.py", tmp_path)
    with pytest.raises(testgen.TestgenError, match="needs a dataset"):
        generate_programs(tmp_path, (Program("python broken.py"),), timeout=60)


def test_a_repository_without_configuration_gets_proposals(tmp_path):
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "README.md").write_text("```\n$ python export.py --epochs 3\n```\n")
    (tmp_path / "tools" / "export.py").write_text(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--epochs')\n"
        "p.add_argument('--dry-run', action='store_true')\np.parse_args()\n"
    )
    (tmp_path / "pyproject.toml").write_text('[project.scripts]\nserve = "app.cli:main"\n')
    found = proposals.find(tmp_path, tmp_path / "tests" / "pytpu")
    assert [(p.command, p.origin) for p in found] == [
        ("python train.py --steps 2", "README.md:4"),
        ("python sample.py", "README.md:5"),
        ("cd tools && python export.py --epochs 3 --dry-run", "tools/README.md:2"),
        ("python -c 'import sys; from app.cli import main; sys.exit(main())'",
         "pyproject.toml [project.scripts] serve"),
        ("python broken.py", "broken.py"),
    ]  # fmt: skip
    planned = programs._planned(tmp_path, (), tmp_path / "tests" / "pytpu")
    assert [(p.name, p.tried) for p in planned] == [
        ("train", True),
        ("sample", True),
        ("export", True),
        ("serve", False),
        ("broken", False),
    ]


def test_program_names_are_unique():
    root = FIXTURE
    names = programs._names(root, ["python train.py", "python train.py", "python x.py"],
                            [None, None, "train-2"])  # fmt: skip
    assert names == ["train", "train-3", "train-2"]


def test_a_run_starts_from_the_files_generation_began_with(tmp_path):
    from pytpu.engine.testgen import workspace

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "kept.txt").write_text("the user's")
    (tmp_path / "tests" / "pytpu").mkdir(parents=True)
    before = workspace.snapshot(tmp_path)
    (tmp_path / "snapshot.pt").write_text("written by the run")
    (tmp_path / "runs" / "1").mkdir(parents=True)
    (tmp_path / "runs" / "1" / "events").write_text("log")
    (tmp_path / "data" / "kept.txt").write_text("changed by the run")
    (tmp_path / "tests" / "pytpu" / "train").mkdir()
    (tmp_path / "tests" / "pytpu" / ".pytpu-suite-x").mkdir()
    removed = workspace.remove_created(tmp_path, before, keep=tmp_path / "tests/pytpu/train")
    assert sorted(removed) == ["runs/", "runs/1/", "runs/1/events", "snapshot.pt"]
    assert (tmp_path / "data" / "kept.txt").read_text() == "changed by the run"
    assert (tmp_path / "tests" / "pytpu" / "train").is_dir()
    assert (tmp_path / "tests" / "pytpu" / ".pytpu-suite-x").is_dir()
