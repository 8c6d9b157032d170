"""The GitHub peer itself: PyGithub and GitPython against it, faults, the log, schema checks."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import git
import pytest
import requests
from github import (
    Auth,
    BadCredentialsException,
    Github,
    GithubException,
    GithubRetry,
    RateLimitExceededException,
    UnknownObjectException,
)
from urllib3.util.retry import Retry

from tests.github_peer import GitHubPeer, PeerError, SchemaViolation, github_peer_fixture
from tests.github_peer import bodies as peer_bodies
from tests.github_peer import rest as peer_rest
from tests.github_peer import routing as peer_routing
from tests.github_peer import schemas as peer_schemas
from tests.github_peer.bare import BareRepos
from tests.github_peer.git_server import GitServer

OWNER, NAME = "acme", "trainer"
BRANCH = "pytpu/migrate"
IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.invalid",
}

peer = github_peer_fixture(name="peer")


def git_env(**extra: str) -> dict[str, str]:
    """git isolated from the machine's config (no credential helper, no prompt)."""
    return {
        **IDENTITY,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        **extra,
    }


def make_source(path: Path, branch: str = "main") -> Path:
    """A small git repository with two commits on `branch`."""
    repo = git.Repo.init(path, initial_branch=branch)
    with repo.git.custom_environment(**git_env()):
        (path / "train.py").write_text("import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n")
        repo.git.add("-A")
        repo.git.commit("-m", "first")
        (path / "README.md").write_text("# trainer\n")
        repo.git.add("-A")
        repo.git.commit("-m", "second")
    return path


def client(peer: GitHubPeer, token: str | None = None, retry: object = None) -> Github:
    # PyGithub waits 0.25 s between requests and 1 s between writes by default: not here.
    return Github(
        base_url=peer.api_url,
        auth=Auth.Token(token or peer.token),
        retry=retry,
        seconds_between_requests=None,
        seconds_between_writes=None,
    )


def push_branch(peer: GitHubPeer, workdir: Path, payload: bytes = b"x = 1\n") -> str:
    """Clone over HTTP with the token, commit on BRANCH, push it; the new commit's sha."""
    clone = git.Repo.clone_from(peer.authenticated_url(OWNER, NAME), workdir, env=git_env())
    with clone.git.custom_environment(**git_env()):
        clone.git.checkout("-b", BRANCH)
        (workdir / "train.py").write_bytes(payload)
        clone.git.add("-A")
        clone.git.commit("-m", "Migrate to PyTorch/XLA")
        clone.git.push("origin", f"{BRANCH}:{BRANCH}")
    sha = clone.head.commit.hexsha
    clone.close()  # GitPython's cat-file helpers end here, not at exit
    return sha


def api_get(peer: GitHubPeer, path: str, token: str | None = None) -> requests.Response:
    return requests.get(
        peer.api_url + path, headers={"Authorization": f"token {token or peer.token}"}, timeout=10
    )


@pytest.fixture
def seeded(peer: GitHubPeer, tmp_path: Path) -> GitHubPeer:
    """acme/trainer from a git repository, with issue #1 where alice asks for a migration."""
    peer.add_repo(OWNER, NAME, make_source(tmp_path / "source"))
    peer.set_permission(OWNER, NAME, "alice", "write")
    peer.add_issue(OWNER, NAME, "Run on TPUs", "Please.", "/pytpu migrate", "alice")
    return peer


# repositories, branches, permissions ---------------------------------------------------------


def test_repository_and_branch(seeded: GitHubPeer) -> None:
    repo = client(seeded).get_repo(f"{OWNER}/{NAME}")
    assert repo.full_name == "acme/trainer"
    assert repo.default_branch == "main"
    assert repo.owner.login == OWNER
    assert repo.permissions.push and not repo.permissions.admin
    assert repo.clone_url == f"{seeded.server_url}/acme/trainer.git"
    branch = repo.get_branch("main")
    assert branch.commit.sha == seeded.branch_commits(OWNER, NAME, "main")[0]
    assert branch.commit.commit.message == "second"
    assert len(seeded.branch_commits(OWNER, NAME, "main")) == 2
    with pytest.raises(UnknownObjectException):
        repo.get_branch("nope")
    with pytest.raises(UnknownObjectException):
        client(seeded).get_repo("acme/missing")


def test_repository_from_plain_folder_with_named_default_branch(
    peer: GitHubPeer, tmp_path: Path
) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "train.py").write_text("print('hi')\n")
    bare = peer.add_repo("bob", "plain", folder, default_branch="trunk")
    assert bare == peer.root / "bob" / "plain.git" and (bare / "HEAD").is_file()
    repo = client(peer).get_repo("bob/plain")
    assert repo.default_branch == "trunk"
    assert len(peer.branch_commits("bob", "plain", "trunk")) == 1
    assert peer.branch_commits("bob", "plain", "main") == []


def test_collaborator_permission(seeded: GitHubPeer) -> None:
    seeded.set_permission(OWNER, NAME, "carol", "triage")
    seeded.set_permission(OWNER, NAME, "dave", "none")
    repo = client(seeded).get_repo(f"{OWNER}/{NAME}")
    assert repo.get_collaborator_permission("alice") == "write"
    assert repo.get_collaborator_permission(OWNER) == "admin"
    assert repo.get_collaborator_permission("carol") == "read"  # triage reports as read
    assert repo.get_collaborator_permission("dave") == "none"
    role = repo.get_collaborator_role_name("carol")
    assert role == "triage"
    assert repo.has_in_collaborators("alice") and not repo.has_in_collaborators("dave")
    with pytest.raises(UnknownObjectException):
        repo.get_collaborator_permission("nobody-at-all")
    with pytest.raises(ValueError):
        seeded.set_permission(OWNER, NAME, "eve", "owner")


# issues, comments, reactions -------------------------------------------------------------------


def test_issue_comments_and_reactions(seeded: GitHubPeer) -> None:
    repo = client(seeded).get_repo(f"{OWNER}/{NAME}")
    issue = repo.get_issue(1)
    assert (issue.title, issue.user.login, issue.pull_request) == ("Run on TPUs", "alice", None)
    [asked] = issue.get_comments()
    assert (asked.body, asked.user.login) == ("/pytpu migrate", "alice")
    assert repo.get_issue(1).get_comment(asked.id).body == "/pytpu migrate"

    eyes = asked.create_reaction("eyes")
    assert eyes.content == "eyes" and eyes.user.login == seeded.login
    # Reacting twice gives back the same reaction, as GitHub does.
    assert asked.create_reaction("eyes").id == eyes.id
    issue.create_reaction("rocket")
    reply = issue.create_comment("Migrating…")
    assert reply.user.login == seeded.login

    assert [c.body for c in issue.get_comments()] == ["/pytpu migrate", "Migrating…"]
    assert [(r.content, r.comment_id) for r in seeded.state.reactions] == [
        ("eyes", asked.id),
        ("rocket", None),
    ]
    assert repo.get_issue(1).get_comment(asked.id).reactions["eyes"] == 1
    with pytest.raises(GithubException) as refused:
        asked.create_reaction("thumbsup")  # not a GitHub reaction
    assert refused.value.status == 422
    with pytest.raises(UnknownObjectException):
        repo.get_issue(99)


def test_add_issue_returns_number_and_comment(seeded: GitHubPeer) -> None:
    number, comment_id = seeded.add_issue(OWNER, NAME, "Again", "", "/pytpu migrate", "zoe")
    assert number == 2
    assert seeded.state.comment("acme/trainer", comment_id).user == "zoe"
    comment = client(seeded).get_repo(f"{OWNER}/{NAME}").get_issue(2).get_comment(comment_id)
    assert comment.user.login == "zoe"


def test_comments_are_paginated_with_link_headers(seeded: GitHubPeer) -> None:
    for index in range(34):
        seeded.state.new_comment("acme/trainer", 1, f"note {index}", "alice")
    first = api_get(seeded, "/repos/acme/trainer/issues/1/comments")
    assert len(first.json()) == 30
    assert 'rel="next"' in first.headers["Link"]
    comments = client(seeded).get_repo(f"{OWNER}/{NAME}").get_issue(1).get_comments()
    assert len(list(comments)) == 35  # PyGithub followed the next link


# pull requests -----------------------------------------------------------------------------


def test_pull_request_lifecycle(seeded: GitHubPeer, tmp_path: Path) -> None:
    head_sha = push_branch(seeded, tmp_path / "work")
    repo = client(seeded).get_repo(f"{OWNER}/{NAME}")
    pull = repo.create_pull(title="Migrate", body="report", head=BRANCH, base="main")
    assert pull.number == 2  # issues and pull requests share one sequence
    assert (pull.head.ref, pull.head.sha, pull.base.ref) == (BRANCH, head_sha, "main")
    assert (pull.commits, pull.changed_files) == (1, 1)
    assert repo.get_issue(2).pull_request is not None

    with pytest.raises(GithubException) as duplicate:
        repo.create_pull(title="Again", body="", head=BRANCH, base="main")
    assert duplicate.value.status == 422
    assert duplicate.value.data["message"] == "Validation Failed"
    assert duplicate.value.data["errors"][0]["message"] == (
        "A pull request already exists for acme:pytpu/migrate."
    )
    with pytest.raises(GithubException) as missing:
        repo.create_pull(title="x", body="", head="no-such-branch", base="main")
    assert missing.value.data["errors"] == [
        {"resource": "PullRequest", "field": "head", "code": "invalid"}
    ]

    found = list(repo.get_pulls(state="open", head=f"{OWNER}:{BRANCH}", base="main"))
    assert [p.number for p in found] == [2]
    assert list(repo.get_pulls(state="open", head=f"{OWNER}:other")) == []
    assert list(repo.get_pulls(state="open", base="other")) == []

    found[0].edit(body="updated report")
    assert repo.get_pull(2).body == "updated report"
    pull.edit(state="closed")
    assert list(repo.get_pulls(state="open")) == []
    assert [p.state for p in repo.get_pulls(state="closed")] == ["closed"]
    # Closed, so a new one for the same branch may be opened.
    assert repo.create_pull(title="Again", body="", head=BRANCH, base="main").number == 3


# commit statuses ---------------------------------------------------------------------------


def test_commit_statuses(seeded: GitHubPeer) -> None:
    repo = client(seeded).get_repo(f"{OWNER}/{NAME}")
    sha = seeded.branch_commits(OWNER, NAME, "main")[0]
    status = repo.get_commit(sha).create_status(
        state="failure",
        target_url="http://ci.example.invalid/run/1",
        description="2 files could not be migrated",
        context="pytpu/migrate",
    )
    assert (status.state, status.context, status.creator.login) == (
        "failure",
        "pytpu/migrate",
        seeded.login,
    )
    repo.get_commit(sha).create_status(state="success", context="pytpu/migrate")
    assert [s.state for s in repo.get_commit(sha).get_statuses()] == ["success", "failure"]
    by_branch = api_get(seeded, "/repos/acme/trainer/commits/main/statuses").json()
    assert [s["state"] for s in by_branch] == ["success", "failure"]
    assert repo.get_commit(sha).get_combined_status().state == "success"
    assert [(s.sha, s.state) for s in seeded.state.statuses] == [
        (sha, "failure"),
        (sha, "success"),
    ]
    with pytest.raises(GithubException) as refused:
        repo.get_commit(sha).create_status(state="done")  # not a status state
    assert refused.value.status == 422


# users and the rate limit ------------------------------------------------------------------


def test_users_and_rate_limit(seeded: GitHubPeer) -> None:
    gh = client(seeded)
    assert gh.get_user().login == seeded.login
    assert gh.get_user("alice").login == "alice"
    with pytest.raises(UnknownObjectException):
        gh.get_user("nobody-at-all")
    limit = gh.get_rate_limit()
    assert limit.resources.core.limit == 5000
    assert 0 < limit.resources.core.remaining < 5000


# git over HTTP -----------------------------------------------------------------------------


def test_clone_and_push_over_http_is_visible_to_the_api(seeded: GitHubPeer, tmp_path: Path) -> None:
    # Over 1 MiB, so git sends the pack with Transfer-Encoding: chunked.
    payload = os.urandom(3 * 1024 * 1024)
    head_sha = push_branch(seeded, tmp_path / "work", payload)
    assert seeded.branch_commits(OWNER, NAME, BRANCH)[0] == head_sha
    branch = client(seeded).get_repo(f"{OWNER}/{NAME}").get_branch(BRANCH)
    assert branch.commit.sha == head_sha
    pushes = [r for r in seeded.requests if r.path.endswith("/git-receive-pack")]
    # git probes with a tiny request before it streams a large pack.
    assert [r.status for r in pushes] == [200] * len(pushes)
    assert any(r.chunked for r in pushes)


def test_clone_with_an_authorization_header_like_the_bot(
    seeded: GitHubPeer, tmp_path: Path
) -> None:
    basic = base64.b64encode(f"x-access-token:{seeded.token}".encode()).decode()
    header = git_env(
        GIT_CONFIG_COUNT="1",
        GIT_CONFIG_KEY_0=f"http.{seeded.server_url}/.extraheader",
        GIT_CONFIG_VALUE_0=f"Authorization: Basic {basic}",
    )
    clone = git.Repo.clone_from(seeded.clone_url(OWNER, NAME), tmp_path / "c", env=header)
    assert clone.head.commit.hexsha == seeded.branch_commits(OWNER, NAME, "main")[0]
    assert all(r.status == 200 for r in seeded.requests)  # sent up front: no 401 round trip


def test_wrong_token_fails_for_git_and_api(seeded: GitHubPeer, tmp_path: Path) -> None:
    url = seeded.authenticated_url(OWNER, NAME, token="ghp_wrong")
    with pytest.raises(git.GitCommandError) as failed:
        git.Repo.clone_from(url, tmp_path / "denied", env=git_env())
    assert "Authentication failed" in failed.value.stderr
    with pytest.raises(BadCredentialsException) as denied:
        client(seeded, token="ghp_wrong").get_repo(f"{OWNER}/{NAME}")
    assert denied.value.status == 401 and denied.value.data["message"] == "Bad credentials"
    assert api_get(seeded, "/user", token="ghp_wrong").status_code == 401
    assert requests.get(seeded.api_url + "/user", timeout=10).status_code == 401
    statuses = {(r.operation, r.status) for r in seeded.requests}
    assert ("git", 401) in statuses and ("repos/get", 401) in statuses


def test_push_with_wrong_token_fails(seeded: GitHubPeer, tmp_path: Path) -> None:
    clone = git.Repo.clone_from(
        seeded.authenticated_url(OWNER, NAME), tmp_path / "w", env=git_env()
    )
    with clone.git.custom_environment(**git_env()):
        clone.git.checkout("-b", BRANCH)
        clone.git.remote("set-url", "origin", seeded.authenticated_url(OWNER, NAME, "ghp_wrong"))
        with pytest.raises(git.GitCommandError) as failed:
            clone.git.push("origin", BRANCH)
    assert "Authentication failed" in failed.value.stderr
    assert seeded.branch_commits(OWNER, NAME, BRANCH) == []


def test_git_server_alone(tmp_path: Path) -> None:
    BareRepos(tmp_path / "root").create("o", "r", make_source(tmp_path / "source"), None)
    with GitServer(tmp_path / "root", token="s3cret") as server:
        host = server.url.removeprefix("http://")

        def ls_remote(url: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["git", "ls-remote", url],
                env={**os.environ, **git_env()},
                capture_output=True,
                text=True,
                timeout=30,
            )

        listed = ls_remote(f"http://x-access-token:s3cret@{host}/o/r.git")
        assert listed.returncode == 0 and "refs/heads/main" in listed.stdout
        denied = ls_remote(f"http://x-access-token:nope@{host}/o/r.git")
        assert denied.returncode != 0 and "Authentication failed" in denied.stderr
        missing = ls_remote(f"http://x-access-token:s3cret@{host}/o/absent.git")
        assert missing.returncode != 0 and "not found" in missing.stderr.lower()


# the log and leaks -------------------------------------------------------------------------


def test_log_redacts_credentials_and_finds_leaks(seeded: GitHubPeer, tmp_path: Path) -> None:
    push_branch(seeded, tmp_path / "work")
    client(seeded).get_repo(f"{OWNER}/{NAME}").get_issue(1).create_comment("done")
    log = seeded.requests
    assert {r.authorization for r in log} >= {"token <redacted>", "Basic <redacted>"}
    assert seeded.token not in repr(log)
    assert seeded.token_leaks() == []
    # The check can fail: a comment that carries the token is found.
    client(seeded).get_repo(f"{OWNER}/{NAME}").get_issue(1).create_comment(
        f"push failed: https://x-access-token:{seeded.token}@host/acme/trainer.git"
    )
    assert any(label.startswith("comment ") for label in seeded.token_leaks())
    assert any(label.endswith(" body") for label in seeded.token_leaks())


# faults ------------------------------------------------------------------------------------


def test_a_500_is_retried_by_pygithub(seeded: GitHubPeer) -> None:
    seeded.fail_next("GET", r"/repos/acme/trainer$", 500)
    retry = Retry(total=3, status_forcelist=[500, 502, 503], backoff_factor=0.1)
    repo = client(seeded, retry=retry).get_repo(f"{OWNER}/{NAME}")
    assert repo.default_branch == "main"
    answers = [(r.status, r.fault) for r in seeded.requests if r.operation == "repos/get"]
    assert answers == [(500, True), (200, False)]


def test_a_500_without_retries_fails(seeded: GitHubPeer) -> None:
    seeded.fail_next("GET", r"/repos/acme/trainer$", 502, count=2)
    gh = client(seeded)
    for _ in range(2):
        with pytest.raises(GithubException) as failed:
            gh.get_repo(f"{OWNER}/{NAME}")
        assert failed.value.status == 502
    assert gh.get_repo(f"{OWNER}/{NAME}").name == NAME  # the fault is spent


def test_secondary_rate_limit_429_as_configured(seeded: GitHubPeer) -> None:
    seeded.fail_next("POST", r"/issues/\d+/comments$", 429, retry_after=7)
    answer = requests.post(
        seeded.api_url + "/repos/acme/trainer/issues/1/comments",
        headers={"Authorization": f"Bearer {seeded.token}"},
        json={"body": "hi"},
        timeout=10,
    )
    assert answer.status_code == 429
    assert answer.headers["Retry-After"] == "7"
    assert answer.headers["X-RateLimit-Remaining"] == "0"
    assert answer.json()["message"].startswith("You have exceeded a secondary rate limit")
    assert seeded.state.comments_on("acme/trainer", 1)[-1].body == "/pytpu migrate"
    seeded.fail_next("POST", r"/issues/\d+/comments$", 403)
    with pytest.raises(RateLimitExceededException):
        client(seeded).get_repo(f"{OWNER}/{NAME}").get_issue(1).create_comment("hi")


def test_github_retry_waits_out_a_403_rate_limit(seeded: GitHubPeer) -> None:
    seeded.fail_next("GET", r"/repos/acme/trainer$", 403, retry_after=0)
    retry = GithubRetry(total=2, backoff_factor=0.01, secondary_rate_wait=0.01)
    assert client(seeded, retry=retry).get_repo(f"{OWNER}/{NAME}").name == NAME
    assert [r.status for r in seeded.requests] == [403, 200]


def test_faults_reach_git_too(seeded: GitHubPeer, tmp_path: Path) -> None:
    seeded.fail_next("*", r"\.git/info/refs$", 503)
    with pytest.raises(git.GitCommandError) as failed:
        git.Repo.clone_from(seeded.authenticated_url(OWNER, NAME), tmp_path / "a", env=git_env())
    assert "503" in failed.value.stderr
    git.Repo.clone_from(seeded.authenticated_url(OWNER, NAME), tmp_path / "b", env=git_env())


# schema checks -----------------------------------------------------------------------------


def test_every_response_is_validated(seeded: GitHubPeer, tmp_path: Path) -> None:
    push_branch(seeded, tmp_path / "work")
    repo = client(seeded).get_repo(f"{OWNER}/{NAME}")
    repo.create_pull(title="Migrate", body="", head=BRANCH, base="main")
    list(repo.get_pulls(head=f"{OWNER}:{BRANCH}"))
    repo.get_issue(1).create_comment("ok").create_reaction("+1")
    api_get(seeded, "/repos/acme/trainer/pulls/99")
    rest_calls = [r for r in seeded.requests if r.operation != "git"]
    assert {r.schema for r in rest_calls} >= {
        "FullRepository",
        "PullRequest",
        "list[PullRequestSimple]",
        "IssueComment",
        "Reaction",
        "BasicError",
    }
    assert all(r.operation and r.schema and "violation" not in r.schema for r in rest_calls)
    assert seeded.violations == []


def test_a_broken_body_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = peer_bodies.Bodies.repository

    def without_default_branch(self, *args, **kwargs):
        body = real(self, *args, **kwargs)
        del body["default_branch"]
        return body

    monkeypatch.setattr(peer_bodies.Bodies, "repository", without_default_branch)
    with pytest.raises(SchemaViolation, match=r"repos/get .*default_branch: Field required"):
        with GitHubPeer(tmp_path / "g") as peer:
            peer.add_repo(OWNER, NAME, make_source(tmp_path / "source"))
            with pytest.raises(GithubException) as failed:
                client(peer).get_repo(f"{OWNER}/{NAME}")
            assert failed.value.status == 500
            assert "github-peer" in failed.value.data["message"]
            assert len(peer.violations) == 1


def test_the_checker_rejects_wrong_types_and_invented_fields() -> None:
    op = peer_schemas.operation(
        "POST", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions"
    )
    good = {
        "id": 1,
        "node_id": "R_1",
        "user": None,
        "content": "eyes",
        "created_at": "2024-05-01T10:00:00Z",
    }
    assert peer_schemas.check_response(op, 201, good) == "Reaction"
    with pytest.raises(SchemaViolation, match=r"reactions/create-for-issue-comment .* id: "):
        peer_schemas.check_response(op, 201, {**good, "id": "1"})
    with pytest.raises(SchemaViolation, match=r"content: "):
        peer_schemas.check_response(op, 201, {**good, "content": "thumbsup"})
    with pytest.raises(SchemaViolation, match=r"mood: not in the schema"):
        peer_schemas.check_response(op, 201, {**good, "mood": "happy"})
    with pytest.raises(SchemaViolation, match=r"ValidationError: message: Field required"):
        peer_schemas.check_response(op, 422, {"errors": []})


def test_routes_are_operations_of_githubs_description() -> None:
    table = peer_schemas.operations()
    assert len(table) > 1000  # the whole description was read
    ids = {r.operation.id for r in peer_routing.routes()}
    assert {
        "repos/get",
        "repos/get-branch",
        "repos/get-collaborator-permission-level",
        "issues/get",
        "issues/create-comment",
        "issues/list-comments",
        "issues/get-comment",
        "reactions/create-for-issue-comment",
        "reactions/create-for-issue",
        "pulls/create",
        "pulls/list",
        "pulls/get",
        "pulls/update",
        "repos/create-commit-status",
        "repos/list-commit-statuses-for-ref",
        "users/get-authenticated",
        "users/get-by-username",
        "rate-limit/get",
    } <= ids
    assert table[("GET", "/repos/{owner}/{repo}")].response == "FullRepository"
    assert table[("POST", "/repos/{owner}/{repo}/pulls")].errors["422"] == "ValidationError"
    with pytest.raises(KeyError):
        peer_schemas.operation("GET", "/repos/{owner}/{repo}/not-an-endpoint")


def test_an_unmodelled_request_is_reported(tmp_path: Path) -> None:
    with pytest.raises(PeerError, match=r"GET /api/v3/repos/acme/trainer/labels"):
        with GitHubPeer(tmp_path / "g") as peer:
            peer.add_repo(OWNER, NAME, make_source(tmp_path / "source"))
            assert api_get(peer, "/repos/acme/trainer/labels").status_code == 404
            assert peer.unmodelled == ["GET /api/v3/repos/acme/trainer/labels"]


def test_a_crash_in_the_peer_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(self, call, owner, repo):
        raise RuntimeError("boom")

    monkeypatch.setattr(peer_rest.RestApi, "get_repo", crash)
    with pytest.raises(PeerError, match=r"crashed on: GET /api/v3/repos/acme/trainer: .*boom"):
        with GitHubPeer(tmp_path / "g") as peer:
            assert api_get(peer, "/repos/acme/trainer").status_code == 500


# the control API ---------------------------------------------------------------------------


def _control(peer: GitHubPeer, method: str, path: str, data: object = None) -> tuple[int, object]:
    body = json.dumps(data).encode() if data is not None else None
    request = urllib.request.Request(peer.server_url + "/_peer" + path, body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            raw = answer.read()
            return answer.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_control_api(peer: GitHubPeer, tmp_path: Path) -> None:
    source = str(make_source(tmp_path / "source"))
    status, made = _control(
        peer, "POST", "/repos", {"owner": OWNER, "name": NAME, "source": source}
    )
    assert status == 201 and Path(made["bare"]).is_dir()
    issue = {
        "owner": OWNER,
        "name": NAME,
        "title": "T",
        "body": "B",
        "comment_body": "/pytpu migrate",
        "commenter": "alice",
    }
    status, seeded = _control(peer, "POST", "/issues", issue)
    assert status == 201 and seeded["number"] == 1
    grant = {"owner": OWNER, "name": NAME, "user": "alice", "permission": "admin"}
    assert _control(peer, "PUT", "/permissions", grant)[0] == 204
    fault = {"method": "GET", "path": "/issues/1$", "status": 503}
    assert _control(peer, "POST", "/faults", fault)[0] == 201
    assert api_get(peer, "/repos/acme/trainer/issues/1").status_code == 503
    assert client(peer).get_repo(f"{OWNER}/{NAME}").get_collaborator_permission("alice") == "admin"
    status, log = _control(peer, "GET", "/requests")
    assert [(e["operation"], e["status"]) for e in log][:1] == [("issues/get", 503)]
    status, state = _control(peer, "GET", "/state")
    assert state["comments"][0]["body"] == "/pytpu migrate"
    assert _control(peer, "POST", "/repos", {"owner": OWNER})[0] == 400
    assert re.match(r"http://127\.0\.0\.1:\d+$", peer.server_url)
