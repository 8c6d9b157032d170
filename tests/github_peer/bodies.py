"""GitHub-shaped JSON bodies, with absolute URLs that point back at the peer.

PyGithub follows the `url` fields it gets and refuses any whose host, port or path prefix differ
from its base_url, so API URLs are `<server>/api/v3/...` and web URLs `<server>/...`. The field
sets follow GitHub's OpenAPI description (2022-11-28); schemas.py checks every body sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .bare import CommitInfo
from .state import ROLE_PERMISSION, Comment, Issue, Pull, Reaction, Repo, Status, User

REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")
RATE_LIMIT = 5000
DOCS = "https://docs.github.com/rest"
# A fixed creation time for users: bodies stay stable between runs.
_EPOCH = "2020-01-01T00:00:00Z"


def utc(stamp: str) -> str:
    """git's ISO 8601 date (any offset) as GitHub writes it: UTC, with Z."""
    moment = datetime.fromisoformat(stamp).astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def node_id(kind: str, number: int) -> str:
    return f"{kind}_peer{number:08d}"


def error(status: int, message: str, doc: str = DOCS, errors: list | None = None) -> dict:
    """GitHub's error body: BasicError, or for 422 ValidationError (which has no `status`)."""
    body: dict[str, Any] = {"message": message, "documentation_url": doc}
    if status != 422:
        body["status"] = str(status)
    if errors is not None:
        body["errors"] = errors
    return body


def permissions(role: str) -> dict[str, bool]:
    """The booleans GitHub derives from a repository role."""
    order = ["read", "triage", "write", "maintain", "admin"]
    rank = order.index(role) if role in order else -1
    return {
        "admin": rank >= 4,
        "maintain": rank >= 3,
        "push": rank >= 2,
        "triage": rank >= 1,
        "pull": rank >= 0,
    }


@dataclass(frozen=True)
class PullView:
    """What a pull request body is made from."""

    pull: Pull
    issue: Issue
    author: User
    owner: User
    association: str
    repo: dict[str, Any]  # Repository
    head_sha: str
    base_sha: str


class Bodies:
    """Builds the bodies; `server` is http://127.0.0.1:PORT."""

    def __init__(self, server: str) -> None:
        self.web = server.rstrip("/")
        self.api = self.web + "/api/v3"

    # users ---------------------------------------------------------------------------------

    def user(self, user: User) -> dict[str, Any]:
        """SimpleUser."""
        api = f"{self.api}/users/{user.login}"
        return {
            "login": user.login,
            "id": user.id,
            "node_id": node_id("U", user.id),
            "avatar_url": f"{self.web}/avatars/{user.login}",
            "gravatar_id": "",
            "url": api,
            "html_url": f"{self.web}/{user.login}",
            "followers_url": f"{api}/followers",
            "following_url": f"{api}/following{{/other_user}}",
            "gists_url": f"{api}/gists{{/gist_id}}",
            "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{api}/subscriptions",
            "organizations_url": f"{api}/orgs",
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events{{/privacy}}",
            "received_events_url": f"{api}/received_events",
            "type": user.type,
            "user_view_type": "public",
            "site_admin": False,
        }

    def public_user(self, user: User, public_repos: int) -> dict[str, Any]:
        """PublicUser (GET /users/{username})."""
        return {
            **self.user(user),
            "name": None,
            "company": None,
            "blog": "",
            "location": None,
            "email": None,
            "hireable": None,
            "bio": None,
            "twitter_username": None,
            "public_repos": public_repos,
            "public_gists": 0,
            "followers": 0,
            "following": 0,
            "created_at": _EPOCH,
            "updated_at": _EPOCH,
        }

    def private_user(self, user: User, repos: int) -> dict[str, Any]:
        """PrivateUser (GET /user)."""
        return {
            **self.public_user(user, repos),
            "private_gists": 0,
            "total_private_repos": 0,
            "owned_private_repos": 0,
            "disk_usage": 0,
            "collaborators": 0,
            "two_factor_authentication": True,
        }

    def collaborator(self, user: User, role: str) -> dict[str, Any]:
        """Collaborator: a user with their role in one repository."""
        return {**self.user(user), "permissions": permissions(role), "role_name": role}

    def collaborator_permission(self, user: User, role: str) -> dict[str, Any]:
        """RepositoryCollaboratorPermission."""
        return {
            "permission": ROLE_PERMISSION[role],
            "role_name": role,
            "user": self.collaborator(user, role),
        }

    # repositories ----------------------------------------------------------------------------

    def repository(
        self, repo: Repo, owner: User, default_branch: str, viewer_role: str, pushed_at: str
    ) -> dict[str, Any]:
        """FullRepository (GET /repos/{owner}/{repo})."""
        api = f"{self.api}/repos/{repo.full_name}"
        html = f"{self.web}/{repo.full_name}"
        open_issues = 0  # filled by the caller when it knows
        return {
            "id": repo.id,
            "node_id": node_id("R", repo.id),
            "name": repo.name,
            "full_name": repo.full_name,
            "owner": self.user(owner),
            "private": repo.private,
            "html_url": html,
            "description": None,
            "fork": False,
            "url": api,
            "archive_url": f"{api}/{{archive_format}}{{/ref}}",
            "assignees_url": f"{api}/assignees{{/user}}",
            "blobs_url": f"{api}/git/blobs{{/sha}}",
            "branches_url": f"{api}/branches{{/branch}}",
            "collaborators_url": f"{api}/collaborators{{/collaborator}}",
            "comments_url": f"{api}/comments{{/number}}",
            "commits_url": f"{api}/commits{{/sha}}",
            "compare_url": f"{api}/compare/{{base}}...{{head}}",
            "contents_url": f"{api}/contents/{{+path}}",
            "contributors_url": f"{api}/contributors",
            "deployments_url": f"{api}/deployments",
            "downloads_url": f"{api}/downloads",
            "events_url": f"{api}/events",
            "forks_url": f"{api}/forks",
            "git_commits_url": f"{api}/git/commits{{/sha}}",
            "git_refs_url": f"{api}/git/refs{{/sha}}",
            "git_tags_url": f"{api}/git/tags{{/sha}}",
            "git_url": f"git://127.0.0.1/{repo.full_name}.git",
            "issue_comment_url": f"{api}/issues/comments{{/number}}",
            "issue_events_url": f"{api}/issues/events{{/number}}",
            "issues_url": f"{api}/issues{{/number}}",
            "keys_url": f"{api}/keys{{/key_id}}",
            "labels_url": f"{api}/labels{{/name}}",
            "languages_url": f"{api}/languages",
            "merges_url": f"{api}/merges",
            "milestones_url": f"{api}/milestones{{/number}}",
            "notifications_url": f"{api}/notifications{{?since,all,participating}}",
            "pulls_url": f"{api}/pulls{{/number}}",
            "releases_url": f"{api}/releases{{/id}}",
            "ssh_url": f"git@127.0.0.1:{repo.full_name}.git",
            "stargazers_url": f"{api}/stargazers",
            "statuses_url": f"{api}/statuses/{{sha}}",
            "subscribers_url": f"{api}/subscribers",
            "subscription_url": f"{api}/subscription",
            "tags_url": f"{api}/tags",
            "teams_url": f"{api}/teams",
            "trees_url": f"{api}/git/trees{{/sha}}",
            "clone_url": f"{html}.git",
            "mirror_url": None,
            "hooks_url": f"{api}/hooks",
            "svn_url": html,
            "homepage": None,
            "language": "Python",
            "forks_count": 0,
            "forks": 0,
            "stargazers_count": 0,
            "watchers_count": 0,
            "watchers": 0,
            "size": 0,
            "default_branch": default_branch,
            "open_issues_count": open_issues,
            "open_issues": open_issues,
            "is_template": False,
            "topics": [],
            "has_issues": True,
            "has_projects": True,
            "has_wiki": True,
            "has_pages": False,
            "has_downloads": True,
            "has_discussions": False,
            "archived": False,
            "disabled": False,
            "visibility": "private" if repo.private else "public",
            "pushed_at": pushed_at,
            "created_at": repo.created_at,
            "updated_at": pushed_at,
            "permissions": permissions(viewer_role),
            "allow_rebase_merge": True,
            "allow_squash_merge": True,
            "allow_merge_commit": True,
            "allow_auto_merge": False,
            "delete_branch_on_merge": False,
            "allow_forking": True,
            "web_commit_signoff_required": False,
            "subscribers_count": 0,
            "network_count": 0,
            "license": None,
        }

    def repository_in_pull(self, full: dict[str, Any]) -> dict[str, Any]:
        """Repository (the head and base repos of a pull request): FullRepository less two."""
        return {k: v for k, v in full.items() if k not in ("subscribers_count", "network_count")}

    # commits and branches ----------------------------------------------------------------------

    def commit(self, full_name: str, info: CommitInfo) -> dict[str, Any]:
        """Commit (the branch's head, GET /repos/{owner}/{repo}/commits/{ref})."""
        api = f"{self.api}/repos/{full_name}"
        return {
            "sha": info.sha,
            "node_id": node_id("C", int(info.sha[:7], 16)),
            "url": f"{api}/commits/{info.sha}",
            "html_url": f"{self.web}/{full_name}/commit/{info.sha}",
            "comments_url": f"{api}/commits/{info.sha}/comments",
            "commit": {
                "url": f"{api}/git/commits/{info.sha}",
                "author": {
                    "name": info.author_name,
                    "email": info.author_email,
                    "date": utc(info.author_date),
                },
                "committer": {
                    "name": info.committer_name,
                    "email": info.committer_email,
                    "date": utc(info.committer_date),
                },
                "message": info.message,
                "comment_count": 0,
                "tree": {"sha": info.tree, "url": f"{api}/git/trees/{info.tree}"},
                "verification": {
                    "verified": False,
                    "reason": "unsigned",
                    "signature": None,
                    "payload": None,
                    "verified_at": None,
                },
            },
            # git authors are not linked to GitHub accounts here.
            "author": None,
            "committer": None,
            "parents": [
                {
                    "sha": parent,
                    "url": f"{api}/commits/{parent}",
                    "html_url": f"{self.web}/{full_name}/commit/{parent}",
                }
                for parent in info.parents
            ],
        }

    def branch(self, full_name: str, name: str, info: CommitInfo) -> dict[str, Any]:
        """BranchWithProtection (GET /repos/{owner}/{repo}/branches/{branch})."""
        api = f"{self.api}/repos/{full_name}/branches/{name}"
        return {
            "name": name,
            "commit": self.commit(full_name, info),
            "_links": {"self": api, "html": f"{self.web}/{full_name}/tree/{name}"},
            "protected": False,
            "protection": {
                "enabled": False,
                "required_status_checks": {
                    "enforcement_level": "off",
                    "contexts": [],
                    "checks": [],
                },
            },
            "protection_url": f"{api}/protection",
        }

    # issues, comments, reactions ---------------------------------------------------------------

    def reaction_rollup(self, url: str, reactions: list[Reaction]) -> dict[str, Any]:
        rollup: dict[str, Any] = {"url": f"{url}/reactions", "total_count": len(reactions)}
        for content in REACTIONS:
            rollup[content] = sum(1 for r in reactions if r.content == content)
        return rollup

    def issue(
        self,
        issue: Issue,
        user: User,
        association: str,
        comments: int,
        reactions: list[Reaction],
    ) -> dict[str, Any]:
        """Issue (GET /repos/{owner}/{repo}/issues/{issue_number})."""
        repo_api = f"{self.api}/repos/{issue.repo}"
        api = f"{repo_api}/issues/{issue.number}"
        kind = "pull" if issue.is_pull else "issues"
        body: dict[str, Any] = {
            "id": issue.id,
            "node_id": node_id("I", issue.id),
            "url": api,
            "repository_url": repo_api,
            "labels_url": f"{api}/labels{{/name}}",
            "comments_url": f"{api}/comments",
            "events_url": f"{api}/events",
            "html_url": f"{self.web}/{issue.repo}/{kind}/{issue.number}",
            "number": issue.number,
            "state": issue.state,
            "state_reason": "completed" if issue.state == "closed" else None,
            "title": issue.title,
            "body": issue.body,
            "user": self.user(user),
            "labels": [],
            "assignee": None,
            "assignees": [],
            "milestone": None,
            "locked": False,
            "active_lock_reason": None,
            "comments": comments,
            "closed_at": issue.closed_at,
            "created_at": issue.created_at,
            "updated_at": issue.updated_at,
            "closed_by": None,
            "author_association": association,
            "reactions": self.reaction_rollup(api, reactions),
            "timeline_url": f"{api}/timeline",
            "performed_via_github_app": None,
        }
        if issue.is_pull:
            pull_api = f"{repo_api}/pulls/{issue.number}"
            html = f"{self.web}/{issue.repo}/pull/{issue.number}"
            body["pull_request"] = {
                "url": pull_api,
                "html_url": html,
                "diff_url": f"{html}.diff",
                "patch_url": f"{html}.patch",
                "merged_at": None,
            }
        return body

    def comment(
        self, comment: Comment, user: User, association: str, reactions: list[Reaction]
    ) -> dict[str, Any]:
        """IssueComment."""
        repo_api = f"{self.api}/repos/{comment.repo}"
        api = f"{repo_api}/issues/comments/{comment.id}"
        return {
            "id": comment.id,
            "node_id": node_id("IC", comment.id),
            "url": api,
            "html_url": (
                f"{self.web}/{comment.repo}/issues/{comment.issue_number}#issuecomment-{comment.id}"
            ),
            "body": comment.body,
            "user": self.user(user),
            "created_at": comment.created_at,
            "updated_at": comment.updated_at,
            "issue_url": f"{repo_api}/issues/{comment.issue_number}",
            "author_association": association,
            "performed_via_github_app": None,
            "reactions": self.reaction_rollup(api, reactions),
        }

    def reaction(self, reaction: Reaction, user: User) -> dict[str, Any]:
        """Reaction."""
        return {
            "id": reaction.id,
            "node_id": node_id("REA", reaction.id),
            "user": self.user(user),
            "content": reaction.content,
            "created_at": reaction.created_at,
        }

    # pull requests ---------------------------------------------------------------------------

    def pull_simple(self, view: PullView) -> dict[str, Any]:
        """PullRequestSimple (GET /repos/{owner}/{repo}/pulls)."""
        pull, issue, owner, repo = view.pull, view.issue, view.owner, view.repo
        head_sha, base_sha = view.head_sha, view.base_sha
        repo_api = f"{self.api}/repos/{issue.repo}"
        api = f"{repo_api}/pulls/{pull.number}"
        html = f"{self.web}/{issue.repo}/pull/{pull.number}"
        issue_api = f"{repo_api}/issues/{pull.number}"
        return {
            "url": api,
            "id": pull.id,
            "node_id": node_id("PR", pull.id),
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "issue_url": issue_api,
            "commits_url": f"{api}/commits",
            "review_comments_url": f"{api}/comments",
            "review_comment_url": f"{repo_api}/pulls/comments{{/number}}",
            "comments_url": f"{issue_api}/comments",
            "statuses_url": f"{repo_api}/statuses/{head_sha}",
            "number": pull.number,
            "state": issue.state,
            "locked": False,
            "title": issue.title,
            "user": self.user(view.author),
            "body": issue.body,
            "labels": [],
            "milestone": None,
            "active_lock_reason": None,
            "created_at": issue.created_at,
            "updated_at": issue.updated_at,
            "closed_at": issue.closed_at,
            "merged_at": None,
            "merge_commit_sha": None,
            "assignee": None,
            "assignees": [],
            "requested_reviewers": [],
            "requested_teams": [],
            "head": {
                "label": f"{owner.login}:{pull.head}",
                "ref": pull.head,
                "sha": head_sha,
                "user": self.user(owner),
                "repo": repo,
            },
            "base": {
                "label": f"{owner.login}:{pull.base}",
                "ref": pull.base,
                "sha": base_sha,
                "user": self.user(owner),
                "repo": repo,
            },
            "_links": {
                "self": {"href": api},
                "html": {"href": html},
                "issue": {"href": issue_api},
                "comments": {"href": f"{issue_api}/comments"},
                "review_comments": {"href": f"{api}/comments"},
                "review_comment": {"href": f"{repo_api}/pulls/comments{{/number}}"},
                "commits": {"href": f"{api}/commits"},
                "statuses": {"href": f"{repo_api}/statuses/{head_sha}"},
            },
            "author_association": view.association,
            "auto_merge": None,
            "draft": pull.draft,
        }

    def pull(
        self,
        view: PullView,
        *,
        comments: int,
        commits: int,
        diffstat: tuple[int, int, int],
    ) -> dict[str, Any]:
        """PullRequest (create, get, update)."""
        changed_files, additions, deletions = diffstat
        return {
            **self.pull_simple(view),
            "merged": False,
            "mergeable": True,
            "rebaseable": True,
            "mergeable_state": "clean",
            "merged_by": None,
            "comments": comments,
            "review_comments": 0,
            "maintainer_can_modify": view.pull.maintainer_can_modify,
            "commits": commits,
            "additions": additions,
            "deletions": deletions,
            "changed_files": changed_files,
        }

    # statuses and rate limits ----------------------------------------------------------------

    def status(self, status: Status, creator: User) -> dict[str, Any]:
        """Status (a commit status)."""
        return {
            "url": f"{self.api}/repos/{status.repo}/statuses/{status.sha}",
            "avatar_url": None,
            "id": status.id,
            "node_id": node_id("SC", status.id),
            "state": status.state,
            "description": status.description,
            "target_url": status.target_url,
            "context": status.context,
            "created_at": status.created_at,
            "updated_at": status.created_at,
            "creator": self.user(creator),
        }

    def workflow(self, full_name: str, workflow_id: int, path: str, name: str) -> dict[str, Any]:
        """Workflow (GET /repos/{owner}/{repo}/actions/workflows/{workflow_id})."""
        stamp = "2026-01-01T00:00:00Z"
        return {
            "id": workflow_id,
            "node_id": node_id("W_", workflow_id),
            "name": name,
            "path": path,
            "state": "active",
            "created_at": stamp,
            "updated_at": stamp,
            "url": f"{self.api}/repos/{full_name}/actions/workflows/{workflow_id}",
            "html_url": f"{self.web}/{full_name}/blob/HEAD/{path}",
            "badge_url": f"{self.web}/{full_name}/workflows/{name}/badge.svg",
        }

    def combined_status(
        self, repository: dict[str, Any], sha: str, latest: list[tuple[Status, User]]
    ) -> dict[str, Any]:
        """CombinedCommitStatus: the newest status per context, and their combined state."""
        states = {status.state for status, _ in latest}
        if states & {"error", "failure"}:
            state = "failure"
        elif not states or "pending" in states:
            state = "pending"
        else:
            state = "success"
        api = repository["url"]
        return {
            "state": state,
            "statuses": [
                {k: v for k, v in self.status(s, u).items() if k != "creator"} for s, u in latest
            ],
            "sha": sha,
            "total_count": len(latest),
            "repository": self.minimal_repository(repository),
            "commit_url": f"{api}/commits/{sha}",
            "url": f"{api}/commits/{sha}/status",
        }

    def minimal_repository(self, full: dict[str, Any]) -> dict[str, Any]:
        """MinimalRepository, as embedded in a combined status."""
        # The merge settings are FullRepository's alone.
        dropped = {
            "allow_auto_merge",
            "allow_merge_commit",
            "allow_rebase_merge",
            "allow_squash_merge",
        }
        return {k: v for k, v in full.items() if k not in dropped}

    def rate_limit(self, used: int, reset: int) -> dict[str, Any]:
        """RateLimitOverview (GET /rate_limit)."""

        def bucket(limit: int, spent: int) -> dict[str, int]:
            return {
                "limit": limit,
                "remaining": max(limit - spent, 0),
                "reset": reset,
                "used": spent,
            }

        core = bucket(RATE_LIMIT, used)
        return {
            "resources": {
                "core": core,
                "search": bucket(30, 0),
                "graphql": bucket(RATE_LIMIT, 0),
            },
            "rate": core,
        }
