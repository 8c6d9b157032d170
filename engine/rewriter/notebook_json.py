"""A notebook's JSON text with some cells' sources replaced and every other byte kept.

Jupyter, JupyterLab, VS Code and Colab each write a notebook their own way (indent 1 or 2, keys
sorted or not, non-ASCII escaped or not, a final newline or not). Serializing the notebook again,
even with nbformat, would rewrite the whole file in one of those ways; instead each changed
cell's "source" value is found in the text and only that value is replaced, written as the old
one was (a list of lines at the same indentation, or one string), and the lines that did not
change keep their exact JSON text. The result is checked by reading it back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from json.decoder import scanstring

from pytpu.engine.rewriter.ipython import split_lines

_DECODER = json.JSONDecoder()
_SPACE = " \t\n\r"


class SpliceError(Exception):
    """The replaced text does not read back as the notebook with the new sources."""


def replace_sources(text: str, data: dict, sources: dict[int, str]) -> str:
    """`text` (the JSON of the notebook `data`) with the source of cell number `i` (0-based
    index into `data["cells"]`) replaced by `sources[i]`, for each `i`."""
    spans = _source_spans(text)
    ascii_only = text.isascii()
    expected = json.loads(text)
    for i in sorted(sources, reverse=True):  # from the end: earlier offsets stay valid
        start, end = spans[i]
        old = data["cells"][i]["source"]
        new = _source_value(old, sources[i])
        fragment = _render(text, start, end, new, ascii_only)
        text = text[:start] + fragment + text[end:]
        expected["cells"][i]["source"] = new
    if json.loads(text) != expected:
        raise SpliceError("the notebook's JSON does not read back as written")
    return text


def _source_value(old: str | list[str], source: str) -> str | list[str]:
    """The new source in the old one's shape: a list of lines (as Jupyter writes it) or a
    string."""
    return source if isinstance(old, str) else split_lines(source)


def _render(text: str, start: int, end: int, new: str | list[str], ascii_only: bool) -> str:
    """The JSON text of `new`, laid out as the old value at text[start:end] was."""
    if isinstance(new, str):
        return json.dumps(new, ensure_ascii=ascii_only)
    old = text[start:end]
    kept = {_DECODER.raw_decode(text, s)[0]: text[s:e] for s, e in _elements(text, start)}
    items = [kept.get(line) or json.dumps(line, ensure_ascii=ascii_only) for line in new]
    if not items:
        return "[]"
    if "\n" not in old and old != "[]":  # one line, as written without indentation
        return "[" + ", ".join(items) + "]"
    item_indent, close_indent = _list_indents(text, start, old)
    newline = "\r\n" if "\r\n" in text else "\n"  # (a notebook saved on Windows)
    body = ",".join(newline + item_indent + item for item in items)
    return "[" + body + newline + close_indent + "]"


def _list_indents(text: str, start: int, old: str) -> tuple[str, str]:
    """The indentation of a list's items and of its closing bracket, from the old list, else
    from its key's line and the file's indentation step."""
    if "\n" in old:
        first = old.split("\n", 1)[1]
        last = old.rsplit("\n", 1)[1]
        return first[: len(first) - len(first.lstrip(" \t"))], last[:-1]  # (before the "]")
    line_start = text.rfind("\n", 0, start) + 1
    line = text[line_start:start]
    key_indent = line[: len(line) - len(line.lstrip(" \t"))]
    return key_indent + _indent_step(text), key_indent


def _indent_step(text: str) -> str:
    """The file's indentation step: the indentation of the root object's first key."""
    after = text[text.find("{") + 1 :]
    line = after.split("\n", 2)[1] if after.startswith("\n") else ""
    return line[: len(line) - len(line.lstrip(" \t"))] or " "


def _source_spans(text: str) -> dict[int, tuple[int, int]]:
    """Where each cell's "source" value is in `text`, by the cell's index (the last member of a
    name counts, as json.loads keeps the last)."""
    root = _skip(text, 0)
    members = {key: (s, e) for key, s, e in _members(text, root)}
    spans = {}
    for i, (cell_start, _end) in enumerate(_elements(text, members["cells"][0])):
        cell = {key: (s, e) for key, s, e in _members(text, cell_start)}
        spans[i] = cell["source"]
    return spans


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _SPACE:
        i += 1
    return i


def _members(text: str, i: int) -> Iterator[tuple[str, int, int]]:
    """(name, start, end) of each member's value of the JSON object that opens at text[i]."""
    i = _skip(text, i + 1)
    while text[i] != "}":
        key, i = scanstring(text, i + 1)
        i = _skip(text, _skip(text, i) + 1)  # past the colon
        _value, end = _DECODER.raw_decode(text, i)
        yield key, i, end
        i = _skip(text, end)
        if text[i] == ",":
            i = _skip(text, i + 1)


def _elements(text: str, i: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each element of the JSON array that opens at text[i]."""
    i = _skip(text, i + 1)
    while text[i] != "]":
        _value, end = _DECODER.raw_decode(text, i)
        yield i, end
        i = _skip(text, end)
        if text[i] == ",":
            i = _skip(text, i + 1)
