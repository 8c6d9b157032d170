"""The bot's commands, added to `pytpu` through the `pytpu.commands` entry points:
`pytpu action` (inside a GitHub Actions job) and `pytpu serve` (webhooks of a GitHub App).

Both hand the event to `handle.handle`, which looks it up in the one table of `bot/events.py`;
`pytpu serve` accepts the events that table names. Each command imports what it uses when it runs.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pytpu.bot import context as run_context
from pytpu.bot import tokens

if TYPE_CHECKING:
    from pytpu.bot import webhook

action_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
serve_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def _logging(token: str | None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    tokens.protect_logs(token)


@action_app.command("action")
def action() -> None:
    """Handle the GitHub Actions event of this job (issue_comment, workflow_dispatch, push).

    Reads GITHUB_EVENT_NAME, GITHUB_EVENT_PATH, GITHUB_REPOSITORY, GITHUB_API_URL,
    GITHUB_SERVER_URL, GITHUB_OUTPUT and GITHUB_STEP_SUMMARY, and the token from INPUT_TOKEN or
    GITHUB_TOKEN (removed from the environment at once: the user's code never sees it).
    """
    from pytpu.bot import handle

    token = tokens.take_token()
    _logging(token)
    try:
        context = run_context.from_actions(dict(os.environ), token)
        result = handle.handle(context)
    except run_context.ContextError as exc:
        typer.echo(f"pytpu action: error: {exc}", err=True)
        raise typer.Exit(2) from None
    except Exception as exc:
        typer.echo(f"pytpu action: error: {tokens.redact(str(exc), token)}", err=True)
        raise typer.Exit(1) from None
    for note in result.notes[:1]:
        typer.echo(note)
    # What failed once the PR existed is a warning, not an error: the exit code stays the
    # migration's, since the PR and the Action's outputs are there (bot/followups.py).
    for failure in result.followup_failures:
        typer.echo(run_context.warning_command(failure.sentence()))
    raise typer.Exit(result.exit_code)


def _webhook_handler(token: str, api_url: str, server_url: str) -> webhook.Handler:
    from pytpu.bot import handle

    def run(event: str, payload: dict[str, Any]) -> None:
        context = run_context.RunContext(
            event_name=event,
            payload=payload,
            repository=payload["repository"]["full_name"],
            api_url=api_url,
            server_url=server_url,
            token=token,
            workdir=Path(tempfile.gettempdir()),
        )
        handle.handle(context)

    return run


@serve_app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
) -> None:
    """Receive GitHub webhooks (a GitHub App's deliveries) and handle them as `pytpu action` does.

    Needs PYTPU_WEBHOOK_SECRET (the App's webhook secret: deliveries are verified with it) and
    PYTPU_GITHUB_TOKEN (a token with the App's permissions); GITHUB_API_URL and GITHUB_SERVER_URL
    name a GitHub Enterprise server. Put it behind a TLS proxy.
    """
    from wsgiref.simple_server import make_server

    from pytpu.bot import handle, webhook  # importing handle fills the table of events

    secret = os.environ.pop("PYTPU_WEBHOOK_SECRET", "")
    token = tokens.take_token()
    _logging(token)
    if not secret or not token:
        typer.echo("pytpu serve: error: set PYTPU_WEBHOOK_SECRET and PYTPU_GITHUB_TOKEN", err=True)
        raise typer.Exit(2)
    handler = _webhook_handler(
        token,
        os.environ.get("GITHUB_API_URL", "https://api.github.com"),
        os.environ.get("GITHUB_SERVER_URL", "https://github.com"),
    )
    app = webhook.WebhookApp(secret, handler, handle.EVENTS.webhook_events())
    with make_server(host, port, app) as server:
        print(f"pytpu serve: listening on http://{host}:{server.server_port}/", file=sys.stderr)
        server.serve_forever()
