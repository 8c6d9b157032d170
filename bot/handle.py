"""One event, handled: a `/pytpu` comment on an issue, a manual dispatch, or a push.

`handle` looks the event up in the table of `bot/events.py`; the handlers below register
themselves there (`@EVENTS.on(...)`), and the `/pytpu` commands' functions in `COMMAND_HANDLERS`
(`@on_command(...)`; their names and help lines are in `bot/command.py`).

For a comment: only a collaborator with write access runs anything (asked through the
collaborator-permission API; author_association is not a permission). The comment gets 👀 at
once, 🚀 when the PR is ready, and a reply that links the PR or says what failed with the run's
link. The main job runs on a fresh clone of the default branch; `pytpu/migrate` is pushed only over
PyTPU's own commits; the PR is opened once and its body updated afterwards.

What is called once the PR exists (the commit status, the reactions, the reply) goes through
`bot/followups.py`: a failure there is told (in the reply after the PR's link, as a warning in the
job log, in the job summary) and never turns the run into a failure. The exit code and the
Action's outputs stay the migration's: the PR is there, with its number and link. The push and the
PR itself are steps of the same table: their failure is "PyTPU could not finish", and a 403 there
names the permission the workflow lacks, as a follow-up's does.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from github import GithubException
from github.Issue import Issue
from github.IssueComment import IssueComment
from github.PullRequest import PullRequest
from github.Repository import Repository

from pytpu.bot import command as slash
from pytpu.bot import followups, github_api, gitremote
from pytpu.bot.context import RunContext, write_outputs, write_summary
from pytpu.bot.events import EVENTS, EventResult
from pytpu.bot.tokens import redact
from pytpu.engine import gitrepo

if TYPE_CHECKING:
    from pytpu.engine.migrate import Result

log = logging.getLogger("pytpu.bot")
WRITE_PERMISSIONS = ("admin", "maintain", "write")
# The inputs of the PyTPU workflow's workflow_dispatch by which `pytpu serve --run-on workflow`
# hands it a `/pytpu migrate` (examples/workflows/pytpu.yml declares them).
DISPATCH_INPUTS = ("issue", "comment")


def handle(context: RunContext) -> EventResult:
    """The event through the table: `pytpu action` and `pytpu serve` both come here."""
    if not context.token:
        raise RuntimeError("no token: give the action's `token` input (or set GITHUB_TOKEN)")
    gh = github_api.connect(context.api_url, context.token)
    handler = EVENTS.handler(context.event_name)
    if handler is None:
        return EventResult(notes=[f"event {context.event_name!r} is not handled: nothing to do"])
    return handler(context, gh.get_repo(context.repository))


# --- the events ---------------------------------------------------------------------------------


@EVENTS.on("workflow_dispatch", webhook=False)  # an App's delivery of it is someone else's run
def on_dispatch(context: RunContext, repo: Repository) -> EventResult:
    """The workflow started by hand: migrate the default branch. Started by `pytpu serve --run-on
    workflow` for a `/pytpu migrate` (inputs `issue` and `comment`): answer that comment too."""
    inputs = context.payload.get("inputs") or {}
    if all(inputs.get(name) for name in DISPATCH_INPUTS):
        issue = repo.get_issue(int(inputs["issue"]))
        result = _migrate(context, repo, issue, issue.get_comment(int(inputs["comment"])))
    else:
        result = _migrate_and_publish(context, repo)
    _finish(context, result)
    return result


@EVENTS.on("push")
def on_push(context: RunContext, repo: Repository) -> EventResult:
    """A push to the default branch: migrate it again."""
    # PyTPU's own push to pytpu/migrate must not start another run.
    if context.payload.get("ref") != f"refs/heads/{repo.default_branch}":
        return EventResult(notes=["push to another branch: nothing to do"])
    if context.workflow:
        return _hand_over(context, repo)
    return on_dispatch(context, repo)


@EVENTS.on("issue_comment")
def on_comment(context: RunContext, repo: Repository) -> EventResult:
    """A `/pytpu` command on the first line of a new comment on an issue."""
    payload = context.payload
    if payload.get("action") != "created" or "pull_request" in payload.get("issue", {}):
        return EventResult(notes=["not a new comment on an issue: ignored"])
    body = payload.get("comment", {}).get("body")
    issue = repo.get_issue(payload["issue"]["number"])
    login = payload["comment"]["user"]["login"]
    try:
        parsed = slash.parse(body)
    except slash.CommandError as exc:
        if not _may_write(repo, login):
            return EventResult(notes=["not a valid command, from someone without write access"])
        _reply(context, issue, f"{exc}.\n\n{slash.HELP}")
        return EventResult(notes=[str(exc)])
    if parsed is None:
        return EventResult(notes=["not a command: ignored"])
    if not _may_write(repo, login):
        _reply(
            context,
            issue,
            f"Thanks @{login}! Only people with write access to this repository can run "
            "`/pytpu` commands, so nothing was run. A maintainer can comment `/pytpu migrate`.",
        )
        return EventResult(notes=[f"{login} has no write access: replied, nothing ran"])
    comment = issue.get_comment(payload["comment"]["id"])
    seen: list[followups.Failure] = []  # 👀 is decoration: its failure must not stop the run
    _react(context, comment, "eyes", seen)
    result = COMMAND_HANDLERS[parsed.name](context, repo, issue, comment)
    result.followup_failures[:0] = seen
    _finish(context, result)
    return result


def _may_write(repo: Repository, login: str) -> bool:
    try:
        return repo.get_collaborator_permission(login) in WRITE_PERMISSIONS
    except GithubException as exc:
        if exc.status == 404:  # not a collaborator at all
            return False
        raise


# --- the `/pytpu` commands, from a collaborator with write access --------------------------------

CommandHandler = Callable[[RunContext, Repository, Issue, IssueComment], EventResult]
COMMAND_HANDLERS: dict[str, CommandHandler] = {}


def on_command(name: str) -> Callable[[CommandHandler], CommandHandler]:
    """Register the decorated function as what `/pytpu NAME` runs."""
    if name not in slash.COMMANDS:
        raise ValueError(f"/pytpu {name}: not in command.COMMANDS, so nobody could run it")

    def register(handler: CommandHandler) -> CommandHandler:
        COMMAND_HANDLERS[name] = handler
        return handler

    return register


@on_command("help")
def _help(
    context: RunContext, repo: Repository, issue: Issue, comment: IssueComment
) -> EventResult:
    _reply(context, issue, slash.HELP)
    return EventResult(notes=["help"])


@on_command("migrate")
def _migrate(
    context: RunContext, repo: Repository, issue: Issue, comment: IssueComment
) -> EventResult:
    if context.workflow:
        return _hand_over(context, repo, issue)
    try:
        result = _migrate_and_publish(context, repo)
        mood = "rocket" if result.pr_number is not None else None
    except Exception as exc:  # before the PR exists: the reply must say what failed, whatever
        message = _failure_text(exc, context)
        log.error("%s", message)
        result, mood = EventResult(ran=True, exit_code=1, notes=[message]), "confused"
    if mood is not None:
        _react(context, comment, mood, result.followup_failures)
    reply = _paragraphs(*result.notes, followups.reply_section(result.followup_failures))
    followups.attempt(
        followups.REPLY,
        lambda: _reply(context, issue, reply),
        result.followup_failures,
        context.token,
    )
    return result


def _hand_over(context: RunContext, repo: Repository, issue: Issue | None = None) -> EventResult:
    """`pytpu serve --run-on workflow`: the main job runs in the repository's PyTPU workflow, on
    its runners (a TPU pool), started through workflow_dispatch; for a comment, that run reacts
    and replies (inputs `issue` and `comment`). Only a failure to start it is answered here."""
    inputs = {}
    if issue is not None:
        comment = context.payload["comment"]["id"]
        inputs = dict(zip(DISPATCH_INPUTS, (str(issue.number), str(comment)), strict=True))
    try:
        with followups.during(followups.DISPATCH):
            workflow = repo.get_workflow(context.workflow)
            workflow.create_dispatch(repo.default_branch, inputs, throw=True)
    except followups.StepFailed as exc:
        if issue is None:
            raise
        message = _failure_text(exc, context)
        _reply(context, issue, message)
        return EventResult(exit_code=1, notes=[message])
    return EventResult(notes=[f"handed to the workflow {context.workflow}"])


def _reply(context: RunContext, issue: Issue, text: str) -> None:
    """Post `text` on `issue` once per delivery: a job started again after a kill finds the reply
    its first start posted (by a marker GitHub does not show) and does not post it again."""
    if context.delivery:
        marker = f"<!-- pytpu-delivery: {context.delivery} -->"
        if context.attempt > 1 and any(marker in (c.body or "") for c in issue.get_comments()):
            log.info("reply already posted", extra={"delivery": context.delivery})
            return
        text = f"{text}\n\n{marker}"
    issue.create_comment(text)


def _paragraphs(*texts: str) -> str:
    return "\n\n".join(text for text in texts if text)


def _react(
    context: RunContext, comment: IssueComment, content: str, failures: list[followups.Failure]
) -> None:
    followups.attempt(
        followups.REACTION, lambda: comment.create_reaction(content), failures, context.token
    )


# --- the main job on a clone, and its pull request ------------------------------------------------


def _migrate_and_publish(context: RunContext, repo: Repository) -> EventResult:
    from pytpu.engine import migrate  # the engine's pipeline loads torch: only when it runs

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
            return EventResult(
                ran=True,
                exit_code=1,
                notes=[
                    f"Someone has pushed commits to `{gitrepo.BRANCH}`, so PyTPU did not "
                    f"overwrite it: {exc}"
                ],
            )
        tip = clone.heads[gitrepo.BRANCH].commit.hexsha
        if tip != expected:
            with followups.during(followups.PUSH):
                gitremote.push(clone, context.server_url, context.token, expected)
        body = github_api.fit_body(result.markdown, context.run_url)
        with followups.during(followups.PULL_REQUEST):
            title = clone.heads[gitrepo.BRANCH].commit.summary  # "Migrate to TorchTPU (PyTPU)"
            pull, created = github_api.open_or_update_pull(repo, base, body, title)
    published = _published(result, pull, created, pushed=tip != expected)
    # From here on the PR exists: what fails is told with its link, never instead of it.
    followups.attempt(
        followups.STATUS,
        lambda: github_api.post_status(
            repo, tip, result.exit_code == 0, result.headline, context.run_url
        ),
        published.followup_failures,
        context.token,
    )
    return published


def _published(result: Result, pull: PullRequest, created: bool, pushed: bool) -> EventResult:
    verdict = result.verdict
    done = "Opened" if created else "Updated"
    unchanged = "" if pushed else " (no new commits: the result is the same)"
    return EventResult(
        ran=True,
        exit_code=result.exit_code,
        pr_number=pull.number,
        pr_url=pull.html_url,
        parity=verdict.fraction,
        speedup="" if verdict.speedup is None else f"{verdict.speedup:.2f}",
        # The PR by its link: a reply read by mail or in the job log has no #N autolink.
        notes=[
            f"{done} [#{pull.number}]({pull.html_url}){unchanged}: {result.headline}",
            _summary_markdown(result),
        ],
        report=result.markdown,
    )


def _summary_markdown(result: Result) -> str:
    if not result.regressed_tests:
        return "Every test that passed before the migration passes after it."
    listed = "\n".join(f"- `{r}`" for r in result.regressed_tests[:10])
    return f"These tests passed before the migration and fail after it:\n{listed}"


def _failure_text(exc: Exception, context: RunContext) -> str:
    what = redact(followups.unfinished(exc), context.token)
    link = f" See [the run]({context.run_url}) for details." if context.run_url else ""
    return f"PyTPU could not finish `/pytpu migrate`: {what}{link}"


def _finish(context: RunContext, result: EventResult) -> None:
    write_outputs(
        context,
        {
            "pr-number": "" if result.pr_number is None else str(result.pr_number),
            "pr-url": result.pr_url or "",
            "parity": result.parity or "",
            "speedup": result.speedup or "",
        },
    )
    shown = result.report or _paragraphs(*result.notes)
    write_summary(context, _paragraphs(shown, followups.summary_section(result.followup_failures)))
