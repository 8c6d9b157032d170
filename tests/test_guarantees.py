"""The engine's guarantees, each checked on a small checkout written into a temporary folder.

- A file that cannot be read or parsed is skipped with a clear error; the other files go on.
- Ignored, vendored and virtual-environment folders, and links that leave the checkout, are
  never touched.
- Writes are atomic (no temporary files left behind) and a second run changes nothing.
- black runs only where the project uses it, and then only on the lines PyTPU changed.
- Output that does not parse is never written; the error names the rules and lines involved.
- Line endings, a UTF-8 BOM and the declared encoding survive a rewrite.
"""

from __future__ import annotations

import ast
import itertools
import os
import stat
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from pytpu.engine.rewriter import checkout, single_file
from pytpu.engine.rewriter.transform import TransformResult

CUDA_LINE = "x = torch.zeros(3).cuda()\n"
SIMPLE = "import torch\n\n" + CUDA_LINE

# A small but realistic training script that uses most CUDA idioms at once.
REALISTIC = textwrap.dedent(
    """\
    import argparse
    import os

    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    def parse_args():
        parser = argparse.ArgumentParser()
        parser.add_argument("--device", default="cuda")
        parser.add_argument("--epochs", type=int, default=2)
        return parser.parse_args()


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 4)

        def forward(self, x):
            return F.relu(self.fc(x))


    def train(rank, args):
        torch.manual_seed(0)
        torch.cuda.manual_seed_all(0)
        torch.backends.cudnn.benchmark = True
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if torch.cuda.is_available():
            torch.cuda.set_device(rank)
        model = Net().cuda()
        model = torch.compile(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(args.epochs):
            data = torch.randn(8, 16).cuda(non_blocking=True)
            target = torch.randint(0, 4, (8,)).to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data), target)
            loss.backward()
            optimizer.step()
            torch.cuda.synchronize()
            print(epoch, loss.item())
        torch.cuda.empty_cache()
        torch.save(model.state_dict(), os.path.join("checkpoints", "model.pt"))
        state = torch.load(os.path.join("checkpoints", "model.pt"), map_location="cuda")
        model.load_state_dict(state)
        return model


    if __name__ == "__main__":
        train(0, parse_args())
    """
)


# --- helpers -----------------------------------------------------------------------------------


def put(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def snapshot(root: Path) -> dict[str, bytes]:
    """Every regular file under `root` (links not followed) with its bytes."""
    out = {}
    for current, _dirs, files in os.walk(root):
        for name in files:
            path = Path(current) / name
            if not path.is_symlink():
                out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def by_path(result: checkout.RunResult) -> dict[str, checkout.FileResult]:
    return {f.path: f for f in result.files}


def code_only(text: str) -> str:
    """`text` without its comment lines (findings leave comments that name the old calls)."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def assert_parses(text: str) -> None:
    cst.parse_module(text)
    ast.parse(text)


# --- files that cannot be used ---------------------------------------------------------------


def test_python2_file_is_skipped_and_its_sibling_is_migrated(tmp_path: Path) -> None:
    py2 = put(tmp_path / "legacy.py", 'import torch\nprint "x"\n' + CUDA_LINE)
    good = put(tmp_path / "train.py", SIMPLE)
    before = py2.read_bytes()

    result = checkout.run(tmp_path, write=True)
    files = by_path(result)

    assert files["legacy.py"].status == "error"
    error = files["legacy.py"].error or ""
    assert "legacy.py" in error
    assert "line " in error
    assert "skipped" in error
    assert py2.read_bytes() == before
    assert files["train.py"].status == "changed"
    assert ".cuda()" not in good.read_text()
    assert_parses(good.read_text())


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ('import torch\nprint "x"\n' + CUDA_LINE, 2),
        ('import torch\n\nx = 1\nprint "x"\ny = 2\n\n' + CUDA_LINE, 4),
        ("import torch\n" + CUDA_LINE + 'exec "y = 1"\n', 3),
        ("import torch\n" + CUDA_LINE + 'print "last line without newline"', 3),
    ],
    ids=["second", "middle", "exec", "last"],
)
def test_python2_error_names_the_line_of_the_error(tmp_path: Path, source: str, line: int) -> None:
    put(tmp_path / "legacy.py", source)
    error = by_path(checkout.run(tmp_path))["legacy.py"].error or ""
    assert f"line {line}:" in error, error


def test_python2_print_statement_gets_the_python2_hint(tmp_path: Path) -> None:
    put(tmp_path / "legacy.py", 'import torch\nprint "x"\n' + CUDA_LINE)
    error = by_path(checkout.run(tmp_path))["legacy.py"].error or ""
    assert "Python 2" in error, error


def test_binary_file_named_py_gives_a_clear_error(tmp_path: Path) -> None:
    binary = put(tmp_path / "weights.py", b"\x00\x01\x02cuda\x00torch.cuda.synchronize()\xff")
    put(tmp_path / "ok.py", SIMPLE)
    before = binary.read_bytes()

    files = by_path(checkout.run(tmp_path, write=True))

    assert files["weights.py"].status == "error"
    error = files["weights.py"].error or ""
    assert error.startswith("weights.py")
    assert "binary" in error
    assert binary.read_bytes() == before
    assert files["ok.py"].status == "changed"


@pytest.mark.parametrize(
    "content",
    [
        b"# -*- coding: utf-8 -*-\nimport torch\nx = '\xff\xfe cuda'\n" + CUDA_LINE.encode(),
        b"import torch\nname = 'caf\xe9'  # latin-1 without a declaration\n" + CUDA_LINE.encode(),
        b"# -*- coding: klingon -*-\nimport torch\n" + CUDA_LINE.encode(),
    ],
    ids=["invalid-utf8", "undeclared-latin1", "unknown-codec"],
)
def test_badly_encoded_file_gives_a_clear_error(tmp_path: Path, content: bytes) -> None:
    bad = put(tmp_path / "bad.py", content)
    put(tmp_path / "ok.py", SIMPLE)

    files = by_path(checkout.run(tmp_path, write=True))

    assert files["bad.py"].status == "error"
    error = files["bad.py"].error or ""
    assert error.startswith("bad.py")
    assert "encoding" in error
    assert bad.read_bytes() == content
    assert files["ok.py"].status == "changed"


def test_declared_latin1_encoding_is_kept(tmp_path: Path) -> None:
    content = b"# -*- coding: latin-1 -*-\nimport torch\nname = 'caf\xe9'\n" + CUDA_LINE.encode()
    path = put(tmp_path / "latin.py", content)

    files = by_path(checkout.run(tmp_path, write=True))

    assert files["latin.py"].status == "changed"
    data = path.read_bytes()
    assert b"name = 'caf\xe9'\n" in data  # still one latin-1 byte, not UTF-8
    assert ".cuda()" not in data.decode("latin-1")


def test_parser_errors_from_migrate_text(tmp_path: Path) -> None:
    with pytest.raises(cst.ParserSyntaxError):
        checkout.migrate_text('import torch\nprint "cuda"\n', checkout.rule_index())


# --- what is never touched -------------------------------------------------------------------


def test_symlink_to_a_file_outside_the_root_is_reported_and_not_followed(tmp_path: Path) -> None:
    outside = put(tmp_path / "elsewhere" / "shared.py", SIMPLE)
    root = tmp_path / "repo"
    put(root / "main.py", SIMPLE)
    (root / "shared.py").symlink_to(outside)
    before = outside.read_bytes()

    result = checkout.run(root, write=True)
    files = by_path(result)

    assert files["shared.py"].status == "error"
    error = files["shared.py"].error or ""
    assert "shared.py" in error and "symbolic link" in error and "outside" in error
    assert any(path == "shared.py" for path, _reason in result.skipped)
    assert outside.read_bytes() == before
    assert (root / "shared.py").is_symlink()
    assert files["main.py"].status == "changed"


def test_symlinked_directory_outside_the_root_is_not_followed(tmp_path: Path) -> None:
    outside = put(tmp_path / "elsewhere" / "lib" / "mod.py", SIMPLE)
    root = tmp_path / "repo"
    put(root / "main.py", SIMPLE)
    (root / "lib").symlink_to(outside.parent, target_is_directory=True)
    before = outside.read_bytes()

    files = by_path(checkout.run(root, write=True))

    assert set(files) == {"main.py"}
    assert outside.read_bytes() == before


def test_symlink_given_as_the_root_is_not_followed_outside(tmp_path: Path) -> None:
    outside = put(tmp_path / "elsewhere" / "shared.py", SIMPLE)
    link = tmp_path / "repo" / "shared.py"
    link.parent.mkdir()
    link.symlink_to(outside)

    result = checkout.run(link, write=True)

    assert [f.status for f in result.files] == ["error"]
    assert "symbolic link" in (result.files[0].error or "")
    assert outside.read_bytes() == SIMPLE.encode()


def test_symlink_inside_the_root_is_migrated_once_through_its_target(tmp_path: Path) -> None:
    real = put(tmp_path / "real.py", SIMPLE)
    (tmp_path / "alias.py").symlink_to("real.py")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "alias2.py").symlink_to("../real.py")

    result = checkout.run(tmp_path, write=True)

    assert [(f.path, f.status) for f in result.files] == [("real.py", "changed")]
    assert (tmp_path / "alias.py").is_symlink() and (tmp_path / "sub" / "alias2.py").is_symlink()
    assert ".cuda()" not in real.read_text()


def test_ignored_vendored_and_virtualenv_files_are_not_touched(tmp_path: Path) -> None:
    put(tmp_path / ".gitignore", "build/\ngenerated_*.py\n# a comment\n")
    put(tmp_path / "sub" / ".gitignore", "local.py\n")
    put(tmp_path / ".git" / "info" / "exclude", "scratch.py\n")
    untouchable = [
        "build/out.py",
        "generated_model.py",
        "sub/local.py",
        "scratch.py",
        "vendor/lib.py",
        "third_party/dep/dep.py",
        "pkg/vendor/inner.py",
        "myenv/lib/python3.11/site-packages/thing.py",
        "myenv/bin/tool.py",
        "condaenv/lib/x.py",
        ".venv/lib/y.py",
    ]
    for rel in untouchable:
        put(tmp_path / rel, SIMPLE)
    put(tmp_path / "myenv" / "pyvenv.cfg", "home = /usr/bin\n")
    (tmp_path / "condaenv" / "conda-meta").mkdir()
    migrated = ["main.py", "sub/kept.py", "pkg/model.py"]
    for rel in migrated:
        put(tmp_path / rel, SIMPLE)

    result = checkout.run(tmp_path, write=True)
    files = by_path(result)

    assert set(files) == set(migrated)
    assert all(f.status == "changed" for f in files.values())
    for rel in untouchable:
        assert (tmp_path / rel).read_text() == SIMPLE, rel


def test_files_without_trigger_words_are_not_parsed(tmp_path: Path) -> None:
    put(tmp_path / "plain.py", "def f(:\n    pass\n")  # not even valid, but nothing to migrate
    put(tmp_path / "gpu.py", SIMPLE)

    result = checkout.run(tmp_path)
    files = by_path(result)

    assert result.parsed == 1
    assert files["plain.py"].status == "unchanged"
    assert files["gpu.py"].status == "changed"


# --- writing -----------------------------------------------------------------------------------


def test_write_leaves_no_temp_files_and_output_parses(tmp_path: Path) -> None:
    put(tmp_path / "train.py", REALISTIC)
    put(tmp_path / "pkg" / "model.py", SIMPLE)
    put(tmp_path / "pkg" / "plain.py", "x = 1\n")
    script = tmp_path / "run.py"
    put(script, "#!/usr/bin/env python\nimport torch\n" + CUDA_LINE)
    script.chmod(0o754)
    names_before = set(snapshot(tmp_path))

    result = checkout.run(tmp_path, write=True)

    assert {f.path for f in result.changed} == {"train.py", "pkg/model.py", "run.py"}
    assert set(snapshot(tmp_path)) == names_before  # no .pytpu-tmp or other leftovers
    for changed in result.changed:
        text = (tmp_path / changed.path).read_text()
        assert text == changed.after
        assert_parses(text)
    assert stat.S_IMODE(script.stat().st_mode) == 0o754
    assert (tmp_path / "pkg" / "plain.py").read_text() == "x = 1\n"


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    put(tmp_path / "train.py", REALISTIC)
    before = snapshot(tmp_path)

    result = checkout.run(tmp_path, write=False)

    assert [f.path for f in result.changed] == ["train.py"]
    assert snapshot(tmp_path) == before
    diff = result.changed[0].diff()
    assert diff.startswith("--- a/train.py\n+++ b/train.py\n")
    assert "-    model = Net().cuda()\n" in diff


def test_second_run_changes_nothing(tmp_path: Path) -> None:
    path = put(tmp_path / "train.py", REALISTIC)

    first = checkout.run(tmp_path, write=True)
    migrated = path.read_text()
    second = checkout.run(tmp_path, write=True)

    assert [f.status for f in first.files] == ["changed"]
    assert [f.status for f in second.files] == ["unchanged"]
    assert path.read_text() == migrated
    assert_parses(migrated)
    # every idiom with a rewriting rule was rewritten (comments may still name them)
    code = code_only(migrated)
    for gone in (
        ".cuda(",
        "torch.cuda.synchronize",
        "torch.cuda.empty_cache",
        "torch.cuda.set_device",
        "cudnn.benchmark",
        "torch.cuda.is_available",
        'map_location="cuda"',
        '"cuda" if',
        'default="cuda"',
    ):
        assert gone not in code, gone
    assert "import torch_xla\n" in code
    assert "torch_xla.sync(wait=True)" in code
    # the second run still reports, but proposes nothing new
    again, _findings = checkout.migrate_text(migrated, checkout.rule_index())
    assert again == migrated


# --- formatting ----------------------------------------------------------------------------------

UGLY = textwrap.dedent(
    """\
    import torch
    x = {  'a':1,'b' :2 }
    def f( a,b ):
        return a+b
    y = torch.zeros( 1 ).cuda( )
    z = [ 1,2,3 ]
    """
)
UNTOUCHED_UGLY_LINES = ["x = {  'a':1,'b' :2 }", "def f( a,b ):", "    return a+b", "z = [ 1,2,3 ]"]


@pytest.mark.parametrize(
    "config",
    [
        ("pyproject.toml", "[tool.black]\nline-length = 100\n"),
        (
            ".pre-commit-config.yaml",
            "repos:\n  - repo: https://github.com/psf/black\n    hooks:\n      - id: black\n",
        ),
    ],
    ids=["pyproject", "pre-commit"],
)
def test_black_runs_only_on_changed_lines(tmp_path: Path, config: tuple[str, str]) -> None:
    put(tmp_path / config[0], config[1])
    path = put(tmp_path / "pkg" / "m.py", UGLY)

    files = by_path(checkout.run(tmp_path, write=True))

    assert files["pkg/m.py"].status == "changed"
    lines = path.read_text().splitlines()
    for line in UNTOUCHED_UGLY_LINES:
        assert line in lines, line
    assert "y = torch.zeros(1).to(torch_xla.device())" in lines  # the changed line, formatted


def test_without_black_config_only_changed_lines_differ(tmp_path: Path) -> None:
    path = put(tmp_path / "m.py", UGLY)

    files = by_path(checkout.run(tmp_path, write=True))

    assert files["m.py"].status == "changed"
    lines = path.read_text().splitlines()
    for line in UNTOUCHED_UGLY_LINES:
        assert line in lines, line
    assert "y = torch.zeros( 1 ).to(torch_xla.device())" in lines  # spacing inside kept
    # nothing but the changed line and the added import differ
    removed = set(UGLY.splitlines()) - set(lines)
    assert removed == {"y = torch.zeros( 1 ).cuda( )"}


# --- never write unparsable output -------------------------------------------------------------


class _BreakTorchXla(cst.CSTTransformer):
    """Turn every `torch_xla` name into the keyword `def`: valid as a CST node, invalid as code."""

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        if updated_node.value == "torch_xla":
            return updated_node.with_changes(value="def")
        return updated_node


def _break_for_libcst(module: cst.Module) -> cst.Module:
    return module.visit(_BreakTorchXla())


def _break_for_ast(module: cst.Module) -> cst.Module:
    # libcst accepts the Python 2 `except E, name:` but the interpreter's parser does not
    extra = cst.parse_module("try:\n    pass\nexcept ValueError, e:\n    pass\n").body
    return module.with_changes(body=[*module.body, *extra])


@pytest.mark.parametrize("breaker", [_break_for_libcst, _break_for_ast], ids=["libcst", "ast"])
def test_unparsable_output_is_never_written(tmp_path: Path, monkeypatch, breaker) -> None:
    source = "import torch\n\nx = torch.zeros(3).cuda()\ntorch.cuda.synchronize()\n"
    path = put(tmp_path / "train.py", source)
    put(tmp_path / "other.py", "import os\n")  # no trigger word: not parsed
    _, expected_findings = checkout.migrate_text(source, checkout.rule_index())
    involved = {(f.rule.id, f.line) for f in expected_findings if f.case.changes_code}
    assert involved  # the check below is not vacuous

    real = single_file.transform_module

    def broken(module: cst.Module, *args, **kwargs) -> TransformResult:
        result = real(module, *args, **kwargs)
        broken_module = breaker(result.module)
        return TransformResult(
            module=broken_module, findings=result.findings, code=broken_module.code
        )

    monkeypatch.setattr(single_file, "transform_module", broken)
    before = path.read_bytes()
    names_before = set(snapshot(tmp_path))

    result = checkout.run(tmp_path, write=True)
    files = by_path(result)

    assert path.read_bytes() == before
    assert set(snapshot(tmp_path)) == names_before
    assert files["train.py"].status == "error"
    error = files["train.py"].error or ""
    assert error.startswith("train.py")
    assert "does not parse" in error
    assert "left unchanged" in error
    for rule_id, line in involved:
        assert f"{rule_id} (line {line})" in error, error
    with pytest.raises(checkout.OutputDoesNotParse):
        checkout.migrate_text(source, checkout.rule_index())


def test_unparsable_black_output_is_never_written(tmp_path: Path, monkeypatch) -> None:
    put(tmp_path / "pyproject.toml", "[tool.black]\n")
    path = put(tmp_path / "m.py", SIMPLE)
    monkeypatch.setattr(
        single_file, "format_changed", lambda before, after, *a, **k: after + "def (\n"
    )

    files = by_path(checkout.run(tmp_path, write=True))

    assert files["m.py"].status == "error"
    assert "left unchanged" in (files["m.py"].error or "")
    assert path.read_text() == SIMPLE


# --- line endings, BOM, final newline ----------------------------------------------------------


@pytest.mark.parametrize(
    ("bom", "newline"),
    [(b"", b"\r\n"), (b"\xef\xbb\xbf", b"\n"), (b"\xef\xbb\xbf", b"\r\n")],
    ids=["crlf", "bom", "bom+crlf"],
)
@pytest.mark.parametrize("black_project", [False, True], ids=["plain", "black"])
def test_line_endings_and_bom_survive(
    tmp_path: Path, bom: bytes, newline: bytes, black_project: bool
) -> None:
    if black_project:
        put(tmp_path / "pyproject.toml", "[tool.black]\n")
    lines = [
        "# -*- coding: utf-8 -*-",
        "import torch",
        "",
        "name = 'café'",
        "x = torch.zeros(3).cuda()",
        "torch.cuda.synchronize()",
        "if torch.cuda.is_available():",
        "    torch.cuda.empty_cache()",
        "",
    ]
    content = bom + newline.join(line.encode("utf-8") for line in lines)
    path = put(tmp_path / "m.py", content)

    files = by_path(checkout.run(tmp_path, write=True))

    assert files["m.py"].status == "changed"
    data = path.read_bytes()
    assert data.startswith(bom + b"# -*- coding")
    assert data.count(b"\xef\xbb\xbf") == len(bom) // 3
    body = data[len(bom) :]
    if newline == b"\r\n":
        assert body.count(b"\n") == body.count(b"\r\n")  # no bare LF crept in
    else:
        assert b"\r" not in body
    assert body.endswith(newline)
    assert "name = 'café'" in data.decode("utf-8-sig")
    assert ".cuda()" not in data.decode("utf-8-sig")
    # and the written file is stable
    assert [f.status for f in checkout.run(tmp_path, write=True).files] == ["unchanged"]


def test_missing_final_newline_stays_missing(tmp_path: Path) -> None:
    path = put(tmp_path / "m.py", "import torch\nx = torch.zeros(3).cuda()")

    checkout.run(tmp_path, write=True)

    text = path.read_text()
    assert not text.endswith("\n")
    assert text.endswith("x = torch.zeros(3).to(torch_xla.device())")


def test_cr_only_file_without_findings_is_unchanged(tmp_path: Path) -> None:
    content = b"import torch\r# runs on cuda\rx = 1\r"
    path = put(tmp_path / "m.py", content)

    result = checkout.run(tmp_path, write=True)

    assert [f.status for f in result.files] == ["unchanged"]
    assert path.read_bytes() == content


def test_cr_only_file_keeps_its_final_newline(tmp_path: Path) -> None:
    path = put(tmp_path / "m.py", b"import torch\rx = torch.zeros(3).cuda()\r")

    checkout.run(tmp_path, write=True)

    assert path.read_bytes().endswith(b"device())\r")


# --- single files and deep nesting ---------------------------------------------------------------


def test_a_single_file_can_be_the_root(tmp_path: Path) -> None:
    path = put(tmp_path / "train.py", SIMPLE)
    put(tmp_path / "other.py", SIMPLE)

    result = checkout.run(path, write=True)

    assert [(f.path, f.status) for f in result.files] == [("train.py", "changed")]
    assert (tmp_path / "other.py").read_text() == SIMPLE


def test_too_deeply_nested_file_is_skipped_and_others_go_on(tmp_path: Path) -> None:
    depth = 1000
    nested = "[" * depth + "y.cuda()" + "]" * depth
    deep = put(tmp_path / "deep.py", f"import torch\nx = {nested}\n")
    put(tmp_path / "ok.py", SIMPLE)
    before = deep.read_bytes()

    files = by_path(checkout.run(tmp_path, write=True))

    assert files["deep.py"].status == "error"
    assert "deep.py" in (files["deep.py"].error or "")
    assert deep.read_bytes() == before
    assert files["ok.py"].status == "changed"


# --- regressions: engine bugs found while writing these tests, since fixed --------------------

FORM_FEED_INDENT = "import torch\n\n\nclass A:\n\x0c    pass\n\n\nx = torch.zeros(3).cuda()\n"


def test_form_feed_in_indentation_does_not_abort_the_run(tmp_path: Path) -> None:
    put(tmp_path / "a_formfeed.py", FORM_FEED_INDENT)
    put(tmp_path / "b_ok.py", SIMPLE)

    files = by_path(checkout.run(tmp_path, write=True))

    assert files["b_ok.py"].status == "changed"
    assert files["a_formfeed.py"].status == "changed"
    assert "\x0c    pass\n" in (tmp_path / "a_formfeed.py").read_text()


def test_form_feed_in_indentation_is_migrated() -> None:
    out, _ = checkout.migrate_text(FORM_FEED_INDENT, checkout.rule_index())
    assert_parses(out)
    assert "\x0c    pass\n" in out
    assert ".cuda()" not in out


def test_form_feed_between_top_level_blocks_is_kept() -> None:
    source = "import torch\n\x0c\ndef f():\n    return 1\n\x0c\nx = torch.zeros(3).cuda()\n"
    out, _ = checkout.migrate_text(source, checkout.rule_index())
    assert out.count("\x0c\n") == 2
    assert ".cuda()" not in out


@pytest.mark.parametrize(
    "line",
    [
        'print(f"used {torch.cuda.max_memory_allocated() / 1e9:.2f} GB")',
        "print(f'used {torch.cuda.memory_allocated() / 1e9:.2f} GB')",
    ],
    ids=["double", "single"],
)
def test_memory_query_inside_an_f_string_is_migrated(line: str) -> None:
    quote = line[7]
    source = f"import torch\n\nname = {quote}gpu{quote}\n{line}\n"
    out, _ = checkout.migrate_text(source, checkout.rule_index())
    assert_parses(out)
    assert checkout.migrate_text(out, checkout.rule_index())[0] == out


def test_replacement_alias_is_not_shadowed_by_a_parameter() -> None:
    source = "import torch\n\n\ndef world(xr):\n    return torch.cuda.device_count()\n"
    out, _ = checkout.migrate_text(source, checkout.rule_index())
    function = next(n for n in ast.walk(ast.parse(out)) if isinstance(n, ast.FunctionDef))
    params = {a.arg for a in function.args.args}
    for node in ast.walk(function):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            assert node.value.id not in params, out


@pytest.mark.parametrize(
    "deleted",
    ["torch.cuda.set_device(rank)", "# free memory\n    torch.cuda.empty_cache()"],
    ids=["set_device-with-note", "empty_cache-with-comment"],
)
def test_insert_after_a_deleted_statement_is_not_lost(tmp_path: Path, deleted: str) -> None:
    source = f"import torch\n\n\ndef setup(rank):\n    {deleted}\n    torch.manual_seed(0)\n"
    path = put(tmp_path / "seed.py", source)

    first = checkout.run(tmp_path, write=True)
    second = checkout.run(tmp_path, write=True)

    assert [f.status for f in first.files] == ["changed"]
    assert [f.status for f in second.files] == ["unchanged"], path.read_text()


def test_insert_after_a_deleted_statement_without_comments() -> None:
    source = "import torch\n\ndef f(r):\n    torch.cuda.empty_cache()\n    torch.manual_seed(0)\n"
    out, _ = checkout.migrate_text(source, checkout.rule_index())
    assert checkout.migrate_text(out, checkout.rule_index())[0] == out


def _torch_xla_bound_before_use(text: str) -> bool:
    """Whether a top-level, unconditional import binds `torch_xla` before the first top-level
    statement that uses it (function bodies run later and are not counted as uses)."""
    bound = False
    for stmt in ast.parse(text).body:
        if isinstance(stmt, ast.Import) and any(
            a.asname is None and a.name.split(".")[0] == "torch_xla" for a in stmt.names
        ):
            bound = True
            continue
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        uses = any(isinstance(n, ast.Name) and n.id == "torch_xla" for n in ast.walk(stmt))
        if uses:
            return bound
    return True


def test_type_checking_import_does_not_count_as_a_binding() -> None:
    source = (
        "from typing import TYPE_CHECKING\n\nimport torch\n\nif TYPE_CHECKING:\n"
        "    import torch_xla\n\nx = torch.zeros(3).cuda()\n"
    )
    out, _ = checkout.migrate_text(source, checkout.rule_index())
    assert ".cuda()" not in out
    assert _torch_xla_bound_before_use(out), out


def test_a_fallback_for_a_failed_import_is_no_second_binding(monkeypatch) -> None:
    """`except ImportError: torch = None` keeps the import table's answers exact: the file is
    not analysed a second time with libcst's scope analysis, and is migrated the same."""
    from pytpu.engine.rewriter import transform

    source = (
        "try:\n    import torch\nexcept ImportError:\n    torch = None\n\n"
        "def sync():\n    torch.cuda.synchronize()\n"
    )
    rerun = []
    monkeypatch.setattr(transform, "MetadataWrapper", lambda *a, **k: rerun.append(1))
    out, findings = checkout.migrate_text(source, checkout.rule_index())
    assert not rerun
    assert "torch.cuda.synchronize" not in out and {f.rule.id for f in findings}


SYNC = "    def sync(self):\n        torch.cuda.synchronize()\n"


@pytest.mark.parametrize(
    ("body", "second_analysis"),
    [
        ("    def torch(self):\n        return None\n\n" + SYNC, False),  # a method
        ("    torch = None\n\n" + SYNC, False),  # a class attribute
        ("    def run(self, torch):\n        return torch\n\n" + SYNC, False),  # a parameter
        ("    def sync(self):\n        torch = None\n        torch.cuda.synchronize()\n", True),
    ],
)
def test_a_name_a_class_body_binds_is_not_seen_by_its_methods(
    monkeypatch, body, second_analysis
) -> None:
    """A name bound in a class body (a method called `torch`) does not shadow the module's
    import in the class's other methods: the import table's answer is exact and the file is
    not analysed a second time. A binding in the use's own scope still is a second binding."""
    from pytpu.engine.rewriter import transform

    source = f"import torch\n\n\nclass Runner:\n{body}"
    rerun = []
    real = transform.MetadataWrapper
    monkeypatch.setattr(
        transform, "MetadataWrapper", lambda *a, **k: rerun.append(1) or real(*a, **k)
    )
    out, findings = checkout.migrate_text(source, checkout.rule_index())
    assert bool(rerun) is second_analysis, source
    if not second_analysis:
        assert "torch.cuda.synchronize" not in out and findings


def test_later_import_does_not_count_for_earlier_uses() -> None:
    source = "import torch\n\nx = torch.zeros(3).cuda()\n\nimport torch_xla  # noqa: E402\n"
    out, _ = checkout.migrate_text(source, checkout.rule_index())
    assert ".cuda()" not in out
    assert _torch_xla_bound_before_use(out), out


def test_replacement_root_is_not_shadowed_by_a_parameter() -> None:
    source = "import torch\n\n\ndef move(t, torch_xla):\n    return t.cuda()\n"
    out, _ = checkout.migrate_text(source, checkout.rule_index())
    function = next(n for n in ast.walk(ast.parse(out)) if isinstance(n, ast.FunctionDef))
    # the inserted device call must not go through the parameter `torch_xla`
    calls = [ast.unparse(n.func) for n in ast.walk(function) if isinstance(n, ast.Call)]
    assert not any(c.startswith("torch_xla.") for c in calls), out
    assert ".cuda()" not in out


def _answered_by(resolver: str, monkeypatch) -> None:
    """Make the file's names answered by the import table, or by libcst's scope analysis."""
    if resolver == "scope analysis":
        from pytpu.engine.rewriter.resolve import ImportTableResolver

        monkeypatch.setattr(ImportTableResolver, "consistent", lambda self: False)


@pytest.mark.parametrize("resolver", ["import table", "scope analysis"])
def test_a_module_a_plain_import_names_is_no_value_of_a_method_pattern(
    monkeypatch, resolver
) -> None:
    """`pd.unique(x)` is pandas's function, not `$x.unique()` on a tensor `pd` (PYTPU741); a
    name imported from a module, or a parameter that shadows the import, may be a tensor."""
    _answered_by(resolver, monkeypatch)
    source = (
        "import pandas as pd\nimport pandas.core.algorithms\nimport scipy.special as sp\n"
        "from data import frame\n\n"
        "labels = pd.unique(column)\n"
        "kept = pandas.core.algorithms.unique(column)\n"
        "where = sp.nonzero(mask)\n"
        "values = frame.unique()\n\n\n"
        "def count(pd):\n    return pd.unique()\n"
    )
    out, _ = checkout.migrate_text(source, checkout.rule_index())
    lines = out.splitlines()
    flagged = [line for before, line in itertools.pairwise(lines) if "PYTPU741" in before]
    assert flagged == ["values = frame.unique()", "    return pd.unique()"], out


@pytest.mark.parametrize("resolver", ["import table", "scope analysis"])
def test_a_member_of_the_programs_own_module_is_a_run_time_value(monkeypatch, resolver) -> None:
    """`config.DEVICE` is computed by the program (a module of torch's holds constants)."""
    _answered_by(resolver, monkeypatch)
    source = "import config\nimport torch\n\ng = torch.Generator(device=config.DEVICE)\n"
    out, _ = checkout.migrate_text(source, checkout.rule_index())
    assert "g = torch.Generator()" in out, out


def test_seed_in_a_one_line_if_is_migrated_in_one_run() -> None:
    source = "import torch\n\nif torch.cuda.is_available(): torch.manual_seed(0)\n"
    out, _ = checkout.migrate_text(source, checkout.rule_index())
    assert checkout.migrate_text(out, checkout.rule_index())[0] == out


@pytest.mark.parametrize("uses_black", [False, True])
def test_the_comments_written_are_recorded_at_their_lines(tmp_path: Path, uses_black) -> None:
    """The report reads the rewriter's record of its comments, never the output: each recorded
    comment is at its line, black's reformatting of the lines before it included."""
    if uses_black:
        put(tmp_path / "pyproject.toml", "[tool.black]\n")
    source = textwrap.dedent(
        """\
        import torch
        x = torch.zeros(3, dtype=torch.float32, requires_grad=False, names=None).cuda()
        n = torch.cuda.device_count()


        start = torch.cuda.Event()
        torch.manual_seed(0)
        """
    )
    put(tmp_path / "m.py", source)
    result = by_path(checkout.run(tmp_path, write=True))["m.py"]
    lines = result.after.splitlines()
    written = [(n, line.strip()) for n, line in enumerate(lines, 1) if "# PYTPU" in line]
    assert len(written) >= 3
    assert [(c.line, c.text) for c in result.comments] == written
    assert {c.code for c in result.comments if c.needs_review} == {"PYTPU202", "PYTPU213"}
    # with black, the long rewritten line above the comments is split: they moved down
    statement = next(line for line in lines if line.startswith("x = "))
    assert statement.endswith("(") == uses_black


def test_no_rule_judges_another_rules_output() -> None:
    """R-HOST-05 adds `.cpu()` where an image is saved; in a step, R-HOST-01 flags that read of
    a device value in the first run (the original reads it too), not in a second run over the
    `.cpu()` PyTPU wrote; and a file whose only device word is PyTPU's own import of torch_xla
    (for `xm.save`) gets no barriers in a second run."""
    index = checkout.rule_index()
    step = textwrap.dedent(
        """\
        import torchvision.utils as vutils

        def train(model, loader, optimizer, device):
            for x, y in loader:
                loss = model(x.to(device)).mean()
                loss.backward()
                optimizer.step()
                vutils.save_image(x, "a.png", normalize=True)
                grid = vutils.make_grid(x, nrow=4)
        """
    )
    saves = textwrap.dedent(
        """\
        import torch

        def check(model, inputs, path):
            for x in inputs:
                torch.save(model(x), path)
        """
    )
    for source in (step, saves):
        first, _ = checkout.migrate_text(source, index)
        assert first != source
        assert checkout.migrate_text(first, index)[0] == first
    assert checkout.migrate_text(step, index)[0].count("# PYTPU703") == 2


def test_an_empty_tuple_is_no_site_and_no_recursion():
    # (found by the wild corpus: detectron2's `_C.DATASETS.TRAIN = ()` was skipped as "nested
    # too deeply": an assignment's tuple value was dispatched on itself when empty)
    source = "import torch\n\n_C.DATASETS.TRAIN = ()\nx = torch.zeros(2).cuda()\n"
    out, _findings = checkout.migrate_text(source, checkout.rule_index())
    assert "_C.DATASETS.TRAIN = ()" in out
    assert "x = torch.zeros(2).to(torch_xla.device())" in out


def test_a_tensor_read_straight_back_does_not_make_a_cpu_program_a_gpu_one():
    # (found by the idempotence property: `x.cuda().numpy()` became `x.cpu().numpy()`, and only
    # the second run took the file for a CPU program and moved its device to XLA)
    source = (
        "import torch\n\ndevice = torch.device('cpu')\n"
        "w = torch.full((), 0.5, device=device, requires_grad=True)\n"
        "(w * 2).sum().backward()\nvalues = w.cuda().numpy()\n"
    )
    out, _findings = checkout.migrate_text(source, checkout.rule_index())
    assert "device = torch_xla.device()" in out
    assert checkout.migrate_text(out, checkout.rule_index())[0] == out
