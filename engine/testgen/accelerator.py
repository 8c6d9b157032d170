"""The commands of the two sides: the user's command with the accelerator on.

A short run command often turns the GPU off, because the CI it was written for has none:
`--no-cuda`, `--cpu`, `--device cpu`, `--gpu -1`, `CUDA_VISIBLE_DEVICES=` before the program, or
an opt-in `--cuda` left out. The migrated side must run on the XLA device, which the migrated
program takes for its accelerator (`torch.cuda.is_available()` is True there, 'cuda' is 'xla');
so the switch that turns the accelerator off is left out, the opt-in switch added, or the
setting given the accelerator's value. The original side runs the same program path: its
accelerator branch, with the work on the CPU (`pytpu.runtime.cuda` answers the program as one GPU
would), so the two sides compare the same code (a GPU branch often shuffles or loads data another
way); only a device's name differs, 'cuda' before the migration and 'xla' after it. Names decide
which options are about the accelerator (cuda, gpu, accel, cpu, device); the program's own parser
(action, dest, default, choices) decides what turns it on. Test generation records with the
original side's command and writes both into the suite, and the benchmark derives them the same
way, so recording, parity and the benchmark run the same program.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pytpu.engine.testgen import invocation
from pytpu.engine.testgen.invocation import ADD, DROP, SET, Change, SideCommand
from pytpu.engine.testgen.options import Option, is_value, program_options

_ACCELERATOR = r"(?:cuda|gpus?|accel|accelerator|tpu|xla)"
# A name (its dest, `-` read as `_`) that means "the accelerator is used" when true...
ON = re.compile(rf"(?:use_?|with_|enable_?)?{_ACCELERATOR}")
# ... and one that means "the CPU is used" when true.
OFF = re.compile(
    rf"(?:no|disable|without|not|dont)_?(?:use_?)?{_ACCELERATOR}|(?:use_|force_|only_)?cpu(?:_only)?"
)
DEVICE = re.compile(r"device(?:_type)?")  # a device's name: 'cpu', 'cuda', 'xla'
GPU_ID = re.compile(r"gpus?(?:_?ids?)?|cuda_device|device_ids?")  # -1: the CPU
GPU_COUNT = re.compile(r"(?:n|num)_?gpus?|ngpus?")  # 0: the CPU
# Variables set before the program that hide the GPU, and the values that do.
HIDING = {"CUDA_VISIBLE_DEVICES": ("", "-1")}
TRUE_WORDS = ("1", "true", "yes", "y", "on", "t")
FALSE_WORDS = ("0", "false", "no", "n", "off", "f")
# The accelerator's name on each side: before the migration PyTPU's runtime maps 'cuda' to the CPU.
ACCELERATOR_ON = {"cpu": "cuda", "xla": "xla", "tpu": "tpu"}


def on_device(root: Path, command: str, device: str) -> SideCommand:
    """The command the side on `device` ('cpu', 'xla', 'tpu') runs: `command` with each change that
    turns the accelerator on, read from the program's parser (`options.program_options`)."""
    changes = [
        Change(DROP, word.value.split("=")[0], was=word.value.partition("=")[2], variable=True)
        for word in invocation.assignments(command)
        if word.value.partition("=")[2] in HIDING.get(word.value.split("=")[0], ())
    ]
    call = invocation.program_call(root, command)
    if call is not None:
        options = program_options(root, call, command)
        changes += _option_changes(call, options, ACCELERATOR_ON[device])
    if not changes:
        return SideCommand(command)
    return SideCommand(invocation.changed(root, command, changes), tuple(changes))


def section(before: SideCommand, after: SideCommand) -> dict[str, Any] | None:
    """The commands the two sides ran when they are not the given one: the changes that turned
    the accelerator on (`--no-cuda` left out), as the XLA side made them; None without any."""
    if not after.changes:
        return None
    changes = [c.as_dict() for c in after.changes]
    return {"command": after.command, "before": before.command, "changes": changes}


def described(changes: tuple[Change, ...] | list[Change]) -> str:
    """What was changed, in words: without `--no-cuda`, with `--cuda`."""
    return ", ".join(change.said for change in changes)


def _option_changes(
    call: invocation.ProgramCall, options: list[Option], accelerator: str
) -> list[Change]:
    by_name = {name: option for option in options for name in option.names}
    changes = []
    on_by_command: dict[str, bool] = {}  # dest -> the accelerator as the kept switches leave it
    for name, value, option in _given(call.values, by_name):
        if option is not None and not option.takes_value:
            on = _switch_turns_on(option, name)
            if on is False:
                changes.append(Change(DROP, name))
            elif on:
                on_by_command[option.dest] = True
        elif value is not None:
            change = _valued(name, value, option, accelerator)
            changes += [change] if change else []
    opt_in = _opt_in(options, on_by_command)
    return changes + ([Change(ADD, opt_in)] if opt_in else [])


def _given(words: list[str], by_name: dict[str, Option]) -> list[tuple]:
    """(option, its value or None, its declaration or None) for each option the words give."""
    found = []
    for index, word in enumerate(words):
        if not word.startswith("-"):
            continue
        name, equals, value = word.partition("=")
        option = by_name.get(name)
        if equals:
            found.append((name, value, option))
        elif option is not None and not option.takes_value:
            found.append((name, None, option))
        elif index + 1 < len(words) and is_value(words[index + 1]):
            found.append((name, words[index + 1], option))
    return found


def _polarity(name: str) -> bool | None:
    """True: the name says the accelerator is used when it is true; False: the CPU; None:
    neither."""
    key = name.lstrip("-").lower().replace("-", "_")
    if OFF.fullmatch(key):
        return False
    if ON.fullmatch(key):
        return True
    return None


def _switch_turns_on(option: Option, name: str) -> bool | None:
    """Whether giving the switch `name` leaves the accelerator on (True) or turns it off
    (False); None when it is not about the accelerator."""
    if option.action == "BooleanOptionalAction":
        value = not name.startswith("--no-")
    elif option.action in ("store_true", "store_false"):
        value = option.action == "store_true"
    else:
        return None
    polarity = _polarity(option.dest)
    if polarity is None:  # the name the program reads says nothing: the switch's own name does
        polarity, value = _polarity(name), True
    return None if polarity is None else value == polarity


def _opt_in(options: list[Option], on_by_command: dict[str, bool]) -> str | None:
    """The switch that turns on an accelerator which is off unless given (`--cuda`), where
    the command gives none that keeps it on."""
    for option in options:
        polarity = _polarity(option.dest)
        if polarity is None or on_by_command.get(option.dest) or option.long is None:
            continue
        if not isinstance(option.default, bool) or option.default == polarity:
            continue  # on by default (or not known to be off)
        if option.action == "BooleanOptionalAction" and polarity:
            return option.long
        if _switch_turns_on(option, option.long):
            return option.long
    return None


def _valued(name: str, value: str, option: Option | None, accelerator: str) -> Change | None:
    """The change that turns the accelerator on when the command gives `name` the `value`
    that turns it off: a device named 'cpu', a GPU id of -1, a GPU count of 0, a boolean
    setting of the wrong sign; None for any other option or value."""
    dest = (option.dest if option else name.lstrip("-")).lower().replace("-", "_")
    word = value.lower()
    if DEVICE.fullmatch(dest) and word == "cpu":
        if option is None or option.choices is None or accelerator in option.choices:
            return Change(SET, name, accelerator, was=value)
        return _back_to_default(name, value)  # which the migration makes 'xla' (R-DEV-15, 20)
    if option is None:
        return None  # only a device's name is known without the parser
    default = option.default
    if GPU_COUNT.fullmatch(dest) or (dest == "gpus" and option.kind == "int"):
        if word == "0":
            on = isinstance(default, int) and default > 0
            return _back_to_default(name, value) if on else Change(SET, name, "1", was=value)
        return None
    if GPU_ID.fullmatch(dest):  # `--gpu 0` is the first GPU, not "no GPU"
        if word != "-1":
            return None
        off = default is None or str(default) == "-1"
        return Change(SET, name, "0", was=value) if off else _back_to_default(name, value)
    polarity = _polarity(dest)
    if polarity is None or word not in TRUE_WORDS + FALSE_WORDS:
        return None
    if (word in TRUE_WORDS) == polarity:
        return None  # it keeps the accelerator on
    if default is not None and _truth(default) == polarity:
        return _back_to_default(name, value)
    return Change(SET, name, _opposite(value), was=value)


def _back_to_default(name: str, value: str) -> Change:
    return Change(DROP, name, was=value, takes_value=True)


def _truth(value: object) -> bool:
    return str(value).lower() in TRUE_WORDS


def _opposite(value: str) -> str:
    """The boolean word of the other sign, spelled alike: 0 -> 1, False -> True, no -> yes."""
    pairs = [*zip(TRUE_WORDS, FALSE_WORDS, strict=True), *zip(FALSE_WORDS, TRUE_WORDS, strict=True)]
    words = dict(pairs)
    opposite = words[value.lower()]
    return opposite.capitalize() if value[:1].isupper() else opposite
