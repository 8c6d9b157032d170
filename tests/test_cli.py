"""The `pytpu` command line: exit codes, outputs, and what it writes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pytpu.engine import cli
from pytpu.engine.reporting import review
from pytpu.engine.rewriter import checkout, kb

CUDA_SOURCE = "import torch\nx = torch.zeros(3).cuda()\n"
CLEAN_SOURCE = "print('hello')\n"
# One unsafe rewrite (device_count) and one flagged-only site (Event): both need review.
REVIEW_SOURCE = "import torch\nn = torch.cuda.device_count()\nstart = torch.cuda.Event()\n"

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(cli.app, [str(a) for a in args])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(CUDA_SOURCE)
    (tmp_path / "clean.py").write_text(CLEAN_SOURCE)
    return tmp_path


@pytest.fixture
def clean_project(tmp_path: Path) -> Path:
    root = tmp_path / "clean_project"
    root.mkdir()
    (root / "clean.py").write_text(CLEAN_SOURCE)
    return root


# --- rewrite ---------------------------------------------------------------------------------


def test_rewrite_dry_run_summarises_and_changes_nothing(project: Path) -> None:
    result = invoke("rewrite", project)
    assert result.exit_code == 0, result.output
    assert "1 file would be changed, 1 left unchanged, 0 skipped with errors" in result.stderr
    assert "1 converted" in result.stderr
    assert "would change train.py" in result.stderr
    assert result.stdout == ""
    assert (project / "train.py").read_text() == CUDA_SOURCE


def test_rewrite_check_exits_1_when_a_file_would_change(project: Path) -> None:
    result = invoke("rewrite", project, "--check")
    assert result.exit_code == 1
    assert (project / "train.py").read_text() == CUDA_SOURCE


def test_rewrite_check_exits_0_when_nothing_to_do(clean_project: Path) -> None:
    result = invoke("rewrite", clean_project, "--check")
    assert result.exit_code == 0, result.output
    assert "0 files would be changed, 1 left unchanged, 0 skipped with errors" in result.stderr


def test_rewrite_diff_prints_unified_diff_to_stdout(project: Path) -> None:
    result = invoke("rewrite", project, "--diff")
    assert result.exit_code == 0, result.output
    assert "--- a/train.py" in result.stdout
    assert "+++ b/train.py" in result.stdout
    assert "-x = torch.zeros(3).cuda()" in result.stdout
    assert "+x = torch.zeros(3).to(torch_xla.device())" in result.stdout
    assert "+import torch_xla" in result.stdout
    assert "clean.py" not in result.stdout
    assert (project / "train.py").read_text() == CUDA_SOURCE


def test_rewrite_diff_check_exits_1(project: Path) -> None:
    assert invoke("rewrite", project, "--diff", "--check").exit_code == 1


def test_rewrite_write_changes_the_file_and_a_second_run_has_nothing_to_do(project: Path) -> None:
    result = invoke("rewrite", project, "--write")
    assert result.exit_code == 0, result.output
    assert "1 file changed, 1 left unchanged, 0 skipped with errors" in result.stderr
    text = (project / "train.py").read_text()
    assert "x = torch.zeros(3).to(torch_xla.device())" in text
    assert "import torch_xla" in text
    assert (project / "clean.py").read_text() == CLEAN_SOURCE
    assert invoke("rewrite", project, "--check").exit_code == 0


def test_data_parallel_chooses_the_spmd_rules(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import torch\n\nif __name__ == '__main__':\n    main()\n", encoding="utf-8"
    )
    assert "PYTPU891" not in invoke("rewrite", tmp_path, "--diff").stdout
    assert (
        "+    xr.use_spmd()"
        in invoke("rewrite", tmp_path, "--diff", "--data-parallel", "spmd").stdout
    )
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github/pytpu.yml").write_text("data_parallel: spmd\n", encoding="utf-8")
    assert "PYTPU891" in invoke("rewrite", tmp_path, "--diff").stdout  # the repository's setting
    assert "PYTPU891" not in invoke("rewrite", tmp_path, "--diff", "--data-parallel", "none").stdout


def test_precision_chooses_the_bf16_rule(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import torch\n\nfor x, y in batches:\n    x = x.cuda()\n    loss = model(x, y)\n"
        "    loss.backward()\n",
        encoding="utf-8",
    )
    assert "PYTPU726" not in invoke("rewrite", tmp_path, "--diff").stdout
    wrapped = invoke("rewrite", tmp_path, "--diff", "--precision", "bf16").stdout
    assert "+    with torch.autocast('xla', dtype=torch.bfloat16):" in wrapped
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github/pytpu.yml").write_text("precision: bf16\n", encoding="utf-8")
    assert "PYTPU726" in invoke("rewrite", tmp_path, "--diff").stdout  # the repository's setting
    assert "PYTPU726" not in invoke("rewrite", tmp_path, "--diff", "--precision", "fp32").stdout


def test_batch_per_device_multiplies_the_loader_s_batch_under_spmd(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import torch\n\nloader = torch.utils.data.DataLoader(ds, batch_size=32)\n",
        encoding="utf-8",
    )
    scaled = "batch_size=32 * xr.global_runtime_device_count()"
    assert scaled not in invoke("rewrite", tmp_path, "--diff", "--data-parallel", "spmd").stdout
    per_device = ("--data-parallel", "spmd", "--batch", "per_device")
    assert scaled in invoke("rewrite", tmp_path, "--diff", *per_device).stdout
    # (without SPMD there is no split to scale for)
    assert scaled not in invoke("rewrite", tmp_path, "--diff", "--batch", "per_device").stdout


def test_rewrite_diff_and_write_together_is_a_usage_error(project: Path) -> None:
    result = invoke("rewrite", project, "--diff", "--write")
    assert result.exit_code == 2
    assert "--diff and --write cannot be used together" in result.output
    assert (project / "train.py").read_text() == CUDA_SOURCE


@pytest.mark.parametrize(
    "args",
    [
        ("rewrite", "{missing}"),
        ("analyze", "{missing}"),
        ("rewrite", "{project}", "--target", "tensorflow"),
        ("analyze", "{project}", "--target", "tensorflow"),
        ("rewrite", "{project}", "--no-such-option"),
    ],
)
def test_usage_errors_exit_2(project: Path, args: tuple[str, ...]) -> None:
    values = {"missing": project / "missing.py", "project": project}
    result = invoke(*(a.format(**values) for a in args))
    assert result.exit_code == 2, result.output


def test_a_broken_file_is_reported_and_the_run_goes_on(project: Path) -> None:
    (project / "broken.py").write_text("def f(:\n    torch.cuda.synchronize()\n")
    result = invoke("rewrite", project, "--write")
    assert result.exit_code == 0, result.output
    assert "error: broken.py" in result.stderr
    assert "1 file changed, 1 left unchanged, 1 skipped with errors" in result.stderr
    assert "torch_xla.device()" in (project / "train.py").read_text()
    # The check cannot vouch for a file it could not read.
    assert invoke("rewrite", project, "--check").exit_code == 1


def test_rewrite_json_report(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = invoke("rewrite", project, "--json", out)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["command"] == "rewrite"
    assert data["mode"] == "dry-run"
    assert data["files_changed"] == 1
    assert [f["path"] for f in data["files"]] == ["train.py"]


# --- analyze ---------------------------------------------------------------------------------


def test_analyze_prints_table_and_changes_nothing(project: Path) -> None:
    result = invoke("analyze", project)
    assert result.exit_code == 0, result.output
    assert "train.py" in result.stdout
    total = next(line for line in result.stdout.splitlines() if "Total (1 file)" in line)
    assert [cell.strip() for cell in total.split("│")[2:6]] == ["1", "0", "0", "0"]
    assert "Estimated review effort: none" in result.stdout
    assert (project / "train.py").read_text() == CUDA_SOURCE


def test_analyze_check_exits_1_when_something_is_found(project: Path) -> None:
    assert invoke("analyze", project, "--check").exit_code == 1


def test_flagged_sites_left_after_a_rewrite_still_fail_analyze_check(tmp_path: Path) -> None:
    (tmp_path / "bench.py").write_text(REVIEW_SOURCE)
    assert invoke("rewrite", tmp_path, "--write").exit_code == 0
    # Nothing left to rewrite, but the flagged torch.cuda.Event() still needs a person.
    assert invoke("rewrite", tmp_path, "--check").exit_code == 0
    result = invoke("analyze", tmp_path, "--check")
    assert result.exit_code == 1
    assert "PYTPU213" in result.stdout


def test_analyze_check_exits_0_on_a_clean_project(clean_project: Path) -> None:
    result = invoke("analyze", clean_project, "--check")
    assert result.exit_code == 0, result.output
    assert "No CUDA-specific code found." in result.stdout


def _minutes(code: str) -> int:
    return kb.EFFORT_MINUTES[kb.default().find(code).diagnostic.effort]


def test_analyze_lists_review_items_with_effort(tmp_path: Path) -> None:
    (tmp_path / "bench.py").write_text(REVIEW_SOURCE)
    result = invoke("analyze", tmp_path)
    assert result.exit_code == 0, result.output
    assert "bench.py:2:5: PYTPU202" in result.stdout
    assert "bench.py:3:9: PYTPU213" in result.stdout
    minutes = _minutes("PYTPU202") + _minutes("PYTPU213")
    lines = result.stdout.splitlines()
    effort_line = next(line for line in lines if "Estimated review effort" in line)
    for code in ("PYTPU202", "PYTPU213"):
        assert kb.default().find(code).diagnostic.effort in effort_line
    assert str(minutes) in effort_line or f"{minutes / 60:.1f}".removesuffix(".0") in effort_line


def test_effort_estimate_wording() -> None:
    def item(effort: str) -> review.ReviewItem:
        minutes = kb.EFFORT_MINUTES[effort]
        return review.ReviewItem(
            "a.py",
            1,
            1,
            "PYTPU000",
            "R-X-00",
            "flagged",
            "display_only",
            effort,
            minutes,
            "message",
        )

    efforts = ["low", "high", "low", "medium", "high", "low"]
    effort = review.Effort([item(e) for e in efforts])
    assert effort.minutes == 3 * 5 + 30 + 2 * 120
    assert effort.describe() == "about 4.8 h (3 low, 1 medium, 2 high items)"
    assert review.Effort([item("medium")]).describe() == "about 30 min (1 medium item)"
    assert review.Effort([]).describe() == "none (no items need review)"


def test_analyze_json_report(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(CUDA_SOURCE)
    (src / "bench.py").write_text(REVIEW_SOURCE)
    (src / "clean.py").write_text(CLEAN_SOURCE)
    out = tmp_path / "analysis.json"
    result = invoke("analyze", src, "--json", out)
    assert result.exit_code == 0, result.output
    assert "train.py" in result.stdout  # the table is still printed
    data = json.loads(out.read_text())
    assert data["command"] == "analyze"
    assert data["files_seen"] == 3
    assert data["files_changed"] == 2  # planned, not written
    assert data["totals"]["converted"] == 2
    assert data["totals"]["flagged"] == 1
    files = {f["path"]: f for f in data["files"]}
    assert set(files) == {"train.py", "bench.py"}
    assert files["train.py"]["counts"]["converted"] == 1
    assert files["train.py"]["review_minutes"] == 0
    assert files["train.py"]["findings"][0]["code"] == "PYTPU104"
    assert files["bench.py"]["review_minutes"] == _minutes("PYTPU202") + _minutes("PYTPU213")
    effort = data["effort"]
    assert effort["minutes"] == _minutes("PYTPU202") + _minutes("PYTPU213")
    items = [(i["path"], i["line"], i["code"], i["kind"]) for i in effort["review_items"]]
    assert items == [
        ("bench.py", 2, "PYTPU202", "converted"),
        ("bench.py", 3, "PYTPU213", "flagged"),
    ]
    assert (src / "train.py").read_text() == CUDA_SOURCE


# --- kb --------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["PYTPU104", "R-DEV-04", "pytpu104"])
def test_kb_show(key: str) -> None:
    result = invoke("kb", "show", key)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("# PYTPU104: ")
    assert "`R-DEV-04`" in result.stdout
    assert "$x.cuda($*args)" in result.stdout
    assert "$x.to(torch_xla.device())" in result.stdout
    assert "model = torch.nn.Linear(2, 2).cuda()" in result.stdout  # the example, before
    assert "https://" in result.stdout


def test_kb_show_unknown_code_exits_2() -> None:
    result = invoke("kb", "show", "PYTPU999")
    assert result.exit_code == 2
    assert "no rule with ID or code 'PYTPU999'" in result.stderr
    assert "pytpu kb list" in result.stderr


def test_kb_list_has_every_rule() -> None:
    result = invoke("kb", "list")
    assert result.exit_code == 0, result.output
    for rule in kb.default().rules:
        assert rule.diagnostic.code in result.stdout
        assert rule.id in result.stdout


def test_kb_docs_writes_and_checks(tmp_path: Path) -> None:
    page = tmp_path / "docs" / "kb.md"
    assert invoke("kb", "docs", "--output", page, "--check").exit_code == 1  # missing
    assert not page.exists()
    assert invoke("kb", "docs", "--output", page).exit_code == 0
    assert "PYTPU104" in page.read_text()
    assert invoke("kb", "docs", "--output", page, "--check").exit_code == 0
    page.write_text(page.read_text() + "edited by hand\n")
    result = invoke("kb", "docs", "--output", page, "--check")
    assert result.exit_code == 1
    assert "out of date" in result.stderr
    assert page.read_text().endswith("edited by hand\n")  # --check writes nothing


def test_every_command_has_help() -> None:
    for args in (
        ["--help"],
        ["rewrite", "--help"],
        ["analyze", "--help"],
        ["kb", "--help"],
        ["kb", "list", "--help"],
        ["kb", "show", "--help"],
        ["kb", "docs", "--help"],
    ):
        result = invoke(*args)
        assert result.exit_code == 0, args
        assert "Usage:" in result.stdout


# --- the top level: errors and plugins -------------------------------------------------------


def run_main(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    return exit_info.value.code


def test_internal_error_is_one_line_and_exits_2(project: Path, monkeypatch, capsys) -> None:
    def explode(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.delenv("PYTPU_DEBUG", raising=False)
    monkeypatch.setattr(checkout, "run", explode)
    assert run_main(["analyze", str(project)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pytpu: error: internal error: RuntimeError: boom")
    assert "\n" not in err


def test_malformed_kb_exits_2(monkeypatch, capsys) -> None:
    def malformed():
        raise kb.KBError("kb/device.yaml", "R-DEV-99", "versions: not a version range")

    monkeypatch.setattr(kb, "default", malformed)
    assert run_main(["kb", "list"]) == 2
    assert "kb/device.yaml: rule R-DEV-99: versions: not a version range" in capsys.readouterr().err


def test_main_exit_codes(project: Path, clean_project: Path) -> None:
    assert run_main(["rewrite", str(clean_project), "--check"]) == 0
    assert run_main(["rewrite", str(project), "--check"]) == 1
    assert run_main(["rewrite", str(project), "--diff", "--write"]) == 2


PLUGIN = textwrap.dedent(
    """
    import click
    import typer

    app = typer.Typer()

    @app.command()
    def hello(name: str = "world"):
        print(f"hello {name} from a plugin")

    @click.command()
    @click.argument("who")
    def greet(who):
        click.echo(f"greetings, {who}")

    not_a_command = 42
    """
)


def test_plugin_commands_are_registered_and_broken_ones_are_harmless(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    (tmp_path / "pytpu_test_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    entries = [
        metadata.EntryPoint("hello", "pytpu_test_plugin:app", cli.PLUGIN_GROUP),
        metadata.EntryPoint("greet", "pytpu_test_plugin:greet", cli.PLUGIN_GROUP),
        metadata.EntryPoint("broken", "pytpu_no_such_module:app", cli.PLUGIN_GROUP),
        metadata.EntryPoint("number", "pytpu_test_plugin:not_a_command", cli.PLUGIN_GROUP),
        metadata.EntryPoint("rewrite", "pytpu_test_plugin:app", cli.PLUGIN_GROUP),
    ]
    looked_up = []

    def entry_points(group):
        looked_up.append(group)
        return entries if group == cli.PLUGIN_GROUP else []

    monkeypatch.setattr(metadata, "entry_points", entry_points)

    assert run_main(["hello", "--name", "tpu"]) == 0
    out, err = capsys.readouterr()
    assert "hello tpu from a plugin" in out
    assert "skipped command plugin 'broken'" in err
    assert "skipped command plugin 'number'" in err
    assert "skipped command plugin 'rewrite'" in err

    assert run_main(["greet", "bob"]) == 0
    assert "greetings, bob" in capsys.readouterr().out

    assert run_main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "hello" in out and "greet" in out and "rewrite" in out

    # a built-in command starts without looking for plugins
    looked_up.clear()
    assert run_main(["kb", "list"]) == 0
    assert looked_up == []


def test_progress_bar_only_for_long_runs_in_a_terminal(monkeypatch) -> None:
    paths = [Path(f"f{i}.py") for i in range(cli.PROGRESS_MIN_FILES)]
    wrap = cli._progress("Testing")
    monkeypatch.setattr(cli.sys.stderr, "isatty", lambda: False, raising=False)
    assert wrap(paths, len(paths)) is paths
    monkeypatch.setattr(cli.sys.stderr, "isatty", lambda: True, raising=False)
    assert wrap(paths[:3], 3) == paths[:3]
    wrapped = wrap(paths, len(paths))
    assert wrapped is not paths
    assert list(wrapped) == paths


# --- start-up --------------------------------------------------------------------------------

HEAVY_MODULES = ("torch", "torch_xla", "pytpu.engine.testgen")


def test_importing_the_cli_loads_neither_torch_nor_the_test_generator() -> None:
    code = (
        "import sys\n"
        "import pytpu.engine.cli\n"
        f"print(sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_defaults_shown_in_help_are_the_engine_defaults() -> None:
    from pytpu.engine import testgen
    from pytpu.engine.rewriter import kbdocs

    assert cli.TESTS_OUT == testgen.DEFAULT_OUT
    assert cli.KB_DOCS_OUTPUT == kbdocs.DEFAULT_OUTPUT


def test_in_a_log_each_stage_says_when_it_starts():
    # no spinner shows in a CI log: a long stage (building an environment) must not be silent
    import io

    from rich.console import Console

    from pytpu.engine.cli import _stage_printer

    log = io.StringIO()
    on_stage = _stage_printer(Console(file=log, width=80))
    on_stage("environment", "start", None)
    on_stage("environment", "end", 154.2)
    assert log.getvalue().splitlines() == ["environment...", "done environment  154.2 s"]


def test_rewrite_and_analyze_follow_the_repository_s_target(tmp_path, monkeypatch):
    # `pytpu rewrite` previews what `pytpu migrate` writes: the settings' `target`, unless
    # --target says otherwise (victoresque/pytorch-template with `target: torch_tpu`)
    monkeypatch.delenv("PYTPU_TARGET", raising=False)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "pytpu.yml").write_text("target: torch_tpu\n")
    (tmp_path / "src").mkdir()
    script = tmp_path / "src" / "train.py"
    script.write_text("import torch\n\nx = torch.ones(2).cuda()\n")
    assert "torch.ones(2).tpu()" in invoke("rewrite", script, "--diff").stdout
    xla = invoke("rewrite", tmp_path / "src", "--diff", "--target", "torch_xla").stdout
    assert "torch_xla.device()" in xla
    (tmp_path / ".github" / "pytpu.yml").write_text("target: [torch_tpu]\n")
    result = invoke("analyze", script)
    assert "this run uses the default target, torch_xla" in result.stderr
