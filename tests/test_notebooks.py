"""Jupyter notebooks, migrated cell by cell with the same engine and KB as .py files.

Each test writes small but real-shaped notebooks with nbformat's v4 helpers (markdown, outputs,
execution counts, IPython magics and shell lines, as a CUDA training notebook has them) and checks
what the engine guarantees for them: the rewrite lands in the right cells, everything else in the
file is kept byte for byte, a second run changes nothing, a notebook that cannot be read is a
clear error naming it, and .py files are migrated as before.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
from pathlib import Path

import msgspec
import nbformat
import pytest
from nbformat import v4
from typer.testing import CliRunner

from pytpu.engine import cli
from pytpu.engine.reporting import markdown, review
from pytpu.engine.reporting import sections as report_sections
from pytpu.engine.rewriter import checkout, ipython, notebooks, sources

DEVICE_LINE = "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')"
TRAIN_LOOP = (
    "for step in range(3):\n"
    "    x = torch.randn(8, 4).cuda()\n"
    "    loss = model(x).sum()\n"
    "    opt.zero_grad()\n"
    "    loss.backward()\n"
    "    opt.step()"
)


def training_notebook() -> nbformat.NotebookNode:
    """A CUDA training notebook as people write them: a title, an imports cell opened by
    magics and a shell line, the device cell (run, with its output), the model, the loop."""
    nb = v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [
        v4.new_markdown_cell("# Training on a GPU\n\nRun the cells in order."),
        v4.new_code_cell("%matplotlib inline\n!nvidia-smi\nimport torch\nimport torch.nn as nn"),
        v4.new_code_cell(
            DEVICE_LINE + "\nprint(device)",
            execution_count=2,
            outputs=[v4.new_output("stream", name="stdout", text="cuda\n")],
            metadata={"tags": ["setup"]},
        ),
        v4.new_code_cell(
            "model = nn.Linear(4, 2).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)"
        ),
        v4.new_markdown_cell("Train for a few steps:"),
        v4.new_code_cell("%%time\n" + TRAIN_LOOP),
        v4.new_code_cell("%%bash\necho 'x = torch.zeros(3).cuda()'"),
    ]
    return nb


def put(path: Path, nb: nbformat.NotebookNode | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(nb, str):
        path.write_text(nb, encoding="utf-8")
    else:
        nbformat.write(nb, str(path))
    return path


def by_path(run: checkout.RunResult) -> dict[str, checkout.FileResult]:
    return {f.path: f for f in run.files}


def cells_of(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return notebooks.source_of(cell)


def without_source(cell: dict) -> dict:
    return {key: value for key, value in cell.items() if key != "source"}


# --- the rewrite, cell by cell ----------------------------------------------------------------


def test_cuda_training_notebook_is_migrated_in_its_cells(tmp_path: Path) -> None:
    path = put(tmp_path / "train.ipynb", training_notebook())
    before = cells_of(path)

    result = by_path(checkout.run(tmp_path, write=True))["train.ipynb"]

    assert result.status == "changed", result.error
    after = cells_of(path)
    assert result.notebook is not None
    assert [c.number for c in result.notebook.cells] == [2, 3, 4, 6]
    imports, device, model, loop = (source(after[i]) for i in (1, 2, 3, 5))
    # the one import the rewrite needs is in the imports cell, after its imports
    assert imports.splitlines() == [
        "%matplotlib inline",
        "!nvidia-smi",
        "import torch",
        "import torch.nn as nn",
        "import torch_xla",
    ]
    assert device.splitlines()[0] == "device = torch_xla.device()"
    assert "nn.Linear(4, 2).to(torch_xla.device())" in model
    assert loop.startswith("%%time\nfor step in range(3):\n")
    assert ".cuda()" not in loop and "torch_xla.sync()" in loop
    # the markdown cells and the %%bash cell are as they were, even with CUDA code in it
    for i in (0, 4, 6):
        assert after[i] == before[i]
    # outputs, execution counts, metadata and cell ids are kept in every cell
    assert [without_source(c) for c in after] == [without_source(c) for c in before]
    nbformat.validate(nbformat.reads(path.read_text(), as_version=nbformat.NO_CONVERT))


def test_notebook_keeps_its_json_formatting_and_a_second_run_changes_nothing(
    tmp_path: Path,
) -> None:
    path = put(tmp_path / "train.ipynb", training_notebook())
    original = path.read_text()

    checkout.run(tmp_path, write=True)
    migrated = path.read_bytes()

    # written by nbformat, it still reads as nbformat writes it: indent, key order, final newline
    text = migrated.decode()
    assert text == nbformat.writes(nbformat.reads(text, as_version=nbformat.NO_CONVERT)) + "\n"
    assert text.endswith("}\n") and original.endswith("}\n")
    assert json.loads(text)["nbformat_minor"] == json.loads(original)["nbformat_minor"]
    # a minimal diff: only lines of the cells' sources changed
    changed = [
        line
        for line in difflib.unified_diff(original.splitlines(), text.splitlines(), n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changed and all(line[1:].lstrip().startswith('"') for line in changed), changed

    again = checkout.run(tmp_path, write=True)
    assert not again.changed and not again.errors
    assert path.read_bytes() == migrated


def colab_json(nb: nbformat.NotebookNode) -> str:
    """The notebook as Colab saves it: indent 2, keys in insertion order, non-ASCII escaped,
    no final newline."""
    data = json.loads(nbformat.writes(nb))
    data = {
        "nbformat": 4,
        "nbformat_minor": 0,
        "metadata": data["metadata"],
        "cells": data["cells"],
    }
    for cell in data["cells"]:
        cell.pop("id", None)  # (ids came with nbformat 4.5)
    return json.dumps(data, indent=2, ensure_ascii=True)


def test_a_notebook_saved_by_another_program_keeps_its_own_layout(tmp_path: Path) -> None:
    nb = training_notebook()
    nb.cells[2].source = DEVICE_LINE + "\nprint('Gerät:', device)  # ü\nprint('a/b')"
    # (a writer may escape a slash: a line that did not change keeps even that)
    original = colab_json(nb).replace("a/b", "a\\/b")
    path = put(tmp_path / "colab.ipynb", original)

    checkout.run(tmp_path, write=True)

    text = path.read_text()
    assert not text.endswith("\n")
    assert "\\u00fc" in text and "ü" not in text  # still escaped, as Colab wrote it
    diff = list(difflib.ndiff(original.splitlines(), text.splitlines()))
    changed = [line for line in diff if line[:2] in ("- ", "+ ")]
    assert changed and all(line[2:].lstrip().startswith('"') for line in changed), changed
    # the lines of a changed cell that did not change keep their exact JSON text
    assert "        \"print('a\\/b')\"" in text.splitlines()


def test_a_windows_notebook_keeps_its_line_endings_and_byte_order_mark(tmp_path: Path) -> None:
    text = nbformat.writes(training_notebook()).replace("\n", "\r\n") + "\r\n"
    path = tmp_path / "win.ipynb"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))

    result = by_path(checkout.run(tmp_path, write=True))["win.ipynb"]

    assert result.status == "changed", result.error
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf")
    assert b"\n" not in data.replace(b"\r\n", b"")
    assert "torch_xla.device()" in data.decode("utf-8-sig")


def test_an_unchanged_notebook_is_byte_identical(tmp_path: Path) -> None:
    nb = v4.new_notebook()
    nb.cells = [v4.new_code_cell("%matplotlib inline\nimport numpy as np\nprint(np.ones(3))")]
    path = put(tmp_path / "plain.ipynb", nb)
    data = path.read_bytes()
    result = by_path(checkout.run(tmp_path, write=True))["plain.ipynb"]
    assert result.status == "unchanged"
    assert path.read_bytes() == data


# --- IPython's own lines ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "%matplotlib inline",
        "!nvidia-smi",
        "files = !ls",
        "%env CUDA_VISIBLE_DEVICES=0",
        "?torch",
        "torch.cuda.is_available??",
        "%time y = x + 1",
    ],
)
def test_magic_and_shell_lines_are_kept_and_the_python_around_them_migrated(
    tmp_path: Path, line: str
) -> None:
    nb = v4.new_notebook()
    nb.cells = [v4.new_code_cell(f"import torch\n{line}\nx = torch.zeros(3).cuda()\n{line}")]
    path = put(tmp_path / "magic.ipynb", nb)

    result = by_path(checkout.run(tmp_path, write=True))["magic.ipynb"]

    assert result.status == "changed", result.error
    new = source(cells_of(path)[0])
    assert new.splitlines()[:3] == ["import torch", "import torch_xla", line]
    assert new.splitlines()[-1] == line
    assert "x = torch.zeros(3).to(torch_xla.device())" in new


def test_indented_shell_line_keeps_its_indentation(tmp_path: Path) -> None:
    nb = v4.new_notebook()
    nb.cells = [
        v4.new_code_cell(
            "import torch\nfor i in range(2):\n    !echo $i\n    x = torch.zeros(i).cuda()"
        )
    ]
    path = put(tmp_path / "loop.ipynb", nb)
    checkout.run(tmp_path, write=True)
    assert source(cells_of(path)[0]).splitlines()[3] == "    !echo $i"


def test_a_shell_line_continued_with_backslashes_is_kept_whole(tmp_path: Path) -> None:
    shell = '!curl http://127.0.0.1:8000/v1 \\\n  -H "Content-Type: application/json" \\\n  -d "{}"'
    nb = v4.new_notebook()
    nb.cells = [v4.new_code_cell(f"import torch\n{shell}\nx = torch.zeros(3).cuda()")]
    path = put(tmp_path / "curl.ipynb", nb)
    result = by_path(checkout.run(tmp_path, write=True))["curl.ipynb"]
    assert result.status == "changed", result.error
    assert shell in source(cells_of(path)[0])


def test_magic_like_text_inside_python_is_python() -> None:
    # a `%` that continues an expression, a `!` in a multi-line string: not IPython's lines
    cell = "x = (10\n     % 3)\ns = '''\n!not a shell line\n'''\n%env A=1"
    masked = ipython.mask(cell, [])
    assert masked.text.splitlines()[:5] == cell.splitlines()[:5]
    assert list(masked.lines.values()) == ["%env A=1"]
    assert masked.restore(masked.text) == cell


def test_a_cell_magic_that_is_not_python_is_left_alone() -> None:
    with pytest.raises(ipython.NotPython, match="%%writefile"):
        ipython.mask("%%writefile train.py\nx = torch.zeros(3).cuda()", [])
    assert ipython.mask("%%time\nx = 1", []).text == "__pytpu_magic_0__\nx = 1"


def test_a_cell_that_is_not_python_is_left_unchanged_with_a_warning(tmp_path: Path) -> None:
    nb = v4.new_notebook()
    nb.cells = [
        v4.new_code_cell("import torch"),
        v4.new_code_cell('print "python 2"\ny = torch.zeros(3).cuda()'),
        v4.new_code_cell("x = torch.zeros(3).cuda()"),
    ]
    path = put(tmp_path / "mixed.ipynb", nb)

    result = invoke("rewrite", tmp_path, "--write")

    assert result.exit_code == 0, result.output
    assert "warning: mixed.ipynb cell 2: not valid Python at line 1" in result.stderr
    cells = cells_of(path)
    assert source(cells[1]) == nb.cells[1].source
    assert "torch_xla.device()" in source(cells[2])


# --- the cells are one program ----------------------------------------------------------------


def test_added_imports_go_to_the_first_cell_with_imports(tmp_path: Path) -> None:
    nb = v4.new_notebook()
    nb.cells = [
        v4.new_code_cell("!pip install -q tqdm"),
        v4.new_code_cell("import torch"),
        v4.new_code_cell("import numpy as np\nseed = 0\nx = torch.zeros(3).cuda()"),
    ]
    path = put(tmp_path / "spread.ipynb", nb)

    checkout.run(tmp_path, write=True)

    cells = [source(c) for c in cells_of(path)]
    assert cells[0] == "!pip install -q tqdm"
    assert cells[1] == "import torch\nimport torch_xla"
    assert cells[2] == "import numpy as np\nseed = 0\nx = torch.zeros(3).to(torch_xla.device())"


def test_added_imports_stay_in_a_first_cell_that_opens_with_imports(tmp_path: Path) -> None:
    nb = v4.new_notebook()
    nb.cells = [
        v4.new_code_cell("import torch"),
        v4.new_code_cell(
            "!pip install -q some-package\nimport numpy as np\nx = torch.zeros(3).cuda()"
        ),
    ]
    path = put(tmp_path / "install.ipynb", nb)
    checkout.run(tmp_path, write=True)
    cells = [source(c) for c in cells_of(path)]
    assert cells[0] == "import torch\nimport torch_xla"  # (and no blank line at its end)
    assert cells[1] == nb.cells[1].source.replace(".cuda()", ".to(torch_xla.device())")


def test_added_imports_do_not_move_below_code_that_uses_them(tmp_path: Path) -> None:
    nb = v4.new_notebook()
    nb.cells = [
        v4.new_code_cell("x = torch.zeros(3).cuda()"),  # (torch comes from the next cell)
        v4.new_code_cell("import torch"),
    ]
    path = put(tmp_path / "early.ipynb", nb)
    checkout.run(tmp_path, write=True)
    cells = [source(c) for c in cells_of(path)]
    assert cells[0].splitlines()[0] == "import torch_xla"
    assert cells[1] == "import torch"


def test_analyses_see_the_cells_in_order(tmp_path: Path) -> None:
    """A device chosen in one cell is the device of the next: the whole-program analyses see
    the cells as one module."""
    nb = v4.new_notebook()
    nb.cells = [
        v4.new_code_cell("import torch"),
        v4.new_code_cell(DEVICE_LINE),
        v4.new_code_cell("x = torch.zeros(3, device=device)\ny = x.to(device)"),
    ]
    path = put(tmp_path / "flow.ipynb", nb)
    result = by_path(checkout.run(tmp_path, write=True))["flow.ipynb"]
    assert [c.number for c in result.notebook.cells] == [1, 2]
    assert source(cells_of(path)[2]) == nb.cells[2].source


def test_a_notebook_of_another_language_is_left_alone(tmp_path: Path) -> None:
    nb = v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "ir", "display_name": "R", "language": "R"}
    nb.cells = [v4.new_code_cell("x <- torch.zeros(3).cuda()")]
    path = put(tmp_path / "r.ipynb", nb)
    data = path.read_bytes()
    result = by_path(checkout.run(tmp_path, write=True))["r.ipynb"]
    assert result.status == "unchanged" and path.read_bytes() == data


# --- guarantees -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"cells": [', "is not valid JSON (line 1, column 12"),
        ("", "is not valid JSON"),
        ('{"name": "not a notebook"}', "is not a Jupyter notebook"),
        ('{"nbformat": 3, "nbformat_minor": 0, "cells": []}', "nbformat 3"),
        (
            '{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, '
            '"cells": [{"cell_type": "code"}]}',
            "is not a valid Jupyter notebook",
        ),
    ],
    ids=["truncated", "empty", "other-json", "nbformat3", "invalid"],
)
def test_a_bad_notebook_is_an_error_naming_it_and_the_run_goes_on(
    tmp_path: Path, text: str, reason: str
) -> None:
    bad = put(tmp_path / "notes" / "bad.ipynb", text)
    good = put(tmp_path / "good.ipynb", training_notebook())
    script = put(tmp_path / "train.py", "import torch\nx = torch.zeros(3).cuda()\n")

    files = by_path(checkout.run(tmp_path, write=True))

    error = files["notes/bad.ipynb"].error or ""
    assert files["notes/bad.ipynb"].status == "error"
    assert error.startswith("notes/bad.ipynb: ") and reason in error, error
    assert bad.read_text() == text
    assert files["good.ipynb"].status == "changed" and "torch_xla" in good.read_text()
    assert files["train.py"].status == "changed" and "torch_xla" in script.read_text()


def test_a_rewrite_that_moves_code_across_cells_leaves_the_notebook_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = put(tmp_path / "train.ipynb", training_notebook())
    data = path.read_bytes()
    real = notebooks.migrate_source

    def lose_a_marker(text, *args, **kwargs):
        migrated = real(text, *args, **kwargs)
        migrated.text = migrated.text.replace(notebooks.MARKER.format(4) + "\n", "")
        return migrated

    monkeypatch.setattr(notebooks, "migrate_source", lose_a_marker)
    result = by_path(checkout.run(tmp_path, write=True))["train.ipynb"]
    assert result.status == "error"
    assert result.error.startswith("train.ipynb: ") and "left unchanged" in result.error
    assert path.read_bytes() == data


def test_a_cell_that_would_not_parse_leaves_the_notebook_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = put(tmp_path / "train.ipynb", training_notebook())
    data = path.read_bytes()
    real = notebooks.migrate_source

    def break_cell_3(text, *args, **kwargs):
        migrated = real(text, *args, **kwargs)
        migrated.text = migrated.text.replace("print(device)", "print(device")
        return migrated

    monkeypatch.setattr(notebooks, "migrate_source", break_cell_3)
    result = by_path(checkout.run(tmp_path, write=True))["train.ipynb"]
    assert result.status == "error"
    assert "train.ipynb: cell 3 would not parse" in (result.error or "")
    assert path.read_bytes() == data
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".pytpu-tmp")]


def test_checkpoints_are_not_migrated_and_py_discovery_is_unchanged(tmp_path: Path) -> None:
    put(tmp_path / "train.ipynb", training_notebook())
    put(tmp_path / ".ipynb_checkpoints" / "train-checkpoint.ipynb", training_notebook())
    put(tmp_path / "train.py", "import torch\nx = torch.zeros(3).cuda()\n")
    assert [p.name for p in sources.discover(tmp_path)[0]] == ["train.py"]
    found = sources.discover(tmp_path, notebooks=True)[0]
    assert [p.name for p in found] == ["train.ipynb", "train.py"]


def test_py_results_are_the_same_with_notebooks_beside_them(tmp_path: Path) -> None:
    script = "import torch\nn = torch.cuda.device_count()\nx = torch.zeros(3).cuda()\n"
    alone = put(tmp_path / "alone" / "train.py", script)
    put(tmp_path / "both" / "train.py", script)
    put(tmp_path / "both" / "train.ipynb", training_notebook())

    first = by_path(checkout.run(alone.parent))["train.py"]
    second = by_path(checkout.run(tmp_path / "both"))["train.py"]

    assert first.as_dict() == second.as_dict()
    assert first.after == second.after and first.diff() == second.diff()
    assert all("cell" not in f for f in first.as_dict()["findings"])
    assert first.notebook is None and first.label() == "train.py"


# --- where people read the changes ------------------------------------------------------------

runner = CliRunner()


def invoke(*args: object):
    return runner.invoke(cli.app, [str(a) for a in args])


def test_rewrite_shows_a_notebook_change_per_cell(tmp_path: Path) -> None:
    put(tmp_path / "train.ipynb", training_notebook())

    dry = invoke("rewrite", tmp_path)
    diff = invoke("rewrite", tmp_path, "--diff")

    assert dry.exit_code == 0, dry.output
    assert "would change train.ipynb (cells 2, 3, 4, 6)" in dry.stderr
    assert diff.exit_code == 0, diff.output
    assert "--- a/train.ipynb cell 3\n+++ b/train.ipynb cell 3\n" in diff.stdout
    assert f"-{DEVICE_LINE}\n+device = torch_xla.device()\n print(device)\n" in diff.stdout
    assert '"source"' not in diff.stdout  # the cells' code, not the JSON


def test_review_items_name_their_cell(tmp_path: Path) -> None:
    nb = training_notebook()
    nb.cells.insert(
        4, v4.new_code_cell("n = torch.cuda.device_count()\nstart = torch.cuda.Event()")
    )
    put(tmp_path / "bench.ipynb", nb)

    result = invoke("analyze", tmp_path)
    assert "bench.ipynb cell 5:1:5: PYTPU202" in result.stdout
    assert "bench.ipynb cell 5:2:9: PYTPU213" in result.stdout

    run = checkout.run(tmp_path)
    items = review.estimate(run).as_dict()["review_items"]
    assert [(i["cell"], i["line"], i["code"]) for i in items] == [
        (5, 1, "PYTPU202"),
        (5, 2, "PYTPU213"),
    ]
    # the report points at the comments written in the migrated cell
    after = run.files[0].notebook.cells
    cell5 = next(c for c in after if c.number == 5).after.splitlines()
    entries = msgspec.to_builtins(report_sections.review(run))
    for entry in entries:
        assert entry["file"] == "bench.ipynb" and entry["cell"] == 5
        assert cell5[entry["line"] - 1].startswith(f"# {entry['code']}:")


def test_the_report_shows_the_cell_of_a_review_item() -> None:
    path = Path(__file__).parent / "fixtures" / "reporting" / "parity.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    item = copy.deepcopy(doc["review"][0])
    item.update(file="notebooks/train.ipynb", cell=3, line=2)
    doc["review"].append(item)
    text = markdown.render(doc)
    assert "`notebooks/train.ipynb cell 3:2`" in text
    assert f"`{doc['review'][0]['file']}:{doc['review'][0]['line']}`" in text
