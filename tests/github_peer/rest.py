"""A stateful fake of the GitHub REST API that the bot uses, under /api/v3 as on GitHub Enterprise.

PyGithub works against it unmodified: `Github(base_url=peer.api_url, auth=Auth.Token(token))`.
Branches and commits are read from the real bare repositories the git server serves; issues,
pull requests, comments, reactions and statuses live in PeerState.

Each route is registered under its OpenAPI path template, and its operation (id, request and
response schemas) is looked up in GitHub's description (schemas.py). Every response body is
validated against the operation's schema for its status before it is sent: in strict mode a body
that does not validate is replaced by a 500 and recorded in `violations`, which the peer raises
in the test. Request bodies are checked against the request schema, and refused with 422 as
GitHub would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlencode
from zlib import crc32

import yaml

from . import bodies, schemas
from .bare import BareRepos
from .bodies import Bodies, PullView
from .faults import Fault, fault_body, fault_headers
from .routing import ApiError, Call, Reply, Route, match, route, validation_failed
from .state import Dispatch, PeerState, Pull, Reaction, Repo, Status, now
from .wsgi import read_body

PREFIX = "/api/v3"
_COLLABORATOR_ROLES = {"admin", "maintain", "write", "triage", "read"}


def _id_of(path: str) -> int:
    """A workflow's ID: stable for its path."""
    return crc32(path.encode()) % 10**8


def _token(header: str | None) -> str | None:
    scheme, _, value = (header or "").strip().partition(" ")
    return value.strip() if scheme.lower() in ("token", "bearer") and value.strip() else None


class RestApi:
    """The WSGI app for /api/v3. `bind(server_url)` must be called once the port is known."""

    def __init__(self, state: PeerState, repos: BareRepos, token: str, login: str, strict: bool):
        self.state = state
        self.repos = repos
        self.token = token
        self.login = login
        self.strict = strict
        self.bodies: Bodies | None = None
        self.violations: list[schemas.SchemaViolation] = []
        self.unrouted: list[str] = []
        self.crashes: list[str] = []
        self._used = 0
        self._requests = 0
        self._reset = int(time.time()) + 3600

    def bind(self, server_url: str) -> None:
        self.bodies = Bodies(server_url)

    # plumbing ------------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        method = environ["REQUEST_METHOD"].upper()
        path = environ.get("PATH_INFO", "")[len(PREFIX) :] or "/"
        raw = read_body(environ)
        environ["peer.body"] = raw.decode("utf-8", "replace") if raw else None
        with self.state.lock:
            self._requests += 1
            request_id = f"PEER:{self._requests:06d}"
            matched = match(method, path)
            operation = (
                matched[0].operation
                if matched
                else schemas.Operation(id="(not modelled)", method=method, path=path)
            )
            reply = self._answer(environ, method, path, raw, matched, request_id)
            try:
                environ["peer.schema"] = schemas.check_response(operation, reply.status, reply.body)
            except schemas.SchemaViolation as exc:
                self.violations.append(exc)
                environ["peer.schema"] = f"violation: {exc}"
                if self.strict:
                    reply = Reply(500, bodies.error(500, f"github-peer: {exc}"))
            environ["peer.operation"] = operation.id if matched else None
            environ["peer.request_id"] = request_id
            headers = self._headers(reply, request_id)
        payload = b"" if reply.body is None else json.dumps(reply.body).encode()
        headers.append(("Content-Length", str(len(payload))))
        start_response(f"{reply.status} {HTTPStatus(reply.status).phrase}", headers)
        return [payload]

    def _headers(self, reply: Reply, request_id: str) -> list[tuple[str, str]]:
        headers = [
            ("X-GitHub-Request-Id", request_id),
            ("X-GitHub-Api-Version-Selected", "2022-11-28"),
        ]
        if reply.body is not None:
            headers.append(("Content-Type", "application/json; charset=utf-8"))
        names = {name.lower() for name, _ in reply.headers}
        if "x-ratelimit-remaining" not in names:
            headers += [
                ("X-RateLimit-Limit", str(bodies.RATE_LIMIT)),
                ("X-RateLimit-Remaining", str(max(bodies.RATE_LIMIT - self._used, 0))),
                ("X-RateLimit-Used", str(self._used)),
                ("X-RateLimit-Reset", str(self._reset)),
                ("X-RateLimit-Resource", "core"),
            ]
        return headers + reply.headers

    def _answer(
        self,
        environ: dict[str, Any],
        method: str,
        path: str,
        raw: bytes,
        matched: tuple[Route, dict[str, str]] | None,
        request_id: str,
    ) -> Reply:
        fault: Fault | None = environ.get("peer.fault")
        if fault is not None:
            return Reply(fault.status, fault_body(fault, request_id), fault_headers(fault))
        if matched is None:
            self.unrouted.append(f"{method} {PREFIX}{path}")
            return Reply(404, bodies.error(404, "Not Found"))
        if _token(environ.get("HTTP_AUTHORIZATION")) != self.token:
            return Reply(401, bodies.error(401, "Bad credentials"))
        self._used += 1
        found, params = matched
        try:
            data = json.loads(raw) if raw.strip() else None
        except ValueError:
            return Reply(400, bodies.error(400, "Problems parsing JSON"))
        if method in ("POST", "PATCH", "PUT"):
            problems = schemas.request_problems(found.operation, data if data is not None else {})
            if problems:
                return Reply(422, bodies.error(422, "Invalid request.\n\n" + "\n".join(problems)))
        call = Call(
            method=method,
            path=path,
            query=dict(parse_qsl(environ.get("QUERY_STRING", ""))),
            json=data if data is not None else {},
            login=self.login,
        )
        try:
            return getattr(self, found.handler)(call, **params)
        except ApiError as exc:
            return Reply(exc.status, exc.body)
        except Exception as exc:  # a bug in the peer: report it, keep serving
            problem = f"{type(exc).__name__}: {exc}"
            self.crashes.append(f"{method} {PREFIX}{path}: {problem}")
            return Reply(500, bodies.error(500, f"github-peer crashed: {problem}"))

    # helpers -------------------------------------------------------------------------------

    @property
    def b(self) -> Bodies:
        assert self.bodies is not None, "RestApi.bind() was not called"
        return self.bodies

    def _repo(self, owner: str, name: str) -> Repo:
        found = self.state.repos.get(f"{owner}/{name}")
        if found is None or not self.repos.exists(owner, name):
            raise ApiError(404, "Not Found")
        return found

    def role(self, repo: Repo, login: str) -> str:
        """The user's role; people without one can read a public repository."""
        if login == repo.owner:
            return "admin"
        return repo.roles.get(login, "none" if repo.private else "read")

    def association(self, repo: Repo, login: str) -> str:
        if login == repo.owner:
            return "OWNER"
        return "COLLABORATOR" if repo.roles.get(login) in _COLLABORATOR_ROLES else "NONE"

    def _page(self, call: Call, items: list[Any]) -> Reply:
        """One page of a list, with GitHub's Link header when there are more."""
        try:
            per_page = max(1, min(int(call.query.get("per_page", 30)), 100))
            page = max(1, int(call.query.get("page", 1)))
        except ValueError:
            raise ApiError(422, "Invalid page or per_page") from None
        last = max(1, -(-len(items) // per_page))
        links = []
        for rel, number in (("prev", page - 1), ("next", page + 1), ("first", 1), ("last", last)):
            if 1 <= number <= last and number != page:
                query = urlencode({**call.query, "per_page": per_page, "page": number})
                links.append(f'<{self.b.api}{call.path}?{query}>; rel="{rel}"')
        headers = [("Link", ", ".join(links))] if links else []
        return Reply(200, items[(page - 1) * per_page : page * per_page], headers)

    def _full_repo(self, repo: Repo, viewer: str) -> dict[str, Any]:
        default = self.repos.default_branch(repo.owner, repo.name)
        head = self.repos.resolve(repo.owner, repo.name, default)
        pushed = (
            bodies.utc(self.repos.commit(repo.owner, repo.name, head).committer_date)
            if head
            else repo.created_at
        )
        body = self.b.repository(
            repo, self.state.user(repo.owner), default, self.role(repo, viewer), pushed
        )
        open_issues = sum(
            1 for i in self.state.issues if i.repo == repo.full_name and i.state == "open"
        )
        body["open_issues_count"] = body["open_issues"] = open_issues
        return body

    def _reactions(self, repo: str, comment_id=None, issue_number=None) -> list[Reaction]:
        return [
            r
            for r in self.state.reactions
            if r.repo == repo
            and (comment_id is None or r.comment_id == comment_id)
            and (issue_number is None or r.issue_number == issue_number)
        ]

    def _issue_body(self, repo: Repo, number: int) -> dict[str, Any]:
        issue = self.state.issue(repo.full_name, number)
        if issue is None:
            raise ApiError(404, "Not Found")
        return self.b.issue(
            issue,
            self.state.user(issue.user),
            self.association(repo, issue.user),
            len(self.state.comments_on(repo.full_name, number)),
            self._reactions(repo.full_name, issue_number=number),
        )

    def _comment_body(self, repo: Repo, comment_id: int) -> dict[str, Any]:
        comment = self.state.comment(repo.full_name, comment_id)
        if comment is None:
            raise ApiError(404, "Not Found")
        return self.b.comment(
            comment,
            self.state.user(comment.user),
            self.association(repo, comment.user),
            self._reactions(repo.full_name, comment_id=comment_id),
        )

    def _pull_view(self, repo: Repo, pull: Pull) -> PullView:
        issue = self.state.issue(repo.full_name, pull.number)
        assert issue is not None
        branches = self.repos.branches(repo.owner, repo.name)
        full = self._full_repo(repo, self.login)
        return PullView(
            pull=pull,
            issue=issue,
            author=self.state.user(issue.user),
            owner=self.state.user(repo.owner),
            association=self.association(repo, issue.user),
            repo=self.b.repository_in_pull(full),
            # A deleted branch keeps the sha GitHub last saw; the peer has none, so "0"s.
            head_sha=branches.get(pull.head, "0" * 40),
            base_sha=branches.get(pull.base, "0" * 40),
        )

    def _pull_body(self, repo: Repo, pull: Pull) -> dict[str, Any]:
        view = self._pull_view(repo, pull)
        both = view.head_sha != "0" * 40 and view.base_sha != "0" * 40
        return self.b.pull(
            view,
            comments=len(self.state.comments_on(repo.full_name, pull.number)),
            commits=(
                self.repos.ahead(repo.owner, repo.name, view.base_sha, view.head_sha) if both else 0
            ),
            diffstat=(
                self.repos.diffstat(repo.owner, repo.name, view.base_sha, view.head_sha)
                if both
                else (0, 0, 0)
            ),
        )

    def _open_pull(
        self, repo: Repo, head: str, base: str, besides: int | None = None
    ) -> Pull | None:
        for pull in self.state.pulls:
            issue = self.state.issue(repo.full_name, pull.number)
            if (
                pull.repo == repo.full_name
                and pull.head == head
                and pull.base == base
                and issue is not None
                and issue.state == "open"
                and pull.number != besides
            ):
                return pull
        return None

    # repositories ----------------------------------------------------------------------------

    @route("GET", "/repos/{owner}/{repo}")
    def get_repo(self, call: Call, owner: str, repo: str) -> Reply:
        return Reply(200, self._full_repo(self._repo(owner, repo), call.login))

    @route("GET", "/repos/{owner}/{repo}/branches/{branch}")
    def get_branch(self, call: Call, owner: str, repo: str, branch: str) -> Reply:
        found = self._repo(owner, repo)
        sha = self.repos.branches(owner, repo).get(branch)
        if sha is None:
            raise ApiError(404, "Branch not found")
        info = self.repos.commit(owner, repo, sha)
        return Reply(200, self.b.branch(found.full_name, branch, info))

    @route("GET", "/repos/{owner}/{repo}/commits/{ref}")
    def get_commit(self, call: Call, owner: str, repo: str, ref: str) -> Reply:
        found = self._repo(owner, repo)
        sha = self.repos.resolve(owner, repo, ref)
        if sha is None:
            raise ApiError(422, f"No commit found for SHA: {ref}")
        return Reply(200, self.b.commit(found.full_name, self.repos.commit(owner, repo, sha)))

    @route("GET", "/repos/{owner}/{repo}/collaborators/{username}")
    def check_collaborator(self, call: Call, owner: str, repo: str, username: str) -> Reply:
        found = self._repo(owner, repo)
        if username == found.owner or found.roles.get(username) in _COLLABORATOR_ROLES:
            return Reply(204)
        raise ApiError(404, "Not Found")

    @route("GET", "/repos/{owner}/{repo}/collaborators/{username}/permission")
    def collaborator_permission(self, call: Call, owner: str, repo: str, username: str) -> Reply:
        found = self._repo(owner, repo)
        if username not in self.state.users:
            raise ApiError(404, "Not Found")
        role = self.role(found, username)
        return Reply(200, self.b.collaborator_permission(self.state.user(username), role))

    # issues, comments, reactions ---------------------------------------------------------------

    @route("GET", "/repos/{owner}/{repo}/issues/{issue_number}")
    def get_issue(self, call: Call, owner: str, repo: str, issue_number: str) -> Reply:
        return Reply(200, self._issue_body(self._repo(owner, repo), int(issue_number)))

    @route("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments")
    def list_comments(self, call: Call, owner: str, repo: str, issue_number: str) -> Reply:
        found = self._repo(owner, repo)
        self._issue_body(found, int(issue_number))  # 404 for an unknown issue
        comments = self.state.comments_on(found.full_name, int(issue_number))
        return self._page(call, [self._comment_body(found, c.id) for c in comments])

    @route("POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments")
    def create_comment(self, call: Call, owner: str, repo: str, issue_number: str) -> Reply:
        found = self._repo(owner, repo)
        self._issue_body(found, int(issue_number))
        comment = self.state.new_comment(
            found.full_name, int(issue_number), call.json["body"], call.login
        )
        body = self._comment_body(found, comment.id)
        return Reply(201, body, [("Location", body["url"])])

    @route("GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}")
    def get_comment(self, call: Call, owner: str, repo: str, comment_id: str) -> Reply:
        return Reply(200, self._comment_body(self._repo(owner, repo), int(comment_id)))

    @route("PATCH", "/repos/{owner}/{repo}/issues/comments/{comment_id}")
    def update_comment(self, call: Call, owner: str, repo: str, comment_id: str) -> Reply:
        found = self._repo(owner, repo)
        comment = self.state.comment(found.full_name, int(comment_id))
        if comment is None:
            raise ApiError(404, "Not Found")
        comment.body = call.json["body"]
        comment.updated_at = now()
        return Reply(200, self._comment_body(found, comment.id))

    def _react(self, repo: Repo, content: str, comment_id=None, issue_number=None) -> Reply:
        for existing in self._reactions(repo.full_name, comment_id, issue_number):
            if existing.user == self.login and existing.content == content:
                # GitHub answers 200 with the reaction the user already gave.
                return Reply(200, self.b.reaction(existing, self.state.user(self.login)))
        reaction = Reaction(
            repo=repo.full_name,
            id=self.state.new_id(),
            content=content,
            user=self.login,
            created_at=now(),
            comment_id=comment_id,
            issue_number=issue_number,
        )
        self.state.reactions.append(reaction)
        return Reply(201, self.b.reaction(reaction, self.state.user(self.login)))

    @route("POST", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions")
    def react_to_comment(self, call: Call, owner: str, repo: str, comment_id: str) -> Reply:
        found = self._repo(owner, repo)
        self._comment_body(found, int(comment_id))
        return self._react(found, call.json["content"], comment_id=int(comment_id))

    @route("GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions")
    def list_comment_reactions(self, call: Call, owner: str, repo: str, comment_id: str) -> Reply:
        found = self._repo(owner, repo)
        self._comment_body(found, int(comment_id))
        reactions = self._reactions(found.full_name, comment_id=int(comment_id))
        return self._page(call, [self.b.reaction(r, self.state.user(r.user)) for r in reactions])

    @route("POST", "/repos/{owner}/{repo}/issues/{issue_number}/reactions")
    def react_to_issue(self, call: Call, owner: str, repo: str, issue_number: str) -> Reply:
        found = self._repo(owner, repo)
        self._issue_body(found, int(issue_number))
        return self._react(found, call.json["content"], issue_number=int(issue_number))

    @route("GET", "/repos/{owner}/{repo}/issues/{issue_number}/reactions")
    def list_issue_reactions(self, call: Call, owner: str, repo: str, issue_number: str) -> Reply:
        found = self._repo(owner, repo)
        self._issue_body(found, int(issue_number))
        reactions = self._reactions(found.full_name, issue_number=int(issue_number))
        return self._page(call, [self.b.reaction(r, self.state.user(r.user)) for r in reactions])

    # pull requests ---------------------------------------------------------------------------

    @route("GET", "/repos/{owner}/{repo}/pulls")
    def list_pulls(self, call: Call, owner: str, repo: str) -> Reply:
        found = self._repo(owner, repo)
        state = call.query.get("state", "open")
        if state not in ("open", "closed", "all"):
            raise validation_failed(
                {"resource": "PullRequest", "field": "state", "code": "invalid"}
            )
        head_owner, _, head_branch = call.query.get("head", "").partition(":")
        base = call.query.get("base")
        chosen = []
        for pull in self.state.pulls:
            issue = self.state.issue(found.full_name, pull.number)
            if pull.repo != found.full_name or issue is None:
                continue
            if state != "all" and issue.state != state:
                continue
            # `head` is "user:branch" or just "user"; forks are not modelled, so user = owner.
            if head_owner and (head_owner != found.owner or head_branch not in ("", pull.head)):
                continue
            if base and pull.base != base:
                continue
            chosen.append((pull, issue))
        key = "updated_at" if call.query.get("sort") == "updated" else "created_at"
        descending = call.query.get("direction", "desc") == "desc"
        chosen.sort(key=lambda pair: (getattr(pair[1], key), pair[0].number), reverse=descending)
        views = [self.b.pull_simple(self._pull_view(found, pull)) for pull, _ in chosen]
        return self._page(call, views)

    @route("POST", "/repos/{owner}/{repo}/pulls")
    def create_pull(self, call: Call, owner: str, repo: str) -> Reply:
        found = self._repo(owner, repo)
        data = call.json
        head_owner, _, head = data["head"].rpartition(":")
        base = data["base"]
        if data.get("issue") is not None:
            raise ApiError(422, "github-peer does not model turning an issue into a PR")
        if not data.get("title"):
            raise validation_failed(
                {"resource": "Issue", "field": "title", "code": "missing_field"}
            )
        branches = self.repos.branches(owner, repo)
        if base not in branches:
            raise validation_failed({"resource": "PullRequest", "field": "base", "code": "invalid"})
        if head not in branches or head_owner not in ("", found.owner):
            raise validation_failed({"resource": "PullRequest", "field": "head", "code": "invalid"})
        if self._open_pull(found, head, base) is not None:
            raise validation_failed(
                {
                    "resource": "PullRequest",
                    "code": "custom",
                    "message": f"A pull request already exists for {found.owner}:{head}.",
                }
            )
        if self.repos.ahead(owner, repo, branches[base], branches[head]) == 0:
            raise validation_failed(
                {
                    "resource": "PullRequest",
                    "code": "custom",
                    "message": f"No commits between {base} and {head}",
                }
            )
        issue = self.state.new_issue(found, data["title"], data.get("body"), call.login, True)
        pull = Pull(
            repo=found.full_name,
            number=issue.number,
            id=self.state.new_id(),
            head=head,
            base=base,
            draft=bool(data.get("draft", False)),
            maintainer_can_modify=bool(data.get("maintainer_can_modify", True)),
        )
        self.state.pulls.append(pull)
        body = self._pull_body(found, pull)
        return Reply(201, body, [("Location", body["url"])])

    def _pull(self, repo: Repo, number: str) -> Pull:
        pull = self.state.pull(repo.full_name, int(number))
        if pull is None:
            raise ApiError(404, "Not Found")
        return pull

    @route("GET", "/repos/{owner}/{repo}/pulls/{pull_number}")
    def get_pull(self, call: Call, owner: str, repo: str, pull_number: str) -> Reply:
        found = self._repo(owner, repo)
        return Reply(200, self._pull_body(found, self._pull(found, pull_number)))

    @route("PATCH", "/repos/{owner}/{repo}/pulls/{pull_number}")
    def update_pull(self, call: Call, owner: str, repo: str, pull_number: str) -> Reply:
        found = self._repo(owner, repo)
        pull = self._pull(found, pull_number)
        issue = self.state.issue(found.full_name, pull.number)
        assert issue is not None
        data = call.json
        base = data.get("base", pull.base)
        if base not in self.repos.branches(owner, repo):
            raise validation_failed({"resource": "PullRequest", "field": "base", "code": "invalid"})
        reopening = data.get("state") == "open" and issue.state == "closed"
        staying_open = issue.state == "open" and data.get("state") != "closed"
        if (reopening or staying_open) and self._open_pull(found, pull.head, base, pull.number):
            raise validation_failed(
                {
                    "resource": "PullRequest",
                    "code": "custom",
                    "message": f"A pull request already exists for {found.owner}:{pull.head}.",
                }
            )
        pull.base = base
        issue.title = data.get("title", issue.title)
        issue.body = data.get("body", issue.body)
        pull.maintainer_can_modify = data.get("maintainer_can_modify", pull.maintainer_can_modify)
        if "state" in data and data["state"] != issue.state:
            issue.state = data["state"]
            issue.closed_at = now() if issue.state == "closed" else None
        issue.updated_at = now()
        return Reply(200, self._pull_body(found, pull))

    # commit statuses -------------------------------------------------------------------------

    @route("POST", "/repos/{owner}/{repo}/statuses/{sha}")
    def create_status(self, call: Call, owner: str, repo: str, sha: str) -> Reply:
        found = self._repo(owner, repo)
        resolved = self.repos.resolve(owner, repo, sha)
        if resolved is None or not resolved.startswith(sha.lower()):
            raise ApiError(422, f"No commit found for SHA: {sha}")
        data = call.json
        status = Status(
            repo=found.full_name,
            id=self.state.new_id(),
            sha=resolved,
            state=data["state"],
            context=data.get("context") or "default",
            creator=call.login,
            created_at=now(),
            target_url=data.get("target_url"),
            description=data.get("description"),
        )
        self.state.statuses.append(status)
        body = self.b.status(status, self.state.user(call.login))
        return Reply(201, body, [("Location", body["url"])])

    def _statuses(self, owner: str, repo: str, ref: str) -> tuple[Repo, str, list[Status]]:
        found = self._repo(owner, repo)
        sha = self.repos.resolve(owner, repo, ref)
        if sha is None:
            raise ApiError(404, "Not Found")
        chosen = [s for s in self.state.statuses if s.repo == found.full_name and s.sha == sha]
        return found, sha, chosen[::-1]  # newest first, as GitHub lists them

    @route("GET", "/repos/{owner}/{repo}/commits/{ref}/statuses")
    def list_statuses(self, call: Call, owner: str, repo: str, ref: str) -> Reply:
        _, _, chosen = self._statuses(owner, repo, ref)
        return self._page(call, [self.b.status(s, self.state.user(s.creator)) for s in chosen])

    # PyGithub's Commit.get_statuses() still calls this older path.
    @route(
        "GET",
        "/repos/{owner}/{repo}/statuses/{ref}",
        alias_of="/repos/{owner}/{repo}/commits/{ref}/statuses",
    )
    def list_statuses_legacy(self, call: Call, owner: str, repo: str, ref: str) -> Reply:
        return self.list_statuses(call, owner, repo, ref)

    @route("GET", "/repos/{owner}/{repo}/commits/{ref}/status")
    def combined_status(self, call: Call, owner: str, repo: str, ref: str) -> Reply:
        found, sha, chosen = self._statuses(owner, repo, ref)
        latest: dict[str, Status] = {}
        for status in chosen:  # newest first: the first per context wins
            latest.setdefault(status.context, status)
        body = self.b.combined_status(
            self._full_repo(found, call.login),
            sha,
            [(s, self.state.user(s.creator)) for s in latest.values()],
        )
        return Reply(200, body)

    # workflows -------------------------------------------------------------------------------

    def _workflow(self, owner: str, repo: str, workflow_id: str) -> tuple[Repo, str, dict]:
        """A workflow by its file name or ID: (repository, path, parsed file), from the default
        branch, as GitHub lists the workflows it knows."""
        found = self._repo(owner, repo)
        branch = self.repos.default_branch(owner, repo)
        for path in (f".github/workflows/{workflow_id}", ".github/workflows/pytpu.yml"):
            text = self.repos.file(owner, repo, branch, path)
            if text is not None and workflow_id in (path.rsplit("/", 1)[1], str(_id_of(path))):
                return found, path, yaml.safe_load(text) or {}
        raise ApiError(404, "Not Found")

    @route("GET", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}")
    def get_workflow(self, call: Call, owner: str, repo: str, workflow_id: str) -> Reply:
        found, path, workflow = self._workflow(owner, repo, workflow_id)
        name = workflow.get("name") or path
        return Reply(200, self.b.workflow(found.full_name, _id_of(path), path, name))

    @route("POST", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches")
    def dispatch_workflow(self, call: Call, owner: str, repo: str, workflow_id: str) -> Reply:
        found, path, workflow = self._workflow(owner, repo, workflow_id)
        triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
        if not isinstance(triggers, dict | list | str) or "workflow_dispatch" not in triggers:
            raise ApiError(422, "Workflow does not have 'workflow_dispatch' trigger")
        data = call.json
        if self.repos.resolve(owner, repo, data["ref"]) is None:
            raise ApiError(422, f"No ref found for: {data['ref']}")
        with self.state.lock:
            self.state.dispatches.append(
                Dispatch(found.full_name, path, data["ref"], data.get("inputs") or {}, call.login)
            )
        return Reply(204)

    # users and rate limits -------------------------------------------------------------------

    def _owned(self, login: str) -> int:
        return sum(1 for r in self.state.repos.values() if r.owner == login)

    @route("GET", "/user")
    def authenticated_user(self, call: Call) -> Reply:
        user = self.state.user(call.login)
        return Reply(200, self.b.private_user(user, self._owned(call.login)))

    @route("GET", "/users/{username}")
    def get_user(self, call: Call, username: str) -> Reply:
        if username not in self.state.users:
            raise ApiError(404, "Not Found")
        return Reply(200, self.b.public_user(self.state.users[username], self._owned(username)))

    @route("GET", "/rate_limit")
    def rate_limit(self, call: Call) -> Reply:
        self._used -= 1  # GitHub does not count this call
        return Reply(200, self.b.rate_limit(self._used, self._reset))
