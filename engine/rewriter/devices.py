"""Which expressions name a CUDA device, and where in a program a string names a device.

Only strings in device positions are rewritten: `x.to('cuda')`, `device='cuda'`,
`device = 'cuda'`, `device.type == 'cuda'`; a `'cuda'` in a log message stays. The positions
themselves (keywords, callees, variable names) are KB data: `kb/device.yaml`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from pytpu.engine.rewriter.cst_nodes import NameGlobs, dotted_name

_CONST_RE = re.compile(r"^cuda(:\d+)?$")
_TEMPLATE_RE = re.compile(r"^cuda:\{[^{}]*\}$")


def _string_value(node: cst.CSTNode) -> str | None:
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def cuda_device_kind(node: cst.CSTNode) -> str | None:
    """'const' for 'cuda' / 'cuda:1', 'dynamic' for f'cuda:{rank}' and the like, else None."""
    value = _string_value(node)
    if value is not None:
        return "const" if _CONST_RE.match(value) else None
    if isinstance(node, cst.FormattedString):
        parts = node.parts
        if parts and isinstance(parts[0], cst.FormattedStringText):
            text = parts[0].value
            if len(parts) == 1:
                return "const" if _CONST_RE.match(text) else None
            if text == "cuda:":
                return "dynamic"
        return None
    if isinstance(node, cst.BinaryOperation):
        left = _string_value(node.left)
        if isinstance(node.operator, cst.Modulo) and left in ("cuda:%d", "cuda:%s", "cuda:%i"):
            return "dynamic"
        if isinstance(node.operator, cst.Add) and left == "cuda:":
            return "dynamic"
        return None
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        template = _string_value(node.func.value)
        if node.func.attr.value == "format" and template and _TEMPLATE_RE.match(template):
            return "dynamic"  # 'cuda:{}'.format(rank), 'cuda:{:d}'.format(rank)
    return None


def renamed_device(node: cst.CSTNode, kind: str) -> cst.CSTNode | None:
    """`node` naming the same device index on `kind` (`'cuda:1'` -> `'tpu:1'`, `f'cuda:{rank}'`
    -> `f'tpu:{rank}'`), or None when its text has no leading 'cuda' to rename."""

    def renamed(text_node: cst.CSTNode) -> cst.CSTNode | None:
        if isinstance(text_node, cst.SimpleString) and "cuda" in text_node.value:
            prefix = text_node.prefix + text_node.quote
            body = text_node.value[len(prefix) :]
            if body.startswith("cuda"):
                return text_node.with_changes(value=prefix + kind + body[len("cuda") :])
        return None

    if isinstance(node, cst.SimpleString):
        return renamed(node)
    if isinstance(node, cst.FormattedString) and node.parts:
        first = node.parts[0]
        if isinstance(first, cst.FormattedStringText) and first.value.startswith("cuda"):
            text = first.with_changes(value=kind + first.value[len("cuda") :])
            return node.with_changes(parts=[text, *node.parts[1:]])
        return None
    if isinstance(node, cst.BinaryOperation):
        left = renamed(node.left)
        return node.with_changes(left=left) if left is not None else None
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        template = renamed(node.func.value)
        if template is not None:
            return node.with_changes(func=node.func.with_changes(value=template))
    return None


def quote_like(node: cst.CSTNode, value: str) -> cst.SimpleString:
    """A string literal holding `value`, quoted the way `node` was."""
    quote = "'"
    if isinstance(node, cst.SimpleString):
        quote = node.quote if node.quote in ("'", '"') else "'"
    elif isinstance(node, cst.FormattedString):
        quote = node.start[-1] if node.start[-1] in "'\"" else "'"
    elif isinstance(node, cst.BinaryOperation) and isinstance(node.left, cst.SimpleString):
        quote = node.left.quote if node.left.quote in ("'", '"') else "'"
    elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        return quote_like(node.func.value, value)
    return cst.SimpleString(f"{quote}{value}{quote}")


@dataclass(frozen=True)
class DevicePositions:
    """The KB's device positions, ready for quick look-ups."""

    keywords: frozenset[str]
    first_argument_of: frozenset[str]
    first_argument_names: frozenset[str]  # their last components, for a quick first test
    first_argument_of_methods: frozenset[str]
    name_patterns: tuple[str, ...]
    compared_patterns: tuple[str, ...]
    host_keywords: frozenset[str]  # keywords that name where a checkpoint is loaded
    index_patterns: tuple[str, ...]  # integer variables that named a CUDA device (`rank`)

    @classmethod
    def from_kb(cls, data: dict[str, list[str]]) -> DevicePositions:
        callees = list(data.get("first_argument_of", []))
        functions = frozenset(c for c in callees if not c.startswith("$"))
        return cls(
            keywords=frozenset(data.get("keywords", [])),
            first_argument_of=functions,
            first_argument_names=frozenset(c.rsplit(".", 1)[-1] for c in functions),
            first_argument_of_methods=frozenset(
                c.split(".", 1)[1] for c in callees if c.startswith("$")
            ),
            name_patterns=tuple(data.get("names", [])),
            compared_patterns=tuple(data.get("compared_names", data.get("names", []))),
            host_keywords=frozenset(data.get("host_keywords", [])),
            index_patterns=tuple(data.get("index_names", [])),
        )

    def __post_init__(self) -> None:
        # One compiled expression per list: these are asked about for every assignment.
        object.__setattr__(self, "_names", NameGlobs(self.name_patterns))
        object.__setattr__(self, "_compared", NameGlobs(self.compared_patterns))
        object.__setattr__(self, "_indexes", NameGlobs(self.index_patterns))

    def is_device_name(self, name: str) -> bool:
        return name in self._names

    def is_index_name(self, name: str) -> bool:
        return name in self._indexes

    def is_device_valued(self, node: cst.CSTNode, compared: bool = False) -> bool:
        """An expression that holds a device: `device`, `self.device`, `x.device.type`, ...
        With `compared`, also the names compared with 'cuda' as device checks (`device_type`)."""
        names = self._compared if compared else self._names
        if isinstance(node, cst.Name):
            return node.value in names
        if isinstance(node, cst.Attribute):
            if node.attr.value in names:
                return True
            return node.attr.value == "type" and self.is_device_valued(node.value)
        if isinstance(node, cst.Call) and not node.args[1:] and node.args:
            # str(device) / str(x.device)
            return dotted_name(node.func) == "str" and self.is_device_valued(
                node.args[0].value, compared
            )
        return False


def device_subexpressions(node: cst.CSTNode) -> list[cst.CSTNode]:
    """`node` and, through conditionals and boolean operators, the values it may take."""
    out = [node]
    if isinstance(node, cst.IfExp):
        out += device_subexpressions(node.body) + device_subexpressions(node.orelse)
    elif isinstance(node, cst.BooleanOperation):
        out += device_subexpressions(node.left) + device_subexpressions(node.right)
    return out


@dataclass(frozen=True)
class RankGuards:
    """`if rank == 0:`, `if master_process:`, `if xm.is_master_ordinal():`: code that only some
    processes run. The names are KB data (`kb/general.yaml`)."""

    names: NameGlobs
    flags: NameGlobs
    calls: frozenset[str]

    @classmethod
    def from_kb(cls, data: dict[str, list[str]]) -> RankGuards:
        return cls(
            names=NameGlobs(data.get("names", [])),
            flags=NameGlobs(data.get("flags", [])),
            calls=frozenset(data.get("calls", [])),
        )

    @cached_property
    def _call_words(self) -> frozenset[str]:
        return frozenset(c.rsplit(".", 1)[-1] for c in self.calls)

    def _named(self, node: cst.CSTNode, globs: NameGlobs) -> bool:
        kind = type(node)
        if kind is cst.Attribute:
            return node.attr.value in globs
        return kind is cst.Name and node.value in globs

    def is_guard(self, nodes: Iterable[cst.CSTNode], resolver: object) -> bool:
        """Whether a test, given as its nodes (`walk(test)`), asks for the rank."""
        for node in nodes:
            kind = type(node)
            if kind is cst.Name or kind is cst.Attribute:
                if self._named(node, self.flags):
                    return True
            elif kind is cst.Comparison:
                operands = [node.left] + [c.comparator for c in node.comparisons]
                if any(self._named(o, self.names) for o in operands):
                    return True
                if any(type(o) is cst.Call and self._is_rank_call(o, resolver) for o in operands):
                    return True
            elif kind is cst.Call and self._is_rank_call(node, resolver):
                name = dotted_name(node.func) or ""
                if name.rsplit(".", 1)[-1].startswith("is_"):
                    return True
        return False

    def _is_rank_call(self, node: cst.Call, resolver: object) -> bool:
        name = dotted_name(node.func)
        if name is None or name.rsplit(".", 1)[-1] not in self._call_words:
            return False
        return bool(resolver.qualified_names(node.func) & self.calls)  # type: ignore[attr-defined]
