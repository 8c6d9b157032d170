"""One event, handled: a `/pytpu` comment on an issue, a manual dispatch, or a push.

For a comment: only a collaborator with write access runs anything (asked through the
collaborator-permission API; author_association is not a permission). The comment gets 👀 at
once, 🚀 when the PR is ready, and a reply that links the PR or says what failed with the run's
link. The main job runs on a fresh clone of the default branch; `pytpu/migrate` is pushed only over
PyTPU's own commits; the PR is opened once and its body updated afterwards.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from github import GithubException
from github.Repository import Repository

from pytpu.bot import command as slash
from pytpu.bot import github_api, gitremote
from pytpu.bot.context import RunContext, write_outputs, write_summary
from pytpu.bot.tokens import redact
from pytpu.engine import gitrepo, migrate
from pytpu.engine.reporting import markdown

log = logging.getLogger("pytpu.bot")
WRITE_PERMISSIONS = ("admin", "maintain", "write")


@dataclass
class Outcome:
    """What the run did, for the Action's outputs and for the tests."""

    ran: bool = False
    exit_code: int = 0
    pr_number: int | None = None
    pr_url: str | None = None
    parity: str | None = None
    speedup: str | None = None
    notes: list[str] = field(default_factory=list)
    report: str | None = None  # the rendered report, for the job summary


def handle(context: RunContext) -> Outcome:
    if not context.token:
        raise RuntimeError("no token: give the action's `token` input (or set GITHUB_TOKEN)")
    gh = github_api.connect(context.api_url, context.token)
    if context.event_name == "issue_comment":
        return _on_comment(context, gh.get_repo(context.repository))
    if context.event_name in ("workflow_dispatch", "push"):
        repo = gh.get_repo(context.repository)
        if context.event_name == "push" and not _push_to_default(context, repo):
            return Outcome(notes=["push to another branch: nothing to do"])
        outcome = _migrate_and_publish(context, repo)
        _finish(context, outcome)
        return outcome
    return Outcome(notes=[f"event {context.event_name!r} is not handled: nothing to do"])


def _push_to_default(context: RunContext, repo: Repository) -> bool:
    # PyTPU's own push to pytpu/migrate must not start another run.
    return context.payload.get("ref") == f"refs/heads/{repo.default_branch}"


def _on_comment(context: RunContext, repo: Repository) -> Outcome:
    payload = context.payload
    if payload.get("action") != "created" or "pull_request" in payload.get("issue", {}):
        return Outcome(notes=["not a new comment on an issue: ignored"])
    body = payload.get("comment", {}).get("body")
    issue = repo.get_issue(payload["issue"]["number"])
    try:
        parsed = slash.parse(body)
    except slash.CommandError as exc:
        if not _may_write(repo, payload["comment"]["user"]["login"]):
            return Outcome(notes=["not a valid command, from someone without write access"])
        issue.create_comment(f"{exc}.\n\n{slash.HELP}")
        return Outcome(notes=[str(exc)])
    if parsed is None:
        return Outcome(notes=["not a command: ignored"])
    login = payload["comment"]["user"]["login"]
    if not _may_write(repo, login):
        issue.create_comment(
            f"Thanks @{login}! Only people with write access to this repository can run "
            "`/pytpu` commands, so nothing was run. A maintainer can comment `/pytpu migrate`."
        )
        return Outcome(notes=[f"{login} has no write access: replied, nothing ran"])
    comment = issue.get_comment(payload["comment"]["id"])
    comment.create_reaction("eyes")
    if parsed.name == "help":
        issue.create_comment(slash.HELP)
        return Outcome(notes=["help"])
    try:
        outcome = _migrate_and_publish(context, repo)
    except Exception as exc:  # the reply must say what failed, whatever it was
        message = _failure_text(exc, context)
        log.error("%s", message)
        failed = Outcome(ran=True, exit_code=1, notes=[message])
        _finish(context, failed)
        issue.create_comment(message)
        comment.create_reaction("confused")
        return failed
    if outcome.pr_number is not None:
        comment.create_reaction("rocket")
    issue.create_comment("\n\n".join(outcome.notes))
    _finish(context, outcome)
    return outcome


def _may_write(repo: Repository, login: str) -> bool:
    try:
        return repo.get_collaborator_permission(login) in WRITE_PERMISSIONS
    except GithubException as exc:
        if exc.status == 404:  # not a collaborator at all
            return False
        raise


def _migrate_and_publish(context: RunContext, repo: Repository) -> Outcome:
    base = repo.default_branch
    with tempfile.TemporaryDirectory(prefix="pytpu-bot-", dir=context.workdir) as scratch:
        checkout = Path(scratch) / repo.name
        clone = gitremote.clone(
            context.server_url, context.repository, base, context.token, checkout
        )
        expected = gitremote.remote_tip(clone, context.server_url, context.token)
        try:
            result = migrate.migrate(checkout)
        except migrate.BranchTaken as exc:
            return Outcome(
                ran=True,
                exit_code=1,
                notes=[
                    f"Someone has pushed commits to `{gitrepo.BRANCH}`, so PyTPU did not "
                    f"overwrite it: {exc}"
                ],
            )
        tip = clone.heads[gitrepo.BRANCH].commit.hexsha
        if tip != expected:
            gitremote.push(clone, context.server_url, context.token, expected)
        verdict = markdown.verdict_line(result.document)
        body = github_api.fit_body(result.markdown, context.run_url)
        pull, created = github_api.open_or_update_pull(repo, base, body)
        github_api.post_status(repo, tip, result.exit_code == 0, verdict, context.run_url)
    summary = result.document["verdict"]
    speedup = summary.get("speedup")
    done = "Opened" if created else "Updated"
    unchanged = " (no new commits: the result is the same)" if tip == expected else ""
    return Outcome(
        ran=True,
        exit_code=result.exit_code,
        pr_number=pull.number,
        pr_url=pull.html_url,
        parity=f"{summary['passed_both']}/{summary['total']}",
        speedup="" if speedup is None else f"{speedup:.2f}",
        notes=[f"{done} #{pull.number}{unchanged}: {verdict}", _summary_markdown(result)],
        report=result.markdown,
    )


def _summary_markdown(result: migrate.Result) -> str:
    regressions = [r["id"] for r in result.document["parity"]["tests"] if r["regression"]]
    if not regressions:
        return "Every test that passed before the migration passes after it."
    listed = "\n".join(f"- `{r}`" for r in regressions[:10])
    return f"These tests passed before the migration and fail after it:\n{listed}"


def _failure_text(exc: Exception, context: RunContext) -> str:
    if isinstance(exc, GithubException):
        what = f"GitHub answered {github_api.describe(exc)}"
    else:
        what = f"{type(exc).__name__}: {exc}"
    what = redact(what, context.token)
    link = f" See [the run]({context.run_url}) for details." if context.run_url else ""
    return f"PyTPU could not finish `/pytpu migrate`: {what}.{link}"


def _finish(context: RunContext, outcome: Outcome) -> None:
    write_outputs(
        context,
        {
            "pr-number": "" if outcome.pr_number is None else str(outcome.pr_number),
            "pr-url": outcome.pr_url or "",
            "parity": outcome.parity or "",
            "speedup": outcome.speedup or "",
        },
    )
    write_summary(context, outcome.report or "\n\n".join(outcome.notes))
