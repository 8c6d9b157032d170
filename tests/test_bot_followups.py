"""The follow-ups against the GitHub peer (no migration, so fast): the commit status refused the
ways GitHub refuses it, and what PyTPU makes of each answer (bot/followups.py); and the push and
the pull request refused before it exists, which the "could not finish" reply explains alike. The
peer checks every answer it sends against GitHub's OpenAPI description, the injected errors
included."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import git
import pytest
import requests

from pytpu.bot import followups, github_api, handle
from pytpu.bot.context import RunContext
from pytpu.engine import gitrepo, migrate
from tests.github_peer import GitHubPeer, github_peer_fixture

peer = github_peer_fixture(name="peer")
OWNER, NAME = "octo", "tiny"
STATUSES = rf"/repos/{OWNER}/{NAME}/statuses/"


@pytest.fixture
def repo_and_sha(peer: GitHubPeer, tmp_path: Path):
    source = tmp_path / "source"
    source.mkdir()
    (source / "train.py").write_text("print('train')\n")
    peer.add_repo(OWNER, NAME, source)
    # Few, short retries: the behaviour of `pytpu action`'s client, without its waiting.
    gh = github_api.connect(peer.api_url, peer.token, retries=1, backoff=0.01)
    return gh.get_repo(f"{OWNER}/{NAME}"), peer.branch_commits(OWNER, NAME, "main")[0]


def _post_status(peer: GitHubPeer, repo_and_sha) -> list[followups.Failure]:
    repo, sha = repo_and_sha
    failures: list[followups.Failure] = []
    logging.getLogger("pytpu.bot").disabled = True  # the log is tested in test_bot_parts
    try:
        followups.attempt(
            followups.STATUS,
            lambda: github_api.post_status(repo, sha, True, "parity 5/5", None),
            failures,
            peer.token,
        )
    finally:
        logging.getLogger("pytpu.bot").disabled = False
    return failures


def _asked(peer: GitHubPeer) -> list[tuple[int, bool]]:
    return [
        (e.status, e.fault) for e in peer.requests if e.operation == "repos/create-commit-status"
    ]


def test_a_token_without_statuses_write_gets_githubs_403_once(peer, repo_and_sha):
    peer.fail_next("POST", STATUSES, 403, permission="statuses=write")
    [failure] = _post_status(peer, repo_and_sha)
    assert failure.why.startswith(
        "GitHub answered 403 Resource not accessible by integration: the token lacks the "
        "`statuses: write` permission. Add `statuses: write` to the `permissions:` block"
    )
    assert _asked(peer) == [(403, True)]  # not retried: waiting does not grant a permission
    assert peer.state.statuses == []
    assert _post_status(peer, repo_and_sha) == []  # the fault is spent: the status is posted
    assert [s.context for s in peer.state.statuses] == [github_api.STATUS_CONTEXT]


def test_a_404_on_the_status_says_what_was_not_found(peer, repo_and_sha):
    peer.fail_next("POST", STATUSES, 404)
    [failure] = _post_status(peer, repo_and_sha)
    assert failure.why.startswith("GitHub answered 404 Not Found: the commit or the commit")
    assert _asked(peer) == [(404, True)]


@pytest.mark.parametrize("status", [403, 502])
def test_retries_that_run_out_are_not_a_missing_permission(peer, repo_and_sha, status):
    # A 403 without a permission is GitHub's secondary rate limit: retried, like a 502.
    peer.fail_next("POST", STATUSES, status, count=2)
    [failure] = _post_status(peer, repo_and_sha)
    assert failure.why.startswith("GitHub kept failing until PyTPU's retries ran out")
    assert f"too many {status} error responses" in failure.why
    assert "permission" not in failure.why
    assert _asked(peer) == [(status, True), (status, True)]


def test_the_permission_fault_is_githubs_answer(peer, repo_and_sha):
    peer.fail_next("POST", STATUSES, 403, permission="statuses=write")
    _, sha = repo_and_sha
    answer = requests.post(
        f"{peer.api_url}/repos/{OWNER}/{NAME}/statuses/{sha}",
        headers={"Authorization": f"Bearer {peer.token}"},
        json={"state": "success"},
        timeout=10,
    )
    assert answer.status_code == 403
    assert answer.headers["X-Accepted-GitHub-Permissions"] == "statuses=write"
    assert answer.headers["X-RateLimit-Remaining"] != "0"  # not a rate limit
    assert answer.json()["message"] == "Resource not accessible by integration"
    assert peer.requests[-1].schema == "BasicError"  # valid, as GitHub's error body
    with pytest.raises(ValueError, match="403"):
        peer.fail_next("POST", STATUSES, 404, permission="statuses=write")


# --- before the pull request exists: "could not finish", and the permission a 403 needs ----------

MAINTAINER = "maintainer"
RUN_URL = f"https://github.example/{OWNER}/{NAME}/actions/runs/4242"
ADVICE = (
    "Add `{permission}` to the `permissions:` block of the job that runs PyTPU (in "
    "`.github/workflows/pytpu.yml` if you copied PyTPU's example workflow, which lists everything "
    "PyTPU needs); a GitHub App or fine-grained token passed as `token` needs the same permission."
)


def _migrated(checkout: Path) -> SimpleNamespace:
    """In place of `migrate.migrate`: PyTPU's commit on its branch, and the report (all the bot
    reads of the result before the pull request exists)."""
    git.Repo(checkout).git.switch("-c", gitrepo.BRANCH)
    gitrepo.commit_paths(checkout, [], "Migrate to PyTorch/XLA (PyTPU)", "")
    return SimpleNamespace(markdown="**PyTPU: parity 5/5**\n")


def _command(peer: GitHubPeer, tmp_path: Path) -> tuple[int, int]:
    """A maintainer's `/pytpu migrate`, handled as `pytpu action` does: (issue, comment id)."""
    peer.set_permission(OWNER, NAME, MAINTAINER, "write")
    number, comment_id = peer.add_issue(OWNER, NAME, "TPUs", "", "/pytpu migrate", MAINTAINER)
    payload = {
        "action": "created",
        "issue": {"number": number},
        "comment": {"id": comment_id, "body": "/pytpu migrate", "user": {"login": MAINTAINER}},
    }
    context = RunContext(
        event_name="issue_comment",
        payload=payload,
        repository=f"{OWNER}/{NAME}",
        api_url=peer.api_url,
        server_url=peer.server_url,
        token=peer.token,
        workdir=tmp_path,
        run_url=RUN_URL,
    )
    result = handle.handle(context)
    assert result.ran and result.exit_code == 1 and result.pr_number is None
    return number, comment_id


REFUSED_BEFORE_THE_PULL_REQUEST = [
    pytest.param(
        r"\.git/git-receive-pack$",
        "contents=write",
        "RemoteError: pushing pytpu/migrate: ",
        "contents: write",
        id="push",
    ),
    pytest.param(
        rf"/repos/{OWNER}/{NAME}/pulls$",
        "pull_requests=write",
        "GitHub answered 403 Resource not accessible by integration",
        "pull-requests: write",
        id="pull-request",
    ),
]


@pytest.mark.parametrize(
    ("path", "header", "answer", "permission"), REFUSED_BEFORE_THE_PULL_REQUEST
)
def test_a_403_before_the_pull_request_names_the_workflows_missing_permission(
    peer, repo_and_sha, monkeypatch, tmp_path, path, header, answer, permission
):
    monkeypatch.setattr(migrate, "migrate", _migrated)
    peer.fail_next("POST", path, 403, permission=header)
    number, comment_id = _command(peer, tmp_path)
    [reply] = [c.body for c in peer.state.comments if c.issue_number == number][1:]
    advice = ADVICE.format(permission=permission)
    assert reply.startswith(f"PyTPU could not finish `/pytpu migrate`: {answer}"), reply
    assert reply.endswith(
        f": the token lacks the `{permission}` permission. {advice} "
        f"See [the run]({RUN_URL}) for details."
    ), reply
    assert [(e.status, e.fault) for e in peer.requests if e.status == 403] == [(403, True)]
    assert peer.state.pulls == []
    assert [r.content for r in peer.state.reactions if r.comment_id == comment_id] == [
        "eyes",
        "confused",
    ]
    assert peer.token not in reply


def test_other_failures_before_the_pull_request_read_as_before(
    peer, repo_and_sha, monkeypatch, tmp_path
):
    monkeypatch.setattr(migrate, "migrate", _migrated)
    peer.fail_next("POST", rf"/repos/{OWNER}/{NAME}/pulls$", 422)
    number, _ = _command(peer, tmp_path)
    [reply] = [c.body for c in peer.state.comments if c.issue_number == number][1:]
    assert reply == (
        "PyTPU could not finish `/pytpu migrate`: GitHub answered 422 Unprocessable Entity. "
        f"See [the run]({RUN_URL}) for details."
    )
