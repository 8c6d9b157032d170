"""`pytpu serve`'s web application: deliveries in, jobs on the durable queue, and health.

Each delivery is checked before anything else: its X-Hub-Signature-256 must be the HMAC-SHA256 of
the raw body with the shared secret (compared in constant time), and its X-GitHub-Delivery ID must
be new, across restarts too (`bot/jobqueue.py` keeps every ID it accepted). The events accepted
are those of the bot's table (`bot/events.py`, given by `pytpu serve`): their job is on disk
before the 202 is sent, and the workers (`bot/service.py`) are woken. Any other event, and
GitHub's ping, is answered and remembered, never queued. `GET /healthz` reports the queue.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Callable, Collection, Iterable
from typing import Any

from pytpu.bot.jobqueue import JobStore

log = logging.getLogger("pytpu.bot.webhook")
PING = "ping"  # GitHub's test delivery when a hook is made: answered, never queued
MAX_BODY = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB
HEALTH_PATH = "/healthz"

Status = tuple[str, dict[str, Any]]


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def valid_signature(secret: str, body: bytes, header: str | None) -> bool:
    return bool(header) and hmac.compare_digest(signature(secret, body), header)


class WebhookApp:
    """A WSGI application: verify, refuse replays, queue durably, wake the workers."""

    def __init__(
        self,
        secret: str,
        store: JobStore,
        events: Collection[str],
        wake: Callable[[], None] = lambda: None,
        health: Callable[[], dict[str, Any]] | None = None,
    ):
        if not secret:
            raise ValueError("a webhook secret is required: unsigned deliveries are refused")
        self.secret = secret
        self.store = store
        self.events = frozenset(events)  # the events the workers handle
        self.wake = wake
        self.health = health or (lambda: {"status": "ok", "jobs": store.counts()})

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == HEALTH_PATH and environ.get("REQUEST_METHOD") == "GET":
            report = self.health()
            status = "200 OK" if report.get("status") == "ok" else "503 Service Unavailable"
            answer: dict[str, Any] = report
        else:
            status, answer = self.receive(environ)
        body = json.dumps(answer).encode()
        start_response(
            status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        return [body]

    def receive(self, environ: dict[str, Any]) -> Status:
        if environ.get("REQUEST_METHOD") != "POST":
            return _answer("405 Method Not Allowed", "POST webhook deliveries here")
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            return _answer("400 Bad Request", "missing or oversized body")
        body = environ["wsgi.input"].read(length)
        if not valid_signature(self.secret, body, environ.get("HTTP_X_HUB_SIGNATURE_256")):
            log.warning("refused a delivery", extra={"reason": "bad signature"})
            return _answer("401 Unauthorized", "bad or missing X-Hub-Signature-256")
        delivery = environ.get("HTTP_X_GITHUB_DELIVERY", "")
        event = environ.get("HTTP_X_GITHUB_EVENT", "")
        if not delivery:
            return _answer("400 Bad Request", "missing X-GitHub-Delivery")
        try:
            payload = json.loads(body)
            repository = payload["repository"]["full_name"] if event in self.events else None
        except (ValueError, KeyError, TypeError):
            return _answer("400 Bad Request", f"the body is not a {event or 'GitHub'} event")
        queued = repository is not None
        if not self.store.accept(delivery, event, repository, payload if queued else None):
            log.info("refused a replay", extra={"delivery": delivery, "event": event})
            return _answer("200 OK", f"delivery {delivery} was already received: ignored")
        if not queued:
            why = "answered" if event == PING else "not handled: ignored"
            return _answer("202 Accepted", f"event {event!r} {why}")
        log.info("queued", extra={"delivery": delivery, "event": event, "repository": repository})
        self.wake()
        return _answer("202 Accepted", f"{event} queued")


def _answer(status: str, message: str) -> Status:
    return status, {"message": message}
