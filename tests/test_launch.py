"""The one runner of child processes (`pytpu.runtime.launch`): a run in a session of its own,
its output in files, whatever it leaves behind killed at its end; a started process its caller
can stop (the bot's jobs at a shutdown)."""

import os
import signal
import sys
import time

from pytpu.runtime import launch

SLEEPER = f"{sys.executable} -c 'import time; time.sleep(60)'"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # (a zombie waits for its parent, dead all the same)
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_a_run_kills_what_its_command_leaves_behind(tmp_path):
    pid_file = tmp_path / "pid"
    command = f"{SLEEPER} & echo $! > {pid_file}; echo done"
    finished = launch.run(command, tmp_path, dict(os.environ), timeout=30)
    assert (finished.returncode, finished.stdout, finished.timed_out) == (0, "done\n", False)
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_a_run_past_its_time_limit_is_stopped_and_says_so(tmp_path):
    finished = launch.run(SLEEPER, tmp_path, dict(os.environ), timeout=0.5)
    assert finished.timed_out
    assert finished.returncode == -signal.SIGKILL
    assert finished.seconds < 30


def test_a_started_process_stops_with_its_session_when_signalled(tmp_path):
    running = launch.Running(["sh", "-c", f"{SLEEPER} & wait"], tmp_path, dict(os.environ))
    time.sleep(0.3)
    running.signal(signal.SIGTERM)
    finished = running.wait(timeout=10)
    assert not finished.timed_out
    assert finished.returncode == -signal.SIGTERM
    assert finished.seconds < 10


def test_a_started_process_may_keep_its_callers_standard_error(tmp_path, capfd):
    command = [sys.executable, "-c", "import sys; print('out'); print('log line', file=sys.stderr)"]
    finished = launch.Running(command, tmp_path, dict(os.environ), inherit_stderr=True).wait(30)
    assert (finished.returncode, finished.stdout, finished.stderr) == (0, "out\n", "")
    assert "log line" in capfd.readouterr().err
    kept = launch.Running(command, tmp_path, dict(os.environ)).wait(30)
    assert kept.stderr == "log line\n"
