"""black, only where the repository itself uses it, and only on the lines PyTPU changed.

black is imported only for a repository that uses it (it costs a tenth of a second to load)."""

from __future__ import annotations

import difflib
import tomllib
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import black


def _uses_black(directory: Path) -> black.Mode | None:
    pyproject = directory / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            data = {}
        if "black" in data.get("tool", {}):
            import black

            return _mode(black.parse_pyproject_toml(str(pyproject)))
    for name in (".pre-commit-config.yaml", ".pre-commit-config.yml"):
        config = directory / name
        if config.is_file():
            text = config.read_text(encoding="utf-8", errors="replace")
            if "psf/black" in text or "id: black" in text:
                import black

                return black.Mode()
    return None


def _mode(config: dict) -> black.Mode:
    import black

    versions = {black.TargetVersion[v.upper()] for v in config.get("target_version", [])}
    return black.Mode(
        target_versions=versions,
        line_length=int(config.get("line_length", black.DEFAULT_LINE_LENGTH)),
        string_normalization=not config.get("skip_string_normalization", False),
        magic_trailing_comma=not config.get("skip_magic_trailing_comma", False),
    )


@cache
def black_mode_for(directory: Path, stop: Path) -> black.Mode | None:
    """The black configuration of the project that holds `directory` (searching up to `stop`)."""
    mode = _uses_black(directory)
    if mode is not None or directory == stop or stop not in directory.parents:
        return mode
    return black_mode_for(directory.parent, stop)


def changed_lines(before: str, after: str) -> list[tuple[int, int]]:
    """1-based, inclusive line ranges of `after` that differ from `before`."""
    matcher = difflib.SequenceMatcher(a=before.splitlines(), b=after.splitlines(), autojunk=False)
    return [
        (j1 + 1, max(j1 + 1, j2))
        for tag, _i1, _i2, j1, j2 in matcher.get_opcodes()
        if tag in ("replace", "insert") and j2 > j1
    ]


def format_changed(before: str, after: str, mode: black.Mode) -> str:
    """Run black over the changed lines of `after` only; the rest keeps its formatting."""
    import black

    ranges = changed_lines(before, after)
    if not ranges:
        return after
    try:
        return black.format_file_contents(after, fast=False, mode=mode, lines=ranges)
    except black.NothingChanged:
        return after
