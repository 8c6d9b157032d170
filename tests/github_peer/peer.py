"""GitHubPeer: git smart-HTTP and the REST fake on one loopback port, with faults and a log.

    with GitHubPeer() as peer:
        peer.add_repo("acme", "trainer", source_dir)
        gh = Github(base_url=peer.api_url, auth=Auth.Token(peer.token))
        git.Repo.clone_from(peer.authenticated_url("acme", "trainer"), target)

Paths: /api/v3/... is the REST API, /_peer/... the control API, anything else git.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from typing import Any

from . import rest
from .bare import BareRepos
from .control import PREFIX as CONTROL_PREFIX
from .control import ControlApp
from .faults import Faults, fault_headers
from .git_server import GitHttpApp
from .log import LogEntry, RequestLog, leaks, redact
from .rest import RestApi
from .schemas import SchemaViolation
from .state import ROLE_PERMISSION, PeerState, Repo, now
from .wsgi import LoopbackServer, read_body


class PeerError(AssertionError):
    """A request the peer does not model, or a bug in the peer itself."""


class GitHubPeer:
    """A real-ish GitHub on 127.0.0.1: start it with `with` (or start()/stop())."""

    def __init__(
        self,
        root: Path | str | None = None,
        *,
        token: str | None = None,
        login: str = "pytpu-bot",
        strict: bool = True,
    ) -> None:
        self._own_root = root is None
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="gh-peer-"))
        self.root.mkdir(parents=True, exist_ok=True)
        # Shaped like a GitHub token, unique per peer, so a leak is easy to search for.
        self.token = token or "ghp_peer" + secrets.token_hex(16)
        self.login = login
        self.strict = strict
        self._state = PeerState()
        self._state.user(login)
        self._repos = BareRepos(self.root)
        self._faults = Faults()
        self._log = RequestLog()
        self._rest = RestApi(self._state, self._repos, self.token, login, strict)
        self._git = GitHttpApp(self.root, lambda candidate: candidate == self.token)
        self._control = ControlApp(self)
        self._server: LoopbackServer | None = None

    # lifecycle -------------------------------------------------------------------------------

    def start(self) -> GitHubPeer:
        if self._server is None:
            self._server = LoopbackServer(self._app)
            self._rest.bind(self._server.url)
            self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> GitHubPeer:
        return self.start()

    def __exit__(self, exc_type: object, *rest_of_exc: object) -> None:
        self.stop()
        if exc_type is None and self.strict:
            self.check()

    # addresses -------------------------------------------------------------------------------

    @property
    def server_url(self) -> str:
        """http://127.0.0.1:PORT, the GITHUB_SERVER_URL of this peer."""
        if self._server is None:
            raise RuntimeError("the peer is not running")
        return self._server.url

    @property
    def api_url(self) -> str:
        """http://127.0.0.1:PORT/api/v3, PyGithub's base_url and GITHUB_API_URL."""
        return self.server_url + rest.PREFIX

    def clone_url(self, owner: str, name: str) -> str:
        return f"{self.server_url}/{owner}/{name}.git"

    def authenticated_url(self, owner: str, name: str, token: str | None = None) -> str:
        """The clone URL with `x-access-token:<token>@`, as GitHub Actions writes it."""
        host = self.server_url.removeprefix("http://")
        return f"http://x-access-token:{token or self.token}@{host}/{owner}/{name}.git"

    # seeding ---------------------------------------------------------------------------------

    def add_repo(
        self,
        owner: str,
        name: str,
        source_dir: Path | str,
        *,
        default_branch: str | None = None,
        private: bool = False,
    ) -> Path:
        """A repository made from a git repository (its commits) or a folder (one commit)."""
        bare = self._repos.create(owner, name, Path(source_dir), default_branch)
        with self._state.lock:
            self._state.user(owner)
            repo = Repo(owner, name, self._state.new_id(), private, now())
            # The token's user can push, like an installation token with contents: write.
            repo.roles[self.login] = "write"
            self._state.repos[repo.full_name] = repo
        return bare

    def _repo(self, owner: str, name: str) -> Repo:
        try:
            return self._state.repos[f"{owner}/{name}"]
        except KeyError:
            raise KeyError(f"no repository {owner}/{name}; add_repo() it first") from None

    def add_issue(
        self, owner: str, name: str, title: str, body: str, comment_body: str, commenter: str
    ) -> tuple[int, int]:
        """An issue opened by `commenter`, with their comment on it: (issue number, comment id)."""
        repo = self._repo(owner, name)
        with self._state.lock:
            issue = self._state.new_issue(repo, title, body, commenter)
            comment = self._state.new_comment(repo.full_name, issue.number, comment_body, commenter)
        return issue.number, comment.id

    def set_permission(self, owner: str, name: str, user: str, permission: str) -> None:
        """The user's role: admin, maintain, write, triage, read or none."""
        if permission not in ROLE_PERMISSION:
            raise ValueError(f"permission must be one of {sorted(ROLE_PERMISSION)}")
        repo = self._repo(owner, name)
        with self._state.lock:
            self._state.user(user)
            repo.roles[user] = permission

    def fail_next(
        self,
        method: str,
        path_regex: str,
        status: int,
        count: int = 1,
        retry_after: int | None = None,
        permission: str | None = None,
    ) -> None:
        """The next `count` requests whose method matches (or "*") and whose path (as sent,
        e.g. /api/v3/repos/o/r/pulls) re.search-matches get `status`: 5xx as GitHub's server
        errors, 403/429 as its secondary rate limit; `retry_after` adds Retry-After. A 403 with
        `permission` ("statuses=write") is GitHub's answer to a token that lacks it."""
        self._faults.add(method, path_regex, status, count, retry_after, permission)

    def clear_faults(self) -> None:
        """Forget the faults not yet spent (a test's leftovers must not reach the next one)."""
        self._faults.clear()

    # reading ---------------------------------------------------------------------------------

    @property
    def requests(self) -> list[LogEntry]:
        """Every request to git and the REST API so far, in order (not the control API's)."""
        return self._log.entries()

    @property
    def state(self) -> PeerState:
        """Live state: .issues, .pulls, .comments, .reactions, .statuses, .dispatches, .repos,
        .users."""
        return self._state

    @property
    def violations(self) -> list[SchemaViolation]:
        return list(self._rest.violations)

    @property
    def unmodelled(self) -> list[str]:
        """REST requests no route answered (the peer said 404)."""
        return list(self._rest.unrouted)

    def branch_commits(self, owner: str, name: str, branch: str) -> list[str]:
        """The branch's commits in the bare repository, newest first; [] if there is no branch."""
        if branch not in self._repos.branches(owner, name):
            return []
        return self._repos.log(owner, name, f"refs/heads/{branch}")

    def branches(self, owner: str, name: str) -> dict[str, str]:
        return self._repos.branches(owner, name)

    def check(self) -> None:
        """Raise if any body the peer sent broke GitHub's schema or a request was not modelled."""
        if self._rest.violations:
            raise SchemaViolation("\n".join(str(v) for v in self._rest.violations))
        if self._rest.crashes:
            raise PeerError("github-peer crashed on: " + "; ".join(self._rest.crashes))
        if self._rest.unrouted:
            raise PeerError(
                "github-peer does not model: " + ", ".join(self._rest.unrouted) + " (add a route)"
            )

    def token_leaks(self) -> list[str]:
        """Where the token shows up in what was sent or stored (it never should)."""
        texts: list[tuple[str, Any]] = []
        for entry in self.requests:
            label = f"{entry.method} {entry.path}"
            texts += [
                (f"{label} path", entry.path + "?" + entry.query),
                (f"{label} body", entry.body),
            ]
        with self._state.lock:
            for issue in self._state.issues:
                texts += [
                    (f"#{issue.number} title", issue.title),
                    (f"#{issue.number} body", issue.body),
                ]
            for comment in self._state.comments:
                texts.append((f"comment {comment.id}", comment.body))
            for status in self._state.statuses:
                texts.append(
                    (f"status {status.id}", (status.description, status.target_url, status.context))
                )
        return leaks(self.token, texts)

    # the WSGI app ----------------------------------------------------------------------------

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == CONTROL_PREFIX or path.startswith(CONTROL_PREFIX + "/"):
            return self._control(environ, start_response)
        method = environ["REQUEST_METHOD"].upper()
        fault = self._faults.take(method, path)
        seen: dict[str, int] = {}

        def capture(status: str, headers: list, exc_info: Any = None) -> Any:
            seen["status"] = int(status.split(" ", 1)[0])
            return start_response(status, headers, exc_info)

        if path == rest.PREFIX or path.startswith(rest.PREFIX + "/"):
            environ["peer.fault"] = fault
            result = self._rest(environ, capture)
        elif fault is not None:
            read_body(environ)  # drain it, so the client is not cut off mid-send
            phrase = HTTPStatus(fault.status).phrase
            capture(
                f"{fault.status} {phrase}", [("Content-Type", "text/plain"), *fault_headers(fault)]
            )
            result = [f"{phrase}\n".encode()]
        else:
            result = self._git(environ, capture)
        is_git = not path.startswith(rest.PREFIX)
        self._log.add(
            LogEntry(
                method=method,
                path=path,
                query=environ.get("QUERY_STRING", ""),
                status=seen.get("status", 0),
                authorization=redact(environ.get("HTTP_AUTHORIZATION")),
                operation="git" if is_git else environ.get("peer.operation"),
                schema=environ.get("peer.schema"),
                fault=fault is not None,
                body=environ.get("peer.body"),
                request_id=environ.get("peer.request_id", ""),
                chunked="chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower(),
            )
        )
        return result
