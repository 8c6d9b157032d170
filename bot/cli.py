"""The bot's commands, added to `pytpu` through the `pytpu.commands` entry points:
`pytpu action` (inside a GitHub Actions job) and `pytpu serve` (webhooks of a GitHub App).

Both hand the event to `handle.handle`, which looks it up in the one table of `bot/events.py`;
`pytpu serve` accepts the events that table names. Each command imports what it uses when it runs.
"""

from __future__ import annotations

import enum
import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from pytpu.bot import context as run_context
from pytpu.bot import tokens


class RunOn(enum.StrEnum):
    here = "here"
    workflow = "workflow"


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


@serve_app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port).")] = 8080,
    state: Annotated[
        Path | None,
        typer.Option(
            help="Folder of the durable queue (default: $PYTPU_STATE, else "
            "$XDG_STATE_HOME/pytpu or ~/.local/state/pytpu)."
        ),
    ] = None,
    workers: Annotated[
        int, typer.Option(min=1, help="Jobs run at once, each of another repository.")
    ] = 2,
    threads: Annotated[int, typer.Option(min=1, help="HTTP requests served at once.")] = 8,
    grace: Annotated[
        float,
        typer.Option(
            min=0,
            help="Seconds the running jobs get to finish at shutdown before they are "
            "stopped and queued again.",
        ),
    ] = 600.0,
    run_on: Annotated[
        RunOn,
        typer.Option(
            help="Where `/pytpu migrate` runs: here (a child process of this server) or in the "
            "repository's PyTPU workflow, started through workflow_dispatch (a runner pool)."
        ),
    ] = RunOn.here,
    workflow: Annotated[
        str, typer.Option(help="The workflow file that --run-on workflow starts.")
    ] = "pytpu.yml",
) -> None:
    """Receive GitHub webhooks (a GitHub App's deliveries) and handle them as `pytpu action` does.

    Needs PYTPU_WEBHOOK_SECRET (the App's webhook secret: deliveries are verified with it) and
    PYTPU_GITHUB_TOKEN (a token with the App's permissions); GITHUB_API_URL and GITHUB_SERVER_URL
    name a GitHub Enterprise server. Accepted deliveries wait in a durable queue until handled,
    across restarts; GET /healthz reports it. SIGTERM stops gracefully. Put it behind a TLS proxy.
    """
    from pytpu.bot import handle, service  # importing handle fills the table of events

    secret = os.environ.pop("PYTPU_WEBHOOK_SECRET", "")
    token = tokens.take_token()
    service.json_logging()
    tokens.protect_logs(token)
    if not secret or not token:
        typer.echo("pytpu serve: error: set PYTPU_WEBHOOK_SECRET and PYTPU_GITHUB_TOKEN", err=True)
        raise typer.Exit(2)
    job = [sys.executable, "-m", "pytpu.bot.job", "--parent", str(os.getpid())]
    job += ["--api-url", os.environ.get("GITHUB_API_URL", "https://api.github.com")]
    job += ["--server-url", os.environ.get("GITHUB_SERVER_URL", "https://github.com")]
    if run_on is RunOn.workflow:
        job += ["--workflow", workflow]
    settings = service.Settings(
        host=host,
        port=port,
        state=state or service.default_state(),
        workers=workers,
        threads=threads,
        grace=grace,
        job_command=job,
        job_environment={**os.environ, "PYTPU_GITHUB_TOKEN": token},
    )
    try:
        service.serve(settings, secret, handle.EVENTS.webhook_events())
    except service.StateInUse as exc:
        typer.echo(f"pytpu serve: error: {exc}", err=True)
        raise typer.Exit(2) from None
