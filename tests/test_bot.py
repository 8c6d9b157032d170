"""`pytpu action` end to end against a real git server and a GitHub REST peer on loopback whose
every response is checked against GitHub's OpenAPI description (tests/github_peer)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import git
import pytest

from pytpu.bot import github_api
from pytpu.engine import gitrepo, migrate
from tests.github_peer import GitHubPeer

FIXTURE = Path(__file__).parent / "fixtures" / "testgen" / "tiny"
OWNER, NAME = "octo", "tiny"
MAINTAINER, STRANGER = "maintainer", "stranger"


def _source(folder: Path) -> Path:
    """The user's repository: a CUDA program with its PyTPU settings, one commit on main."""
    shutil.copytree(FIXTURE, folder)
    (folder / ".github").mkdir()
    (folder / ".github" / "pytpu.yml").write_text("run: python train.py --cuda --steps 16\n")
    repo = git.Repo.init(folder, initial_branch="main")
    repo.git.add("--all")
    person = git.Actor("Octo Cat", "octo@example.invalid")
    repo.index.commit("A CUDA program", author=person, committer=person)
    return folder


def _event(peer: GitHubPeer, number: int, comment_id: int, body: str, login: str) -> dict:
    repo = f"{peer.api_url}/repos/{OWNER}/{NAME}"
    return {
        "action": "created",
        "issue": {"number": number, "title": "Run on TPUs", "url": f"{repo}/issues/{number}"},
        "comment": {
            "id": comment_id,
            "body": body,
            "user": {"login": login},
            "author_association": "COLLABORATOR" if login == MAINTAINER else "NONE",
        },
        "repository": {"full_name": f"{OWNER}/{NAME}", "name": NAME, "default_branch": "main"},
        "sender": {"login": login},
    }


def run_action(peer: GitHubPeer, tmp: Path, event_name: str, payload: dict) -> dict:
    """`pytpu action` as the Action runs it: a child process with the Actions variables."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "event.json").write_text(json.dumps(payload))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTPU_", "GITHUB_"))}
    env.update(
        GITHUB_EVENT_NAME=event_name,
        GITHUB_EVENT_PATH=str(tmp / "event.json"),
        GITHUB_REPOSITORY=f"{OWNER}/{NAME}",
        GITHUB_API_URL=peer.api_url,
        GITHUB_SERVER_URL=peer.server_url,
        GITHUB_RUN_ID="4242",
        GITHUB_OUTPUT=str(tmp / "output"),
        GITHUB_STEP_SUMMARY=str(tmp / "summary.md"),
        RUNNER_TEMP=str(tmp),
        INPUT_TOKEN=peer.token,
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytpu.engine.cli", "action"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    outputs = {}
    if (tmp / "output").exists():
        outputs = dict(line.split("=", 1) for line in (tmp / "output").read_text().splitlines())
    return {"done": done, "outputs": outputs, "log": done.stdout + done.stderr, "dir": tmp}


def _reactions(peer: GitHubPeer, comment_id: int) -> list[str]:
    return [r.content for r in peer.state.reactions if r.comment_id == comment_id]


def _replies(peer: GitHubPeer, number: int) -> list[str]:
    return [c.body for c in peer.state.comments if c.issue_number == number][1:]


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    root = tmp_path_factory.mktemp("bot")
    with GitHubPeer(root / "peer") as github:
        github.tiny_bare = github.add_repo(
            OWNER, NAME, _source(root / "source"), default_branch="main"
        )
        github.set_permission(OWNER, NAME, MAINTAINER, "write")
        github.set_permission(OWNER, NAME, STRANGER, "read")
        yield github
        assert github.token_leaks() == []


@pytest.fixture(scope="module")
def first_run(peer, tmp_path_factory):
    number, comment_id = peer.add_issue(
        OWNER, NAME, "Run on TPUs", "Please migrate.", "/pytpu migrate", MAINTAINER
    )
    # A flaky API on the way: one 500 and one rate limit with Retry-After, both retried.
    peer.fail_next("POST", rf"/issues/comments/{comment_id}/reactions$", 500)
    peer.fail_next("GET", rf"/repos/{OWNER}/{NAME}$", 429, retry_after=1)
    result = run_action(
        peer,
        tmp_path_factory.mktemp("run1"),
        "issue_comment",
        _event(peer, number, comment_id, "/pytpu migrate", MAINTAINER),
    )
    return number, comment_id, result


def test_a_collaborators_command_opens_the_pull_request(peer, first_run):
    number, comment_id, result = first_run
    assert result["done"].returncode == 0, result["log"][-3000:]
    assert _reactions(peer, comment_id) == ["eyes", "rocket"]
    commits = peer.branch_commits(OWNER, NAME, gitrepo.BRANCH)
    main = peer.branch_commits(OWNER, NAME, "main")
    assert commits[2:] == main and len(main) == 1  # exactly two commits on top of main
    pulls = [p for p in peer.state.pulls if p.head == gitrepo.BRANCH]
    assert len(pulls) == 1 and pulls[0].base == "main"
    body = next(i.body for i in peer.state.issues if i.number == pulls[0].number)
    assert body.startswith("**PyTPU: parity")
    replies = _replies(peer, number)
    assert len(replies) == 1 and f"#{pulls[0].number}" in replies[0]
    outputs = result["outputs"]
    assert outputs["pr-number"] == str(pulls[0].number)
    assert outputs["pr-url"].endswith(f"/pull/{pulls[0].number}")
    assert outputs["parity"].split("/")[0] == outputs["parity"].split("/")[1] != "0"
    assert float(outputs["speedup"]) > 0
    assert (result["dir"] / "summary.md").read_text().startswith("**PyTPU: parity")
    statuses = [s for s in peer.state.statuses if s.sha == commits[0]]
    assert [(s.state, s.context) for s in statuses] == [("success", github_api.STATUS_CONTEXT)]
    assert statuses[0].target_url.endswith("/actions/runs/4242")
    # The faults were answered and retried, never surfaced.
    assert any(e.fault and e.status == 500 for e in peer.requests)
    assert any(e.fault and e.status == 429 for e in peer.requests)
    assert peer.token not in result["log"]


def test_a_second_command_updates_the_same_pull_request(peer, first_run, tmp_path):
    tip = peer.branch_commits(OWNER, NAME, gitrepo.BRANCH)[0]
    number, comment_id = peer.add_issue(OWNER, NAME, "Again", "", "/pytpu migrate", MAINTAINER)
    result = run_action(
        peer,
        tmp_path,
        "issue_comment",
        _event(peer, number, comment_id, "/pytpu migrate", MAINTAINER),
    )
    assert result["done"].returncode == 0, result["log"][-3000:]
    assert len([p for p in peer.state.pulls if p.head == gitrepo.BRANCH]) == 1
    assert peer.branch_commits(OWNER, NAME, gitrepo.BRANCH)[0] == tip  # nothing new to push
    assert "Updated #" in _replies(peer, number)[0]
    assert (tmp_path / "summary.md").read_text().startswith("**PyTPU: parity")


def test_a_persons_commit_on_the_branch_is_not_overwritten(peer, first_run, tmp_path):
    work = git.Repo.clone_from(peer.authenticated_url(OWNER, NAME), tmp_path / "person")
    work.git.checkout(gitrepo.BRANCH)
    (tmp_path / "person" / "NOTES.md").write_text("notes\n")
    work.index.add(["NOTES.md"])
    person = git.Actor("A Person", "person@example.invalid")
    mine = work.index.commit("My notes", author=person, committer=person)
    work.git.push("origin", gitrepo.BRANCH)
    number, comment_id = peer.add_issue(OWNER, NAME, "Once more", "", "/pytpu migrate", MAINTAINER)
    result = run_action(
        peer,
        tmp_path / "run",
        "issue_comment",
        _event(peer, number, comment_id, "/pytpu migrate", MAINTAINER),
    )
    assert result["done"].returncode == 1
    assert peer.branch_commits(OWNER, NAME, gitrepo.BRANCH)[0] == mine.hexsha
    reply = _replies(peer, number)[0]
    assert "did not overwrite" in reply and mine.hexsha[:7] in reply
    assert len([p for p in peer.state.pulls if p.head == gitrepo.BRANCH]) == 1


def test_a_commenter_without_write_access_gets_one_reply_and_nothing_runs(peer, tmp_path):
    before = peer.branches(OWNER, NAME)
    seen = len(peer.requests)
    number, comment_id = peer.add_issue(OWNER, NAME, "Me too", "", "/pytpu migrate", STRANGER)
    result = run_action(
        peer,
        tmp_path,
        "issue_comment",
        _event(peer, number, comment_id, "/pytpu migrate", STRANGER),
    )
    assert result["done"].returncode == 0, result["log"][-3000:]
    replies = _replies(peer, number)
    assert len(replies) == 1 and "write access" in replies[0]
    assert _reactions(peer, comment_id) == []
    assert not any(e.operation == "git" for e in peer.requests[seen:])  # nothing cloned
    assert peer.branches(OWNER, NAME) == before  # nothing pushed


def test_a_comment_that_is_not_a_command_is_ignored_quietly(peer, tmp_path):
    seen = len(peer.requests)
    number, comment_id = peer.add_issue(OWNER, NAME, "Chat", "", "thanks for /pytpu!", MAINTAINER)
    result = run_action(
        peer,
        tmp_path,
        "issue_comment",
        _event(peer, number, comment_id, "thanks for /pytpu!", MAINTAINER),
    )
    assert result["done"].returncode == 0
    assert _replies(peer, number) == [] and _reactions(peer, comment_id) == []
    assert not any(e.method == "POST" for e in peer.requests[seen:])


def test_api_failures_are_retried_then_reported_clearly(peer, first_run, tmp_path):
    # Drop the person's commit of the test before, so the run reaches the pull request.
    bare = git.Repo(peer.tiny_bare)
    ours = [c for c in bare.iter_commits(gitrepo.BRANCH) if gitrepo.is_ours(c)][0]
    bare.git.update_ref(f"refs/heads/{gitrepo.BRANCH}", ours.hexsha)
    number, comment_id = peer.add_issue(OWNER, NAME, "Flaky", "", "/pytpu migrate", MAINTAINER)
    peer.fail_next("GET", rf"/repos/{OWNER}/{NAME}/pulls$", 502, count=50)
    result = run_action(
        peer,
        tmp_path,
        "issue_comment",
        _event(peer, number, comment_id, "/pytpu migrate", MAINTAINER),
    )
    assert result["done"].returncode == 1
    failures = [e for e in peer.requests if e.fault and e.status == 502]
    assert len(failures) > 1  # retried before giving up
    reply = _replies(peer, number)[-1]
    assert "could not finish" in reply and "/actions/runs/4242" in reply
    assert "502" in reply or "Server Error" in reply or "retries" in reply.lower()
    assert "confused" in _reactions(peer, comment_id)
    assert peer.token not in result["log"] and peer.token not in reply


def test_a_push_to_another_branch_starts_nothing(peer, tmp_path):
    # PyTPU's own push to pytpu/migrate must not start another run.
    seen = len(peer.requests)
    payload = {"ref": f"refs/heads/{gitrepo.BRANCH}", "repository": {"full_name": "octo/tiny"}}
    result = run_action(peer, tmp_path, "push", payload)
    assert result["done"].returncode == 0, result["log"][-3000:]
    assert "nothing to do" in result["done"].stdout
    assert all(e.method == "GET" for e in peer.requests[seen:])


def test_migrate_error_class_for_a_taken_branch_is_what_the_bot_catches():
    assert issubclass(migrate.BranchTaken, migrate.MigrateError)
