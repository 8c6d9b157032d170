"""Cloning the repository and pushing PyTPU's branch, with GitPython.

The token travels in an HTTP header that git reads from its environment (GIT_CONFIG_*), never in
a URL or on a command line, so it cannot show in git's messages, in `git remote -v`, or in an
error GitPython raises. A push replaces the remote branch only when every commit on it is PyTPU's,
and with a lease on the commit that was checked, so a person's push in between is not lost.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import git

from pytpu.bot.tokens import redact
from pytpu.engine import gitrepo

REFSPEC = f"refs/heads/{gitrepo.BRANCH}:refs/heads/{gitrepo.BRANCH}"
# How git tells the HTTP status it was answered: "The requested URL returned error: 403".
_HTTP_STATUS = re.compile(r"returned error: (\d{3})\b")


class RemoteError(Exception):
    """A git operation with the remote failed; the message has no token in it. `status` is the
    HTTP status git was answered when it says one (403 for a token that may not push), as
    PyGithub's errors have it, so bot/followups.py explains both alike."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        found = _HTTP_STATUS.search(message)
        self.status = int(found.group(1)) if found else None


def _auth_environment(server_url: str, token: str) -> dict[str, str]:
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"http.{server_url.rstrip('/')}/.extraheader",
        "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
        "GIT_TERMINAL_PROMPT": "0",
    }


def repository_url(server_url: str, full_name: str) -> str:
    return f"{server_url.rstrip('/')}/{full_name}.git"


def clone(server_url: str, full_name: str, branch: str, token: str, target: Path) -> git.Repo:
    """A clone of `branch`, with PyTPU's branch fetched too when the remote has it."""
    env = _auth_environment(server_url, token)
    try:
        repo = git.Repo.clone_from(
            repository_url(server_url, full_name), target, branch=branch, env=env
        )
        with repo.git.custom_environment(**env):
            remote_heads = repo.git.ls_remote("--heads", "origin", gitrepo.BRANCH)
            if remote_heads.strip():
                repo.git.fetch("origin", f"+{REFSPEC}")
    except git.GitCommandError as exc:
        raise RemoteError(f"cloning {full_name}: {redact(str(exc.stderr or exc), token)}") from None
    with repo.config_writer() as config:
        config.set_value("user", "name", gitrepo.AUTHOR.name)
        config.set_value("user", "email", gitrepo.AUTHOR.email)
    return repo


def remote_tip(repo: git.Repo, server_url: str, token: str) -> str | None:
    """The commit `pytpu/migrate` points at on the remote now, or None when it has none."""
    with repo.git.custom_environment(**_auth_environment(server_url, token)):
        try:
            line = repo.git.ls_remote("--heads", "origin", gitrepo.BRANCH).strip()
        except git.GitCommandError as exc:
            raise RemoteError(f"reading the remote: {redact(str(exc.stderr), token)}") from None
    return line.split()[0] if line else None


def push(repo: git.Repo, server_url: str, token: str, expected: str | None) -> None:
    """Push `pytpu/migrate`, replacing the remote branch only if it still is at `expected`."""
    lease = f"--force-with-lease={gitrepo.BRANCH}:{expected or ''}"
    with repo.git.custom_environment(**_auth_environment(server_url, token)):
        try:
            repo.git.push(lease, "origin", REFSPEC)
        except git.GitCommandError as exc:
            raise RemoteError(
                f"pushing {gitrepo.BRANCH}: {redact(str(exc.stderr), token)}"
            ) from None
