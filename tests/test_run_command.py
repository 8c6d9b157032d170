"""The one reading of a run command's shell line (`pytpu.runtime.command`): its simple commands,
`cd`s, variables, program, arguments with their places, redirections, and edits that leave the
rest of the line byte for byte."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pytpu.runtime import command as shell
from pytpu.runtime.command import MODULE, NOTEBOOK, SCRIPT, Edit, parse


def test_a_line_splits_at_its_operators_outside_quotes():
    line = parse("cd a && python b.py --x 1 | tee 'log; here' ; echo \"x && y\" || true & ")
    texts = [line.text_of(s) for s in line.segments]
    assert texts == ["cd a", "python b.py --x 1", "tee 'log; here'", 'echo "x && y"', "true"]
    assert [s.operator for s in line.segments] == ["&&", "|", ";", "||", "&"]
    assert line.segments[2].values == ["tee", "log; here"]
    assert line.segments[3].values == ["echo", "x && y"]


def test_words_keep_their_place_and_are_unquoted():
    text = """python b.py --name 'a b' --say="hi there" it\\'s"""
    words = parse(text).segments[0].words
    assert [w.value for w in words] == ["python", "b.py", "--name", "a b", "--say=hi there", "it's"]
    assert [text[w.start : w.end] for w in words] == [
        "python", "b.py", "--name", "'a b'", '--say="hi there"', "it\\'s"
    ]  # fmt: skip


def test_cd_then_python_runs_the_script_in_the_folder():
    line = parse("cd a && python b.py --x 1")
    assert line.directories == ["a"]
    [(folder, program)] = line.programs()
    assert folder == Path("a")
    assert (program.kind, program.target.value, program.values) == (SCRIPT, "b.py", ["--x", "1"])
    assert [w.value for w in program.launcher] == ["python"]
    assert line.text[program.end :] == ""


def test_folders_join_in_order():
    [(folder, program)] = parse("cd a && cd b/c && python3 x.py").programs()
    assert folder == Path("a/b/c") and program.target.value == "x.py"


def test_variables_set_for_the_program():
    line = parse("A=1 env B='x y' CUDA_VISIBLE_DEVICES= python train.py")
    segment = line.segments[0]
    assert [w.value for w in segment.assignments] == ["A=1", "B=x y", "CUDA_VISIBLE_DEVICES="]
    assert segment.environment == {"A": "1", "B": "x y", "CUDA_VISIBLE_DEVICES": ""}
    assert segment.executable is not None and segment.executable.value == "python"
    assert line.program is not None and line.program.target.value == "train.py"
    assert line.edited(line.unset("CUDA_VISIBLE_DEVICES")) == "A=1 env B='x y' python train.py"
    assert line.edited(line.unset("A")) == "env B='x y' CUDA_VISIBLE_DEVICES= python train.py"


@pytest.mark.parametrize(
    "text, kind, target, arguments",
    [
        ("python -m pkg.train --lr 0.1", MODULE, "pkg.train", ["--lr", "0.1"]),
        ("python3 -u -W ignore -m pkg.train", MODULE, "pkg.train", []),
        ("python -X dev train.py a", SCRIPT, "train.py", ["a"]),
        ("torchrun --nproc_per_node=2 train.py --x", SCRIPT, "train.py", ["--x"]),
        ("accelerate launch --cpu train.py", SCRIPT, "train.py", []),
        ("python -m torch.distributed.run --nnodes 1 train.py", SCRIPT, "train.py", []),
        ("jupyter execute nb.ipynb", NOTEBOOK, "nb.ipynb", []),
        ("papermill nb.ipynb out.ipynb", NOTEBOOK, "nb.ipynb", ["out.ipynb"]),
        ("python -m pytpu.runtime.notebook nb.ipynb", NOTEBOOK, "nb.ipynb", []),
        ("A=1 nb.ipynb", NOTEBOOK, "nb.ipynb", []),
    ],
)
def test_the_program_a_command_runs(text, kind, target, arguments):
    program = parse(text).program
    assert program is not None
    assert (program.kind, program.target.value, program.values) == (kind, target, arguments)


@pytest.mark.parametrize("text", ["python -c 'print(1)'", "echo python x.py", "make train", ""])
def test_no_program(text):
    assert parse(text).program is None


def test_redirections_end_the_program_s_arguments():
    text = "python main.py --epochs 1 > log.txt 2>&1 --late"
    line = parse(text)
    [segment] = line.segments
    assert segment.values == ["python", "main.py", "--epochs", "1"]
    assert [(r.operator, r.target and r.target.value) for r in segment.redirections] == [
        (">", "log.txt"),
        ("2>&", "1"),
    ]
    assert [w.value for w in segment.after] == ["--late"]
    assert line.has_flag("--late") and not line.has_flag("log.txt")
    assert line.program is not None and text[: line.program.end] == "python main.py --epochs 1"
    assert line.appendable is None  # a word added at the end would not reach the program


def test_appendable_only_when_the_program_ends_the_line():
    assert parse("cd a && python b.py --x 1").appendable is not None
    assert parse("python b.py | tee log").appendable is not None  # (tee's: not the script's)
    assert parse("python b.py &").appendable is None
    assert parse("python b.py;").appendable is None


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "cd examples/mnist && python main.py --epochs 1 --lr=0.1 > log.txt",
            "cd examples/mnist && python main.py --epochs 7 --lr=0.1 > log.txt",
        ),
        ("python main.py --epochs=1  --lr=0.1", "python main.py --epochs=7  --lr=0.1"),
        ("python main.py --lr 0.1 --epochs", "python main.py --lr 0.1 --epochs=7"),
        ("python main.py  --lr\t0.1", "python main.py  --lr\t0.1 --epochs=7"),
        ("python main.py 'a  b' | tee x", "python main.py 'a  b' --epochs=7 | tee x"),
    ],
)
def test_with_option_changes_only_that_value(text, expected):
    assert parse(text).with_option("--epochs", "7") == expected


def test_a_value_that_needs_quotes_gets_them():
    line = parse("python t.py --name x --tag=y")
    assert line.with_option("--name", "a b") == "python t.py --name 'a b' --tag=y"
    assert line.with_option("--tag", "it's") == "python t.py --name x --tag='it'\"'\"'s'"


def test_with_option_needs_a_program():
    with pytest.raises(ValueError, match="no program"):
        parse("make train").with_option("--epochs", "1")


def test_dropping_an_option_takes_its_space():
    line = parse("python t.py --no-cuda --gpu -1 --lr=3 > log")
    program = line.program
    assert program is not None
    assert line.edited(program.drop("--no-cuda")) == "python t.py --gpu -1 --lr=3 > log"
    assert (
        line.edited(program.drop("--gpu", takes_value=True)) == "python t.py --no-cuda --lr=3 > log"
    )
    assert line.edited(program.drop("--lr")) == "python t.py --no-cuda --gpu -1 > log"
    assert program.gives("--lr") and program.gives("--gpu") and not program.gives("--l")


def test_edits_at_once_are_made_against_the_given_line():
    line = parse("python t.py --a 1 --b=2")
    program = line.program
    assert program is not None
    edits = [*program.set_value("--a", "10"), *program.drop("--b"), program.append(["--c"])]
    assert line.edited(edits) == "python t.py --a 10 --c"
    assert line.edited([Edit(0, 6, "python3")]) == "python3 t.py --a 1 --b=2"


def test_replace_value_names_the_device():
    line = parse("python t.py --device cpu --device_type=cpu:0 --other cpu --device=cpus")
    assert line.replace_value(("--device", "--device_type"), "cpu", "xla") == (
        "python t.py --device xla --device_type=xla:0 --other cpu --device=cpus"
    )
    assert parse("python t.py").replace_value("--device", "cpu", "xla") == "python t.py"


def test_has_flag_reads_words_not_text():
    assert parse("python t.py --cuda").has_flag("--cuda")
    assert not parse("python t.py --cudas --no-cuda").has_flag("--cuda")
    assert parse("cd a && python t.py '--cuda'").has_flag("--cuda")


def test_a_notebook_command():
    line = parse("cd nb && A=1 train.ipynb")
    [(folder, program)] = line.programs()
    assert (folder, program.kind, program.target.value) == (Path("nb"), NOTEBOOK, "train.ipynb")
    assert line.runnable() == "cd nb && A=1 python -m pytpu.runtime.notebook train.ipynb"
    assert shell.runnable("jupyter execute nb.ipynb") == "jupyter execute nb.ipynb"


def test_the_notebook_a_runner_s_command_line_runs():
    assert shell.executed_notebook(["/env/bin/python3", "/env/bin/jupyter", "execute", "a.ipynb"])
    assert shell.executed_notebook(["python", "-m", shell.RUNNER_MODULE, "b.ipynb"]) == "b.ipynb"
    assert shell.executed_notebook(["python", "train.py", "--data", "x.ipynb"]) is None


# --- properties ----------------------------------------------------------------------------------

_WORDS = st.lists(
    st.text(st.characters(codec="ascii", exclude_characters="\x00"), min_size=1, max_size=8),
    max_size=6,
)


@given(_WORDS)
def test_a_quoted_argument_list_reads_back_as_written(arguments):
    text = shlex.join(["python", "x.py", *arguments])
    line = parse(text)
    program = line.program
    assert program is not None and program.values == arguments
    assert [text[w.start : w.end] for w in program.arguments] == [shlex.quote(a) for a in arguments]
    assert program.end == len(text)


@given(_WORDS, st.text(st.characters(codec="ascii", exclude_characters="\x00"), max_size=6))
def test_an_edit_leaves_every_other_byte(arguments, value):
    assume(not any(a.startswith("--steps") for a in arguments))
    prefix = "cd 'a b' && A=1 python x.py " + shlex.join(arguments)
    text = f"{prefix} --steps=3 > 'out log'"
    edited = parse(text).with_option("--steps", value)
    assert edited == f"{prefix} --steps={shlex.quote(value)} > 'out log'"
    program = parse(edited).program
    assert program is not None and program.values == [*arguments, f"--steps={value}"]
