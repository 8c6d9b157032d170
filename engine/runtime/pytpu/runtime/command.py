"""A program's run command, read once: the shell line that runs the program.

A run command is a line of shell: `cd examples/mnist && python main.py --epochs 1 > log.txt`,
`A=1 python -m pkg.train --lr=0.1`, `jupyter execute nb.ipynb`. `parse` reads it into a `Command`:
its simple commands (`Segment`, split at `&&`, `||`, `;`, `|`, `&` and parentheses outside
quotes), each with its words (`Word`: where it is in the line, and its value once the shell has
unquoted it), its redirections, the folder it changes to (`cd X`), the variables it sets for its
program (`A=1 python`, `env A=1 python`) and the program it runs (`Program`): a Python script or
module, directly or through a launcher (`torchrun x.py`, `python -m torch.distributed.run x.py`),
or a notebook, bare (`nb.ipynb`) or through a notebook runner (`jupyter execute nb.ipynb`).

A change of the line is a list of `Edit`s of its words (`Program.set_value`, `Program.drop`,
`Command.unset`, ...), made by `Command.edited`: the rest of the line stays byte for byte.

Every part of PyTPU that reads or changes a run command's shell line does it here: test
generation (`pytpu.engine.testgen.invocation`: the program's script in the repository and the
commands of the two sides), the benchmark's longer commands, the generated suites' program runs
(`support.command_for_device`), and a notebook's run (`kernel`: the notebook a runner's command
line runs). It is no shell: no expansions, no comments, no here-documents; the words after a
redirection are not read as the program's arguments.

Standard library only.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# A shell word (its quotes and escapes kept) or an operator: `&&`, `||`, `;`, `|`, `&`, a
# redirection (`>`, `2>&`), a parenthesis.
_TOKEN = re.compile(
    r"(?P<operator>&&|\|\||\d*[<>]+&?|[;&|()])"
    r"|(?P<word>(?:[^\s'\"\\;&|<>()]|\\.|'[^']*'|\"(?:[^\"\\]|\\.)*\")+)"
)
_REDIRECTION = re.compile(r"\d*[<>]+&?")
_ASSIGNMENT = re.compile(r"\w+=.*")  # a variable set for the program: `A=1 python`
PYTHON = re.compile(r"python[\d.]*")  # an interpreter's name: python, python3, python3.11
# Programs, and Python modules, that run a script given after their own options.
LAUNCHERS = (
    "torchrun",
    "deepspeed",
    "accelerate",
    "torch.distributed.run",
    "torch.distributed.launch",
)
_PYTHON_VALUE_OPTIONS = ("-W", "-X", "--check-hash-based-pycs")  # python options with a value
RUNNABLE = (".py", ".ipynb")  # what a launcher or a notebook runner runs

# Notebook runners: programs that run a notebook given among their arguments (their first .ipynb
# word), by name or as a Python module; `jupyter` through one of its subcommands.
RUNNER_MODULE = "pytpu.runtime.notebook"  # PyTPU's, which runs a bare notebook (`runnable`)
RUNNERS = frozenset({"jupyter-execute", "jupyter-nbconvert", "papermill", RUNNER_MODULE})
JUPYTER_SUBCOMMANDS = frozenset({"execute", "nbconvert"})

# What a program runs (`Program.kind`).
SCRIPT, MODULE, NOTEBOOK = "script", "module", "notebook"


def is_notebook(path: str) -> bool:
    return path.endswith(".ipynb")


def runner_at(words: list[str], index: int) -> int:
    """How many words name a notebook runner at `words[index]`: 1 (`jupyter-execute`,
    `papermill`, the module of `python -m`), 2 (`jupyter execute`), or 0."""
    name = Path(words[index]).name
    if name in RUNNERS:
        return 1
    following = words[index + 1] if index + 1 < len(words) else ""
    return 2 if name == "jupyter" and following in JUPYTER_SUBCOMMANDS else 0


def executed_notebook(argv: list[str]) -> str | None:
    """The notebook a process's command line (`sys.orig_argv`) runs, when it is a notebook
    runner's: its first .ipynb argument."""
    for index in range(len(argv)):
        skip = runner_at(argv, index)
        if skip:
            return next((w for w in argv[index + skip :] if is_notebook(w)), None)
    return None


# --- the parts of a line -------------------------------------------------------------------------


@dataclass(frozen=True)
class Word:
    """A word of a shell line: where it is in the line, and its value once the shell unquotes it."""

    start: int
    end: int
    value: str


@dataclass(frozen=True, order=True)
class Edit:
    """The text that replaces the line's characters from `start` to `end` (empty: they go)."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Redirection:
    """`> log.txt`, `2>&1`, `< in`: the operator, where it is, and the word it takes."""

    start: int
    end: int
    operator: str
    target: Word | None  # None: no word follows (`>` at the end of a segment)


@dataclass(frozen=True)
class Segment:
    """A simple command of the line: what runs between two operators."""

    start: int  # where its first token starts in the line
    end: int  # where its last token ends
    words: tuple[Word, ...]  # up to its first redirection: the command and its arguments
    redirections: tuple[Redirection, ...] = ()
    after: tuple[Word, ...] = ()  # words after a redirection that are not its target
    operator: str | None = None  # the operator after it (`&&`, `|`...); None: the line ends

    @property
    def values(self) -> list[str]:
        return [word.value for word in self.words]

    @property
    def command_index(self) -> int:
        """The index in `words` of what it runs, after its variables and `env`."""
        return _command_start(self.values)

    @property
    def executable(self) -> Word | None:
        """The word of what it runs (`python`, `cd`, `train.ipynb`); None without one."""
        index = self.command_index
        return self.words[index] if index < len(self.words) else None

    @property
    def assignments(self) -> tuple[Word, ...]:
        """The variables it sets for its program: `A=1` of `A=1 python`, `env A=1 python`."""
        return tuple(w for w in self.words[: self.command_index] if w.value != "env")

    @property
    def environment(self) -> dict[str, str]:
        """Those variables: name -> value."""
        return {
            name: value for name, _, value in (w.value.partition("=") for w in self.assignments)
        }

    @property
    def directory(self) -> str | None:
        """The folder of a `cd X`; None for any other command."""
        values = self.values
        return values[1] if values[:1] == ["cd"] and len(values) == 2 else None

    @property
    def program(self) -> Program | None:
        """The Python script or module it runs, directly or through a launcher, after variables,
        `env` and the interpreter's options; or the notebook it runs, bare (`train.ipynb`) or
        through a notebook runner (`jupyter execute train.ipynb`). None for anything else
        (`python -c ...` too)."""
        found = _program_word(self.values)
        if found is None:
            return None
        index, module = found
        kind = MODULE if module else NOTEBOOK if is_notebook(self.words[index].value) else SCRIPT
        return Program(self, index, kind)


@dataclass(frozen=True)
class Program:
    """What a segment runs: the script, module or notebook (`target`), and its arguments."""

    segment: Segment
    index: int  # of `target` in the segment's words
    kind: str  # SCRIPT | MODULE | NOTEBOOK

    @property
    def target(self) -> Word:
        """The script's path, the module's name or the notebook's path, as the line gives it."""
        return self.segment.words[self.index]

    @property
    def launcher(self) -> tuple[Word, ...]:
        """The words that run it: the interpreter and its options, a launcher and its options,
        a notebook runner (`python -u`, `torchrun --nproc_per_node=2`, `jupyter execute`)."""
        return self.segment.words[self.segment.command_index : self.index]

    @property
    def arguments(self) -> tuple[Word, ...]:
        """The words after the target, up to an operator or a redirection."""
        return self.segment.words[self.index + 1 :]

    @property
    def values(self) -> list[str]:
        """The program's arguments as it receives them."""
        return [word.value for word in self.arguments]

    @property
    def end(self) -> int:
        """Where its last word ends: a word added there reaches the program."""
        return self.segment.words[-1].end

    def gives(self, option: str) -> bool:
        """Its arguments give `option`: `--opt`, or `--opt=value`."""
        return any(w.value == option or w.value.startswith(f"{option}=") for w in self.arguments)

    def set_value(self, option: str, value: str) -> list[Edit]:
        """Each place the arguments give `option`, given `value` instead: `--opt=old` becomes
        `--opt=value`, the word after `--opt` becomes `value`; `--opt` as the last argument
        becomes `--opt=value`. None where `option` is not given (`append` adds it)."""
        edits = []
        arguments = self.arguments
        for index, word in enumerate(arguments):
            following = arguments[index + 1] if index + 1 < len(arguments) else None
            if word.value.startswith(f"{option}="):
                edits.append(Edit(word.start, word.end, f"{option}={shlex.quote(value)}"))
            elif word.value == option and following is not None:
                edits.append(Edit(following.start, following.end, shlex.quote(value)))
            elif word.value == option:
                edits.append(Edit(word.start, word.end, f"{option}={shlex.quote(value)}"))
        return edits

    def drop(self, option: str, takes_value: bool = False) -> list[Edit]:
        """Each place the arguments give `option` left out: `--opt=value`, `--opt`, and with
        `takes_value` the word after `--opt` (`--gpu -1`)."""
        edits = []
        arguments = self.arguments
        for index, word in enumerate(arguments):
            following = arguments[index + 1] if index + 1 < len(arguments) else None
            if word.value.startswith(f"{option}="):
                edits.append(Edit(word.start, word.end, ""))
            elif word.value == option:
                end = following.end if following and takes_value else word.end
                edits.append(Edit(word.start, end, ""))
        return edits

    def append(self, words: list[str]) -> Edit:
        """`words` (shell text, quoted as they need) added after the program's last argument."""
        return Edit(self.end, self.end, "".join(f" {word}" for word in words))


@dataclass(frozen=True)
class Command:
    """A run command's shell line, read: its simple commands in order."""

    text: str
    segments: tuple[Segment, ...]

    def text_of(self, segment: Segment) -> str:
        return self.text[segment.start : segment.end]

    @property
    def words(self) -> list[Word]:
        """Every word of the line that is not a redirection's target, in order."""
        return [w for s in self.segments for w in (*s.words, *s.after)]

    @property
    def directories(self) -> list[str]:
        """The folders its `cd X` commands change to, in order."""
        return [s.directory for s in self.segments if s.directory is not None]

    @property
    def assignments(self) -> list[Word]:
        """The variables each of its commands sets for the program it runs."""
        return [word for segment in self.segments for word in segment.assignments]

    @property
    def redirections(self) -> list[Redirection]:
        return [r for segment in self.segments for r in segment.redirections]

    def programs(self) -> list[tuple[Path, Program]]:
        """Each program the line runs (`Segment.program`), with the folder it runs in relative
        to where the line starts: its `cd`s before it, joined."""
        folder, found = Path(), []
        for segment in self.segments:
            if segment.directory is not None:
                folder = folder / segment.directory
            elif (program := segment.program) is not None:
                found.append((folder, program))
        return found

    @property
    def program(self) -> Program | None:
        """The first program the line runs."""
        programs = self.programs()
        return programs[0][1] if programs else None

    @property
    def appendable(self) -> Segment | None:
        """The simple command that ends the line, when a word added at the line's end reaches
        its program as its last argument: no redirection and no operator after it."""
        last = self.segments[-1] if self.segments else None
        if last is None or last.redirections or last.operator is not None:
            return None
        return last

    def has_flag(self, flag: str) -> bool:
        """Some word of the line is `flag` (`--cuda`)."""
        return any(word.value == flag for word in self.words)

    def unset(self, name: str) -> list[Edit]:
        """The assignments of the variable `name` before any program left out."""
        return [Edit(w.start, w.end, "") for w in self.assignments if w.value.split("=")[0] == name]

    def replace_value(self, options: tuple[str, ...] | str, old: str, new: str) -> str:
        """The line with `options`' value `old` (`--device cpu`, `--device=cpu`) given as `new`
        wherever a word gives it; a value that starts with `old` and a character other than a
        letter, a digit or `_` (`cpu:0`) keeps the rest (`xla:0`)."""
        options = (options,) if isinstance(options, str) else options
        pattern = re.compile(rf"{re.escape(old)}(?!\w)")
        edits = []
        for segment in self.segments:
            for words in (segment.words, segment.after):
                for index, word in enumerate(words):
                    name, equals, value = word.value.partition("=")
                    if name not in options:
                        continue
                    if equals and pattern.match(value):
                        replaced = pattern.sub(new, value, count=1)
                        edits.append(Edit(word.start, word.end, f"{name}={shlex.quote(replaced)}"))
                    elif not equals and index + 1 < len(words):
                        following = words[index + 1]
                        if pattern.match(following.value):
                            replaced = pattern.sub(new, following.value, count=1)
                            edits.append(
                                Edit(following.start, following.end, shlex.quote(replaced))
                            )
        return self.edited(edits)

    def with_option(self, option: str, value: str) -> str:
        """The line with its first program's `option` given `value`: in place where the program
        gives it (`Program.set_value`), else added after its last argument as `option=value`."""
        program = self.program
        if program is None:
            raise ValueError(f"no program in {self.text!r} to give {option}")
        if program.gives(option):
            return self.edited(program.set_value(option, value))
        return self.edited([program.append([f"{option}={shlex.quote(value)}"])])

    def runnable(self) -> str:
        """The line with each bare notebook it runs (`train.ipynb`, which a shell cannot run)
        given to PyTPU's notebook runner: `python -m pytpu.runtime.notebook train.ipynb`."""
        return self.edited(
            Edit(word.start, word.start, f"python -m {RUNNER_MODULE} ")
            for segment in self.segments
            if (word := segment.executable) is not None and is_notebook(word.value)
        )

    def edited(self, edits: Iterable[Edit]) -> str:
        """The line with `edits` made (each against this line's text); a word left out takes
        the space before it, or, the line's first, the one after it."""
        text = self.text
        for edit in sorted(edits, reverse=True):
            start, end = edit.start, edit.end
            if not edit.text and text[start - 1 : start] == " ":
                start -= 1
            elif not edit.text and text[end : end + 1] == " ":
                end += 1
            text = text[:start] + edit.text + text[end:]
        return text


def parse(text: str) -> Command:
    """`text`, a shell line, read: its simple commands, split at its operators; each with its
    words up to its first redirection, its redirections, and the words after them."""
    segments: list[Segment] = []
    tokens: list[tuple[str, re.Match[str]]] = []  # the current segment's: ("word"|"operator", m)

    def close(operator: str | None) -> None:
        if tokens:  # (an operator with no words before it makes no segment)
            segments.append(_segment(tokens, operator))
        tokens.clear()

    for token in _TOKEN.finditer(text):
        operator = token["operator"]
        if operator and not _REDIRECTION.fullmatch(operator):
            close(operator)
        else:
            tokens.append(("operator" if operator else "word", token))
    close(None)
    return Command(text, tuple(segments))


def runnable(text: str) -> str:
    """`text` with each bare notebook it runs given to PyTPU's notebook runner
    (`Command.runnable`)."""
    return parse(text).runnable()


def _segment(tokens: list[tuple[str, re.Match[str]]], operator: str | None) -> Segment:
    words: list[Word] = []
    after: list[Word] = []
    redirections: list[Redirection] = []
    pending: re.Match[str] | None = None  # a redirection waiting for its word
    for kind, token in tokens:
        if kind == "operator":
            if pending is not None:
                redirections.append(Redirection(pending.start(), pending.end(), pending[0], None))
            pending = token
            continue
        # the regular expression matched the word's quotes: shlex reads it
        word = Word(token.start(), token.end(), "".join(shlex.split(token["word"])))
        if pending is not None:
            redirections.append(Redirection(pending.start(), pending.end(), pending[0], word))
            pending = None
        elif redirections:
            after.append(word)
        else:
            words.append(word)
    if pending is not None:
        redirections.append(Redirection(pending.start(), pending.end(), pending[0], None))
    start, end = tokens[0][1].start(), tokens[-1][1].end()
    return Segment(start, end, tuple(words), tuple(redirections), tuple(after), operator)


def _program_word(words: list[str]) -> tuple[int, bool] | None:
    """The index of the script (True: of the module) that a command runs with Python, directly or
    through a launcher, after variables, `env` and options; or of the notebook it runs, bare
    (`train.ipynb`) or through a notebook runner (`jupyter execute train.ipynb`)."""
    index = _command_start(words)
    if index == len(words):
        return None
    if is_notebook(words[index]):
        return index, False
    runner = runner_at(words, index)
    launcher = Path(words[index]).name in LAUNCHERS or runner > 0
    if not (launcher or PYTHON.fullmatch(Path(words[index]).name)):
        return None
    index += max(runner, 1)
    while index < len(words):
        word = words[index]
        if launcher:
            if word.endswith(RUNNABLE):
                return index, False
        elif word == "-m" and index + 1 < len(words):
            if words[index + 1] not in LAUNCHERS and not runner_at(words, index + 1):
                return index + 1, True
            launcher, index = True, index + 1  # python -m torch.distributed.run ... x.py
        elif word == "-c":
            return None
        elif word in _PYTHON_VALUE_OPTIONS:
            index += 1
        elif not word.startswith("-"):
            return index, False
        index += 1
    return None


def _command_start(words: list[str]) -> int:
    """The index of the program a simple command runs, after its variables and `env`."""
    index = 0
    while index < len(words) and (words[index] == "env" or _ASSIGNMENT.fullmatch(words[index])):
        index += 1
    return index
