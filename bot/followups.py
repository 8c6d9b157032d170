"""The calls around the pull request that are not what the run is for: the commit status on its
head, the reactions to the command, the reply on the issue.

Once the pull request is open, a call that fails (a workflow without `statuses: write`, a comment
deleted meanwhile) must not turn the run into "PyTPU could not finish": each such call goes
through `attempt`, which logs the failure and keeps it with what it means and how to fix it (the
👀 reaction, made before the run, goes through it too: it is decoration). The reply on the issue
tells the failures whose step is `in_reply`, after the PR's link; the job log (as warning
annotations) and the job summary tell them all; the exit code stays the migration's.

The two calls that make the pull request, the push of `pytpu/migrate` and opening (or updating)
the pull request, are steps too, run `during` their step: without them there is no pull request,
so their failure is the run's ("PyTPU could not finish", `unfinished`), but a 403 there is
explained the same way, with the permission the step needs (a new repository's first run is
where a workflow without `contents: write` or `pull-requests: write` shows).

Each call is a `Step` in `STEPS`; each kind of failure (an HTTP status, an exception class) has
its explainer in `EXPLAINERS`: a new call or a new answer is one entry, not a new branch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from github import GithubException, RateLimitExceededException
from requests.exceptions import RetryError

from pytpu.bot import github_api
from pytpu.bot.tokens import redact
from pytpu.engine import gitrepo

log = logging.getLogger("pytpu.bot")
# Where users keep PyTPU's workflow when they copied the example (examples/workflows/pytpu.yml).
WORKFLOW_FILE = ".github/workflows/pytpu.yml"
# GitHub names the fine-grained permissions an endpoint accepts in this header of its answers.
ACCEPTED_PERMISSIONS = "x-accepted-github-permissions"
# GitHub's 403 to the job's token when the repository's (or its organisation's) settings do not let
# workflows open pull requests, whatever the job's `permissions:` say: a setting, not a permission.
ACTIONS_MAY_NOT_OPEN_PULLS = "GitHub Actions is not permitted to create or approve pull requests"


@dataclass(frozen=True)
class Step:
    """A call around the pull request, and what its failure means."""

    name: str
    does: str  # what it was for, after "could not": "post the commit status ..."
    permission: str  # the job permission it needs, as a workflow's `permissions:` spells it
    resource: str = "the repository"  # what a 404 did not find
    likely: str = "the token cannot see it (GitHub answers 404 rather than say it exists)"
    # Told in the reply too (of a step that is `attempt`ed). Not a failed reaction (reactions are
    # decoration), nor a failed reply.
    in_reply: bool = True


@dataclass(frozen=True)
class Failure:
    step: Step
    why: str  # GitHub's answer, what it means and what to do; Markdown, no token in it

    def sentence(self) -> str:
        return f"PyTPU could not {self.step.does}: {self.why}"


STEPS: dict[str, Step] = {}


def register(step: Step) -> Step:
    if step.name in STEPS:
        raise ValueError(f"step {step.name!r} is registered twice")
    STEPS[step.name] = step
    return step


# Before the pull request exists (run `during` their step, not `attempt`ed).
PUSH = register(
    Step(
        name="push",
        does=f"push the branch `{gitrepo.BRANCH}`",
        permission="contents: write",
    )
)
PULL_REQUEST = register(
    Step(
        name="pull-request",
        does="open or update the pull request",
        permission="pull-requests: write",
    )
)
# `pytpu serve --run-on workflow`: the repository's PyTPU workflow started for the main job.
DISPATCH = register(
    Step(
        name="dispatch",
        does="start the repository's PyTPU workflow (workflow_dispatch)",
        permission="actions: write",
        resource=f"the workflow (`{WORKFLOW_FILE}` on the default branch)",
        likely="the workflow file is not on the default branch, or it has no workflow_dispatch",
    )
)
# Once it exists (`attempt`ed).
STATUS = register(
    Step(
        name="status",
        does="post the commit status `pytpu/migrate` on the pull request's head",
        permission="statuses: write",
        resource="the commit or the commit statuses API",
        likely=(
            "a push replaced `pytpu/migrate` meanwhile, this GitHub (an Enterprise Server, a "
            "proxy) does not offer commit statuses, or the token cannot see the repository "
            "(GitHub answers 404 rather than say it exists)"
        ),
    )
)
REACTION = register(
    Step(
        name="reaction",
        does="react to the `/pytpu` comment",
        permission="issues: write",
        resource="the comment",
        likely="it was deleted, or the token cannot see this repository's issues",
        in_reply=False,
    )
)
REPLY = register(
    Step(
        name="reply",
        does="reply on the issue",
        permission="issues: write",
        resource="the issue",
        likely="it was deleted or transferred, or the token cannot see it",
        in_reply=False,
    )
)


def attempt(
    step: Step, call: Callable[[], object], failures: list[Failure], token: str | None
) -> bool:
    """Make the call; a failure, whatever it is, is logged and added to `failures`, never raised:
    the pull request exists, so nothing after it may undo the run."""
    try:
        call()
    except Exception as exc:
        failure = Failure(step, redact(explain(step, exc), token))
        log.warning("%s", failure.sentence())
        failures.append(failure)
        return False
    return True


class StepFailed(Exception):
    """A step before the pull request exists failed (`cause`, also the `__cause__`)."""

    def __init__(self, step: Step, cause: Exception) -> None:
        super().__init__(str(cause))  # what the job's log and `pytpu action` print stays the same
        self.step = step
        self.cause = cause


@contextmanager
def during(step: Step) -> Iterator[None]:
    """Run a call that makes the pull request: whatever it raises leaves as StepFailed, so the
    "could not finish" reply knows which step GitHub refused (`unfinished`)."""
    try:
        yield
    except Exception as exc:
        raise StepFailed(step, exc) from exc


def unfinished(exc: Exception) -> str:
    """What stopped the run before the pull request existed, as a sentence: GitHub's answer (or
    the error), and for a 403 on a step, the permission it needs and where to add it. Other
    answers are told as GitHub (or git) gave them."""
    if isinstance(exc, StepFailed):
        if getattr(exc.cause, "status", None) == 403:
            return explain(exc.step, exc.cause)
        exc = exc.cause
    return f"{_answer(exc)}."


# --- what GitHub's answer means ------------------------------------------------------------------

Explainer = Callable[[Step, Exception], str]
# Keyed by exception class (the most specific wins) or by HTTP status: a rate limit PyGithub could
# not wait out is a 403 too, and must not read as a missing permission.
EXPLAINERS: dict[type[Exception] | int, Explainer] = {}


def explains(*keys: type[Exception] | int) -> Callable[[Explainer], Explainer]:
    def register_explainer(explainer: Explainer) -> Explainer:
        for key in keys:
            EXPLAINERS[key] = explainer
        return explainer

    return register_explainer


def explain(step: Step, exc: Exception) -> str:
    """What went wrong, in words a maintainer can act on."""
    for key in (*type(exc).__mro__, getattr(exc, "status", None)):
        if key in EXPLAINERS:
            return EXPLAINERS[key](step, exc)
    if isinstance(exc, GithubException):
        return f"{_answer(exc)}."
    return _answer(exc)


def _answer(exc: Exception) -> str:
    """`GitHub answered 403 Forbidden`; for another error (git's), its class and message."""
    if isinstance(exc, GithubException):
        # GitHub's messages may end a sentence already.
        return f"GitHub answered {github_api.describe(exc).rstrip('.')}"
    return f"{type(exc).__name__}: {exc}"


@explains(403)
def _forbidden(step: Step, exc: Exception) -> str:
    if ACTIONS_MAY_NOT_OPEN_PULLS in _answer(exc):
        return (
            f"{_answer(exc)}: the repository's settings do not let workflows open pull requests, "
            "whatever the job's `permissions:` say. Turn on **Allow GitHub Actions to create and "
            "approve pull requests** in its Settings > Actions > General > Workflow permissions "
            "(an organisation's own setting can keep it off), or pass a GitHub App or "
            "fine-grained token as `token`."
        )
    # GitHub's header is the authority where it is sent (App and fine-grained tokens, the job's
    # GITHUB_TOKEN among them; git's answers have none); the step's own permission otherwise.
    needed = accepted_permissions(getattr(exc, "headers", None)) or [step.permission]
    named = " or ".join(f"`{permission}`" for permission in needed)
    add = step.permission if step.permission in needed else needed[0]
    return (
        f"{_answer(exc)}: the token lacks the {named} permission. "
        f"Add `{add}` to the `permissions:` block of the job that runs PyTPU (in "
        f"`{WORKFLOW_FILE}` if you copied PyTPU's example workflow, which lists everything "
        "PyTPU needs); a GitHub App or fine-grained token passed as `token` needs the same "
        "permission."
    )


@explains(404)
def _not_found(step: Step, exc: Exception) -> str:
    return f"{_answer(exc)}: {step.resource} was not found. Most likely {step.likely}."


@explains(RateLimitExceededException, 429)
def _rate_limited(step: Step, exc: Exception) -> str:
    return f"{_answer(exc)}: its rate limit outlasted PyTPU's waiting. The next run tries again."


@explains(RetryError)
def _retries_ran_out(step: Step, exc: Exception) -> str:
    # urllib3's MaxRetryError inside says which answers kept coming ("too many 502 error
    # responses"): server errors, or a rate limit (a 403 with GitHub's rate-limit message).
    cause = getattr(exc.args[0], "reason", None) if exc.args else None
    return (
        f"GitHub kept failing until PyTPU's retries ran out ({cause or exc}). "
        "The next run tries again."
    )


def accepted_permissions(headers: Mapping[str, str] | None) -> list[str]:
    """The permission sets GitHub's X-Accepted-GitHub-Permissions header names, as a workflow's
    `permissions:` spells them: `issues=write; pull_requests=write` gives
    ["issues: write", "pull-requests: write"] (either set will do; a set may list several)."""
    value = next((v for k, v in (headers or {}).items() if k.lower() == ACCEPTED_PERMISSIONS), "")
    sets = []
    for alternative in value.split(";"):
        pairs = [pair.strip().partition("=") for pair in alternative.split(",") if "=" in pair]
        if pairs:
            # Workflow keys use hyphens where the App permission names use underscores.
            sets.append(", ".join(f"{k.replace('_', '-')}: {level}" for k, _, level in pairs))
    return sets


# --- where the failures are told ------------------------------------------------------------------


def reply_section(failures: list[Failure]) -> str:
    """The reply's paragraph about the failed follow-ups ('' when none is told there)."""
    told = [failure for failure in failures if failure.step.in_reply]
    if not told:
        return ""
    items = "\n".join(f"- {failure.sentence()}" for failure in told)
    return f"The pull request is open, but:\n{items}"


def summary_section(failures: list[Failure]) -> str:
    """The job summary's section: every failed follow-up, reactions included."""
    if not failures:
        return ""
    items = "\n".join(f"- {failure.sentence()}" for failure in failures)
    return f"### Not done after the pull request\n\n{items}"
