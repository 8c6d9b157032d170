"""A src layout's tests import its packages as if installed: the folders come from the project
file (or a `src/` package), and the repository's own tests run with them on PYTHONPATH."""

from __future__ import annotations

import pytest

from pytpu.engine import pytest_runs
from pytpu.engine.source_roots import source_roots


def _package(root, folder, name="mypkg"):
    package = root / folder / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("def answer():\n    return 42\n")
    return package


@pytest.mark.parametrize(
    "project, folder",
    [
        ('[tool.setuptools]\npackage-dir = {"" = "lib"}\n', "lib"),
        ('[tool.setuptools.packages.find]\nwhere = ["code"]\n', "code"),
        ('[tool.hatch.build.targets.wheel]\npackages = ["source/mypkg"]\n', "source"),
        ('[tool.poetry]\npackages = [{include = "mypkg", from = "py"}]\n', "py"),
        ("", "src"),  # no declaration: a package under src/
    ],
)
def test_the_folders_a_project_imports_from(tmp_path, project, folder):
    _package(tmp_path, folder)
    (tmp_path / "pyproject.toml").write_text(project)
    assert source_roots(tmp_path) == [tmp_path / folder]


def test_a_flat_layout_needs_nothing(tmp_path):
    _package(tmp_path, ".")
    (tmp_path / "src").mkdir()  # a folder of scripts, no package: not a source root
    (tmp_path / "pyproject.toml").write_text("[tool.setuptools]\npackages = ['mypkg']\n")
    assert source_roots(tmp_path) == []
    (tmp_path / "pyproject.toml").write_text("not = [toml")
    assert source_roots(tmp_path) == []


def test_a_src_layout_repository_tests_run_without_installing(tmp_path):
    _package(tmp_path, "src")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_answer.py").write_text(
        "from mypkg import answer\n\n\ndef test_answer():\n    assert answer() == 42\n"
    )
    run = pytest_runs.run(tmp_path, ["tests"], "cpu", timeout=120)
    assert [r.outcome for r in run.results] == ["passed"], run.output
    assert run.command.startswith("PYTHONPATH=src ")


@pytest.mark.parametrize(
    "file, text",
    [
        ("pyproject.toml", '[project]\nname = "My_Lib"\nversion = "1"\n'),
        ("pyproject.toml", '[tool.poetry]\nname = "my-lib"\n'),
        ("setup.cfg", "[metadata]\nname = my.lib\n"),
        ("setup.py", "from setuptools import setup\n\nsetup(name='my-lib', version='1')\n"),
    ],
)
def test_a_program_in_a_subfolder_imports_the_checkout_of_its_own_project(tmp_path, file, text):
    # facebookresearch/schedule_free: `cd examples/mnist && python main.py` imports the library
    # at the root, which its examples' requirements name; PyPI's release of it was imported
    from pytpu.engine import processes
    from pytpu.engine.source_roots import import_roots, project_names

    _package(tmp_path, ".")
    (tmp_path / file).write_text(text)
    assert project_names(tmp_path) == {"my-lib"}
    assert import_roots(tmp_path) == [tmp_path]  # a flat layout: the root, as `pip install -e .`
    env = processes.program_environment("cpu", processes.HARNESS_ENV, {"root": str(tmp_path)})
    paths = env["PYTHONPATH"].split(":")
    assert paths[1] == str(tmp_path) and paths[0].endswith("startup")  # (PyTPU's start-up first)


def test_a_folder_of_scripts_is_no_project_and_gets_nothing(tmp_path):
    from pytpu.engine.source_roots import import_roots

    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "setup.py").write_text("import setuptools\nsetuptools.setup(name=NAME)\n")
    assert import_roots(tmp_path) == []
