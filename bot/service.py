"""`pytpu serve` as a service: waitress in front, the durable queue behind, workers in between.

- HTTP: waitress, a production WSGI server, serves `bot/webhook.py`'s application (several
  threads, so a slow client does not hold up the others).
- Work: `workers` threads each claim a job from the queue (`bot/jobqueue.py`: one per repository
  at a time) and run it in a child process of its own (`python -m pytpu.bot.job`), so a job that
  crashes or hangs takes nothing else with it, and a shutdown can stop it. The child dies with the
  server (PR_SET_PDEATHSIG), so after a kill no job runs twice at once.
- State: one folder (the queue's SQLite file and a lock, so two servers never share it).
- Shutdown: SIGTERM or SIGINT stops accepting deliveries, lets the running jobs finish for up to
  `grace` seconds, then stops the rest and queues them again; queued jobs wait on disk for the
  next start. A kill (SIGKILL, a crash) loses nothing either: at the next start the jobs it left
  running are queued again.
- Logs: one JSON object a line on stderr (python-json-logger), with the delivery, event,
  repository, job and outcome as fields; the token is masked (`bot/tokens.py`).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pytpu.bot.jobqueue import Job, JobStore
from pytpu.bot.webhook import WebhookApp
from pytpu.runtime import launch

log = logging.getLogger("pytpu.bot.service")
QUEUE_FILE = "queue.sqlite3"
LOCK_FILE = "serve.lock"
POLL_SECONDS = 2.0  # a worker looks at the queue at least this often (a job of a busy repository)
STOP_SECONDS = 10.0  # a job told to stop (SIGTERM) is killed after this long


class StateInUse(RuntimeError):
    """Another `pytpu serve` holds the state folder."""


@dataclass(frozen=True)
class Settings:
    host: str
    port: int
    state: Path
    workers: int  # jobs at once (of different repositories)
    threads: int  # HTTP requests at once
    grace: float  # seconds a running job may take to finish at shutdown
    job_command: list[str]  # the child's command, before the state file and the job's ID
    job_environment: dict[str, str]


def default_state() -> Path:
    """$PYTPU_STATE, else the XDG state folder ($XDG_STATE_HOME/pytpu, ~/.local/state/pytpu)."""
    if os.environ.get("PYTPU_STATE"):
        return Path(os.environ["PYTPU_STATE"])
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "pytpu"


def json_logging(stream: TextIO = sys.stderr) -> None:
    """Every log record, PyTPU's and waitress's, as one JSON object a line."""
    from pythonjsonlogger.json import JsonFormatter

    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        JsonFormatter(
            "{asctime}{levelname}{name}{message}",
            style="{",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


@contextmanager
def state_folder(folder: Path) -> Iterator[JobStore]:
    """The queue in `folder`, held by this process alone while the context lasts."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK_FILE, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StateInUse(
                f"{folder} is in use by another `pytpu serve`: give this one its own --state"
            ) from None
        store = JobStore(folder / QUEUE_FILE)
        try:
            yield store
        finally:
            store.close()


class Workers:
    """Threads that take jobs off the queue and run each in a child process."""

    def __init__(self, store: JobStore, settings: Settings):
        self.store = store
        self.settings = settings
        self._wake = threading.Condition()
        self._stopping = threading.Event()
        self._running: dict[int, tuple[Job, launch.Running]] = {}
        self._stopped: set[int] = set()  # jobs the shutdown stopped: queued again, not failed
        self._threads = [
            threading.Thread(target=self._work, name=f"pytpu-worker-{n}", daemon=True)
            for n in range(settings.workers)
        ]

    def start(self) -> None:
        again, given_up = self.store.recover()
        if again or given_up:
            log.warning(
                "jobs cut off by the last stop", extra={"queued_again": again, "failed": given_up}
            )
        for thread in self._threads:
            thread.start()

    def wake(self) -> None:
        with self._wake:
            self._wake.notify_all()

    @property
    def running(self) -> int:
        return len(self._running)

    def _work(self) -> None:
        while not self._stopping.is_set():
            job = self.store.claim()
            if job is None:
                with self._wake:
                    self._wake.wait(POLL_SECONDS)
                continue
            try:
                self._run(job)
            except Exception:  # the worker must go on: the job is failed, with why
                log.exception("running a job failed", extra=_fields(job))
                self.store.finish(job, False, "PyTPU could not run the job; see the log")
            self.wake()  # its repository is free again

    def _run(self, job: Job) -> None:
        command = [*self.settings.job_command, str(self.store.path), str(job.id)]
        started = time.monotonic()
        log.info("job started", extra=_fields(job))
        # (in a session of its own: the shutdown stops the job's whole process group)
        process = launch.Running(command, None, self.settings.job_environment, inherit_stderr=True)
        self._running[job.id] = (job, process)
        try:
            finished = process.wait()
        finally:
            del self._running[job.id]
        seconds = round(time.monotonic() - started, 3)
        if job.id in self._stopped:
            self.store.release(job, "stopped by a shutdown: queued again")
            log.info("job queued again", extra={**_fields(job), "seconds": seconds})
            return
        outcome = _outcome(finished.stdout, finished.returncode)
        self.store.finish(job, outcome["ok"], outcome["message"])
        log.info(
            "job done" if outcome["ok"] else "job failed",
            extra={**_fields(job), "seconds": seconds, "outcome": outcome["message"]},
        )

    def stop(self, grace: float) -> None:
        """No new job; the running ones get `grace` seconds, then are stopped and queued again."""
        self._stopping.set()
        self.wake()
        deadline = time.monotonic() + grace
        while self._running and time.monotonic() < deadline:
            time.sleep(0.1)
        for job, process in list(self._running.values()):
            self._stopped.add(job.id)
            log.warning("stopping a job at shutdown", extra=_fields(job))
            process.signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        while self._running and time.monotonic() < deadline:
            time.sleep(0.1)
        for _, process in list(self._running.values()):
            process.signal(signal.SIGKILL)
        for thread in self._threads:
            thread.join(STOP_SECONDS)


def _outcome(out: str, returncode: int) -> dict[str, Any]:
    """The child's last line (`bot/job.py` prints its outcome as JSON), or why there is none."""
    lines = out.strip().splitlines()
    try:
        outcome = json.loads(lines[-1])
        if isinstance(outcome, dict) and {"ok", "message"} <= outcome.keys():
            return outcome
    except (IndexError, ValueError):
        pass
    return {"ok": False, "message": f"the job's process ended with {returncode} and no outcome"}


def _fields(job: Job) -> dict[str, Any]:
    return {
        "job": job.id,
        "delivery": job.delivery,
        "event": job.event,
        "repository": job.repository,
        "attempt": job.attempt,
    }


def serve(settings: Settings, secret: str, events: frozenset[str]) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully."""
    from waitress import create_server

    with state_folder(settings.state) as store:
        workers = Workers(store, settings)
        stopping = threading.Event()

        def health() -> dict[str, Any]:
            status = "stopping" if stopping.is_set() else "ok"
            return {"status": status, "jobs": store.counts(), "workers": settings.workers}

        app = WebhookApp(secret, store, events, wake=workers.wake, health=health)
        server = create_server(
            app, host=settings.host, port=settings.port, threads=settings.threads, ident="pytpu"
        )
        _stop_on_signals(stopping)
        workers.start()
        log.info(
            "listening",
            extra={
                "url": f"http://{settings.host}:{server.effective_port}/",
                "state": str(settings.state),
                "workers": settings.workers,
            },
        )
        server.run()  # until a signal's SystemExit; waitress closes its sockets then
        stopping.set()
        log.info("shutting down", extra={"jobs": store.counts(), "running": workers.running})
        workers.stop(settings.grace)
        log.info("stopped", extra={"jobs": store.counts()})


def _stop_on_signals(stopping: threading.Event) -> None:
    def stop(signum: int, frame: Any) -> None:
        if not stopping.is_set():
            stopping.set()
            raise SystemExit(0)  # waitress's loop takes it as the signal to close

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
