"""One job of `pytpu serve`, in a process of its own: `python -m pytpu.bot.job STATE_FILE JOB_ID`.

It reads the job from the queue (`bot/jobqueue.py`), handles its event as `pytpu action` does
(`handle.handle`: with `--workflow FILE`, a `/pytpu migrate` is handed to that workflow of the
repository instead of run here), and prints its outcome as one JSON line, the last of its
standard output, for the server to record. The token comes in PYTPU_GITHUB_TOKEN and leaves the
environment at once. The process dies with the server that started it, so a job cut off by a
kill never runs beside its own second start.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
from pathlib import Path

from pytpu.bot import tokens
from pytpu.bot.context import RunContext
from pytpu.bot.jobqueue import JobStore

log = logging.getLogger("pytpu.bot.job")
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent(parent: int) -> None:
    """Ask Linux to kill this process when its parent, the server, ends (a kill included)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the server's shutdown still stops jobs
        return
    if os.getppid() != parent:  # the server was gone before the request took effect
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytpu.bot.job")
    parser.add_argument("queue", type=Path)
    parser.add_argument("job", type=int)
    parser.add_argument("--parent", type=int, help="the server's process ID")
    parser.add_argument("--workflow", help="hand `/pytpu migrate` to this workflow file")
    parser.add_argument("--api-url", default="https://api.github.com")
    parser.add_argument("--server-url", default="https://github.com")
    options = parser.parse_args(argv)
    if options.parent:
        _die_with_parent(options.parent)
    token = tokens.take_token()
    from pytpu.bot import handle, service  # importing handle fills the table of events

    service.json_logging()
    tokens.protect_logs(token)
    store = JobStore(options.queue)
    job, payload = store.load(options.job)
    store.close()
    context = RunContext(
        event_name=job.event,
        payload=payload,
        repository=job.repository,
        api_url=options.api_url,
        server_url=options.server_url,
        token=token,
        workdir=Path(tempfile.gettempdir()),
        delivery=job.delivery,
        attempt=job.attempt,
        workflow=options.workflow,
    )
    try:
        result = handle.handle(context)
    except Exception as exc:
        log.exception("the job failed", extra={"job": job.id, "delivery": job.delivery})
        outcome = {"ok": False, "message": tokens.redact(f"{type(exc).__name__}: {exc}", token)}
    else:
        outcome = {"ok": True, "message": result.notes[0] if result.notes else "handled"}
    sys.stdout.write(json.dumps(outcome) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
