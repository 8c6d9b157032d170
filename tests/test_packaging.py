"""What users install: the two wheels built from a clean copy of this checkout hold every module and
data file of their source trees, nothing else, and each distribution declares what its code
imports (deptry). tests/test_install.py installs them into a new environment and runs them."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.source_tree import ROOT, copy_tracked, tracked_files

RUNTIME = "engine/runtime"
# A folder of the repository -> where its files go in the wheel of the distribution built there.
PYTPU = {"engine/": "pytpu/engine/", "kb/": "pytpu/kb/", "bot/": "pytpu/bot/"}
PYTPU_RUNTIME = {f"{RUNTIME}/pytpu/": "pytpu/"}
BIN = Path(sys.executable).parent


def build_wheels(source: Path, target: Path) -> dict[str, Path]:
    """Both distributions' wheels, built by pip from `source` as a user's `pip wheel` does."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet"]
        + ["--wheel-dir", str(target), str(source / RUNTIME), str(source)],
        check=True,
        capture_output=True,
        text=True,
    )
    return {path.name.split("-")[0]: path for path in target.glob("*.whl")}


def expected(layout: dict[str, str], leave_out: str | None = None) -> set[str]:
    """The tracked files under `layout`'s folders, at their places in the wheel."""
    found = set()
    for path in tracked_files():
        for folder, place in layout.items():
            if path.startswith(folder) and not (leave_out and path.startswith(leave_out)):
                found.add(place + path.removeprefix(folder))
    return found


def contents(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name for name in archive.namelist() if ".dist-info/" not in name}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    source = copy_tracked(tmp_path_factory.mktemp("clone"))
    return build_wheels(source, tmp_path_factory.mktemp("wheels"))


def test_the_pytpu_wheel_holds_every_file_of_its_folders_and_nothing_else(wheels):
    built, wanted = contents(wheels["pytpu"]), expected(PYTPU, leave_out=f"{RUNTIME}/")
    assert {"pytpu/kb/device.yaml", "pytpu/engine/rewriter/vocabulary/__init__.py"} <= wanted
    assert sorted(wanted - built) == [], "missing from the wheel"
    assert sorted(built - wanted) == [], "in the wheel but not in the source tree"


def test_the_runtime_wheel_holds_every_file_of_its_folder_and_nothing_else(wheels):
    built, wanted = contents(wheels["pytpu_runtime"]), expected(PYTPU_RUNTIME)
    assert "pytpu/runtime/startup/sitecustomize.py" in wanted
    assert sorted(wanted - built) == [] and sorted(built - wanted) == []


def test_a_new_subpackage_and_data_file_are_found_without_an_edit(tmp_path):
    source = copy_tracked(tmp_path / "clone")
    (source / "engine" / "newpart").mkdir()
    (source / "engine" / "newpart" / "__init__.py").write_text("")
    (source / "engine" / "newpart" / "table.yaml").write_text("a: 1\n")
    (source / RUNTIME / "pytpu" / "runtime" / "extra").mkdir()
    (source / RUNTIME / "pytpu" / "runtime" / "extra" / "data.json").write_text("{}")
    built = build_wheels(source, tmp_path / "wheels")
    assert {"pytpu/engine/newpart/__init__.py", "pytpu/engine/newpart/table.yaml"} <= contents(
        built["pytpu"]
    )
    assert "pytpu/runtime/extra/data.json" in contents(built["pytpu_runtime"])


@pytest.mark.parametrize("where", [".", RUNTIME])
def test_each_distribution_declares_what_its_code_imports(where):
    roots = ["engine", "bot", "kb"] if where == "." else ["."]
    done = subprocess.run(
        [str(BIN / "deptry"), *roots, "--no-ansi"],
        cwd=ROOT / where,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_deptry_finds_an_undeclared_import(tmp_path):
    source = copy_tracked(tmp_path / "clone")
    (source / "bot" / "stray.py").write_text("import pydantic\n")  # a dev extra only
    done = subprocess.run(
        [str(BIN / "deptry"), "engine", "bot", "kb", "--no-ansi"],
        cwd=source,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "DEP004 'pydantic'" in done.stdout + done.stderr
