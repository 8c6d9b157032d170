"""What the peer remembers beside git: users, issues, pull requests, comments, reactions, statuses.

As on GitHub, a pull request is also an issue: both take their number from one sequence per
repository, and a PR's conversation comments are its issue's comments.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime

# GitHub's repository roles, and the permission the collaborator endpoint reports for each.
ROLE_PERMISSION = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
    "none": "none",
}


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class User:
    login: str
    id: int
    type: str = "User"


@dataclass
class Repo:
    owner: str
    name: str
    id: int
    private: bool
    created_at: str
    # user login -> role (admin, maintain, write, triage, read, none)
    roles: dict[str, str] = field(default_factory=dict)
    next_number: int = 1

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass
class Issue:
    repo: str  # owner/name
    number: int
    id: int
    title: str
    body: str | None
    user: str
    created_at: str
    updated_at: str
    state: str = "open"
    closed_at: str | None = None
    is_pull: bool = False


@dataclass
class Comment:
    repo: str
    issue_number: int
    id: int
    body: str
    user: str
    created_at: str
    updated_at: str


@dataclass
class Pull:
    repo: str
    number: int
    id: int
    head: str  # branch in the same repository
    base: str
    draft: bool
    maintainer_can_modify: bool


@dataclass
class Reaction:
    repo: str
    id: int
    content: str
    user: str
    created_at: str
    comment_id: int | None = None
    issue_number: int | None = None


@dataclass
class Status:
    repo: str
    id: int
    sha: str
    state: str
    context: str
    creator: str
    created_at: str
    target_url: str | None = None
    description: str | None = None


@dataclass
class Dispatch:
    """A workflow_dispatch event: the run GitHub would start."""

    repo: str
    workflow: str  # the file's path, .github/workflows/NAME
    ref: str
    inputs: dict[str, str]
    actor: str


@dataclass
class PeerState:
    """Everything, in creation order; `lock` guards changes made by the server's threads."""

    users: dict[str, User] = field(default_factory=dict)
    repos: dict[str, Repo] = field(default_factory=dict)
    issues: list[Issue] = field(default_factory=list)
    pulls: list[Pull] = field(default_factory=list)
    comments: list[Comment] = field(default_factory=list)
    reactions: list[Reaction] = field(default_factory=list)
    statuses: list[Status] = field(default_factory=list)
    dispatches: list[Dispatch] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _next_id: int = 1000

    def new_id(self) -> int:
        with self.lock:
            self._next_id += 1
            return self._next_id

    def user(self, login: str) -> User:
        with self.lock:
            if login not in self.users:
                kind = "Bot" if login.endswith("[bot]") else "User"
                self.users[login] = User(login=login, id=self.new_id(), type=kind)
            return self.users[login]

    def issue(self, repo: str, number: int) -> Issue | None:
        return next((i for i in self.issues if i.repo == repo and i.number == number), None)

    def pull(self, repo: str, number: int) -> Pull | None:
        return next((p for p in self.pulls if p.repo == repo and p.number == number), None)

    def comment(self, repo: str, comment_id: int) -> Comment | None:
        return next((c for c in self.comments if c.repo == repo and c.id == comment_id), None)

    def comments_on(self, repo: str, number: int) -> list[Comment]:
        return [c for c in self.comments if c.repo == repo and c.issue_number == number]

    def new_issue(
        self, repo: Repo, title: str, body: str | None, user: str, is_pull=False
    ) -> Issue:
        with self.lock:
            self.user(user)
            stamp = now()
            issue = Issue(
                repo=repo.full_name,
                number=repo.next_number,
                id=self.new_id(),
                title=title,
                body=body,
                user=user,
                created_at=stamp,
                updated_at=stamp,
                is_pull=is_pull,
            )
            repo.next_number += 1
            self.issues.append(issue)
            return issue

    def new_comment(self, repo: str, number: int, body: str, user: str) -> Comment:
        with self.lock:
            self.user(user)
            stamp = now()
            comment = Comment(repo, number, self.new_id(), body, user, stamp, stamp)
            self.comments.append(comment)
            issue = self.issue(repo, number)
            if issue is not None:
                issue.updated_at = stamp
            return comment
