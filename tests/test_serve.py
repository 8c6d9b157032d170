"""`pytpu serve` as a service: the durable queue, the web application, and the real server process
against the GitHub peer, killed, stopped and started again (benchmarks/serve_load.py drives it;
it also measures 500 deliveries)."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import time

import pytest

from benchmarks import serve_load
from pytpu.bot import context, handle, jobqueue, webhook
from pytpu.bot.jobqueue import JobStore

SECRET = serve_load.SECRET
EVENTS = handle.EVENTS.webhook_events()


def _payload(repository: str = "o/r", **more) -> dict:
    return {"action": "created", "repository": {"full_name": repository}, **more}


# --- the queue ----------------------------------------------------------------------------------


def test_an_accepted_delivery_and_its_id_survive_a_restart(tmp_path):
    store = JobStore(tmp_path / "q.sqlite3")
    assert store.accept("d-1", "issue_comment", "o/r", _payload())
    assert store.accept("ping-1", "ping", None, None)  # remembered, not queued
    store.close()
    again = JobStore(tmp_path / "q.sqlite3")  # a new server on the same state
    assert not again.accept("d-1", "issue_comment", "o/r", _payload())
    assert not again.accept("ping-1", "ping", None, None)
    assert again.counts() == {"queued": 1, "running": 0, "done": 0, "failed": 0}
    job = again.claim()
    assert (job.delivery, job.attempt) == ("d-1", 1)
    assert again.load(job.id)[1] == _payload()


def test_one_job_per_repository_at_a_time_and_several_repositories_at_once(tmp_path):
    store = JobStore(tmp_path / "q.sqlite3")
    for delivery, repository in [("a1", "o/a"), ("a2", "o/a"), ("b1", "o/b")]:
        store.accept(delivery, "issue_comment", repository, _payload(repository))
    first, second = store.claim(), store.claim()
    assert (first.delivery, second.delivery) == ("a1", "b1")  # a2 waits for a1
    assert store.claim() is None
    store.finish(first, True, "done")
    assert store.claim().delivery == "a2"
    assert store.jobs()[0]["state"] == jobqueue.DONE


def test_jobs_a_kill_cut_off_are_queued_again_then_given_up(tmp_path):
    store = JobStore(tmp_path / "q.sqlite3")
    store.accept("d", "push", "o/r", _payload())
    for attempt in range(1, jobqueue.MAX_ATTEMPTS + 1):
        job = store.claim()  # a server starts it, and dies
        assert job.attempt == attempt and job.retried == (attempt > 1)
        assert store.recover() == ((1, 0) if attempt < jobqueue.MAX_ATTEMPTS else (0, 1))
    assert store.jobs()[0]["state"] == jobqueue.FAILED
    assert "cut off" in store.jobs()[0]["message"]


def test_a_job_a_shutdown_stopped_is_queued_again_without_losing_a_try(tmp_path):
    store = JobStore(tmp_path / "q.sqlite3")
    store.accept("d", "push", "o/r", _payload())
    store.release(store.claim(), "stopped by a shutdown")
    assert store.claim().attempt == 1


# --- the web application ------------------------------------------------------------------------


def _deliver(app, body: bytes, signature: str | None, delivery: str, event="issue_comment"):
    environ = {
        "REQUEST_METHOD": "POST",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "HTTP_X_GITHUB_DELIVERY": delivery,
        "HTTP_X_GITHUB_EVENT": event,
    }
    if signature is not None:
        environ["HTTP_X_HUB_SIGNATURE_256"] = signature
    return app.receive(environ)


@pytest.fixture
def app(tmp_path):
    woken = []
    found = webhook.WebhookApp(
        SECRET, JobStore(tmp_path / "q.sqlite3"), EVENTS, lambda: woken.append(1)
    )
    found.woken = woken
    return found


def test_bad_or_missing_signatures_are_refused_and_nothing_is_kept(app):
    body = json.dumps(_payload()).encode()
    assert _deliver(app, body, None, "d-1")[0].startswith("401")
    assert _deliver(app, body, "sha256=" + "0" * 64, "d-1")[0].startswith("401")
    assert _deliver(app, body, webhook.signature("other", body), "d-1")[0].startswith("401")
    assert app.store.counts()["queued"] == 0
    # The ID was not used up by the forgeries: the real delivery is accepted.
    assert _deliver(app, body, webhook.signature(SECRET, body), "d-1")[0].startswith("202")


def test_the_tables_events_are_queued_others_remembered_and_replays_refused(app):
    body = json.dumps(_payload()).encode()
    good = webhook.signature(SECRET, body)
    status, answer = _deliver(app, body, good, "p-1", event="workflow_dispatch")
    assert status.startswith("202") and "not handled" in answer["message"]
    assert _deliver(app, body, good, "p-2", event="ping")[0].startswith("202")
    assert _deliver(app, body, good, "p-3", event="push")[0].startswith("202")
    status, answer = _deliver(app, body, good, "p-3", event="push")  # the same delivery again
    assert status.startswith("200") and "already received" in answer["message"]
    assert _deliver(app, body, good, "p-2", event="ping")[0].startswith("200")
    assert app.store.counts()["queued"] == 1 and app.woken == [1]
    bad = b"[1, 2]"
    assert _deliver(app, bad, webhook.signature(SECRET, bad), "p-4")[0].startswith("400")


def test_the_health_endpoint_reports_the_queue(app):
    answers = []
    body = app({"REQUEST_METHOD": "GET", "PATH_INFO": "/healthz"}, lambda *a: answers.append(a))
    assert answers[0][0] == "200 OK"
    assert json.loads(b"".join(body))["jobs"]["queued"] == 0


def test_a_secret_is_required(tmp_path):
    with pytest.raises(ValueError, match="secret"):
        webhook.WebhookApp("", JobStore(tmp_path / "q.sqlite3"), EVENTS)


# --- the server process against the GitHub peer -------------------------------------------------


@pytest.fixture
def world(tmp_path):
    source = tmp_path / "source"
    workflows = source / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "pytpu.yml").write_text(
        "name: PyTPU\non:\n  workflow_dispatch:\n    inputs:\n      issue: {}\n      comment: {}\n"
        "jobs: {}\n"
    )
    subprocess.run(["git", "init", "-q", "-b", "main", str(source)], check=True)
    subprocess.run(["git", "-C", str(source), "add", "-A"], check=True)
    identity = ["-c", "user.name=O", "-c", "user.email=o@example.invalid"]
    subprocess.run(["git", "-C", str(source), *identity, "commit", "-qm", "start"], check=True)
    peer = serve_load.make_peer(tmp_path / "peer", source)
    yield peer, tmp_path
    peer.stop()
    assert peer.violations == [] and peer.token_leaks() == []


def test_killed_with_jobs_queued_and_running_it_loses_nothing_and_repeats_nothing(world):
    peer, root = world
    planned = serve_load.plan(peer, 40)
    server = serve_load.ServeProcess(root / "state", peer).start()
    answers = serve_load.send(server, planned, clients=8)
    while server.health()["jobs"]["done"] < 2:
        time.sleep(0.05)
    at_kill = server.health()["jobs"]
    server.stop(signal.SIGKILL)
    assert at_kill["queued"] > 0  # the kill came with work still to do
    again = serve_load.ServeProcess(root / "state", peer).start()
    drained = serve_load.wait_for_drain(again, timeout=300)
    assert again.stop(signal.SIGTERM) == 0
    found = serve_load.summarise(answers, at_kill, drained, peer, root / "state" / "queue.sqlite3")
    assert found["answers"] == {"bad-signature 401": 4, "new 202": 28, "repeat 200": 8}
    assert found["jobs_of_accepted"] == found["accepted"] == 28
    assert found["job_states"] == {"done": 28}
    assert found["effects"] == {"once": 28}  # one reply per command, none for a plain comment
    assert found["replies_to_unaccepted"] == 0
    cut_off = [
        line for line in again.lines if line.get("message") == "jobs cut off by the last stop"
    ]
    assert len(cut_off) == (1 if at_kill["running"] else 0)


def test_sigterm_finishes_the_running_jobs_and_keeps_the_queued_ones(world):
    peer, root = world
    planned = serve_load.plan(peer, 20)
    server = serve_load.ServeProcess(root / "state", peer, workers=1).start()
    serve_load.send(server, [p for p in planned if p[0] == "new"], clients=4)
    while server.health()["jobs"]["running"] == 0:
        time.sleep(0.02)
    assert server.stop(signal.SIGTERM) == 0
    messages = [line.get("message") for line in server.lines]
    assert messages.index("shutting down") < messages.index("stopped")
    left = JobStore(root / "state" / "queue.sqlite3").counts()
    assert left["running"] == 0 and left["failed"] == 0 and left["queued"] > 0
    again = serve_load.ServeProcess(root / "state", peer, workers=1).start()
    assert serve_load.wait_for_drain(again, timeout=300)["done"] == 14
    again.stop()
    owed = {d.id: d.replies_owed for kind, d in planned if kind == "new"}
    assert dict(serve_load.replies_by_delivery(peer)) == {d: n for d, n in owed.items() if n}


def test_a_second_server_on_the_same_state_is_refused(world):
    peer, root = world
    first = serve_load.ServeProcess(root / "state", peer).start()
    try:
        with pytest.raises(RuntimeError, match="in use by another"):
            serve_load.ServeProcess(root / "state", peer).start(timeout=30)
    finally:
        first.stop()


def test_run_on_workflow_hands_a_migration_to_the_repositorys_workflow(world):
    peer, root = world
    delivery = serve_load.new_comment(peer, 0, "migrate")  # from a stranger: one polite reply
    payload = json.loads(delivery.body)
    payload["comment"]["user"]["login"] = payload["sender"]["login"] = serve_load.MAINTAINER
    body = json.dumps(payload).encode()
    delivery.body, delivery.signature = body, webhook.signature(SECRET, body)
    server = serve_load.ServeProcess(root / "state", peer, extra=["--run-on", "workflow"]).start()
    assert server.post(delivery)[0] == 202
    serve_load.wait_for_drain(server, timeout=120)
    server.stop()
    [dispatch] = peer.state.dispatches
    assert (dispatch.workflow, dispatch.ref) == (".github/workflows/pytpu.yml", "main")
    assert dispatch.inputs == {
        "issue": str(delivery.issue),
        "comment": str(payload["comment"]["id"]),
    }
    comment_id = payload["comment"]["id"]
    assert [r.content for r in peer.state.reactions if r.comment_id == comment_id] == ["eyes"]
    assert not any(entry.operation == "git" for entry in peer.requests)  # nothing cloned here
    assert serve_load.replies_by_delivery(peer) == {}  # the workflow's run replies


def test_a_job_started_again_does_not_reply_twice(world, tmp_path):
    peer, _ = world
    delivery = serve_load.new_comment(peer, 1, "migrate")  # a stranger's command
    found = context.RunContext(
        event_name="issue_comment",
        payload=json.loads(delivery.body),
        repository=f"{serve_load.OWNER}/{delivery.repository}",
        api_url=peer.api_url,
        server_url=peer.server_url,
        token=peer.token,
        workdir=tmp_path,
        delivery=delivery.id,
    )
    handle.handle(found)
    handle.handle(context.RunContext(**{**found.__dict__, "attempt": 2}))  # after a kill
    assert serve_load.replies_by_delivery(peer) == {delivery.id: 1}
    handle.handle(found)  # a first start never looks (a new delivery cannot have replied)
    assert serve_load.replies_by_delivery(peer) == {delivery.id: 2}
