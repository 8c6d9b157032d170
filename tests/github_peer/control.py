"""The peer's own control API under /_peer/ (not GitHub's), for tests that drive it over HTTP.

    POST /_peer/repos        {"owner", "name", "source", "default_branch"?, "private"?}
    POST /_peer/issues       {"owner", "name", "title", "body", "comment_body", "commenter"}
    PUT  /_peer/permissions  {"owner", "name", "user", "permission"}
    POST /_peer/faults       {"method", "path", "status", "count"?, "retry_after"?, "permission"?}
    GET  /_peer/requests     the request log
    GET  /_peer/state        issues, pulls, comments, reactions, statuses, dispatches

It needs no token and is neither logged nor subject to faults.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from .wsgi import read_body

if TYPE_CHECKING:
    from .peer import GitHubPeer

PREFIX = "/_peer"


def _state_dump(state: Any) -> dict[str, Any]:
    with state.lock:
        return {
            name: [dataclasses.asdict(item) for item in getattr(state, name)]
            for name in ("issues", "pulls", "comments", "reactions", "statuses", "dispatches")
        }


class ControlApp:
    def __init__(self, peer: GitHubPeer) -> None:
        self.peer = peer

    def _dispatch(self, method: str, path: str, data: dict[str, Any]) -> tuple[int, Any]:
        peer = self.peer
        if (method, path) == ("POST", "/repos"):
            options = {k: data[k] for k in ("default_branch", "private") if k in data}
            bare = peer.add_repo(data["owner"], data["name"], data["source"], **options)
            return 201, {"bare": str(bare)}
        if (method, path) == ("POST", "/issues"):
            number, comment_id = peer.add_issue(
                data["owner"],
                data["name"],
                data["title"],
                data.get("body", ""),
                data["comment_body"],
                data["commenter"],
            )
            return 201, {"number": number, "comment_id": comment_id}
        if (method, path) == ("PUT", "/permissions"):
            peer.set_permission(data["owner"], data["name"], data["user"], data["permission"])
            return 204, None
        if (method, path) == ("POST", "/faults"):
            peer.fail_next(
                data["method"],
                data["path"],
                data["status"],
                count=data.get("count", 1),
                retry_after=data.get("retry_after"),
                permission=data.get("permission"),
            )
            return 201, {}
        if (method, path) == ("GET", "/requests"):
            return 200, [dataclasses.asdict(entry) for entry in peer.requests]
        if (method, path) == ("GET", "/state"):
            return 200, _state_dump(peer.state)
        return 404, {"error": f"no control endpoint {method} {PREFIX}{path}"}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        path = environ.get("PATH_INFO", "")[len(PREFIX) :]
        try:
            raw = read_body(environ)
            status, body = self._dispatch(
                environ["REQUEST_METHOD"].upper(), path, json.loads(raw) if raw else {}
            )
        except (KeyError, ValueError, TypeError, FileExistsError) as exc:
            status, body = 400, {"error": f"{type(exc).__name__}: {exc}"}
        payload = b"" if body is None else json.dumps(body).encode()
        headers = [("Content-Length", str(len(payload)))]
        if body is not None:
            headers.append(("Content-Type", "application/json"))
        start_response(f"{status} {HTTPStatus(status).phrase}", headers)
        return [payload]
