"""Where a repository's importable packages live, as an editable install would put them on
`sys.path`: a src layout's tests (`from mypkg import model` with the code in `src/mypkg`) import
only after `pip install -e .`, which PyTPU does not do on a shared machine. Adding these folders
to PYTHONPATH when it runs the tests gives the same imports without installing anything.
"""

from __future__ import annotations

import tomllib
from pathlib import Path


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


def _declared(root: Path) -> list[str]:
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []  # no project file, or one the build itself would reject
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
