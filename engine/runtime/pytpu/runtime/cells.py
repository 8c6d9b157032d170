"""A notebook's code cells as the repository's own code: their names, their text, and which cell
the code a kernel runs came from.

A notebook's cell is named like a file, `train.ipynb#cell5` (counted from 1, markdown cells
included, as a reader counts them and as the rewriter's findings do), so that call sites
(`train.ipynb#cell5:3`), training steps and module classes (`train.ipynb#cell5::Net`) read as a
script's do. An IPython kernel compiles each cell under a file name of its own
(`/tmp/ipykernel_<pid>/<hash>.py`) and keeps the code it compiled, after IPython's own
transformations, in `linecache`: `CellIndex` finds the cell whose transformed text that is.
Classes defined in a cell belong to the module `__main__`, which has no file: their code's file
name tells their cell.

Standard library only, and IPython when a kernel's code is looked up.
"""

from __future__ import annotations

import json
import linecache
import os
import sys
from pathlib import Path

from pytpu.runtime.command import is_notebook
from pytpu.runtime.kernel import NOTEBOOK_ENV, is_kernel

_CELL = "#cell"
# What IPython compiles the body of a `%%time` cell as: no file, no linecache entry; its code's
# lines count from the line after the magic's.
MAGIC_BODY = "<timed exec>"


def cell_id(notebook: str, number: int) -> str:
    """The name of cell `number` of `notebook` (a path relative to the repository's root)."""
    return f"{notebook}{_CELL}{number}"


def split_cell_id(name: str) -> tuple[str, int | None]:
    """(notebook, cell number) of a cell's name; (name, None) for any other name."""
    notebook, mark, number = name.rpartition(_CELL)
    if mark and number.isdigit() and is_notebook(notebook):
        return notebook, int(number)
    return name, None


def source_file(name: str) -> str:
    """The file a name of code is in: the notebook of a cell, else the name itself."""
    return split_cell_id(name)[0]


def code_cells(path: Path) -> list[tuple[int, str]]:
    """(number, source) of each code cell of the notebook at `path`, in order, read with json
    only (a generated suite needs no Jupyter package)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    cells = []
    for index, cell in enumerate(data.get("cells", [])):
        source = cell.get("source", "")
        source = source if isinstance(source, str) else "".join(source)
        if cell.get("cell_type") == "code" and source.strip():
            cells.append((index + 1, source))
    return cells


class CellIndex:
    """Which cell of the notebooks a kernel runs a code object's file name stands for."""

    def __init__(self, root: Path, folder: str):
        self.root = root
        self.notebooks = _running_notebooks(root, Path(folder))  # relative to the root
        self._by_text: dict[str, tuple[str, int]] | None = None

    def locate(self, filename: str) -> tuple[str, int] | None:
        """(the cell's name, the lines IPython dropped before its code) for code a kernel
        compiled from a cell of the notebooks, else None."""
        entry = linecache.cache.get(filename)
        if not self.notebooks or entry is None or len(entry) != 4 or entry[1] is not None:
            return None  # not code compiled from a string that linecache keeps (mtime None)
        return self._texts().get("".join(entry[2]))

    def _texts(self) -> dict[str, tuple[str, int]]:
        """Each code cell's text as the kernel compiles it -> (its name, the offset)."""
        if self._by_text is None:
            self._by_text = {}
            transform = _ipython_transform()
            for relative in self.notebooks:
                for number, source in code_cells(self.root / relative):
                    try:
                        text = transform(source)
                    except Exception:  # noqa: BLE001 - IPython's error: the kernel's too
                        continue
                    lines = "".join(line + "\n" for line in text.splitlines())
                    self._by_text.setdefault(lines, (cell_id(relative, number), _dropped(source)))
        return self._by_text


def _running_notebooks(root: Path, folder: Path) -> list[str]:
    """The notebooks this process may run, relative to `root`: the one the process that
    started this kernel names, else, in a kernel, those in `folder`, where it started (a kernel
    starts in its notebook's folder); none in a script's process."""
    named = os.environ.get(NOTEBOOK_ENV)
    if named:
        paths = [Path(named)]
    else:
        paths = sorted(folder.glob("*.ipynb")) if is_kernel(sys.orig_argv) else []
    found = []
    for path in paths:
        path = path.resolve()
        if root in path.parents and path.is_file():
            found.append(path.relative_to(root).as_posix())
    return found


def _ipython_transform():
    """IPython's transformation of a cell's text (magics to calls), as the kernel applies it;
    without IPython, the text itself."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return lambda source: source
    return TransformerManager().transform_cell


def _dropped(source: str) -> int:
    """The blank lines IPython drops from the start of a cell before compiling it."""
    lines = source.splitlines()
    return next((i for i, line in enumerate(lines) if line.strip()), 0)
