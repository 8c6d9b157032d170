"""Routing for the REST fake: handlers registered under GitHub's OpenAPI path templates.

A route's template is the key of its operation in GitHub's description (schemas.operation), so
each handler is tied to the operation, and the schemas, that its answers are checked against.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import bodies, schemas

# Parameters that may hold slashes (branch names such as pytpu/migrate).
_GREEDY = {"branch", "ref"}
_NUMERIC = {"issue_number", "pull_number", "comment_id"}


class ApiError(Exception):
    """An error answer, with GitHub's error body."""

    def __init__(self, status: int, message: str, errors: list | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = bodies.error(status, message, errors=errors)


def validation_failed(*errors: dict[str, Any]) -> ApiError:
    return ApiError(422, "Validation Failed", errors=list(errors))


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Call:
    """One authenticated API request, as the handlers see it."""

    method: str
    path: str  # without /api/v3
    query: dict[str, str]
    json: Any
    login: str


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    handler: str
    pattern: re.Pattern[str]
    # A legacy path GitHub still serves but no longer describes: the operation it aliases.
    alias_of: str | None = None

    @property
    def operation(self) -> schemas.Operation:
        return schemas.operation(self.method, self.alias_of or self.template)


_ROUTES: list[Route] = []


def _compile(template: str) -> re.Pattern[str]:
    def group(param: re.Match[str]) -> str:
        name = param[1]
        body = ".+" if name in _GREEDY else r"\d+" if name in _NUMERIC else "[^/]+"
        return f"(?P<{name}>{body})"

    return re.compile("^" + re.sub(r"\\\{(\w+)\\\}", group, re.escape(template)) + "$")


def route(method: str, template: str, alias_of: str | None = None) -> Callable:
    def register(func: Callable) -> Callable:
        _ROUTES.append(Route(method, template, func.__name__, _compile(template), alias_of))
        # Routes with more fixed segments go first: /commits/{ref}/statuses before /commits/{ref}.
        _ROUTES.sort(key=lambda r: -len(re.sub(r"\{\w+\}", "", r.template)))
        return func

    return register


def routes() -> list[Route]:
    return list(_ROUTES)


def match(method: str, path: str) -> tuple[Route, dict[str, str]] | None:
    """The route for a request (path without /api/v3) and its parameters, or None."""
    for candidate in _ROUTES:
        if candidate.method == method:
            found = candidate.pattern.match(path)
            if found:
                return candidate, found.groupdict()
    return None
