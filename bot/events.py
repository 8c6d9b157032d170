"""The bot's one table of events: a GitHub event's name -> the function that handles it.

Each handler registers itself where it is defined, as bedevere's routers do:

    @EVENTS.on("push")
    def on_push(context: RunContext, repo: Repository) -> EventResult: ...

`pytpu action` (the event of a GitHub Actions job) and `pytpu serve` (a GitHub App's webhook
deliveries) both dispatch through it (`handle.handle`), and `pytpu serve` accepts exactly the
events it names, less those registered with `webhook=False`. The table is complete once the
modules that define handlers are imported (`bot/handle.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from github.Repository import Repository

    from pytpu.bot.context import RunContext
    from pytpu.bot.followups import Failure


@dataclass
class EventResult:
    """What handling one event did: the Action's outputs, the notes, and the exit code."""

    ran: bool = False  # the main job ran
    exit_code: int = 0
    pr_number: int | None = None
    pr_url: str | None = None
    parity: str | None = None  # `18/18`
    speedup: str | None = None  # `1.42`
    notes: list[str] = field(default_factory=list)  # the first is what the command prints
    report: str | None = None  # the rendered report, for the job summary
    # Calls after the pull request existed that failed (bot/followups.py): told, never fatal.
    followup_failures: list[Failure] = field(default_factory=list)


Handler = Callable[["RunContext", "Repository"], EventResult]


@dataclass(frozen=True)
class Route:
    event: str
    handler: Handler
    webhook: bool  # `pytpu serve` accepts it too (else only `pytpu action` handles it)


class EventTable:
    """Event name -> handler; one handler per event."""

    def __init__(self) -> None:
        self._routes: dict[str, Route] = {}

    def on(self, event: str, *, webhook: bool = True) -> Callable[[Handler], Handler]:
        """Register the decorated function as the handler of `event`."""

        def register(handler: Handler) -> Handler:
            if event in self._routes:
                taken = self._routes[event].handler.__qualname__
                raise ValueError(f"event {event!r} already has a handler: {taken}")
            self._routes[event] = Route(event, handler, webhook)
            return handler

        return register

    def handler(self, event: str) -> Handler | None:
        route = self._routes.get(event)
        return route.handler if route else None

    def events(self) -> frozenset[str]:
        """Every event `pytpu action` handles."""
        return frozenset(self._routes)

    def webhook_events(self) -> frozenset[str]:
        """The events `pytpu serve` accepts."""
        return frozenset(name for name, route in self._routes.items() if route.webhook)


EVENTS = EventTable()
