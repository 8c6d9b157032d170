"""The peer's request log, with credentials redacted, and a search for a leaked token.

Tests assert on it what the bot did (method, path, status, which OpenAPI operation and schema
answered) and that the token appears nowhere the bot writes: paths, queries, request bodies,
comments, pull requests, statuses.
"""

from __future__ import annotations

import base64
import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LogEntry:
    method: str
    path: str  # as requested, /api/v3/... for the REST API
    query: str
    status: int
    authorization: str | None  # the scheme only, e.g. "token <redacted>"
    operation: str | None = None  # OpenAPI operation id; "git" for the git server
    schema: str | None = None  # the schema the response body was validated against
    fault: bool = False  # the answer was an injected fault
    body: str | None = None  # a REST request's body (text), for the leak check
    request_id: str = ""
    chunked: bool = False  # the request body came with Transfer-Encoding: chunked


def redact(header: str | None) -> str | None:
    """`token abc` -> `token <redacted>`: which scheme was used, never the secret."""
    if not header:
        return None
    scheme, _, secret = header.strip().partition(" ")
    return f"{scheme} <redacted>" if secret else "<redacted>"


def token_forms(token: str) -> list[str]:
    """The token as it could leak: itself, and inside a Basic header's base64."""
    forms = [token]
    for user in ("x-access-token", "git", ""):
        forms.append(base64.b64encode(f"{user}:{token}".encode()).decode())
    return forms


class RequestLog:
    def __init__(self) -> None:
        self._entries: list[LogEntry] = []
        self._lock = threading.Lock()

    def add(self, entry: LogEntry) -> None:
        with self._lock:
            self._entries.append(entry)

    def entries(self) -> list[LogEntry]:
        with self._lock:
            return list(self._entries)


def leaks(token: str, texts: list[tuple[str, Any]]) -> list[str]:
    """Where (by label) any form of the token shows up in the given texts."""
    forms = token_forms(token)
    return [
        label
        for label, text in texts
        if text is not None and any(form in str(text) for form in forms)
    ]
