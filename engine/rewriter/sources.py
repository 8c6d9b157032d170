"""Which files of a checkout PyTPU works on (Python files; for the rewrite also Jupyter
notebooks), and reading them safely.

Skipped: what `.gitignore` files (and `.git/info/exclude`) ignore, vendored folders, virtual
environments, and symbolic links. A file that cannot be read as Python source (binary, bad
encoding, a link that leaves the repository) is reported with a clear error instead.
"""

from __future__ import annotations

import os
import tokenize
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pathspec


# Folders that hold someone else's code or an installed environment, never the project's own.
SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".ipynb_checkpoints",  # Jupyter's autosaved copies of the notebooks next to it
        ".tox",
        ".nox",
        ".venv",
        "venv",
        ".env",
        "node_modules",
        "site-packages",
        "dist-packages",
        ".eggs",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "vendor",
        "vendored",
        "_vendor",
        "third_party",
        "thirdparty",
        "3rdparty",
    }
)
# A suite written by `pytpu testgen`.
GENERATED_SUITE_MARKERS = ("suite.json", "requirements.txt")
ENVIRONMENT_MARKERS = ("pyvenv.cfg", "conda-meta")


class SourceError(Exception):
    """A file that is not usable Python source; the message says why and what to do."""


@dataclass(frozen=True)
class Source:
    path: Path
    text: str
    encoding: str


def _ignore_spec(directory: Path, names: list[str]) -> pathspec.PathSpec | None:
    lines: list[str] = []
    if ".gitignore" in names:
        lines += (
            (directory / ".gitignore").read_text(encoding="utf-8", errors="replace").splitlines()
        )
    exclude = directory / ".git" / "info" / "exclude"
    if exclude.is_file():
        lines += exclude.read_text(encoding="utf-8", errors="replace").splitlines()
    if not lines:
        return None
    import pathspec  # (a hundredth of a second at start-up, paid only where there is a .gitignore)

    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ignored(path: Path, is_dir: bool, specs: list[tuple[Path, pathspec.PathSpec]]) -> bool:
    for base, spec in specs:
        rel = path.relative_to(base).as_posix() + ("/" if is_dir else "")
        if spec.match_file(rel):
            return True
    return False


def discover(root: Path, notebooks: bool = False) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Python files under `root` to migrate (and Jupyter notebooks, with `notebooks`), and the
    ones skipped with the reason."""
    suffixes = (".py", ".ipynb") if notebooks else (".py",)
    root = root.resolve() if not root.is_symlink() else root.absolute()
    if root.is_file() or root.is_symlink():
        wanted = root.suffix in (*suffixes, ".pyi") or root.is_symlink()
        return ([root], []) if wanted else ([], [])
    files: list[Path] = []
    problems: list[tuple[Path, str]] = []
    specs: list[tuple[Path, pathspec.PathSpec]] = []
    for current, dirnames, filenames in os.walk(root):
        directory = Path(current)
        specs = [(b, s) for b, s in specs if directory == b or b in directory.parents]
        spec = _ignore_spec(directory, filenames)
        if spec is not None:
            specs.append((directory, spec))
        keep = []
        for name in sorted(dirnames):
            sub = directory / name
            if name in SKIPPED_DIRS or sub.is_symlink() or _ignored(sub, True, specs):
                continue
            if any((sub / marker).exists() for marker in ENVIRONMENT_MARKERS):
                continue
            if all((sub / marker).exists() for marker in GENERATED_SUITE_MARKERS):
                continue  # PyTPU's own tests: they must stay the same before and after migration
            keep.append(name)
        dirnames[:] = keep
        for name in sorted(filenames):
            path = directory / name
            if not name.endswith(suffixes) or _ignored(path, False, specs):
                continue
            if path.is_symlink():
                target = path.resolve()
                if root not in target.parents:
                    problems.append(
                        (path, f"a symbolic link to {target}, outside the repository; skipped")
                    )
                continue  # a link inside the repository: its target is migrated in place
            files.append(path)
    return files, problems


def read_source(path: Path, root: Path | None = None) -> Source:
    """Read a Python file as text, with errors that name the file and say what to do."""
    if path.is_symlink():
        target = path.resolve()
        if root is not None and root.resolve() not in target.parents:
            raise SourceError(f"a symbolic link to {target}, outside the repository; not followed")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(f"cannot be read ({exc.strerror}); check its permissions") from None
    if b"\0" in data:
        raise SourceError("is a binary file, not Python source; exclude it or rename it")
    try:
        encoding, _ = tokenize.detect_encoding(BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "msg", None) or str(exc)
        raise SourceError(
            f"is not valid text in its declared encoding ({reason}); "
            "save it as UTF-8 or fix its coding declaration"
        ) from None
    return Source(path=path, text=text, encoding=encoding)


def write_atomically(path: Path, text: str, encoding: str) -> None:
    """Replace the file in one step, so that it is never left half-written."""
    data = text.encode(encoding)
    target = path.resolve()
    tmp = target.with_name(f".{target.name}.pytpu-tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, target.stat().st_mode & 0o7777)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
