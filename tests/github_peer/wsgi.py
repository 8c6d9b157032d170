"""A threaded stdlib WSGI server on 127.0.0.1, and request-body reading that wsgiref lacks."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Any]


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    # A client that hangs up mid-request must not keep the test process alive.
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """The peer keeps its own request log; stderr stays clean."""


class LoopbackServer:
    """Serve a WSGI app on 127.0.0.1 in a background thread; port 0 picks any free port."""

    def __init__(self, app: WsgiApp, port: int = 0) -> None:
        self._httpd = make_server(
            "127.0.0.1", port, app, server_class=_ThreadingServer, handler_class=_QuietHandler
        )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LoopbackServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"github-peer:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _read_chunked(stream: Any) -> bytes:
    """Decode a `Transfer-Encoding: chunked` body (git sends packs over http.postBuffer so)."""
    parts = []
    while True:
        size_line = stream.readline()
        if not size_line:
            raise ValueError("chunked body ended early")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            # Trailer fields, if any, end at an empty line.
            while stream.readline() not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(parts)
        parts.append(stream.read(size))
        stream.readline()  # the CRLF after each chunk


def read_body(environ: dict[str, Any]) -> bytes:
    """The request body, whether sized by Content-Length or chunked."""
    stream = environ["wsgi.input"]
    if "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
        return _read_chunked(stream)
    length = int(environ.get("CONTENT_LENGTH") or 0)
    return stream.read(length) if length > 0 else b""
