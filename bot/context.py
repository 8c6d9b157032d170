"""What a run knows about where it is: the standard GitHub Actions variables, or the same facts
built from a webhook delivery."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ContextError(Exception):
    """A variable the run needs is missing or unreadable; the message names it."""


@dataclass
class RunContext:
    event_name: str
    payload: dict[str, Any]
    repository: str  # owner/name
    api_url: str
    server_url: str
    token: str | None
    workdir: Path
    run_url: str | None = None
    output_path: Path | None = None
    summary_path: Path | None = None
    # `pytpu serve`'s delivery and which start of its job this is: a job started again after a
    # kill must not repeat what its first start did (a reply is looked for before it is posted).
    delivery: str | None = None
    attempt: int = 1
    # The workflow file that runs the main job (`pytpu serve --run-on workflow`), or None: this
    # process runs it.
    workflow: str | None = None

    @property
    def owner(self) -> str:
        return self.repository.split("/", 1)[0]


def from_actions(environ: dict[str, str], token: str | None) -> RunContext:
    """The context of a GitHub Actions step (see the Actions variables reference)."""

    def need(name: str) -> str:
        value = environ.get(name)
        if not value:
            raise ContextError(f"{name} is not set: `pytpu action` runs inside GitHub Actions")
        return value

    event_path = Path(need("GITHUB_EVENT_PATH"))
    try:
        payload = json.loads(event_path.read_text())
    except (OSError, ValueError) as exc:
        raise ContextError(
            f"GITHUB_EVENT_PATH={event_path}: not a readable JSON event ({exc})"
        ) from None
    server_url = environ.get("GITHUB_SERVER_URL", "https://github.com")
    repository = need("GITHUB_REPOSITORY")
    run_id = environ.get("GITHUB_RUN_ID")
    run_url = f"{server_url}/{repository}/actions/runs/{run_id}" if run_id else None
    temp = environ.get("RUNNER_TEMP") or tempfile.gettempdir()
    return RunContext(
        event_name=need("GITHUB_EVENT_NAME"),
        payload=payload,
        repository=repository,
        api_url=environ.get("GITHUB_API_URL", "https://api.github.com"),
        server_url=server_url,
        token=token,
        workdir=Path(temp),
        run_url=run_url,
        output_path=Path(environ["GITHUB_OUTPUT"]) if environ.get("GITHUB_OUTPUT") else None,
        summary_path=(
            Path(environ["GITHUB_STEP_SUMMARY"]) if environ.get("GITHUB_STEP_SUMMARY") else None
        ),
    )


def write_outputs(context: RunContext, outputs: dict[str, str]) -> None:
    """Step outputs in $GITHUB_OUTPUT's `name=value` lines (values are single-line here)."""
    if context.output_path is None:
        return
    with open(context.output_path, "a", encoding="utf-8") as f:
        for name, value in outputs.items():
            f.write(f"{name}={value.replace(chr(10), ' ')}\n")


def write_summary(context: RunContext, markdown: str) -> None:
    if context.summary_path is not None:
        with open(context.summary_path, "a", encoding="utf-8") as f:
            f.write(markdown.rstrip() + "\n")


def warning_command(message: str, title: str = "PyTPU") -> str:
    """A `::warning::` workflow command: the runner shows it as an annotation on the run, where a
    maintainer sees it without reading the log. Data is escaped as the runner expects."""

    def escape(text: str) -> str:
        return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    safe_title = escape(title).replace(":", "%3A").replace(",", "%2C")
    return f"::warning title={safe_title}::{escape(message)}"
