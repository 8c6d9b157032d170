"""This checkout as a clone of it has it: the tracked files, with the work tree's changes, copied to
a folder. Users build and run PyTPU from such a copy (the Action's checkout, a `pip install` of a
clone), never from this editable checkout with its untracked files and caches."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tracked_files() -> list[str]:
    """The tracked files' paths, relative to the root (a file deleted in the work tree left out)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    return [path for path in listed if path and (ROOT / path).is_file()]


def copy_tracked(target: Path) -> Path:
    for relative in tracked_files():
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, target / relative)
    return target
