"""GitHub's published OpenAPI description, as PyPI's githubkit-schemas ships it, for the peer.

githubkit generates one client method per OpenAPI operation. Its source names the operation id,
the method and path template, the request body model and the response models, so the route table
here is read from that source instead of being typed by hand (a hand-typed table could drift the
way a hand-written fake does). The models are pydantic classes generated from the same document.

`check_response` validates a body strictly (no type coercion) and also rejects fields that the
schema does not have, so the fake can neither leave out nor invent a field.
"""

from __future__ import annotations

import ast
import datetime
import functools
import importlib
import json
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic

# The version PyGithub pins in its X-GitHub-Api-Version header.
API_VERSION = "2022-11-28"
_PACKAGE = "githubkit_schemas.v" + API_VERSION.replace("-", "_")

_DOCSTRING = re.compile(
    r'"""(?P<id>[a-z0-9-]+/[a-z0-9-]+)\n\n\s+(?P<method>GET|POST|PUT|PATCH|DELETE|HEAD) '
    r"(?P<path>/\S*)\n"
)
_NEXT_METHOD = re.compile(r"\n    (?:async def|def|@overload)\b")


class SchemaViolation(AssertionError):
    """A body does not match GitHub's OpenAPI description of the operation."""


@dataclass(frozen=True)
class Operation:
    """One OpenAPI operation: its id, route and the names of its schemas (Python expressions)."""

    id: str
    method: str
    path: str
    response: str | None = None
    request: str | None = None
    errors: dict[str, str] = field(default_factory=dict)

    def schema_for(self, status: int) -> str | None:
        """The schema of a response with this status; None means the body must be empty."""
        if 200 <= status < 300:
            return self.response
        # Statuses the description does not list (401, 5xx) carry GitHub's generic error body.
        return self.errors.get(str(status), "BasicError")


def _expression_after(text: str, marker: str) -> str | None:
    """The Python expression that follows `marker`, up to a comma or bracket at depth zero."""
    start = text.find(marker)
    if start < 0:
        return None
    start += len(marker)
    depth = 0
    for index in range(start, len(text)):
        char = text[index]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                return " ".join(text[start:index].split())
            depth -= 1
        elif char == "," and depth == 0:
            return " ".join(text[start:index].split())
    return None


def _operations_in(source: str) -> dict[tuple[str, str], Operation]:
    found: dict[tuple[str, str], Operation] = {}
    for match in _DOCSTRING.finditer(source):
        after = _NEXT_METHOD.search(source, match.end())
        body = source[match.end() : after.start() if after else len(source)]
        errors = ast.parse(_expression_after(body, "error_models=") or "{}", mode="eval").body
        assert isinstance(errors, ast.Dict)
        operation = Operation(
            id=match["id"],
            method=match["method"],
            path=match["path"],
            response=_expression_after(body, "response_model="),
            request=_expression_after(body, "type_validate_python("),
            errors={
                ast.literal_eval(key): ast.unparse(value)
                for key, value in zip(errors.keys, errors.values, strict=True)
                if key is not None
            },
        )
        # The async twin repeats the docstring; the first one wins.
        found.setdefault((operation.method, operation.path), operation)
    return found


@functools.cache
def operations() -> dict[tuple[str, str], Operation]:
    """Every operation of the REST API, by (method, path template)."""
    rest = importlib.import_module(_PACKAGE + ".rest")
    table: dict[tuple[str, str], Operation] = {}
    for module in sorted(Path(rest.__file__).parent.glob("*.py")):
        table.update(_operations_in(module.read_text(encoding="utf-8")))
    return table


def operation(method: str, path: str) -> Operation:
    """The operation of GitHub's description at this method and path template."""
    try:
        return operations()[(method.upper(), path)]
    except KeyError:
        raise KeyError(f"GitHub's OpenAPI description has no operation {method} {path}") from None


def operation_by_id(operation_id: str) -> Operation:
    for candidate in operations().values():
        if candidate.id == operation_id:
            return candidate
    raise KeyError(f"GitHub's OpenAPI description has no operation {operation_id!r}")


def _resolve(node: ast.expr) -> Any:
    """A type from an annotation expression in githubkit's generated code."""
    if isinstance(node, ast.Constant) and node.value is None:
        return type(None)
    if isinstance(node, ast.Name):
        if node.id == "Any":
            return Any
        if node.id in {"str", "int", "bool", "float"}:
            return {"str": str, "int": int, "bool": bool, "float": float}[node.id]
        return getattr(importlib.import_module(_PACKAGE + ".models"), node.id)
    if isinstance(node, ast.Attribute) and ast.unparse(node) == "_dt.date":
        return datetime.date
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if node.value.id == "Annotated":
            # Length limits on lists (Field(max_length=...)) are not the fake's concern.
            return _resolve(items[0])
        args = tuple(_resolve(item) for item in items)
        if node.value.id in {"list", "List"}:
            return list[args[0]]
        if node.value.id in {"dict", "Dict"}:
            return dict[args[0], args[1]]
        if node.value.id == "Union":
            return functools.reduce(operator.or_, args)  # A | B | ...
    raise ValueError(f"unexpected schema expression: {ast.unparse(node)}")


@functools.cache
def adapter(expression: str) -> pydantic.TypeAdapter:
    return pydantic.TypeAdapter(_resolve(ast.parse(expression, mode="eval").body))


def _unknown_fields(value: Any, raw: Any, where: str) -> list[str]:
    """Paths of keys in `raw` that the validated model has no field for."""
    found: list[str] = []
    if isinstance(value, pydantic.BaseModel) and isinstance(raw, dict):
        fields = {(info.alias or name): name for name, info in type(value).model_fields.items()}
        extra_allowed = type(value).model_config.get("extra") == "allow"
        for key, item in raw.items():
            path = f"{where}.{key}" if where else key
            if key not in fields:
                if not extra_allowed:
                    found.append(path)
                continue
            found += _unknown_fields(getattr(value, fields[key]), item, path)
    elif isinstance(value, list) and isinstance(raw, list):
        for index, (item, raw_item) in enumerate(zip(value, raw, strict=False)):
            found += _unknown_fields(item, raw_item, f"{where}[{index}]")
    elif isinstance(value, dict) and isinstance(raw, dict):
        for key, item in value.items():
            found += _unknown_fields(item, raw.get(key), f"{where}.{key}")
    return found


def _problems(expression: str, body: Any) -> list[str]:
    try:
        # JSON mode with strict=True: no "1" for 1, yet RFC 3339 strings are valid datetimes.
        value = adapter(expression).validate_json(json.dumps(body), strict=True)
    except pydantic.ValidationError as exc:
        return [
            f"{'.'.join(str(part) for part in error['loc']) or '(body)'}: {error['msg']}"
            for error in exc.errors()
        ]
    return [f"{path}: not in the schema" for path in _unknown_fields(value, body, "")]


def check_response(op: Operation, status: int, body: Any) -> str:
    """Validate a response body; return the schema's name, raise SchemaViolation naming fields."""
    schema = op.schema_for(status)
    if schema is None:
        if body is not None:
            raise SchemaViolation(f"{op.id} ({op.method} {op.path}) {status}: body must be empty")
        return "(empty)"
    problems = _problems(schema, body)
    if problems:
        raise SchemaViolation(
            f"{op.id} ({op.method} {op.path}) {status}: the body is not a valid {schema}: "
            + "; ".join(problems[:20])
            + (f"; and {len(problems) - 20} more" if len(problems) > 20 else "")
        )
    return schema


def request_problems(op: Operation, body: Any) -> list[str]:
    """Why a request body would be refused by the operation's request schema (lax, as GitHub)."""
    if op.request is None:
        return []
    try:
        adapter(op.request).validate_python(body)
    except pydantic.ValidationError as exc:
        return [
            f"{'.'.join(str(part) for part in error['loc']) or '(body)'}: {error['msg']}"
            for error in exc.errors()
        ]
    return []
