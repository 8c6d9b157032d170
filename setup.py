"""PyTPU's packages, found in its folders rather than listed by hand.

The design card keeps engine/, kb/ and bot/ at the top of the repository; they install as
pytpu.engine, pytpu.kb and pytpu.bot. setuptools' `packages.find` cannot put a prefix before the
names it finds, so the list is made here, from the folders themselves: every folder below them is
a package (a folder of templates too) and every file in it is installed, data included. A new
module, package or data file is in the wheel without an edit here; `tests/test_packaging.py`
compares the built wheels with the source tree. The rest of the metadata is in pyproject.toml.
"""

from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
FOLDERS = {"engine": "pytpu.engine", "kb": "pytpu.kb", "bot": "pytpu.bot"}
# pytpu-runtime, the generated suites' runtime, is a distribution of its own (its pyproject.toml).
OTHER_DISTRIBUTIONS = {HERE / "engine" / "runtime"}


def _kept(folder: Path, root: Path) -> bool:
    """Not a cache, a hidden folder, build metadata or another distribution's folder."""
    skipped = any(
        part == "__pycache__" or part.startswith(".") or part.endswith(".egg-info")
        for part in folder.relative_to(root).parts
    )
    return not skipped and not any(o == folder or o in folder.parents for o in OTHER_DISTRIBUTIONS)


def packages() -> dict[str, str]:
    """Every package's name -> its folder, relative to this file."""
    found: dict[str, str] = {}
    for top, name in FOLDERS.items():
        root = HERE / top
        for folder in sorted([root, *root.rglob("*")]):
            if folder.is_dir() and _kept(folder, root):
                parts = folder.relative_to(root).parts
                found[".".join([name, *parts])] = folder.relative_to(HERE).as_posix()
    return found


FOUND = packages()
setup(
    packages=list(FOUND),
    package_dir=FOUND,
    package_data={name: ["*"] for name in FOUND},
    exclude_package_data={"": ["*.pyc", "*.pyo"]},
)
