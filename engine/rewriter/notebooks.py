"""Jupyter notebooks (.ipynb): their code cells migrated with the same engine and KB as a .py file.

The code cells of a notebook are one program: they run in order in one namespace, so a device
chosen in one cell is used in the next, an import in the first cell serves them all, and a
training loop may span cells. The engine therefore sees them together, as one module:

1. nbformat reads and validates the notebook; each code cell's IPython lines (magics, shell
   lines) are masked line for line (`ipython.py`); a cell that is not Python (`%%bash`, or a
   syntax error) is left out and left as it is.
2. The masked cells are joined in order, a marker statement between two cells, and the module is
   migrated once (`checkout.migrate_source`: same rules, same analyses, same checks).
3. The result is split at the markers. Every marker must be there once and in order, every
   masked line must come back, and each cell must parse on its own; otherwise the notebook is
   left unchanged and the error names it and the cell.
4. An import the rewrite added goes where the notebook's imports are: at the end of the imports
   that open the first code cell that opens with imports (`notebook_imports.py`).
5. Only the changed cells' "source" values are replaced in the file's JSON text
   (`notebook_json.py`): outputs, execution counts, metadata, cell ids, the markdown and raw cells
   and the file's own JSON layout stay byte for byte. Writes are atomic, as for .py files.

Findings and the comments written are placed by cell: `cell` is the cell's 1-based position in
the notebook (markdown cells count, as a reader scrolling the notebook counts them) and `line`
the line within the cell.
"""

from __future__ import annotations

import bisect
import dataclasses
import difflib
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import libcst as cst
import nbformat

from pytpu.engine.rewriter import ipython, notebook_imports
from pytpu.engine.rewriter.findings import Finding, WrittenComment
from pytpu.engine.rewriter.index import RuleIndex
from pytpu.engine.rewriter.notebook_json import SpliceError, replace_sources
from pytpu.engine.rewriter.single_file import (
    Changed,
    Failed,
    FileResult,
    MigratedSource,
    OutputDoesNotParse,
    engine_failure,
    follow_lines,
    migrate_source,
)
from pytpu.engine.rewriter.sources import SourceError, read_source, write_atomically

MARKER = "__pytpu_cell_{}__"
RESERVED = "__pytpu_"  # the prefix of the markers and placeholders: never in a user's cell


class NotebookError(Exception):
    """The notebook cannot be migrated; the message says why (the caller adds the file)."""


@dataclass
class CodeCell:
    index: int  # in the notebook's "cells"
    source: str
    masked: ipython.MaskedCell

    @property
    def number(self) -> int:
        """As people count the cells: from 1, markdown and raw cells included."""
        return self.index + 1


@dataclass
class CellChange:
    number: int
    before: str
    after: str

    def diff(self, path: str) -> str:
        name = f"{path} cell {self.number}"
        return "".join(
            difflib.unified_diff(
                _diff_lines(self.before), _diff_lines(self.after), f"a/{name}", f"b/{name}"
            )
        )


@dataclass
class NotebookInfo:
    """What a FileResult of a notebook adds: the cells changed and the cells left alone."""

    cells: list[CellChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # cells not migrated, and why

    def diff(self, path: str) -> str:
        return "".join(cell.diff(path) for cell in self.cells)

    def label(self) -> str:
        """`cells 2, 5` for the changed cells."""
        numbers = ", ".join(str(c.number) for c in self.cells)
        return f"cell {numbers}" if len(self.cells) == 1 else f"cells {numbers}"

    def as_dict(self) -> dict[str, Any]:
        return {"cells_changed": [c.number for c in self.cells], "notes": self.notes}


@dataclass
class MigratedNotebook:
    text: str  # the notebook's JSON text, changed or not
    findings: list[Finding]
    comments: list[WrittenComment]
    info: NotebookInfo
    parsed: bool  # whether the engine had to parse the cells (the pre-filter let them through)


def _diff_lines(text: str) -> list[str]:
    # a cell's last line has no newline: give it one, or the diff would run it into the next
    return ipython.split_lines(text if text.endswith("\n") or not text else text + "\n")


# --- reading ---------------------------------------------------------------------------------


def load(text: str) -> dict[str, Any]:
    """The notebook in `text`, checked with nbformat; NotebookError says what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotebookError(
            f"is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}), so not a "
            "notebook Jupyter can open; skipped"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise NotebookError("is not a Jupyter notebook (no list of 'cells'); skipped")
    if data.get("nbformat") != 4:
        raise NotebookError(
            f"is a notebook of nbformat {data.get('nbformat')!r}; PyTPU migrates nbformat 4: "
            "open and save it in Jupyter to upgrade it. Skipped"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nbformat's warnings about missing cell ids
            nbformat.validate(nbformat.from_dict(data))
    except nbformat.ValidationError as exc:
        reason = str(exc.message).splitlines()[0]
        raise NotebookError(
            f"is not a valid Jupyter notebook ({reason}); skipped. "
            "Open and save it in Jupyter to repair it"
        ) from None
    return data


def is_python(data: dict[str, Any]) -> bool:
    """Whether the notebook's kernel runs Python (an R or Julia notebook's cells are not)."""
    metadata = data.get("metadata") or {}
    language = (metadata.get("kernelspec") or {}).get("language") or (
        metadata.get("language_info") or {}
    ).get("name")
    return not isinstance(language, str) or language.lower() in ("python", "python3", "")


def source_of(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return source if isinstance(source, str) else "".join(source)


def code_cells(data: dict[str, Any]) -> tuple[list[CodeCell], list[str]]:
    """The notebook's code cells the engine can read, masked, and a note for each cell of
    Python code it cannot (a cell magic that is not Python is no note: it is expected)."""
    cells: list[CodeCell] = []
    notes: list[str] = []
    numbers: list[int] = []  # the placeholders handed out so far
    for index, cell in enumerate(data["cells"]):
        source = source_of(cell)
        if cell.get("cell_type") != "code" or not source.strip():
            continue
        if RESERVED in source:
            raise NotebookError(f"cell {index + 1} uses PyTPU's reserved names ({RESERVED}...)")
        try:
            masked = ipython.mask(source, numbers)
        except ipython.NotPython as exc:
            if ipython.cell_magic(source) is None:
                notes.append(f"cell {index + 1}: {exc}; left unchanged")
            continue
        cells.append(CodeCell(index, source, masked))
    return cells, notes


# --- one module of the cells, and back --------------------------------------------------------


def join(cells: list[CodeCell]) -> str:
    """The masked cells in order as one module, a marker statement before each but the first
    (so that the first cell is the module's top: its docstring, its imports)."""
    return rejoin([cell.masked.text + "\n" for cell in cells], cells)


def rejoin(parts: list[str], cells: list[CodeCell]) -> str:
    """The module of the cells' parts (each ending with a newline), as `join` makes it."""
    out = []
    for k, (part, cell) in enumerate(zip(parts, cells, strict=True)):
        if k:
            out.append(MARKER.format(cell.number) + "\n")
        out.append(part)
    return "".join(out)


MOVED = (
    "the rewrite moved code across cells; the notebook was left unchanged. "
    "Please report this with the notebook"
)


def split(text: str, cells: list[CodeCell]) -> list[tuple[int, str]]:
    """Each cell's part of the module `text` (without the newline `join` added) and the line
    it starts at; NotebookError when a marker is missing, repeated or out of order."""
    lines = ipython.split_lines(text)
    wanted = {MARKER.format(cell.number): k for k, cell in enumerate(cells) if k}
    cuts = [(i, wanted[line.strip()]) for i, line in enumerate(lines) if line.strip() in wanted]
    if [k for _, k in cuts] != list(range(1, len(cells))):
        raise NotebookError(MOVED)
    starts = [0] + [i + 1 for i, _ in cuts]
    ends = [i for i, _ in cuts] + [len(lines)]
    parts = []
    for start, end in zip(starts, ends, strict=True):
        part = "".join(lines[start:end])
        if not part.endswith("\n"):
            raise NotebookError(MOVED)
        parts.append((start + 1, part[:-1]))
    return parts


def _new_sources(parts: list[tuple[int, str]], cells: list[CodeCell]) -> dict[int, str]:
    """The migrated cells (by index in the notebook) that changed, with their IPython lines
    given back; each must parse on its own."""
    changed = {}
    for (_start, part), cell in zip(parts, cells, strict=True):
        try:
            new = _same_ending(cell.source, cell.masked.restore(part))
        except ValueError as exc:
            message = f"cell {cell.number}: {exc}; the notebook was left unchanged"
            raise NotebookError(message) from None
        if new == cell.source:
            continue
        try:
            ipython.mask(new, [])
        except ipython.NotPython as exc:
            raise NotebookError(
                f"cell {cell.number} would not parse after the rewrite ({exc}); the notebook "
                "was left unchanged. Please report this with the notebook"
            ) from None
        changed[cell.index] = new
    return changed


def _same_ending(old: str, new: str) -> str:
    """`new` ending in as many newlines as `old`: the end of a cell is no place for the blank
    lines libcst sets between statements (after added imports, before the next cell's marker)."""
    return new.rstrip("\n") + "\n" * (len(old) - len(old.rstrip("\n")))


def place(line: int, starts: list[int], cells: list[CodeCell]) -> tuple[int, int]:
    """(cell number, line in the cell) of line `line` of the joined module."""
    k = bisect.bisect_right(starts, line) - 1
    return cells[k].number, line - starts[k] + 1


Placed = TypeVar("Placed", Finding, WrittenComment)


def _placed(items: list[Placed], starts: list[int], cells: list[CodeCell]) -> list[Placed]:
    """Findings or written comments, their lines of the joined module made cells and lines."""
    placed = []
    for item in items:
        number, line = place(item.line, starts, cells)
        placed.append(dataclasses.replace(item, line=line, cell=number))
    return placed


# --- the notebook, migrated -------------------------------------------------------------------


def migrate_notebook(text: str, index: RuleIndex, path: str = "<notebook>") -> MigratedNotebook:
    """The migrated notebook (its JSON text), what was found and the comments written.
    Raises NotebookError on a notebook that cannot be read or migrated, libcst's
    ParserSyntaxError and OutputDoesNotParse as `migrate_source` does."""
    data = load(text)
    if not is_python(data):
        return MigratedNotebook(text, [], [], NotebookInfo(), parsed=False)
    cells, notes = code_cells(data)
    info = NotebookInfo(notes=notes)
    module = join(cells)
    if not cells or not index.may_match(module):
        return MigratedNotebook(text, [], [], info, parsed=False)
    old_parts = split(module, cells)
    migrated = _migrate_module(module, old_parts, index, path, cells)
    parts = split(migrated.text, cells)
    starts = [start for start, _ in parts]
    findings = _placed(migrated.findings, [start for start, _ in old_parts], cells)
    changed = _new_sources(parts, cells)
    if not changed:
        return MigratedNotebook(text, findings, [], info, parsed=True)
    comments = _placed(migrated.comments, starts, cells)
    info.cells = [
        CellChange(cell.number, cell.source, changed[cell.index])
        for cell in cells
        if cell.index in changed
    ]
    try:
        new_text = replace_sources(text, data, changed)
    except SpliceError as exc:
        raise NotebookError(f"{exc}; the notebook was left unchanged") from None
    return MigratedNotebook(new_text, findings, comments, info, parsed=True)


def _migrate_module(
    module: str, parts: list[tuple[int, str]], index: RuleIndex, path: str, cells: list[CodeCell]
) -> MigratedSource:
    """The joined cells (`module`, split into `parts`) through the engine, with the added
    imports moved to the notebook's imports. black is not run: a notebook's cells are laid out
    by whoever wrote them, and black formats a notebook only with its jupyter extra."""
    try:
        migrated = migrate_source(module, index, f"{path} (its code cells, joined)")
    except cst.ParserSyntaxError as exc:
        number, line = place(exc.raw_line, [start for start, _ in parts], cells)
        reason = exc.message.splitlines()[0]
        message = f"cell {number}, line {line}: libcst cannot parse it ({reason}); skipped"
        raise NotebookError(message) from None
    before = [part + "\n" for _, part in parts]
    after = [part + "\n" for _, part in split(migrated.text, cells)]
    gathered = notebook_imports.gather(before, after)
    if gathered != after:
        text = rejoin(gathered, cells)
        comments = follow_lines(migrated.text, text, migrated.comments)
        migrated = MigratedSource(text, migrated.findings, comments)
    return migrated


def rewrite_notebook(
    path: Path, root: Path, rel: str, index: RuleIndex, write: bool
) -> tuple[FileResult, bool]:
    """Migrate one notebook file, as `checkout.rewrite_file` does a .py file: its result, and
    whether the engine parsed it."""
    result = FileResult(path=rel)
    try:
        source = read_source(path, root)
        migrated = migrate_notebook(source.text, index, rel)
    except OutputDoesNotParse as exc:  # (its message names the notebook)
        result.outcome = Failed(str(exc))
        return result, True
    except (SourceError, NotebookError) as exc:
        result.outcome = Failed(f"{rel}: {exc}")
        return result, False
    except Exception as exc:  # an engine bug must cost one notebook, not the run
        result.outcome = Failed(engine_failure(rel, exc, "notebook"))
        return result, True
    result.findings, result.notebook = migrated.findings, migrated.info
    if migrated.text != source.text:
        result.outcome = Changed(source.text, migrated.text, migrated.comments)
        if write:
            write_atomically(path, migrated.text, source.encoding)
    return result, migrated.parsed
