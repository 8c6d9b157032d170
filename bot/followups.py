"""The calls around the pull request that are not what the run is for: the commit status on its
head, the reactions to the command, the reply on the issue.

Once the pull request is open, a call that fails (a workflow without `statuses: write`, a comment
deleted meanwhile) must not turn the run into "PyTPU could not finish": each such call goes
through `attempt`, which logs the failure and keeps it with what it means and how to fix it (the
👀 reaction, made before the run, goes through it too: it is decoration). The reply on the issue
tells the failures whose step is `in_reply`, after the PR's link; the job log (as warning
annotations) and the job summary tell them all; the exit code stays the migration's.

Each call is a `Step` in `STEPS`; each kind of failure (an HTTP status, an exception class) has
its explainer in `EXPLAINERS`: a new call or a new answer is one entry, not a new branch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from github import GithubException, RateLimitExceededException
from requests.exceptions import RetryError

from pytpu.bot import github_api
from pytpu.bot.tokens import redact

log = logging.getLogger("pytpu.bot")
# Where users keep PyTPU's workflow when they copied the example (examples/workflows/pytpu.yml).
WORKFLOW_FILE = ".github/workflows/pytpu.yml"
# GitHub names the fine-grained permissions an endpoint accepts in this header of its answers.
ACCEPTED_PERMISSIONS = "x-accepted-github-permissions"


@dataclass(frozen=True)
class Step:
    """A call made after the pull request exists, and what its failure means."""

    name: str
    does: str  # what it was for, after "could not": "post the commit status ..."
    permission: str  # the job permission it needs, as a workflow's `permissions:` spells it
    resource: str  # what a 404 did not find
    likely: str  # why it most likely was not found
    # Told in the reply too. Not a failed reaction (reactions are decoration), nor a failed reply.
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
        return f"GitHub answered {_answer(exc)}."
    return f"{type(exc).__name__}: {exc}"


def _answer(exc: GithubException) -> str:
    return github_api.describe(exc).rstrip(".")  # GitHub's messages may end a sentence already


@explains(403)
def _forbidden(step: Step, exc: Exception) -> str:
    assert isinstance(exc, GithubException)
    # GitHub's header is the authority where it is sent (App and fine-grained tokens, the job's
    # GITHUB_TOKEN among them); the step's own permission otherwise.
    needed = accepted_permissions(exc.headers) or [step.permission]
    named = " or ".join(f"`{permission}`" for permission in needed)
    add = step.permission if step.permission in needed else needed[0]
    return (
        f"GitHub answered {_answer(exc)}: the token lacks the {named} permission. "
        f"Add `{add}` to the `permissions:` block of the job that runs PyTPU (in "
        f"`{WORKFLOW_FILE}` if you copied PyTPU's example workflow, which lists everything "
        "PyTPU needs); a GitHub App or fine-grained token passed as `token` needs the same "
        "permission."
    )


@explains(404)
def _not_found(step: Step, exc: Exception) -> str:
    assert isinstance(exc, GithubException)
    return (
        f"GitHub answered {_answer(exc)}: {step.resource} was not found. Most likely {step.likely}."
    )


@explains(RateLimitExceededException, 429)
def _rate_limited(step: Step, exc: Exception) -> str:
    assert isinstance(exc, GithubException)
    return (
        f"GitHub answered {_answer(exc)}: its rate limit outlasted PyTPU's waiting. "
        "The next run tries again."
    )


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
