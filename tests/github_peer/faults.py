"""Injected failures: the next N requests matching a method and path get a chosen error.

5xx answers are GitHub's generic server errors. 403 and 429 are GitHub's secondary rate limit:
its message (which PyGithub's GithubRetry recognises), `X-RateLimit-Remaining: 0`, and
`Retry-After` when one is given. A 403 given a `permission` is instead what GitHub answers a token
that lacks it (a workflow without `statuses: write`, say): "Resource not accessible by
integration", with the permission in `X-Accepted-GitHub-Permissions`; it is not retried.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus

from . import bodies

SECONDARY_RATE_LIMIT = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "
    "If you reach out to GitHub Support for help, please include the request ID {request_id}."
)
RATE_LIMIT_DOC = (
    "https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api"
    "#about-secondary-rate-limits"
)
# GitHub's answer to an installation token (the job's GITHUB_TOKEN is one) without the permission.
NOT_ACCESSIBLE = "Resource not accessible by integration"
PERMISSIONS_DOC = (
    "https://docs.github.com/rest/using-the-rest-api/troubleshooting-the-rest-api"
    "#resource-not-accessible"
)


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int
    remaining: int
    retry_after: int | None = None
    # A 403 for a token without this permission, as GitHub's header names it: "statuses=write".
    permission: str | None = None

    def matches(self, method: str, path: str) -> bool:
        return self.method in ("*", method.upper()) and self.path.search(path) is not None


class Faults:
    """Rules, first added first used; each rule is spent after `count` matching requests."""

    def __init__(self) -> None:
        self._rules: list[Fault] = []
        self._lock = threading.Lock()

    def add(
        self,
        method: str,
        path_regex: str,
        status: int,
        count: int = 1,
        retry_after: int | None = None,
        permission: str | None = None,
    ) -> Fault:
        if not 400 <= status <= 599:
            raise ValueError(f"a fault is an error status, not {status}")
        if permission is not None and status != 403:
            raise ValueError(f"a missing permission is answered with 403, not {status}")
        fault = Fault(
            method.upper(), re.compile(path_regex), status, count, retry_after, permission
        )
        with self._lock:
            self._rules.append(fault)
        return fault

    def take(self, method: str, path: str) -> Fault | None:
        """The rule this request falls under, spending one of its uses; None if none does."""
        with self._lock:
            for fault in self._rules:
                if fault.remaining > 0 and fault.matches(method, path):
                    fault.remaining -= 1
                    return fault
        return None

    def pending(self) -> list[Fault]:
        with self._lock:
            return [fault for fault in self._rules if fault.remaining > 0]

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()


def is_rate_limit(fault: Fault) -> bool:
    return fault.status in (403, 429) and fault.permission is None


def fault_body(fault: Fault, request_id: str) -> dict:
    if fault.permission is not None:
        return bodies.error(fault.status, NOT_ACCESSIBLE, doc=PERMISSIONS_DOC)
    if is_rate_limit(fault):
        message = SECONDARY_RATE_LIMIT.format(request_id=request_id)
        return bodies.error(fault.status, message, doc=RATE_LIMIT_DOC)
    return bodies.error(fault.status, HTTPStatus(fault.status).phrase)


def fault_headers(fault: Fault) -> list[tuple[str, str]]:
    headers = []
    if fault.permission is not None:
        headers.append(("X-Accepted-GitHub-Permissions", fault.permission))
    if fault.retry_after is not None:
        headers.append(("Retry-After", str(fault.retry_after)))
    if is_rate_limit(fault):
        reset = int(time.time()) + (fault.retry_after or 60)
        headers += [
            ("X-RateLimit-Limit", str(bodies.RATE_LIMIT)),
            ("X-RateLimit-Remaining", "0"),
            ("X-RateLimit-Used", str(bodies.RATE_LIMIT)),
            ("X-RateLimit-Reset", str(reset)),
            ("X-RateLimit-Resource", "core"),
        ]
    return headers
