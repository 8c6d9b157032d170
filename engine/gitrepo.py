"""The local git side of the main job, with GitPython: checks before anything runs, worktrees
for each side, PyTPU's commits, and the branch it owns.

The user's checkout is never touched: work happens in temporary worktrees, commits are made there
(detached), and only `pytpu/migrate` is moved, and only over commits PyTPU made itself.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import git

BRANCH = "pytpu/migrate"
AUTHOR = git.Actor("PyTPU", "pytpu@users.noreply.github.com")
# Every commit PyTPU makes carries this trailer; a commit without it is a person's.
TRAILER = "Generated-by: PyTPU"


class GitError(Exception):
    """The repository is not in a state PyTPU can work from; the message says what to do."""


def open_repository(path: Path) -> git.Repo:
    """The repository whose top folder is `path`, with at least one commit."""
    try:
        repo = git.Repo(path, search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise GitError(
            f"{path}: not a git repository (or not its top folder). PyTPU works from a commit: "
            "run `git init`, commit your code, and run it from the repository's root."
        ) from None
    if repo.bare:
        raise GitError(f"{path}: a bare repository has no checkout to migrate; clone it first")
    if not repo.head.is_valid():
        raise GitError(f"{path}: the repository has no commit yet; commit your code first")
    return repo


def open_clean(path: Path) -> git.Repo:
    """The repository at `path`, if it has a commit and a clean working tree."""
    repo = open_repository(path)
    dirty = sorted(
        {d.a_path for d in repo.index.diff(None)} | {d.a_path for d in repo.index.diff("HEAD")}
    )
    dirty += repo.untracked_files
    if dirty:
        listed = ", ".join(dirty[:5]) + (f" and {len(dirty) - 5} more" if len(dirty) > 5 else "")
        raise GitError(
            f"{path}: the working tree has changes ({listed}). Commit or stash them first: "
            "PyTPU migrates the last commit and changes nothing of yours."
        )
    if not repo.head.is_detached and repo.active_branch.name == BRANCH:
        raise GitError(
            f"{path}: you are on {BRANCH}, the branch PyTPU writes. Check out the branch to "
            "migrate from (e.g. `git switch main`) and run it again."
        )
    return repo


def is_ours(commit: git.Commit) -> bool:
    return commit.author.email == AUTHOR.email and TRAILER in commit.message


def own_commits(repo: git.Repo, base: git.Commit) -> list[git.Commit]:
    """The commits of `pytpu/migrate` that `base` does not have, after checking they are all
    PyTPU's; a person's commit there stops the run (nothing of theirs is ever overwritten)."""
    if BRANCH not in repo.heads:
        return []
    commits = list(repo.iter_commits(f"{base.hexsha}..{BRANCH}"))
    foreign = [c for c in commits if not is_ours(c)]
    if foreign:
        first = foreign[0]
        raise BranchOwnedError(
            f"{BRANCH} has {len(foreign)} commit(s) PyTPU did not make (latest: {first.hexsha[:7]} "
            f"by {first.author.name}, {first.summary!r}). PyTPU does not overwrite them: merge "
            f"them, or rename the branch (`git branch -m {BRANCH} my-work`), then run it again."
        )
    return commits


class BranchOwnedError(GitError):
    """Someone else's commits are on PyTPU's branch."""


@contextmanager
def worktree(repo: git.Repo, commit: git.Commit) -> Iterator[Path]:
    """A detached checkout of `commit` in a temporary folder, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="pytpu-worktree-"))
    path = folder / Path(repo.working_tree_dir).name  # programs may print their folder's name
    repo.git.worktree("add", "--detach", str(path), commit.hexsha)
    try:
        yield path
    finally:
        try:
            repo.git.worktree("remove", "--force", str(path))
        except git.GitCommandError:
            pass
        shutil.rmtree(folder, ignore_errors=True)
        repo.git.worktree("prune")


def commit_paths(
    checkout: Path, paths: list[str], summary: str, body: str, generated: bool = False
) -> git.Commit:
    """Commit exactly `paths` (added, changed or removed) in the detached checkout. `generated`:
    the paths are PyTPU's own output (the suite), added even where `.gitignore` ignores them."""
    repo = git.Repo(checkout)
    if paths:
        # ML repositories often ignore `*.pt`, which would drop the suite's recordings; the user's
        # own files are never forced in.
        repo.git.add("--all", *(["--force"] if generated else []), "--", *paths)
    message = (
        f"{summary}\n\n{body.strip()}\n\n{TRAILER}\n"
        if body.strip()
        else f"{summary}\n\n{TRAILER}\n"
    )
    return repo.index.commit(message, author=AUTHOR, committer=AUTHOR)


def same_change(existing: git.Commit, base: git.Commit, new: git.Commit) -> bool:
    """The branch already holds this result: the same base and the same two trees."""
    if len(existing.parents) != 1 or len(new.parents) != 1:
        return False
    old_tests, new_tests = existing.parents[0], new.parents[0]
    return (
        existing.tree.hexsha == new.tree.hexsha
        and old_tests.tree.hexsha == new_tests.tree.hexsha
        and [p.hexsha for p in old_tests.parents] == [base.hexsha]
    )


def move_branch(repo: git.Repo, commit: git.Commit) -> None:
    """Point `pytpu/migrate` at `commit` (callers checked that it only drops PyTPU's commits)."""
    if BRANCH in repo.heads:
        repo.heads[BRANCH].set_commit(commit)
    else:
        repo.create_head(BRANCH, commit)


def ignore_folder(folder: Path) -> None:
    """A folder of PyTPU's output inside the checkout that git never sees (the tree stays clean)."""
    folder.mkdir(parents=True, exist_ok=True)
    ignore = folder / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# PyTPU's local output (reports); not part of the repository\n*\n")
