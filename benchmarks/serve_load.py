"""`pytpu serve` under load, killed and started again: is every accepted delivery handled once?

    python -m benchmarks.serve_load [--deliveries 500] [--workers 2] [--clients 16] [--json]

A GitHub peer on loopback (tests/github_peer) holds two repositories. `pytpu serve` runs as it is
deployed, a process of its own, and gets signed deliveries as fast as a pool of client threads can
send them: new comments (a stranger's `/pytpu migrate`, answered with one polite reply; a
maintainer's `/pytpu help`, one reply; a plain comment, nothing), repeats of deliveries already
sent, and bad signatures. While jobs are queued and running the server is killed with SIGKILL,
then started again on the same state folder, and the queue drains.

Printed: the answers (status counts, slowest and 99th percentile seconds), and what happened to
each accepted delivery: its job's state and starts, and its effect on the peer (the bot's replies
carry the delivery's ID in a hidden marker), which must be exactly one reply for a command and
none for a plain comment.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytpu.bot.jobqueue import JobStore
from pytpu.bot.service import QUEUE_FILE
from pytpu.bot.webhook import signature
from tests.github_peer import GitHubPeer

SECRET = "load-test-secret"
OWNER = "octo"
REPOSITORIES = ("alpha", "beta")
MAINTAINER, STRANGER = "maintainer", "stranger"
# What a new comment asks for, and how many replies the bot owes it.
KINDS = {"migrate": ("/pytpu migrate", STRANGER, 1), "help": ("/pytpu help", MAINTAINER, 1)}
KINDS["plain"] = ("Thanks, looks good", MAINTAINER, 0)


@dataclass
class Delivery:
    id: str
    event: str
    body: bytes
    signature: str
    repository: str
    issue: int | None = None
    replies_owed: int = 0


@dataclass
class Answer:
    delivery: Delivery
    kind: str  # new, repeat, bad-signature
    status: int
    seconds: float


@dataclass
class ServeProcess:
    """`pytpu serve` in a child process, its JSON log lines collected."""

    state: Path
    peer: GitHubPeer
    workers: int = 2
    grace: float = 30.0
    extra: list[str] = field(default_factory=list)
    lines: list[dict[str, Any]] = field(default_factory=list)
    process: subprocess.Popen | None = None
    url: str = ""

    def start(self, timeout: float = 60.0) -> ServeProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTPU_", "GITHUB_"))}
        env.update(
            PYTPU_WEBHOOK_SECRET=SECRET,
            PYTPU_GITHUB_TOKEN=self.peer.token,
            GITHUB_API_URL=self.peer.api_url,
            GITHUB_SERVER_URL=self.peer.server_url,
        )
        command = [sys.executable, "-m", "pytpu.engine.cli", "serve", "--port", "0"]
        command += ["--state", str(self.state), "--workers", str(self.workers)]
        command += ["--grace", str(self.grace), *self.extra]
        self.lines = []
        self.process = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        listening = threading.Event()

        def read() -> None:
            for line in self.process.stderr:
                try:
                    record = json.loads(line)
                except ValueError:
                    record = {"message": line.rstrip()}
                self.lines.append(record)
                if record.get("message") == "listening":
                    self.url = record["url"]
                    listening.set()

        threading.Thread(target=read, daemon=True).start()
        if not listening.wait(timeout):
            self.stop(signal.SIGKILL)
            raise RuntimeError(f"pytpu serve did not start: {self.lines[-5:]}")
        return self

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 120.0) -> int:
        assert self.process is not None
        self.process.send_signal(signum)
        return self.process.wait(timeout)

    def health(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "healthz", timeout=10) as answer:
            return json.loads(answer.read())

    def post(self, delivery: Delivery, signed: str | None = None) -> tuple[int, float]:
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": delivery.event,
            "X-GitHub-Delivery": delivery.id,
            "X-Hub-Signature-256": signed or delivery.signature,
        }
        request = urllib.request.Request(self.url, data=delivery.body, headers=headers)
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                status = answer.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        return status, time.perf_counter() - started


def make_peer(root: Path, source: Path) -> GitHubPeer:
    """A peer with the repositories, the maintainer (write) and the stranger (read)."""
    peer = GitHubPeer(root).start()
    for name in REPOSITORIES:
        peer.add_repo(OWNER, name, source, default_branch="main")
        peer.set_permission(OWNER, name, MAINTAINER, "write")
        peer.set_permission(OWNER, name, STRANGER, "read")
    return peer


def new_comment(peer: GitHubPeer, index: int, kind: str) -> Delivery:
    """A new issue with a comment on it, and the issue_comment delivery GitHub would send."""
    body, login, owed = KINDS[kind]
    name = REPOSITORIES[index % len(REPOSITORIES)]
    number, comment_id = peer.add_issue(OWNER, name, f"Issue {index}", "", body, login)
    payload = {
        "action": "created",
        "issue": {"number": number, "title": f"Issue {index}"},
        "comment": {"id": comment_id, "body": body, "user": {"login": login}},
        "repository": {"full_name": f"{OWNER}/{name}", "name": name, "default_branch": "main"},
        "sender": {"login": login},
    }
    raw = json.dumps(payload).encode()
    return Delivery(
        str(uuid.uuid4()), "issue_comment", raw, signature(SECRET, raw), name, number, owed
    )


def plan(peer: GitHubPeer, count: int) -> list[tuple[str, Delivery]]:
    """`count` deliveries: of every ten, seven new comments (migrate, help, plain), two repeats of
    one already planned, and one with a bad signature."""
    planned: list[tuple[str, Delivery]] = []
    fresh: list[Delivery] = []
    kinds = ["migrate", "migrate", "migrate", "migrate", "migrate", "help", "plain"]
    for index in range(count):
        slot = index % 10
        if slot < 7 or not fresh:
            delivery = new_comment(peer, index, kinds[slot % len(kinds)])
            fresh.append(delivery)
            planned.append(("new", delivery))
        elif slot < 9:
            planned.append(("repeat", fresh[(index * 7919) % len(fresh)]))
        else:
            planned.append(("bad-signature", new_comment(peer, index, "migrate")))
    return planned


def send(server: ServeProcess, planned: list[tuple[str, Delivery]], clients: int) -> list[Answer]:
    """Every planned delivery, sent by `clients` threads as fast as they can; a repeat is sent
    after its first (so it is a repeat)."""
    firsts = [(k, d) for k, d in planned if k != "repeat"]
    repeats = [(k, d) for k, d in planned if k == "repeat"]

    def one(item: tuple[str, Delivery]) -> Answer:
        kind, delivery = item
        signed = "sha256=" + "0" * 64 if kind == "bad-signature" else None
        status, seconds = server.post(delivery, signed)
        return Answer(delivery, kind, status, seconds)

    with ThreadPoolExecutor(clients) as pool:
        answers = list(pool.map(one, firsts))
        answers += list(pool.map(one, repeats))
    return answers


def replies_by_delivery(peer: GitHubPeer) -> Counter[str]:
    """The bot's replies, counted by the delivery named in their marker."""
    found: Counter[str] = Counter()
    for comment in peer.state.comments:
        if comment.user == peer.login and "pytpu-delivery: " in comment.body:
            found[comment.body.rsplit("pytpu-delivery: ", 1)[1].split(" ", 1)[0]] += 1
    return found


def wait_for_drain(server: ServeProcess, timeout: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = server.health()["jobs"]
        if jobs["queued"] == 0 and jobs["running"] == 0:
            return jobs
        time.sleep(0.5)
    raise TimeoutError(f"the queue did not drain in {timeout} s: {server.health()}")


def run(count: int, workers: int, clients: int, root: Path) -> dict[str, Any]:
    source = root / "source"
    source.mkdir()
    (source / "README.md").write_text("A repository.\n")
    subprocess.run(["git", "init", "-q", "-b", "main", str(source)], check=True)
    subprocess.run(["git", "-C", str(source), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(source), "-c", "user.name=O", "-c", "user.email=o@example.invalid"]
        + ["commit", "-q", "-m", "start"],
        check=True,
    )
    peer = make_peer(root / "peer", source)
    try:
        planned = plan(peer, count)
        server = ServeProcess(root / "state", peer, workers=workers).start()
        answers = send(server, planned, clients)
        # Kill it while jobs are queued and running.
        while server.health()["jobs"]["done"] < min(workers * 2, count // 10):
            time.sleep(0.05)
        at_kill = server.health()["jobs"]
        server.stop(signal.SIGKILL)
        restarted = ServeProcess(root / "state", peer, workers=workers).start()
        drained = wait_for_drain(restarted, timeout=max(120.0, count * 2.0))
        restarted.stop(signal.SIGTERM)
        return summarise(answers, at_kill, drained, peer, root / "state" / QUEUE_FILE)
    finally:
        peer.stop()


def summarise(
    answers: list[Answer], at_kill: dict, drained: dict, peer: GitHubPeer, queue: Path
) -> dict[str, Any]:
    store = JobStore(queue)
    jobs = {job["delivery"]: job for job in store.jobs()}
    store.close()
    replies = replies_by_delivery(peer)
    good = [a for a in answers if a.kind != "bad-signature"]
    seconds = sorted(a.seconds for a in good)
    accepted = {a.delivery.id: a.delivery for a in answers if a.kind == "new" and a.status == 202}
    effects = Counter(
        "once" if replies[d.id] == d.replies_owed else f"{replies[d.id]} of {d.replies_owed}"
        for d in accepted.values()
    )
    return {
        "deliveries": len(answers),
        "answers": {
            f"{kind} {status}": n
            for (kind, status), n in sorted(Counter((a.kind, a.status) for a in answers).items())
        },
        "slowest_good_answer_seconds": round(seconds[-1], 4),
        "p99_good_answer_seconds": round(seconds[int(0.99 * (len(seconds) - 1))], 4),
        "jobs_at_kill": at_kill,
        "jobs_after_restart": drained,
        "accepted": len(accepted),
        "jobs_of_accepted": sum(1 for d in accepted if d in jobs),
        "job_states": dict(Counter(jobs[d]["state"] for d in accepted if d in jobs)),
        "started_twice_or_more": sum(1 for d in accepted if jobs.get(d, {}).get("attempts", 0) > 1),
        "effects": dict(effects),
        "replies_to_unaccepted": sum(n for d, n in replies.items() if d not in accepted),
        "peer_schema_violations": len(peer.violations),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serve_load")
    parser.add_argument("--deliveries", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pytpu-serve-load-") as scratch:
        found = run(options.deliveries, options.workers, options.clients, Path(scratch))
    if options.json:
        print(json.dumps(found, indent=2))
    else:
        for key, value in found.items():
            print(f"{key:32} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
