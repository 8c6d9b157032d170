"""The bare repositories the peer serves, read and made with `git --git-dir`.

The REST fake reads branches and commits from here, the same repositories the git server pushes
into, so a branch pushed over HTTP is visible to the API at once.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Commits the peer makes itself (seeding a repo from a plain folder).
_SEED_IDENTITY = {
    "GIT_AUTHOR_NAME": "Peer Seed",
    "GIT_AUTHOR_EMAIL": "seed@peer.invalid",
    "GIT_COMMITTER_NAME": "Peer Seed",
    "GIT_COMMITTER_EMAIL": "seed@peer.invalid",
}


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    tree: str
    parents: tuple[str, ...]
    author_name: str
    author_email: str
    author_date: str
    committer_name: str
    committer_email: str
    committer_date: str
    message: str


def _git(*args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    base = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "HOME": tempfile.gettempdir(),
    }
    result = subprocess.run(
        ["git", *args], env={**base, **(env or {})}, capture_output=True, text=True, timeout=120
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout if result.returncode == 0 else ""


class BareRepos:
    """ROOT/<owner>/<name>.git, one bare repository per GitHub repository."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, owner: str, name: str) -> Path:
        return self.root / owner / f"{name}.git"

    def exists(self, owner: str, name: str) -> bool:
        return (self.path(owner, name) / "HEAD").is_file()

    def create(self, owner: str, name: str, source: Path, default_branch: str | None) -> Path:
        """A bare copy of `source`: a git repository's commits, or a plain folder's files."""
        target = self.path(owner, name)
        if target.exists():
            raise FileExistsError(f"{owner}/{name} exists already")
        target.parent.mkdir(parents=True, exist_ok=True)
        source = Path(source)
        if (source / ".git").exists() or (source / "HEAD").is_file():
            _git("clone", "--quiet", "--bare", "--no-local", str(source), str(target))
            if default_branch:
                _git(
                    "--git-dir", str(target), "symbolic-ref", "HEAD", f"refs/heads/{default_branch}"
                )
        else:
            self._import_folder(source, target, default_branch or "main")
        return target

    @staticmethod
    def _import_folder(source: Path, target: Path, branch: str) -> None:
        _git("init", "--quiet", "--bare", "--initial-branch", branch, str(target))
        with tempfile.TemporaryDirectory() as scratch:
            # A throwaway index: the folder becomes one commit without a working clone.
            env = {**_SEED_IDENTITY, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
            common = ("--git-dir", str(target), "--work-tree", str(source))
            _git(*common, "add", "--all", ".", env=env)
            tree = _git(*common, "write-tree", env=env).strip()
            commit = _git(
                "--git-dir", str(target), "commit-tree", tree, "-m", "Initial commit", env=env
            ).strip()
        _git("--git-dir", str(target), "update-ref", f"refs/heads/{branch}", commit)

    def default_branch(self, owner: str, name: str) -> str:
        ref = _git("--git-dir", str(self.path(owner, name)), "symbolic-ref", "HEAD").strip()
        return ref.removeprefix("refs/heads/")

    def branches(self, owner: str, name: str) -> dict[str, str]:
        out = _git(
            "--git-dir",
            str(self.path(owner, name)),
            "for-each-ref",
            "--format=%(refname:lstrip=2) %(objectname)",
            "refs/heads",
        )
        pairs = (line.split(" ", 1) for line in out.splitlines() if line)
        return {branch: sha for branch, sha in pairs}

    def resolve(self, owner: str, name: str, ref: str) -> str | None:
        """The commit a branch name, tag or sha names, or None."""
        if ref.startswith("-"):
            return None
        out = _git(
            "--git-dir",
            str(self.path(owner, name)),
            "rev-parse",
            "--verify",
            "--quiet",
            f"{ref}^{{commit}}",
            check=False,
        )
        return out.strip() or None

    def commit(self, owner: str, name: str, sha: str) -> CommitInfo:
        fields = "%H%x00%T%x00%P%x00%an%x00%ae%x00%aI%x00%cn%x00%ce%x00%cI%x00%B"
        out = _git(
            "--git-dir", str(self.path(owner, name)), "show", "-s", f"--format={fields}", sha
        )
        values = out.split("\x00")
        return CommitInfo(
            sha=values[0],
            tree=values[1],
            parents=tuple(values[2].split()),
            author_name=values[3],
            author_email=values[4],
            author_date=values[5],
            committer_name=values[6],
            committer_email=values[7],
            committer_date=values[8],
            message=values[9].rstrip("\n"),
        )

    def file(self, owner: str, name: str, ref: str, path: str) -> str | None:
        """The text of `path` at `ref`, or None."""
        out = _git("--git-dir", str(self.path(owner, name)), "show", f"{ref}:{path}", check=False)
        return out or None

    def log(self, owner: str, name: str, ref: str) -> list[str]:
        """Commit shas reachable from `ref`, newest first."""
        out = _git("--git-dir", str(self.path(owner, name)), "rev-list", ref, "--")
        return out.split()

    def ahead(self, owner: str, name: str, base: str, head: str) -> int:
        """How many commits `head` has that `base` has not."""
        out = _git(
            "--git-dir", str(self.path(owner, name)), "rev-list", "--count", f"{base}..{head}"
        )
        return int(out.strip() or 0)

    def diffstat(self, owner: str, name: str, base: str, head: str) -> tuple[int, int, int]:
        """(files changed, lines added, lines deleted) from the merge base to `head`."""
        out = _git(
            "--git-dir", str(self.path(owner, name)), "diff", "--numstat", f"{base}...{head}"
        )
        files = additions = deletions = 0
        for line in out.splitlines():
            added, deleted, _ = line.split("\t", 2)
            files += 1
            # Binary files show "-" for both counts.
            additions += int(added) if added.isdigit() else 0
            deletions += int(deleted) if deleted.isdigit() else 0
        return files, additions, deletions
