"""A notebook's code cells as discovery reads them: one module, placed back in its cells.

The cells of a notebook run in order in one namespace (an import in the first serves a class in
the fifth), so discovery reads them as the rewriter migrates them: IPython's lines masked, the
cells joined into one module (`rewriter.notebooks`). What it finds there is then named by cell,
as the harness names the code a kernel runs (`pytpu.runtime.cells`): a module class
`nb.ipynb#cell5` line 2, a training step `nb.ipynb#cell7:4`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper

from pytpu.engine.rewriter import notebooks
from pytpu.runtime.cells import cell_id


@dataclass
class NotebookModule:
    """A notebook's code cells joined into one module, and where each cell starts in it."""

    relative: str  # the notebook, relative to the root
    tree: MetadataWrapper
    starts: list[int]  # the line of the module each cell starts at
    cells: list[notebooks.CodeCell]

    def place(self, line: int) -> tuple[str, int]:
        """(the cell's name, the line in the cell) of a line of the module."""
        number, in_cell = notebooks.place(line, self.starts, self.cells)
        return cell_id(self.relative, number), in_cell


def read(root: Path, path: Path) -> NotebookModule | None:
    """The notebook at `path` as one module; None for a notebook of another language or without
    code. Raises NotebookError, or libcst's ParserSyntaxError, for one that cannot be read."""
    data = notebooks.load(path.read_text(encoding="utf-8"))
    code, _ = notebooks.code_cells(data)
    if not notebooks.is_python(data) or not code:
        return None
    module = notebooks.join(code)
    starts = [start for start, _ in notebooks.split(module, code)]
    tree = MetadataWrapper(cst.parse_module(module))
    return NotebookModule(path.relative_to(root).as_posix(), tree, starts, code)


def place_class(cls: Any, notebook: NotebookModule) -> Any:
    """A discover.ModuleClass of the notebook's module, named by its cell."""
    file, line = notebook.place(cls.line)
    methods = tuple(dataclasses.replace(m, line=notebook.place(m.line)[1]) for m in cls.methods)
    checks = tuple((path, notebook.place(at)[1]) for path, at in cls.feature_checks)
    return dataclasses.replace(cls, file=file, line=line, methods=methods, feature_checks=checks)


def place_step(step: Any, notebook: NotebookModule) -> list[Any]:
    """A discover.TrainingStep of the notebook's module, one per cell its steps are in: the
    module level's steps of several cells are each cell's own (the harness names them so)."""
    by_cell: dict[str, list[int]] = {}
    for line in step.step_lines:
        file, in_cell = notebook.place(line)
        by_cell.setdefault(file, []).append(in_cell)
    start_file, start = notebook.place(step.line)
    return [
        # its loop or function where that is in the cell, else the cell's top
        dataclasses.replace(
            step, file=file, line=start if file == start_file else 1, step_lines=tuple(lines)
        )
        for file, lines in by_cell.items()
    ]
