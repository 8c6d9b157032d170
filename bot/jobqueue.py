"""The durable queue of `pytpu serve`: every accepted delivery, on disk until it is handled.

One SQLite file in the server's state folder holds two tables. `deliveries` has the ID of every
delivery ever accepted, so that a replayed ID stays refused across restarts (GitHub signs no
timestamp: the ID is the only guard). `jobs` has the work: a delivery is accepted and its job
queued in one transaction, on disk (WAL, synchronous=FULL) before the 202 is sent, so an
accepted delivery survives a crash.

A worker claims the oldest queued job of a repository with none running: at most one migration
per repository at a time, the rule the Action's workflow keeps with its concurrency group, and
several repositories at once. A job found running when the server starts was cut off by a kill
or a crash: it is queued again, and given up after MAX_ATTEMPTS starts. Handlers are written to
be run again safely (`bot/handle.py`: one pull request per repository, a reply not posted twice),
so a job cut off after its effect but before it was marked done still has its effect once.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
STATES = (QUEUED, RUNNING, DONE, FAILED)
MAX_ATTEMPTS = 3  # a job that kills its server every time must not do so forever

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS deliveries (
    id TEXT PRIMARY KEY,
    event TEXT NOT NULL,
    received REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery TEXT NOT NULL UNIQUE REFERENCES deliveries (id),
    event TEXT NOT NULL,
    repository TEXT NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN {STATES!r}),
    attempts INTEGER NOT NULL DEFAULT 0,
    queued REAL NOT NULL,
    started REAL,
    finished REAL,
    message TEXT
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, id);
"""


@dataclass(frozen=True)
class Job:
    id: int
    delivery: str
    event: str
    repository: str
    attempt: int  # 1 for the first start

    @property
    def retried(self) -> bool:
        return self.attempt > 1


class JobStore:
    """The queue in `path` (created if missing); safe to share between threads."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._connection().executescript(SCHEMA)  # (one transaction of its own)

    def _connection(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            # isolation_level=None: transactions are begun here, explicitly (BEGIN IMMEDIATE takes
            # the write lock at once, so two claims cannot pick the same job).
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")  # a 202 is sent only for what is on disk
            db.execute("PRAGMA foreign_keys=ON")
            db.row_factory = sqlite3.Row
            self._local.db = db
        return db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    # --- the webhook's side ------------------------------------------------------------------

    def accept(
        self, delivery: str, event: str, repository: str | None, payload: dict[str, Any] | None
    ) -> bool:
        """Remember `delivery` and, given a repository and payload, queue its job; False (and
        nothing done) when the ID was accepted before."""
        now = time.time()
        with self._transaction() as db:
            added = db.execute(
                "INSERT OR IGNORE INTO deliveries (id, event, received) VALUES (?, ?, ?)",
                (delivery, event, now),
            ).rowcount
            if added and repository is not None and payload is not None:
                db.execute(
                    "INSERT INTO jobs (delivery, event, repository, payload, state, queued)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (delivery, event, repository, json.dumps(payload), QUEUED, now),
                )
        return bool(added)

    # --- the workers' side -------------------------------------------------------------------

    def recover(self) -> tuple[int, int]:
        """At start: jobs left running by a server that died are queued again, or failed after
        MAX_ATTEMPTS starts. Returns (queued again, given up)."""
        with self._transaction() as db:
            given_up = db.execute(
                "UPDATE jobs SET state = ?, finished = ?, message = ?"
                " WHERE state = ? AND attempts >= ?",
                (FAILED, time.time(), f"cut off {MAX_ATTEMPTS} times", RUNNING, MAX_ATTEMPTS),
            ).rowcount
            again = db.execute(
                "UPDATE jobs SET state = ? WHERE state = ?", (QUEUED, RUNNING)
            ).rowcount
        return again, given_up

    def claim(self) -> Job | None:
        """The oldest queued job of a repository with no job running, now running; or None."""
        with self._transaction() as db:
            row = db.execute(
                "SELECT id, delivery, event, repository, attempts FROM jobs"
                " WHERE state = ? AND repository NOT IN"
                " (SELECT repository FROM jobs WHERE state = ?) ORDER BY id LIMIT 1",
                (QUEUED, RUNNING),
            ).fetchone()
            if row is None:
                return None
            db.execute(
                "UPDATE jobs SET state = ?, attempts = attempts + 1, started = ? WHERE id = ?",
                (RUNNING, time.time(), row["id"]),
            )
        return Job(row["id"], row["delivery"], row["event"], row["repository"], row["attempts"] + 1)

    def load(self, job_id: int) -> tuple[Job, dict[str, Any]]:
        """A claimed job and its payload (for the job's own process)."""
        row = (
            self._connection()
            .execute(
                "SELECT id, delivery, event, repository, attempts, payload FROM jobs WHERE id = ?",
                (job_id,),
            )
            .fetchone()
        )
        if row is None:
            raise KeyError(f"no job {job_id} in {self.path}")
        job = Job(row["id"], row["delivery"], row["event"], row["repository"], row["attempts"])
        return job, json.loads(row["payload"])

    def finish(self, job: Job, succeeded: bool, message: str) -> None:
        """The job's end: its payload is no longer needed (the row stays, as history)."""
        with self._transaction() as db:
            db.execute(
                "UPDATE jobs SET state = ?, finished = ?, message = ?, payload = '{}'"
                " WHERE id = ? AND state = ?",
                (DONE if succeeded else FAILED, time.time(), message, job.id, RUNNING),
            )

    def release(self, job: Job, message: str) -> None:
        """Queue a running job again, this start not counted (a graceful shutdown stopped it)."""
        with self._transaction() as db:
            db.execute(
                "UPDATE jobs SET state = ?, attempts = attempts - 1, message = ?"
                " WHERE id = ? AND state = ?",
                (QUEUED, message, job.id, RUNNING),
            )

    # --- what the health endpoint and the tests read -----------------------------------------

    def counts(self) -> dict[str, int]:
        rows = self._connection().execute("SELECT state, count(*) FROM jobs GROUP BY state")
        found = dict(rows.fetchall())
        return {state: found.get(state, 0) for state in STATES}

    def jobs(self) -> list[dict[str, Any]]:
        rows = self._connection().execute(
            "SELECT id, delivery, event, repository, state, attempts, message FROM jobs ORDER BY id"
        )
        return [dict(row) for row in rows.fetchall()]

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
