"""Where a repository's importable packages live, as an editable install would put them on
`sys.path`: a src layout's tests (`from mypkg import model` with the code in `src/mypkg`) import
only after `pip install -e .`, which PyTPU does not do on a shared machine. Adding these folders
to PYTHONPATH when it runs the tests gives the same imports without installing anything.
"""

from __future__ import annotations

import ast
import configparser
import tomllib
from pathlib import Path

from packaging.utils import canonicalize_name


def source_roots(root: Path) -> list[Path]:
    """The folders, other than the root itself, that the project's packages are imported from:
    those `pyproject.toml` names (setuptools' `package-dir` and `packages.find.where`, hatch's
    wheel `packages`, poetry's `from`), else `src/` when it holds a package."""
    named = [root / folder for folder in _declared(root)]
    if not named and any((root / "src").glob("*/__init__.py")):
        named = [root / "src"]
    found = []
    for folder in named:
        if folder.resolve() != root.resolve() and folder.is_dir() and folder not in found:
            found.append(folder)
    return found


def import_roots(root: Path) -> list[Path]:
    """What an editable install of the repository puts on `sys.path`: its source roots, or, for
    a project that names itself with its packages at the root, the root. A program started from
    a subfolder (`cd examples/mnist && python main.py`) imports the checkout's package then, the
    migrated one on the migrated side, not a release of it."""
    found = source_roots(root)
    return found or ([root] if project_names(root) else [])


def project_names(root: Path) -> set[str]:
    """The distribution names the repository's project files give it (canonical): pyproject's
    `[project]` or poetry's `name`, setup.cfg's `[metadata] name`, `setup(name="...")`."""
    names = set()
    project = _pyproject(root)
    for table in (project.get("project", {}), project.get("tool", {}).get("poetry", {})):
        if isinstance(table, dict) and isinstance(table.get("name"), str):
            names.add(table["name"])
    config = configparser.ConfigParser(interpolation=None)
    try:
        config.read(root / "setup.cfg", encoding="utf-8")
        if config.has_option("metadata", "name"):
            names.add(config.get("metadata", "name"))
    except (configparser.Error, UnicodeDecodeError):
        pass
    names.update(_setup_py_names(root / "setup.py"))
    return {canonicalize_name(name) for name in names if name.strip()}


def _setup_py_names(path: Path) -> set[str]:
    """`name="..."` of the `setup(...)` calls of a setup.py, where it is a literal."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return set()
    return {
        keyword.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "setup"
        for keyword in node.keywords
        if keyword.arg == "name"
        and isinstance(keyword.value, ast.Constant)
        and isinstance(keyword.value.value, str)
    }


def _pyproject(root: Path) -> dict:
    try:
        return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}  # no project file, or one the build itself would reject


def _declared(root: Path) -> list[str]:
    project = _pyproject(root)
    tool = project.get("tool", {})
    setuptools = tool.get("setuptools", {})
    folders = [setuptools.get("package-dir", {}).get("", "")]
    find = setuptools.get("packages", {})
    if isinstance(find, dict):
        folders += list(find.get("find", {}).get("where", []))
    wheel = tool.get("hatch", {}).get("build", {}).get("targets", {}).get("wheel", {})
    folders += [str(Path(p).parent) for p in wheel.get("packages", [])]
    folders += [p.get("from", "") for p in tool.get("poetry", {}).get("packages", [])]
    return [f for f in folders if isinstance(f, str) and f not in ("", ".")]
