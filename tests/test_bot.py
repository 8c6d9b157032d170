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


def _command(peer: GitHubPeer, tmp: Path, title: str, faults=()) -> tuple[int, int, dict]:
    """A maintainer's `/pytpu migrate` on a new issue, the faults given as (method, path, status,
    options) set once the comment's id is known: (issue number, comment id, run)."""
    number, comment_id = peer.add_issue(OWNER, NAME, title, "", "/pytpu migrate", MAINTAINER)
    peer.clear_faults()  # an earlier test's unspent faults (50 502s, say) are not this run's
    for method, path, status, options in faults:
        peer.fail_next(method, path.replace("{comment_id}", str(comment_id)), status, **options)
    event = _event(peer, number, comment_id, "/pytpu migrate", MAINTAINER)
    return number, comment_id, run_action(peer, tmp, "issue_comment", event)


def _only_pytpus_commits_on_the_branch(peer: GitHubPeer) -> None:
    """Drop a person's commit an earlier test pushed, so the run reaches the pull request."""
    bare = git.Repo(peer.tiny_bare)
    ours = [c for c in bare.iter_commits(gitrepo.BRANCH) if gitrepo.is_ours(c)][0]
    bare.git.update_ref(f"refs/heads/{gitrepo.BRANCH}", ours.hexsha)


def _the_pull_url(peer: GitHubPeer) -> tuple[int, str]:
    pulls = [p for p in peer.state.pulls if p.head == gitrepo.BRANCH]
    assert len(pulls) == 1
    return pulls[0].number, f"{peer.server_url}/{OWNER}/{NAME}/pull/{pulls[0].number}"


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
    pr_url = f"{peer.server_url}/{OWNER}/{NAME}/pull/{pulls[0].number}"
    assert len(replies) == 1 and replies[0].startswith(f"Opened [#{pulls[0].number}]({pr_url}): ")
    outputs = result["outputs"]
    assert outputs["pr-number"] == str(pulls[0].number)
    assert outputs["pr-url"].endswith(f"/pull/{pulls[0].number}")
    assert outputs["parity"].split("/")[0] == outputs["parity"].split("/")[1] != "0"
    headline = body.splitlines()[0]
    speedup = outputs["speedup"]  # (empty when the machine was too noisy for a figure)
    assert (speedup and f"speedup x{speedup}" in headline) or (
        speedup == "" and "no trustworthy speedup" in headline
    )
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
    pr_number, pr_url = _the_pull_url(peer)
    assert _replies(peer, number)[0].startswith(f"Updated [#{pr_number}]({pr_url}) (no new commits")
    assert (tmp_path / "summary.md").read_text().startswith("**PyTPU: parity")


def test_a_migration_an_app_handed_over_answers_its_comment(peer, first_run, tmp_path):
    """`pytpu serve --run-on workflow` started the workflow for a comment (and gave it 👀): the
    run answers that comment as the command itself would."""
    number, comment_id = peer.add_issue(OWNER, NAME, "By the App", "", "/pytpu migrate", MAINTAINER)
    payload = {
        "inputs": {"issue": str(number), "comment": str(comment_id)},
        "ref": "refs/heads/main",
        "repository": {"full_name": f"{OWNER}/{NAME}", "name": NAME, "default_branch": "main"},
        "sender": {"login": peer.login},
    }
    result = run_action(peer, tmp_path, "workflow_dispatch", payload)
    assert result["done"].returncode == 0, result["log"][-3000:]
    pr_number, pr_url = _the_pull_url(peer)
    assert _reactions(peer, comment_id) == ["rocket"]
    [reply] = _replies(peer, number)
    assert reply.startswith(f"Updated [#{pr_number}]({pr_url})")
    assert result["outputs"]["pr-number"] == str(pr_number)


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
    _only_pytpus_commits_on_the_branch(peer)
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


# --- failures once the pull request exists: told with its link, never "could not finish" ----------

STATUS_PATH = rf"/repos/{OWNER}/{NAME}/statuses/[0-9a-f]{{40}}$"
# (status, the fault's options, what the reply must say about it)
STATUS_FAILURES = [
    pytest.param(
        403,
        {"permission": "statuses=write"},
        ["403 Resource not accessible by integration", "`statuses: write`", "`permissions:`"],
        id="403-no-statuses-permission",
    ),
    pytest.param(
        404, {}, ["404 Not Found", "commit statuses API was not found"], id="404-not-found"
    ),
]


@pytest.mark.parametrize(("status", "options", "reasons"), STATUS_FAILURES)
def test_a_failed_commit_status_keeps_the_pull_requests_link_in_the_reply(
    peer, first_run, tmp_path, status, options, reasons
):
    _only_pytpus_commits_on_the_branch(peer)
    seen = len(peer.requests)
    faults = [("POST", STATUS_PATH, status, options)]
    number, comment_id, result = _command(peer, tmp_path, f"Status {status}", faults)
    pr_number, pr_url = _the_pull_url(peer)
    # The migration's outcome stands: exit code, outputs, reactions; the status is a warning.
    assert result["done"].returncode == 0, result["log"][-3000:]
    assert result["outputs"]["pr-number"] == str(pr_number)
    assert result["outputs"]["pr-url"] == pr_url
    assert _reactions(peer, comment_id) == ["eyes", "rocket"]
    [reply] = _replies(peer, number)
    assert "could not finish" not in reply
    link, *_, told = reply.split("\n\n")
    assert link.startswith(f"Updated [#{pr_number}]({pr_url})")
    assert told.startswith("The pull request is open, but:\n- PyTPU could not post the commit")
    for reason in reasons:
        assert reason in told
    # Answered once: a missing permission and a 404 are not retried.
    asked = [e for e in peer.requests[seen:] if e.operation == "repos/create-commit-status"]
    assert [(e.status, e.fault) for e in asked] == [(status, True)]
    assert "::warning title=PyTPU::PyTPU could not post the commit status" in result["log"]
    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("**PyTPU: parity") and reasons[0] in summary
    assert peer.token not in result["log"] and peer.token not in reply


def test_a_failed_reaction_does_not_change_the_reply(peer, first_run, tmp_path):
    _only_pytpus_commits_on_the_branch(peer)
    reactions = r"/issues/comments/{comment_id}/reactions$"
    faults = [("POST", reactions, 403, {"permission": "issues=write", "count": 2})]
    number, comment_id, result = _command(peer, tmp_path, "No reactions", faults)
    pr_number, pr_url = _the_pull_url(peer)
    assert result["done"].returncode == 0, result["log"][-3000:]
    assert _reactions(peer, comment_id) == []  # neither 👀 nor 🚀 could be given
    # The reply is what a run without the fault writes: the PR's link and headline (the PR's
    # body, written by this run, starts with the same verdict), then the tests' summary; nothing
    # about the reactions. (Whether this run's result equals the first one's, and so the words
    # after the link, depends on the migration, not on the fault.)
    body = next(i.body for i in peer.state.issues if i.number == pr_number)
    headline = body.splitlines()[0].strip("*")
    [reply] = _replies(peer, number)
    assert reply.startswith(f"Updated [#{pr_number}]({pr_url})"), reply
    assert f"{headline}\n\n" in reply and "react" not in reply, reply
    assert "could not" not in reply and "pull request is open, but" not in reply, reply
    # The job's log and summary still say what was not done, and why.
    assert result["log"].count("::warning title=PyTPU::PyTPU could not react") == 2
    assert "`issues: write`" in (tmp_path / "summary.md").read_text()


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
