"""The slash command in a comment: only a first line `/pytpu migrate` or `/pytpu help` counts.

Anything else, a mention in the middle of a comment included, is not a command and is ignored
quietly: a bot that answers every comment is noise.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

PREFIX = "/pytpu"
# Each command and what it does (its line in the help); `bot/handle.py` runs it.
COMMANDS = {
    "migrate": "generate behaviour tests, migrate, run both sides, open or update the PR",
    "help": "this message",
}

_ROWS = "\n".join(f"| `{PREFIX} {name}` | {does} |" for name, does in COMMANDS.items())
HELP = f"""\
**PyTPU** migrates this repository's PyTorch code to Google TPUs (PyTorch/XLA) and opens a pull
request that shows the tests passing before and after, and the measured speedup.

| Comment | What happens |
| --- | --- |
{_ROWS}

Only people with write access to the repository can run it. Settings live in
`.github/pytpu.yml` (`run`, `benchmark`, `include`, `exclude`, ...)."""


@dataclass(frozen=True)
class Command:
    name: str  # one of COMMANDS
    arguments: tuple[str, ...] = ()


class CommandError(ValueError):
    """A `/pytpu` line that is not a valid command; the message says what is valid."""


def parse(body: str | None) -> Command | None:
    """The command on the comment's first line, or None when the comment is not a command."""
    lines = (body or "").strip().splitlines()
    if not lines:
        return None
    first = lines[0].strip()
    if first != PREFIX and not first.startswith(PREFIX + " "):
        return None
    try:
        words = shlex.split(first)[1:]
    except ValueError as exc:
        raise CommandError(f"`{first}` could not be read ({exc})") from None
    if not words or words[0] not in COMMANDS:
        given = f"`{words[0]}`" if words else "nothing"
        valid = " or ".join(f"`{PREFIX} {name}`" for name in COMMANDS)
        raise CommandError(f"{given} is not a PyTPU command; use {valid}")
    if words[1:]:
        raise CommandError(f"`/pytpu {words[0]}` takes no options (settings: .github/pytpu.yml)")
    return Command(words[0])
