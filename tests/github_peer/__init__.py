"""A real-ish GitHub for the bot's tests, offline on 127.0.0.1: real git over HTTP, a stateful
REST fake under /api/v3 whose every response is checked against GitHub's OpenAPI description,
injected faults and a request log.

    from tests.github_peer import GitHubPeer, github_peer_fixture

    github_peer = github_peer_fixture()  # a fixture named github_peer in this test module

    def test_x(github_peer): ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .faults import Fault
from .log import LogEntry
from .peer import GitHubPeer, PeerError
from .schemas import SchemaViolation
from .state import PeerState

__all__ = [
    "Fault",
    "GitHubPeer",
    "LogEntry",
    "PeerError",
    "PeerState",
    "SchemaViolation",
    "github_peer_fixture",
]


def github_peer_fixture(name: str = "github_peer", **options: Any) -> Callable[..., Any]:
    """A function-scoped pytest fixture that yields a started GitHubPeer under tmp_path.

    At teardown the peer stops; in strict mode (the default) it then raises SchemaViolation if
    any response it sent broke GitHub's schema, or PeerError for a request it does not model.
    Assign the result to a module-level name; `name` is the fixture's name.
    """

    @pytest.fixture(name=name)
    def fixture(tmp_path: Path) -> Iterator[GitHubPeer]:
        with GitHubPeer(tmp_path / "github-peer", **options) as peer:
            yield peer

    return fixture
