"""GitHub's REST API through PyGithub: the client with retries, and the pull request PyTPU keeps.

Retries: 5xx answers and rate limits (403/429, honouring Retry-After) are retried with back-off
by PyGithub's GithubRetry; when they run out, the call fails with a clear error.
"""

from __future__ import annotations

from github import Auth, Github, GithubException, GithubRetry
from github.PullRequest import PullRequest
from github.Repository import Repository

from pytpu.engine import gitrepo

PR_TITLE = "Migrate to PyTorch/XLA (PyTPU)"
STATUS_CONTEXT = "pytpu/migrate"
# GitHub refuses bodies over 65,536 characters; the full report stays in the run's summary.
MAX_BODY = 65_000


def connect(
    api_url: str, token: str, retries: int = 5, backoff: float = 1.0, max_wait: float = 300
) -> Github:
    retry = GithubRetry(
        total=retries,
        backoff_factor=backoff,
        secondary_rate_wait=backoff * 10,
        max_rate_limit_wait=max_wait,
    )
    return Github(base_url=api_url, auth=Auth.Token(token), retry=retry, timeout=60)


def describe(exc: GithubException) -> str:
    """`500 Server Error: ...` without headers or tokens."""
    data = exc.data if isinstance(exc.data, dict) else {}
    return f"{exc.status} {data.get('message') or 'error'}"


def fit_body(body: str, run_url: str | None) -> str:
    if len(body) <= MAX_BODY:
        return body
    where = f" ([the run's summary]({run_url}))" if run_url else ""
    note = f"*The report was cut here; the full report is in the job summary{where}.*"
    return f"{body[:MAX_BODY]}\n\n{note}\n"


def open_or_update_pull(
    repo: Repository, base: str, body: str, title: str = PR_TITLE
) -> tuple[PullRequest, bool]:
    """The one open PR from `pytpu/migrate`: its body updated, or a new one titled `title` (the
    migration commit's subject, which names the target). (pr, created)."""
    head = f"{repo.owner.login}:{gitrepo.BRANCH}"
    for pull in repo.get_pulls(state="open", head=head, base=base):
        pull.edit(body=body)
        return pull, False
    return repo.create_pull(title=title, body=body, head=gitrepo.BRANCH, base=base), True


def post_status(
    repo: Repository, sha: str, success: bool, description: str, url: str | None
) -> dict:
    """A commit status on the PR's head: runs started by a comment show no check otherwise.

    Posted directly (POST /repos/{owner}/{repo}/statuses/{sha}); PyGithub's Commit would first
    fetch the whole commit only to learn its sha."""
    body = {"state": "success" if success else "failure", "context": STATUS_CONTEXT}
    body["description"] = description[:140]  # GitHub's limit
    if url:
        body["target_url"] = url
    _, data = repo.requester.requestJsonAndCheck("POST", f"{repo.url}/statuses/{sha}", input=body)
    return data
