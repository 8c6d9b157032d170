"""The files a recorded run leaves behind. The generated suite runs the program in a clean
checkout, where a checkpoint or snapshot an earlier run wrote does not exist; so each recorded run
(and the suite's check run) starts from the files the repository had when generation began, and
a program that resumes from its own snapshot (`multinode.py`'s `snapshot.pt`) is recorded as it
will be tested, not resumed. What the last run wrote stays: a later program may read it
(`sample.py` the checkpoint of `train.py`), as it will in the suite's order.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

_SKIPPED = (".git", "__pycache__")


def snapshot(root: Path) -> set[str]:
    """Every file and folder under `root` (relative, folders with a trailing /), outside .git,
    bytecode caches and PyTPU's own scratch folders (`.pytpu-*`)."""
    found: set[str] = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIPPED and not d.startswith(".pytpu-")]
        base = Path(folder).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        found.update(prefix + d + "/" for d in dirs)
        found.update(prefix + f for f in files)
    return found


def remove_created(root: Path, before: set[str], keep: Path | None = None) -> list[str]:
    """Remove what is under `root` now and was not in `before` (except under `keep`: the suite
    being written); returns the removed paths. Files that existed and were changed stay changed:
    only new ones can be taken back without copies."""
    kept = keep.resolve().relative_to(root.resolve()).as_posix() + "/" if keep else None
    new = sorted(snapshot(root) - before, key=lambda p: (-p.count("/"), p))
    removed = []
    for relative in new:
        if kept and (relative.startswith(kept) or kept.startswith(relative)):
            continue  # the suite's folder, or a folder on its way
        path = root / relative
        if relative.endswith("/"):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(relative)
    return removed
