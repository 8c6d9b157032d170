"""Keeping the token out of sight: out of logs and error messages, and out of the environment of
the user's code (the engine's child processes drop secret-looking variables; the bot also removes
the token variables from its own environment once it has read them)."""

from __future__ import annotations

import logging
import os

TOKEN_VARIABLES = ("INPUT_TOKEN", "GITHUB_TOKEN", "GH_TOKEN", "PYTPU_GITHUB_TOKEN")
MASK = "***"


def take_token(environ: dict[str, str] | None = None) -> str | None:
    """The token (INPUT_TOKEN first), removed from the environment so no child inherits it."""
    environ = os.environ if environ is None else environ
    token = None
    for name in TOKEN_VARIABLES:
        value = environ.pop(name, None)
        if value and token is None:
            token = value
    return token


def redact(text: str, *secrets: str | None) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text


def protect_logs(token: str | None) -> None:
    """Mask the token in every log record from now on, whichever logger or handler it meets:
    records are cleaned where they are made (the record factory), not where they are shown."""
    if not token:
        return
    make_record = logging.getLogRecordFactory()

    def masked_record(*args, **kwargs) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        message = record.getMessage()
        if token in message:
            record.msg, record.args = message.replace(token, MASK), None
        return record

    logging.setLogRecordFactory(masked_record)
