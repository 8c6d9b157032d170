"""A real git smart-HTTP server: `git http-backend` (CGI) behind WSGI, with token auth.

Bare repositories at ROOT/<owner>/<repo>.git are served at /<owner>/<repo>.git. Every request
needs HTTP Basic auth whose password is the token (any user name, as GitHub's
`x-access-token:<token>`); otherwise the answer is 401 with WWW-Authenticate, so git reports
"Authentication failed". The user name becomes REMOTE_USER, which is what turns on pushes in
http-backend.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .wsgi import LoopbackServer, read_body

_REPO_PATH = re.compile(r"^/[^/]+/[^/]+\.git(/.*)?$")


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """(user, password) from an `Authorization: Basic ...` header, or None."""
    if not header or not header[:6].lower() == "basic ":
        return None
    try:
        user, _, password = base64.b64decode(header[6:].strip()).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return user, password


def _cgi_response(output: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
    """Split CGI output into a status line, headers and the body."""
    ends = [
        (index, len(separator))
        for separator in (b"\r\n\r\n", b"\n\n")
        if (index := output.find(separator)) >= 0
    ]
    if not ends:
        return "502 Bad Gateway", [("Content-Type", "text/plain")], b"no CGI headers\n"
    end, separator_length = min(ends)
    head = output[:end].decode("latin-1")
    body = output[end + separator_length :]
    status = "200 OK"
    headers = []
    for line in head.splitlines():
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = value.strip()
        elif name:
            headers.append((name.strip(), value.strip()))
    return status, headers, body


class GitHttpApp:
    """WSGI app running `git http-backend` for each request, after checking the token."""

    def __init__(self, root: Path, token_ok: Callable[[str], bool]) -> None:
        self.root = Path(root)
        self._token_ok = token_ok

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if not _REPO_PATH.match(path) or ".." in path.split("/"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"Repository not found.\n"]
        credentials = basic_credentials(environ.get("HTTP_AUTHORIZATION"))
        if credentials is None or not self._token_ok(credentials[1]):
            start_response(
                "401 Unauthorized",
                [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Basic realm="GitHub"')],
            )
            return [b"Invalid username or token.\n"]
        body = read_body(environ)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            # The machine's or user's git config must not change what the server does.
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "HOME": str(self.root),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": environ.get("SERVER_PROTOCOL", "HTTP/1.1"),
            "REQUEST_METHOD": environ["REQUEST_METHOD"],
            "PATH_INFO": path,
            "QUERY_STRING": environ.get("QUERY_STRING", ""),
            "CONTENT_TYPE": environ.get("CONTENT_TYPE", ""),
            # The body was de-chunked above, so its length is known now.
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": credentials[0] or "x-access-token",
            "REMOTE_ADDR": environ.get("REMOTE_ADDR", "127.0.0.1"),
        }
        for name in ("HTTP_CONTENT_ENCODING", "HTTP_GIT_PROTOCOL"):
            if name in environ:
                env[name] = environ[name]
        result = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=300
        )
        if result.returncode != 0 and not result.stdout:
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
            return [result.stderr or b"git http-backend failed\n"]
        status, headers, payload = _cgi_response(result.stdout)
        start_response(status, headers)
        return [payload]


class GitServer(LoopbackServer):
    """The git server alone on a free loopback port (the peer serves the REST API beside it)."""

    def __init__(self, root: Path, token: str) -> None:
        super().__init__(GitHttpApp(root, lambda candidate: candidate == token))
