"""Which files a program runs are the repository's own code, for the harness and the CUDA map;
the file a class or module is defined in."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from typing import Any


class RepositoryFiles:
    """Which source files are the repository's own code (not its tests, environments or
    libraries), by their names relative to its root; in an IPython kernel, the code of its
    notebook's cells too, named `nb.ipynb#cell5` (`pytpu.runtime.cells`)."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.names: dict[str, str | None] = {}  # file name -> its name in the repository, or None
        self.offsets: dict[str, int] = {}  # a cell's code -> the lines IPython dropped before it
        self.folder = os.getcwd()  # where a kernel starts: its notebook's folder
        self._cells: Any = None  # the kernel's cells.CellIndex, made when first needed

    def in_repo(self, filename: str) -> bool:
        return self.name(filename) is not None

    def name(self, filename: str) -> str | None:
        if filename not in self.names:
            self.names[filename] = self._file_name(filename) or self._cell_name(filename)
        return self.names[filename]

    def relative(self, filename: str) -> str:
        name = self.name(filename)
        if name is None:
            return Path(filename).resolve().relative_to(self.root).as_posix()
        return name

    def line(self, filename: str, line: int) -> int:
        """A line of `filename`'s code as its file (or cell) numbers it."""
        return line + self.offsets.get(filename, 0)

    def _file_name(self, filename: str) -> str | None:
        try:
            path = Path(filename).resolve()
            parts = path.relative_to(self.root).parts if self.root in path.parents else ()
        except (OSError, ValueError):
            return None
        # The repository's tests, this suite and environments inside it are not its code.
        outside = any(part in ("tests", "site-packages") or part.startswith(".") for part in parts)
        if path.suffix != ".py" or not parts or outside:
            return None
        return "/".join(parts)

    def _cell_name(self, filename: str) -> str | None:
        if self._cells is None:
            from pytpu.runtime.cells import CellIndex

            self._cells = CellIndex(self.root, self.folder)
        found = self._cells.locate(filename)
        if found is None:
            return None
        name, self.offsets[filename] = found
        self.cell_ran()
        return name

    def cell_ran(self) -> None:
        """Called when the code of a notebook's cell is first seen."""

    def notebooks(self) -> list[str]:
        """The notebooks whose cells ran in this process (a kernel), relative to the root."""
        return self._cells.notebooks if self._cells is not None and self.offsets else []


_MAIN_FILE = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else None


def is_main(module_name: str) -> bool:
    """Code of a script run as the program, or of a notebook's cells (a kernel's `__main__`)."""
    return module_name in ("__main__", "__mp_main__")


def class_file(cls: type) -> str | None:
    """The file a class is defined in: its module's, or for a class of a notebook's cell (its
    module `__main__` has no file), that of its methods' code."""
    filename = module_file(sys.modules.get(cls.__module__))
    if filename is None and is_main(cls.__module__):
        codes = [f.__code__ for f in vars(cls).values() if isinstance(f, types.FunctionType)]
        # not the methods a dataclass makes from strings (`<string>`)
        filename = next((c.co_filename for c in codes if not c.co_filename.startswith("<")), None)
    return filename


def module_file(module: types.ModuleType | None) -> str | None:
    """A module's file; Python drops `__main__.__file__` when the script ends, so its path is
    also taken from sys.argv (at start-up, before the program could change directory)."""
    filename = getattr(module, "__file__", None)
    is_main = getattr(module, "__name__", None) == "__main__"
    if filename is None and is_main:
        main = sys.argv[0] if sys.argv and sys.argv[0] else None
        filename = _MAIN_FILE if _MAIN_FILE and main and Path(main).name in _MAIN_FILE else None
    if not isinstance(filename, str) or not (is_main or os.path.isabs(filename)):
        return None  # (`torch.ops` says `_ops.py`: a name, not a file in the current folder)
    return os.path.abspath(filename)
