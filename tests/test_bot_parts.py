"""The bot's parts that need no server: the slash command, the table of events, the webhook
signature, the token's handling, the Actions context, and what a failed follow-up says."""

from __future__ import annotations

import json
import logging

import pytest

from pytpu.bot import command, context, events, followups, gitremote, handle, tokens, webhook

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


def test_signature_matches_githubs_test_vector():
    assert webhook.signature(SECRET, BODY) == EXPECTED
    assert webhook.valid_signature(SECRET, BODY, EXPECTED)
    assert not webhook.valid_signature(SECRET, BODY + b" ", EXPECTED)
    assert not webhook.valid_signature(SECRET, BODY, None)


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


# --- what fails once the pull request exists (bot/followups.py) ---------------------------------


def _github_error(status: int, message: str, headers: dict | None = None) -> Exception:
    from github import GithubException

    return GithubException(status, {"message": message, "status": str(status)}, headers or {})


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("statuses=write", ["statuses: write"]),
        ("issues=write; pull_requests=write", ["issues: write", "pull-requests: write"]),
        ("contents=read,pull_requests=write", ["contents: read, pull-requests: write"]),
        ("", []),
    ],
)
def test_githubs_accepted_permissions_header_in_workflow_spelling(header, expected):
    assert followups.accepted_permissions({"X-Accepted-GitHub-Permissions": header}) == expected
    assert followups.accepted_permissions({"x-accepted-github-permissions": header}) == expected
    assert followups.accepted_permissions(None) == []


def test_a_403_names_the_permission_and_where_to_add_it():
    denied = "Resource not accessible by integration"
    # Without GitHub's header (a classic token), the step's own permission is named.
    why = followups.explain(followups.STATUS, _github_error(403, denied))
    assert why.startswith(f"GitHub answered 403 {denied}: the token lacks the `statuses: write`")
    assert "Add `statuses: write` to the `permissions:` block" in why
    # With it, GitHub's word wins, and the step's permission is the one suggested among several.
    header = {"X-Accepted-GitHub-Permissions": "pull_requests=write; issues=write"}
    why = followups.explain(followups.REACTION, _github_error(403, denied, header))
    assert "`pull-requests: write` or `issues: write`" in why
    assert "Add `issues: write`" in why


def test_a_403_before_the_pull_request_is_explained_by_its_step():
    denied = "Resource not accessible by integration"
    with pytest.raises(followups.StepFailed) as failed:
        with followups.during(followups.PULL_REQUEST):
            raise _github_error(403, denied)
    assert str(failed.value) == str(failed.value.cause)  # `pytpu action` prints the same error
    why = followups.unfinished(failed.value)
    assert why == followups.explain(followups.PULL_REQUEST, failed.value.cause)
    assert "Add `pull-requests: write` to the `permissions:` block" in why
    # git's 403 on the push: the status is read from git's message (git sends no header).
    refused = gitremote.RemoteError(
        "pushing pytpu/migrate: fatal: unable to access 'https://github.com/o/r/': "
        "The requested URL returned error: 403"
    )
    assert refused.status == 403 and gitremote.RemoteError("pushing: hung up").status is None
    why = followups.unfinished(followups.StepFailed(followups.PUSH, refused))
    assert why.startswith(f"RemoteError: {refused}: the token lacks the `contents: write`")
    # Anything else reads as it always has.
    assert followups.unfinished(_github_error(403, denied)) == f"GitHub answered 403 {denied}."
    other = followups.StepFailed(followups.PUSH, gitremote.RemoteError("pushing: hung up"))
    assert followups.unfinished(other) == "RemoteError: pushing: hung up."


def test_a_repository_that_keeps_workflows_from_opening_pull_requests_is_not_told_a_permission():
    # GitHub's 403 when "Allow GitHub Actions to create and approve pull requests" is off: the
    # job's `pull-requests: write` is there, so naming it would send the maintainer in circles.
    refused = _github_error(
        403,
        "GitHub Actions is not permitted to create or approve pull requests.",
        {"X-Accepted-GitHub-Permissions": "pull_requests=write"},
    )
    why = followups.explain(followups.PULL_REQUEST, refused)
    assert why.startswith(
        "GitHub answered 403 GitHub Actions is not permitted to create or approve pull requests: "
        "the repository's settings do not let workflows open pull requests"
    )
    assert "**Allow GitHub Actions to create and approve pull requests**" in why
    assert "lacks" not in why


def test_a_rate_limit_403_is_not_read_as_a_missing_permission():
    from github import RateLimitExceededException

    limited = RateLimitExceededException(403, {"message": "API rate limit exceeded"}, {})
    why = followups.explain(followups.STATUS, limited)
    assert "rate limit" in why and "permission" not in why


def test_a_404_says_what_was_not_found_and_why():
    why = followups.explain(followups.STATUS, _github_error(404, "Not Found"))
    assert why.startswith("GitHub answered 404 Not Found: the commit or the commit statuses API")
    assert "Most likely a push replaced `pytpu/migrate`" in why


def test_an_unexplained_failure_still_says_what_it_was():
    assert followups.explain(followups.STATUS, _github_error(422, "Validation Failed")) == (
        "GitHub answered 422 Validation Failed."
    )
    assert followups.explain(followups.STATUS, OSError("disk full")) == "OSError: disk full"


def test_a_failed_followup_is_kept_not_raised_and_the_token_is_masked(caplog):
    failures: list[followups.Failure] = []

    def fails():
        raise RuntimeError("refused for ghs_secret123")

    with caplog.at_level(logging.WARNING):
        done = followups.attempt(followups.STATUS, fails, failures, "ghs_secret123")
    assert done is False and [f.step for f in failures] == [followups.STATUS]
    assert failures[0].why == f"RuntimeError: refused for {tokens.MASK}"
    assert "ghs_secret123" not in caplog.text and "could not post the commit status" in caplog.text
    assert followups.attempt(followups.STATUS, lambda: None, failures, None) is True
    assert len(failures) == 1


def test_the_reply_tells_the_status_but_not_a_reaction():
    status = followups.Failure(followups.STATUS, "GitHub answered 404 Not Found: ...")
    reaction = followups.Failure(followups.REACTION, "GitHub answered 403 ...")
    assert followups.reply_section([reaction]) == ""
    assert followups.reply_section([reaction, status]) == (
        "The pull request is open, but:\n- PyTPU could not post the commit status "
        "`pytpu/migrate` on the pull request's head: GitHub answered 404 Not Found: ..."
    )
    summary = followups.summary_section([reaction, status])
    assert "could not react" in summary and "could not post the commit status" in summary
    assert followups.summary_section([]) == ""


def test_every_followup_step_is_registered_once():
    assert set(followups.STEPS) == {
        "push",
        "pull-request",
        "dispatch",
        "status",
        "reaction",
        "reply",
    }
    assert all(step.permission.endswith(": write") for step in followups.STEPS.values())
    with pytest.raises(ValueError, match="twice"):
        followups.register(followups.STATUS)


def test_a_warning_annotation_escapes_what_the_runner_would_read_as_commands():
    line = context.warning_command("50% done\nnext: line")
    assert line == "::warning title=PyTPU::50%25 done%0Anext: line"
