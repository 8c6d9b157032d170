"""IPython's own syntax in a notebook cell, hidden from the engine and given back afterwards.

A code cell may hold lines that are not Python: magics (`%matplotlib inline`, `%env X=1`),
shell lines (`!pip install ...`, `files = !ls`), help (`?obj`, `obj??`) and, on its first line,
a cell magic (`%%time`, `%%bash`). The engine leaves them exactly as they are: each such line
that starts a statement is replaced by a placeholder statement at the same indentation (so the
cell keeps its line numbers), the cell is migrated, and the placeholders are replaced by the
original lines again. A cell magic whose body is not Python (`%%bash`, `%%writefile`) leaves the
whole cell alone.

Which lines are IPython's is decided as IPython decides it, per line: by how the line starts,
and only where a statement starts (a `%` that continues an expression in brackets, or a `!` in a
multi-line string, is Python's).

It lives in the test runtime (standard library only) because a generated suite loads a
notebook's definitions with it (`support.Suite.load_notebook`), where PyTPU's engine is not
installed; the rewriter and test generation's discovery use it as `pytpu.engine.rewriter.ipython`.
"""

from __future__ import annotations

import ast
import io
import tokenize
import warnings
from dataclasses import dataclass, field

PLACEHOLDER = "__pytpu_magic_{}__"
# Cell magics whose body IPython runs as Python code; any other one (%%bash, %%writefile,
# %%html, %%cython ...) makes the cell something else.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})


class NotPython(Exception):
    """The cell is not Python even with IPython's lines hidden; the message says why."""


@dataclass
class MaskedCell:
    """A cell's source with IPython's lines replaced by placeholders (line for line)."""

    text: str
    lines: dict[str, str] = field(default_factory=dict)  # placeholder -> the original line
    # placeholders of the lines that continue an IPython line (after a backslash, as in
    # `!apt-get install \`): given back as they were, their indentation is the command's own
    continued: set[str] = field(default_factory=set)

    def restore(self, text: str) -> str:
        """`text` (this cell, migrated) with each placeholder line given back its original line,
        at the placeholder's indentation. Raises ValueError if a placeholder is missing or
        repeated (the migrated cell is then not this cell)."""
        found = dict.fromkeys(self.lines, 0)
        out = []
        for line in split_lines(text):
            body = line.strip()
            if body in found:
                found[body] += 1
                indent = line[: len(line) - len(line.lstrip())]
                ending = line[len(line.rstrip("\r\n")) :]
                original = self.lines[body]
                line = (original if body in self.continued else indent + original.lstrip()) + ending
            out.append(line)
        if any(n != 1 for n in found.values()):
            raise ValueError("an IPython line (magic or shell command) moved")
        return "".join(out)


def split_lines(text: str) -> list[str]:
    """`text`'s lines with their endings, split at "\\n" only (as Jupyter stores a cell's lines;
    `str.splitlines` would also split at form feeds and other separators)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def cell_magic(source: str) -> str | None:
    """The name of the cell's cell magic (`%%time` -> `time`), if it has one."""
    first = next((line for line in source.splitlines() if line.strip()), "")
    if not first.startswith("%%"):
        return None
    words = first[2:].split()
    return words[0] if words else ""


def mask(source: str, numbers: list[int]) -> MaskedCell:
    """The cell with its IPython lines replaced by placeholders; `numbers` is the counter of the
    placeholders (shared by the cells of a notebook, so that every placeholder is unique).
    Raises NotPython when the cell is not Python, with or without its IPython lines."""
    magic = cell_magic(source)
    if magic is not None and magic not in PYTHON_CELL_MAGICS:
        raise NotPython(f"a %%{magic} cell")
    if magic is None and parses(source):
        return MaskedCell(source)
    masked = MaskedCell("")
    out: list[str] = []
    indent = None  # that of the IPython line the next line continues, if it does
    for line in split_lines(source):
        body = line.rstrip("\r\n")
        first_magic = magic is not None and line.startswith("%%") and not masked.lines
        if indent is not None:
            token = _placeholder(masked, body, numbers)
            masked.continued.add(token)
            line = indent + token + line[len(body) :]
        elif first_magic or (is_ipython_line(line) and not _continues("".join(out))):
            token = _placeholder(masked, body, numbers)
            indent = body[: len(body) - len(body.lstrip())]
            line = indent + token + line[len(body) :]
        if indent is not None and not body.endswith("\\"):
            indent = None
        out.append(line)
    masked.text = "".join(out)
    error = syntax_error(masked.text)
    if error is not None:
        raise NotPython(error)
    return masked


def _placeholder(masked: MaskedCell, line: str, numbers: list[int]) -> str:
    """A new placeholder for `line` (without its line ending)."""
    token = PLACEHOLDER.format(len(numbers))
    numbers.append(len(numbers))
    masked.lines[token] = line
    return token


def is_ipython_line(line: str) -> bool:
    """A line that, where a statement starts, IPython runs as a magic, a shell command or a
    help request: none of these forms is a Python statement."""
    text = line.strip()
    if text.startswith(("%", "!", "?")):
        return True
    targets, equals, value = text.partition("=")
    # `files = !ls`, `out = %timeit -o f()` (not `a != b` or `a == b`: their targets are no names)
    if equals and value.lstrip().startswith(("!", "%")) and not value.startswith("="):
        if all(_is_dotted_name(t) for t in targets.split(",")):
            return True
    # `torch.cuda?`, `model.forward??`
    return text.endswith("?") and _is_dotted_name(text.rstrip("?"))


def _is_dotted_name(text: str) -> bool:
    parts = text.strip().split(".")
    return all(part.isidentifier() for part in parts)


def _continues(prefix: str) -> bool:
    """Whether a line after `prefix` continues its last statement (open brackets, a string or a
    backslash): tokenizing `prefix` then ends early."""
    try:
        for _token in tokenize.generate_tokens(io.StringIO(prefix).readline):
            pass
    except tokenize.TokenError:
        return True
    except SyntaxError:  # (a stray character, for newer tokenizers: not a continuation)
        return False
    return False


def syntax_error(text: str) -> str | None:
    """Why `text` is not Python, or None. Only the grammar counts: a notebook may `await` at
    its top level, which the compiler proper would refuse."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes and the like are the user's own
            compile(text, "<cell>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError) as exc:  # (ValueError: null bytes, before Python 3.12)
        line = getattr(exc, "lineno", None)
        message = getattr(exc, "msg", None) or str(exc)
        return (
            f"not valid Python at line {line}: {message}"
            if line
            else f"not valid Python: {message}"
        )
    return None


def parses(text: str) -> bool:
    return syntax_error(text) is None
