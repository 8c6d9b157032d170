"""`pytpu serve`: the webhook endpoint for teams that run PyTPU as a GitHub App.

Each delivery is checked before anything else: its X-Hub-Signature-256 must be the HMAC-SHA256 of
the raw body with the shared secret (compared in constant time), and its X-GitHub-Delivery ID must
be new (GitHub signs no timestamp, so the ID is the only guard against a replayed delivery).
The events accepted are those of the bot's table (`bot/events.py`, given by `pytpu serve`);
they are answered 202 at once and handled one at a time in a worker thread.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from typing import Any

log = logging.getLogger("pytpu.bot.webhook")
PING = "ping"  # GitHub's test delivery when a hook is made: answered, never queued
# Delivery IDs remembered; GitHub redelivers within days, far fewer than this many deliveries.
REMEMBERED = 10_000
MAX_BODY = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def valid_signature(secret: str, body: bytes, header: str | None) -> bool:
    return bool(header) and hmac.compare_digest(signature(secret, body), header)


class Deliveries:
    """The delivery IDs already accepted, oldest forgotten first."""

    def __init__(self, size: int = REMEMBERED):
        self.size = size
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.lock = threading.Lock()

    def first_time(self, delivery: str) -> bool:
        with self.lock:
            if delivery in self.seen:
                return False
            self.seen[delivery] = None
            if len(self.seen) > self.size:
                self.seen.popitem(last=False)
            return True


Handler = Callable[[str, dict[str, Any]], Any]


class WebhookApp:
    """A WSGI application: verify, de-duplicate, queue."""

    def __init__(
        self, secret: str, handler: Handler, events: Collection[str], start_worker: bool = True
    ):
        if not secret:
            raise ValueError("a webhook secret is required: unsigned deliveries are refused")
        self.secret = secret
        self.handler = handler
        self.events = frozenset(events)  # the events `handler` handles
        self.deliveries = Deliveries()
        self.jobs: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        if start_worker:
            threading.Thread(target=self._work, daemon=True, name="pytpu-webhook").start()

    def _work(self) -> None:
        while True:
            event, payload = self.jobs.get()
            try:
                self.handler(event, payload)
            except Exception:  # one failed job must not stop the server
                log.exception("handling a %s event failed", event)
            finally:
                self.jobs.task_done()

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        status, message = self.receive(environ)
        body = json.dumps({"message": message}).encode()
        start_response(status, [("Content-Type", "application/json")])
        return [body]

    def receive(self, environ: dict[str, Any]) -> tuple[str, str]:
        if environ.get("REQUEST_METHOD") != "POST":
            return "405 Method Not Allowed", "POST webhook deliveries here"
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            return "400 Bad Request", "missing or oversized body"
        body = environ["wsgi.input"].read(length)
        header = environ.get("HTTP_X_HUB_SIGNATURE_256")
        if not valid_signature(self.secret, body, header):
            return "401 Unauthorized", "bad or missing X-Hub-Signature-256"
        delivery = environ.get("HTTP_X_GITHUB_DELIVERY", "")
        event = environ.get("HTTP_X_GITHUB_EVENT", "")
        if not delivery:
            return "400 Bad Request", "missing X-GitHub-Delivery"
        if not self.deliveries.first_time(delivery):
            return "200 OK", f"delivery {delivery} was already received: ignored"
        if event not in self.events and event != PING:
            return "202 Accepted", f"event {event!r} is not handled: ignored"
        try:
            payload = json.loads(body)
        except ValueError:
            return "400 Bad Request", "the body is not JSON"
        if event != PING:
            self.jobs.put((event, payload))
        return "202 Accepted", f"{event} queued"
