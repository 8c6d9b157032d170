"""The bot's parts that need no server: the slash command, the table of events, the webhook
checks, the token's handling and the Actions context."""

from __future__ import annotations

import io
import json
import logging

import pytest

from pytpu.bot import command, context, events, handle, tokens, webhook

# GitHub's published test vector for X-Hub-Signature-256 (docs: Validating webhook deliveries).
SECRET, BODY = "It's a Secret to Everybody", b"Hello, World!"
EXPECTED = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
EVENTS = handle.EVENTS.webhook_events()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("/pytpu migrate", command.Command("migrate")),
        ("  /pytpu migrate  \nplease", command.Command("migrate")),
        ("/pytpu help", command.Command("help")),
        ("Thanks! /pytpu migrate later", None),
        ("please see\n/pytpu migrate", None),
        ("/pytpumigrate", None),
        ("", None),
        (None, None),
    ],
)
def test_only_a_first_line_command_counts(body, expected):
    assert command.parse(body) == expected


@pytest.mark.parametrize("body", ["/pytpu", "/pytpu deploy", "/pytpu migrate --force"])
def test_a_bad_command_says_what_is_valid(body):
    with pytest.raises(command.CommandError, match="/pytpu"):
        command.parse(body)


def test_one_table_of_events_for_the_action_and_the_webhooks():
    assert handle.EVENTS.events() == {"issue_comment", "push", "workflow_dispatch"}
    # A webhook's workflow_dispatch is a workflow someone else started: the Action's only.
    assert EVENTS == {"issue_comment", "push"}
    assert handle.EVENTS.handler("push") is handle.on_push
    table = events.EventTable()
    table.on("push")(handle.on_push)
    with pytest.raises(ValueError, match="already has a handler"):
        table.on("push")(handle.on_dispatch)


def test_every_command_has_its_handler_and_its_line_in_the_help():
    assert handle.COMMAND_HANDLERS.keys() == command.COMMANDS.keys()
    for name in command.COMMANDS:
        assert f"| `/pytpu {name}` |" in command.HELP
    with pytest.raises(ValueError, match="COMMANDS"):
        handle.on_command("deploy")


def test_an_event_outside_the_table_is_not_handled(tmp_path):
    found = context.RunContext(
        event_name="deployment",
        payload={},
        repository="octo/demo",
        api_url="http://127.0.0.1:1/api/v3",
        server_url="http://127.0.0.1:1",
        token="t",
        workdir=tmp_path,
    )
    result = handle.handle(found)
    assert not result.ran and result.exit_code == 0
    assert result.notes == ["event 'deployment' is not handled: nothing to do"]


def test_the_webhook_accepts_the_tables_events_and_answers_ping():
    app = webhook.WebhookApp(SECRET, lambda e, p: None, EVENTS, start_worker=False)
    payload = b"{}"
    good = webhook.signature(SECRET, payload)
    status, message = _deliver(app, payload, good, "p-1", event="workflow_dispatch")
    assert status.startswith("202") and "not handled" in message
    assert _deliver(app, payload, good, "p-2", event="ping")[0].startswith("202")
    assert _deliver(app, payload, good, "p-3", event="push")[0].startswith("202")
    assert [app.jobs.get_nowait()[0]] == ["push"] and app.jobs.empty()


def test_signature_matches_githubs_test_vector():
    assert webhook.signature(SECRET, BODY) == EXPECTED
    assert webhook.valid_signature(SECRET, BODY, EXPECTED)
    assert not webhook.valid_signature(SECRET, BODY + b" ", EXPECTED)
    assert not webhook.valid_signature(SECRET, BODY, None)


def _deliver(app, body: bytes, signature: str | None, delivery: str, event: str = "issue_comment"):
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


def test_webhook_refuses_bad_or_missing_signatures_and_replays():
    handled = []
    app = webhook.WebhookApp(
        SECRET, lambda e, p: handled.append((e, p)), EVENTS, start_worker=False
    )
    payload = json.dumps({"action": "created"}).encode()
    good = webhook.signature(SECRET, payload)
    assert _deliver(app, payload, None, "d-1")[0].startswith("401")
    assert _deliver(app, payload, "sha256=" + "0" * 64, "d-1")[0].startswith("401")
    assert _deliver(app, payload, webhook.signature("other", payload), "d-1")[0].startswith("401")
    assert app.jobs.empty()
    assert _deliver(app, payload, good, "d-1")[0].startswith("202")
    status, message = _deliver(app, payload, good, "d-1")  # the same delivery again
    assert status.startswith("200") and "already received" in message
    assert app.jobs.qsize() == 1
    assert _deliver(app, payload, good, "d-2")[0].startswith("202")
    assert app.jobs.qsize() == 2


def test_webhook_requires_a_secret():
    with pytest.raises(ValueError, match="secret"):
        webhook.WebhookApp("", lambda e, p: None, EVENTS, start_worker=False)


def test_token_is_taken_out_of_the_environment():
    environ = {"INPUT_TOKEN": "ghs_input", "GITHUB_TOKEN": "ghs_other", "PATH": "/bin"}
    assert tokens.take_token(environ) == "ghs_input"
    assert environ == {"PATH": "/bin"}


def test_logs_never_show_the_token(caplog):
    factory = logging.getLogRecordFactory()
    try:
        tokens.protect_logs("ghs_secret123")
        with caplog.at_level(logging.INFO):
            logging.getLogger("urllib3.connectionpool").info("GET /?t=%s", "ghs_secret123")
            logging.getLogger("pytpu.bot").warning("pushing with ghs_secret123")
    finally:
        logging.setLogRecordFactory(factory)
    assert "ghs_secret123" not in caplog.text
    assert caplog.text.count(tokens.MASK) == 2


def test_actions_context_reads_the_standard_variables(tmp_path):
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "created"}))
    environ = {
        "GITHUB_EVENT_NAME": "issue_comment",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REPOSITORY": "octo/demo",
        "GITHUB_API_URL": "http://127.0.0.1:1/api/v3",
        "GITHUB_SERVER_URL": "http://127.0.0.1:1",
        "GITHUB_RUN_ID": "42",
        "GITHUB_OUTPUT": str(tmp_path / "out"),
    }
    found = context.from_actions(environ, "t")
    assert found.payload == {"action": "created"} and found.owner == "octo"
    assert found.run_url == "http://127.0.0.1:1/octo/demo/actions/runs/42"
    context.write_outputs(found, {"pr-number": "7", "parity": "5/5"})
    assert (tmp_path / "out").read_text() == "pr-number=7\nparity=5/5\n"
    del environ["GITHUB_REPOSITORY"]
    with pytest.raises(context.ContextError, match="GITHUB_REPOSITORY"):
        context.from_actions(environ, "t")


def test_webhook_server_over_http():
    """`pytpu serve`'s app behind a real HTTP server: 401 without a valid signature, 202 for a
    new delivery, and a replay of it is ignored."""
    import threading
    import urllib.error
    import urllib.request
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):  # keep the test output clean
            pass

    handled = []
    app = webhook.WebhookApp(SECRET, lambda e, p: handled.append(e), EVENTS)
    server = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/"
    payload = json.dumps({"action": "created", "repository": {"full_name": "o/r"}}).encode()

    def post(headers):
        request = urllib.request.Request(url, data=payload, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    base = {"X-GitHub-Event": "issue_comment", "Content-Type": "application/json"}
    try:
        assert post({**base, "X-GitHub-Delivery": "a"}) == 401
        assert post({**base, "X-GitHub-Delivery": "a", "X-Hub-Signature-256": "sha256=00"}) == 401
        signed = {**base, "X-Hub-Signature-256": webhook.signature(SECRET, payload)}
        assert post({**signed, "X-GitHub-Delivery": "a"}) == 202
        assert post({**signed, "X-GitHub-Delivery": "a"}) == 200  # replayed: ignored
        app.jobs.join()
        assert handled == ["issue_comment"]
    finally:
        server.shutdown()
