"""The migration report: the JSON document is checked against its schema, and the Markdown rendered
from it is read back with markdown-it the way GitHub reads a pull request body."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jinja2
import msgspec
import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from pytpu.engine.migrate import BenchmarkRun
from pytpu.engine.reporting import document as report_document
from pytpu.engine.reporting import markdown
from pytpu.engine.reporting import sections as report_sections
from pytpu.engine.reporting.markdown import render, validate, verdict_line
from pytpu.engine.verify import benchmark as benchmark_stage
from pytpu.engine.verify.measured import StepBenchmark

FIXTURES = Path(__file__).parent / "fixtures" / "reporting"
HEADINGS = [
    "Test parity",
    "Benchmark",
    "Environment",
    "XLA evidence",
    "Changes",
    "Review items",
    "Tests generated",
    "Reproduce locally",
]


def load(name: str) -> dict:
    document = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    document["benchmarks"][0] = document["benchmark"]  # one program: one section, changed once
    return document


def parse(text: str) -> list[Token]:
    return MarkdownIt("commonmark").enable("table").parse(text)


def tables(tokens: list[Token]) -> list[list[list[str]]]:
    """Each table's body rows, each row its cells' inline source."""
    found: list[list[list[str]]] = []
    in_body = False
    for token in tokens:
        if token.type == "table_open":
            found.append([])
        elif token.type == "tbody_open":
            in_body = True
        elif token.type == "tbody_close":
            in_body = False
        elif in_body and token.type == "tr_open":
            found[-1].append([])
        elif in_body and token.type == "inline":
            found[-1][-1].append(token.content)
    return found


def headings(tokens: list[Token]) -> list[str]:
    return [
        tokens[i + 1].content
        for i, token in enumerate(tokens)
        if token.type == "heading_open" and token.tag == "h2"
    ]


def section(text: str, title: str) -> str:
    """The Markdown from `## title` to the next level-2 heading."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


@pytest.fixture(params=["parity", "regressed"])
def document(request) -> dict:
    return load(request.param)


# The document and its schema


def test_schema_is_a_valid_draft_2020_12_schema():
    import jsonschema

    schema = json.loads(markdown.SCHEMA_PATH.read_text(encoding="utf-8"))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_fixtures_validate(document):
    validate(document)


@pytest.mark.parametrize(
    "break_it, path",
    [
        (lambda d: d.pop("verdict"), "$.verdict"),
        (lambda d: d["verdict"].update(total="18"), "$.verdict.total"),
        (lambda d: d["verdict"].pop("speedup"), "$.verdict.speedup"),
        (lambda d: d["parity"]["tests"][3].update(target="ok"), "$.parity.tests[3].target"),
        (lambda d: d["benchmark"]["target"].update(gpu=True), "$.benchmark.target"),
        (lambda d: d["review"][0].update(line=0), "$.review[0].line"),
        (lambda d: d["base"].update(rev="3f9c2a7"), "$.base.rev"),
    ],
    ids=["missing verdict", "wrong type", "missing nested", "bad enum", "extra", "min", "sha"],
)
def test_a_broken_document_fails_naming_the_path(break_it, path):
    broken = load("parity")
    break_it(broken)
    with pytest.raises(ValueError) as caught:
        validate(broken)
    assert str(caught.value).startswith(f"report document: {path}: ")


def test_render_refuses_an_invalid_document():
    broken = load("parity")
    del broken["verdict"]["status"]
    with pytest.raises(ValueError, match=r"\$\.verdict\.status"):
        render(broken)


# The verdict line


def test_verdict_line_for_parity():
    expected = "PyTPU: parity 18/18, speedup x1.42 (CPU → XLA on the CPU)"
    assert verdict_line(load("parity")) == expected


def test_verdict_line_for_regressions():
    assert verdict_line(load("regressed")) == (
        "PyTPU: 2 regressions, 16/18 pass on both, benchmark failed (CPU → XLA on the CPU)"
    )


def test_verdict_line_for_one_regression_and_no_tests():
    doc = load("regressed")
    doc["verdict"].update(regressions=1, passed_both=17, speedup=0.8)
    assert verdict_line(doc) == (
        "PyTPU: 1 regression, 17/18 pass on both, speedup x0.80 (CPU → XLA on the CPU)"
    )
    doc["verdict"].update(status="no tests", speedup=None)
    doc["benchmark"]["error"] = None
    doc["devices"]["target"] = "TPU v5e-1 (torch_xla 2.9.0)"
    assert verdict_line(doc) == "PyTPU: no tests, no benchmark (CPU → TPU v5e-1)"


# The Markdown, as GitHub would read it


def test_the_first_block_is_the_bold_verdict(document):
    text = render(document)
    tokens = parse(text)
    assert text.splitlines()[0] == f"**{verdict_line(document)}**"
    assert [t.type for t in tokens[:3]] == ["paragraph_open", "inline", "paragraph_close"]
    inline = tokens[1]
    assert inline.content == f"**{verdict_line(document)}**"
    children = [c.type for c in inline.children if c.type != "text" or c.content]
    assert children == ["strong_open", "text", "strong_close"]
    # then a sentence that names both devices
    assert tokens[4].type == "inline" and tokens[4].content.startswith("This PR migrates")
    assert document["devices"]["baseline"] in tokens[4].content
    assert document["devices"]["target"] in tokens[4].content


def test_headings_in_order(document):
    expected = HEADINGS + (["Problems"] if document["problems"] else [])
    assert headings(parse(render(document))) == expected


def test_tables_parse_and_no_table_line_is_left_as_text(document):
    text = render(document)
    tokens = parse(text)
    assert sum(t.type == "table_open" for t in tokens) >= 5
    html = MarkdownIt("commonmark").enable("table").render(text)
    assert "<p>|" not in html and "\n|" not in html


def test_details_are_balanced_and_the_tables_inside_still_parse(document):
    tokens = parse(render(document))
    depth, spans, inside = 0, 0, False
    for token in tokens:
        if token.type == "html_block":
            # The Markdown inside must not be swallowed by the HTML block.
            assert "|" not in token.content
            depth += token.content.count("<details>") - token.content.count("</details>")
            assert depth in (0, 1)
            if "<details>" in token.content:
                spans, inside = spans + 1, False
                assert "<summary>" in token.content and "</summary>" in token.content
            elif "</details>" in token.content:
                assert inside, "a <details> without a table in it"
        elif token.type == "table_open" and depth:
            inside = True
    assert depth == 0
    assert spans >= 3  # all tests, the changes, the units without a test


def test_a_regression_row_comes_first_and_is_marked():
    doc = load("regressed")
    doc["parity"]["tests"].reverse()  # the renderer does not rely on the producer's order
    text = section(render(doc), "Test parity")
    rows = tables(parse(text))
    assert len(rows) == 2  # the regressions, visible; all tests, collapsed
    regressions, everything = rows
    assert len(regressions) == 2 and len(everything) == 18
    for table in rows:
        for row in table[:2]:
            assert row[0].startswith("❌ `") and row[2].startswith("**")
        assert not any(row[0].startswith("❌") for row in table[2:])
    assert "test_vit_output_shape" in regressions[0][0]
    assert "xla:0 and cpu!" in regressions[0][0]  # its message is shown


def test_short_test_tables_are_not_collapsed():
    doc = load("regressed")
    doc["parity"]["tests"] = doc["parity"]["tests"][:5]
    text = section(render(doc), "Test parity")
    assert "<details>" not in text
    (rows,) = tables(parse(text))
    assert len(rows) == 5 and rows[0][0].startswith("❌")


def test_a_pipe_or_newline_in_a_test_id_or_message_does_not_break_the_table():
    doc = load("parity")
    test = doc["parity"]["tests"][4]
    test["id"] = "tests/test_cast.py::test_cast[float|bf16]"
    test["message"] = "expected 1 | got 2\nsecond line with `code` and <tensor>"
    text = section(render(doc), "Test parity")
    (rows,) = tables(parse(text))
    assert len(rows) == 18
    assert all(len(row) == 3 for row in rows)
    cell = rows[4][0]
    html = MarkdownIt("commonmark").enable("table").renderInline(cell)
    assert "<code>tests/test_cast.py::test_cast[float|bf16]</code>" in html
    assert "expected 1 | got 2<br>second line with <code>code</code> and &lt;tensor&gt;" in html


def test_benchmark_table_has_a_row_per_side(document):
    text = section(render(document), "Benchmark")
    rows = tables(parse(text))[0]
    assert [row[0] for row in rows] == ["Before", "After"]
    assert all(len(row) == 8 for row in rows)
    assert document["benchmark"]["method"] in text
    assert document["benchmark"]["command"] in text


def test_benchmark_speedup_or_failure_is_said_plainly():
    parity = section(render(load("parity")), "Benchmark")
    assert "**Speedup: x1.42**" in parity and "failed" not in parity
    regressed = section(render(load("regressed")), "Benchmark")
    assert "> ⚠️ **The benchmark failed:** the migrated program exited with code 1" in regressed
    assert "After exited with code 1: `RuntimeError" in regressed
    assert "Speedup" not in regressed


def test_the_speedup_comes_with_its_interval_and_rounds():
    text = section(render(load("parity")), "Benchmark")
    assert (
        "**Speedup: x1.42** (93.8% confidence interval x1.39–x1.46), the median of 5 rounds'"
        " ratios of the median step before to the median step after; both sides ran with"
        " OMP_NUM_THREADS=2, MKL_NUM_THREADS=2 on 2 CPU cores."
    ) in text
    rounds = [t for t in tables(parse(text)) if len(t) == 5][0]
    assert [row[0] for row in rounds] == ["1", "2", "3", "4", "5"]
    assert rounds[0][1:] == ["48.6 ms", "34.2 ms", "x1.42", "0.03"]
    sides = tables(parse(text))[0]
    assert sides[0][4] == "658 samples/s" and sides[0][5] == "50 in 5 runs"


def test_a_refused_figure_is_said_plainly_and_kept_out_of_the_headline():
    doc = load("parity")
    why = "other processes used 1.9 of the machine's 2 CPU cores on average while the benchmark ran"
    doc["benchmark"]["refused"] = doc["benchmarks"][0]["refused"] = why
    doc["verdict"]["speedup"] = None
    text = section(render(doc), "Benchmark")
    assert f"> ⚠️ **No speedup figure can be trusted from this run:** {why}." in text
    assert "(The rounds' median ratio was x1.42, interval x1.39–x1.46.)" in text
    assert "**Speedup:" not in text
    assert verdict_line(doc) == (
        "PyTPU: parity 18/18, no trustworthy speedup (CPU → XLA on the CPU)"
    )
    # On TorchTPU's CPU stand-in no figure is claimed at all, busy machine or not.
    doc["benchmark"]["on_stand_in"] = True
    assert verdict_line(doc).endswith("no speedup on the CPU stand-in (CPU → XLA on the CPU)")


def test_a_target_that_is_not_a_tpu_is_named_as_such():
    doc = load("parity")
    assert "The target is XLA on the CPU, not a TPU" in render(doc)
    doc["devices"]["target"] = "TPU v5e-1 (torch_xla 2.9.0)"
    assert "not a TPU" not in render(doc)


def test_xla_evidence_steady_state_and_recompilation_warning():
    doc = load("parity")
    text = section(render(doc), "XLA evidence")
    assert "- Graphs compiled: 3, in 5.62 s" in text
    assert "steady state: no recompilation" in text
    assert "- Host transfers per step: 1\n" in text
    assert "- CPU fallback ops: none" in text
    doc["benchmark"]["target"]["compile"]["after_warmup"] = 3
    doc["benchmark"]["target"]["cpu_fallbacks"] = {"aten::nonzero": 2, "aten::_unique2": 5}
    text = section(render(doc), "XLA evidence")
    assert "steady state" not in text
    assert "⚠️ **3**: the step still recompiles after warm-up" in text
    assert "- CPU fallback ops: `aten::_unique2` ×5, `aten::nonzero` ×2" in text
    # compiled once, early (an evaluation pass): no warning, and said so
    doc["benchmark"]["target"]["compile"]["settled"] = True
    text = section(render(doc), "XLA evidence")
    assert "⚠️" not in text.split("- CPU fallback")[0]
    assert "- Compilations after warm-up: 3, at one point of the timed steps (one step's" in text


def test_the_evidence_counts_the_devices_used_and_present():
    doc = load("parity")
    assert "Devices used" not in section(render(doc), "XLA evidence")  # (not reported)
    doc["benchmarks"][0]["target"].update(devices=1, devices_present=1)
    assert "- Devices used: 1 of 1\n" in section(render(doc), "XLA evidence")
    doc["benchmarks"][0]["target"].update(devices=1, devices_present=4)
    assert (
        "- Devices used: ⚠️ **1 of 4**: each step ran on 1 device while 3 stayed idle; only data"
        " parallelism over a mesh of every device (SPMD) uses them all (the setting"
        " `data_parallel: spmd`)\n- Host transfers per step"  # (a line of its own)
    ) in section(render(doc), "XLA evidence")
    # SPMD on, but no batch to shard found: the report says why the devices stayed idle
    rules = doc["changes"]["files"][0]["rules"]
    rules.append({"converted": 0, "noted": 1, "flagged": 0, "id": "R-SPMD-01", "code": "PYTPU891"})
    assert (
        "stayed idle; the migration turned SPMD on (PYTPU891) but found no batch a training step"
        " moves to the device to shard (PYTPU892"
    ) in section(render(doc), "XLA evidence")
    assert "computed the whole step\n- Host transfers" in section(render(doc), "XLA evidence")
    rules.append({"converted": 0, "noted": 1, "flagged": 0, "id": "R-SPMD-02", "code": "PYTPU892"})
    assert "the migration marks batches for sharding (PYTPU892), but no step split one" in (
        section(render(doc), "XLA evidence")
    )
    doc["benchmarks"][0]["target"].update(devices=4, devices_present=4)
    assert (
        "- Devices used: 4 of 4: one SPMD program, each step's batch split over the devices; the"
        " batch a step sees is the program's own (its global batch), so its learning rate stays"
        " right\n"
    ) in section(render(doc), "XLA evidence")
    rules.append({"converted": 1, "noted": 0, "flagged": 0, "id": "R-SPMD-03", "code": "PYTPU893"})
    assert (
        "each device gets the program's batch (`batch: per_device`), so a step takes 4 times the"
        " program's batch while its learning rate is the program's own: scale it"
    ) in section(render(doc), "XLA evidence")


def test_nothing_on_xla_claims_no_speedup_and_no_steady_state():
    # nlp-tutorial's NNLM places nothing on a device: both sides timed the host (x0.94).
    doc = load("parity")
    measured = doc["benchmark"]
    measured["target"].update(
        steps_ran=14, compile={"graphs": 0, "seconds": 0.0, "after_warmup": 0}
    )
    fields = StepBenchmark.__struct_fields__
    measured = msgspec.convert({k: v for k, v in measured.items() if k in fields}, StepBenchmark)
    run = BenchmarkRun("train", measured, benchmark_stage.nothing_on_xla(measured))
    assert run.nothing_on_xla and run.speedup is None
    doc["benchmark"] = msgspec.to_builtins(report_sections.benchmark(run))
    doc["benchmarks"] = [doc["benchmark"]]
    doc["verdict"]["speedup"] = run.speedup
    assert verdict_line(doc) == (
        "PyTPU: parity 18/18, speedup n/a — nothing ran on the XLA device (CPU → XLA on the CPU)"
    )
    text = render(doc)
    assert "x1.42" not in text
    bench = section(text, "Benchmark")
    assert "**Speedup: n/a — nothing ran on the XLA device.**" in bench
    assert "places nothing on a device" in bench and "PYTPU diagnostics" in bench
    assert "not a TPU" not in bench  # the times show nothing about XLA
    # Without review items the advice does not point to them.
    bench_alone = section(render({**doc, "review": []}), "Benchmark")
    assert "PYTPU diagnostics" not in bench_alone and "Put the model" in bench_alone
    evidence = section(text, "XLA evidence")
    assert "- Graphs compiled: 0: nothing ran on the XLA device" in evidence
    assert "Compilations after warm-up" not in evidence and "no recompilation" not in evidence
    # Steps that compiled graphs keep their speedup.
    measured.target.compile.graphs = 3
    assert BenchmarkRun("train", measured, benchmark_stage.nothing_on_xla(measured)).speedup == 1.42


def test_changes_per_rule_with_totals():
    text = section(render(load("parity")), "Changes")
    assert "**15 of 19 sites converted** (79%) in 3 files, 4 of them with a note" in text
    assert "**4 flagged**" in text
    (rows,) = tables(parse(text))
    assert len(rows) == 14 + 1  # a row per rule in each file, and the totals
    assert rows[0][:2] == ["`train.py`", "`R-IMP-01` PYTPU001"]
    assert rows[1][0] == ""  # the file is named once
    assert rows[-1] == ["**Total**", "", "**11**", "**4**", "**4**"]


def test_review_items_link_their_code_or_say_none():
    doc = load("parity")
    text = section(render(doc), "Review items")
    (rows,) = tables(parse(text))
    assert len(rows) == 4
    item = doc["review"][0]
    assert rows[0] == [
        f"[{item['code']}]({item['link']})",
        f"`{item['file']}:{item['line']}`",
        item["message"],
        item["effort"],
    ]
    assert "3 low, 1 medium effort" in text
    doc["review"] = []
    text = section(render(doc), "Review items")
    assert "None: no change needs a person's review." in text
    assert not tables(parse(text))


def test_many_review_items_are_collapsed():
    doc = load("parity")
    doc["review"] = doc["review"] * 3
    text = section(render(doc), "Review items")
    assert "<details>\n<summary>12 review items</summary>\n\n| Code |" in text


def test_tests_generated_counts_and_untested_units_collapsed():
    text = section(render(load("parity")), "Tests generated")
    assert "16 tests for 6 units (5 modules, 1 training step); 2 units have no test." in text
    assert "<summary>2 units without a test, and why</summary>" in text
    (rows,) = tables(parse(text))
    assert rows[0] == [
        "method",
        "`models/vit.py::VisionTransformer.attention_maps`",
        "needs layer, which no recorded call shows",
    ]


def test_reproduce_is_a_shell_block_and_the_footer_has_version_and_timings(document):
    tokens = parse(render(document))
    fences = [t for t in tokens if t.type == "fence"]
    assert len(fences) == 1 and fences[0].info == "sh"
    assert fences[0].content == "\n".join(document["reproduce"]) + "\n"
    last = [t for t in tokens if t.type == "inline"][-1].content
    assert last.startswith(f"<sub>PyTPU {document['tool']['version']} · environment ")
    assert "· total 1 min" in last


def test_no_runs_of_blank_lines_or_trailing_spaces(document):
    document["reproduce"].append("echo done   ")
    text = render(document)
    assert "\n\n\n" not in text
    assert text.endswith("\n") and not text.endswith("\n\n")
    assert all(line == line.rstrip() for line in text.splitlines())


# Overrides


def test_an_override_template_replaces_the_body(tmp_path):
    (tmp_path / "report.md.j2").write_text("Custom: {{ verdict }} on {{ doc.repository.name }}\n")
    assert render(load("parity"), overrides=tmp_path) == (
        "Custom: PyTPU: parity 18/18, speedup x1.42 (CPU → XLA on the CPU) on tiny-vit\n"
    )


def test_an_override_partial_replaces_only_its_section(tmp_path):
    (tmp_path / "footer.md.j2").write_text("Made by our bot.\n")
    doc = load("parity")
    text = render(doc, overrides=tmp_path)
    assert text.endswith("```\n\nMade by our bot.\n") and "<sub>" not in text
    assert text.split("```\n\n")[0] == render(doc).split("```\n\n")[0]
    assert headings(parse(text)) == HEADINGS


def test_an_override_folder_without_templates_changes_nothing(tmp_path):
    doc = load("parity")
    assert render(doc, overrides=tmp_path) == render(doc)
    assert render(doc, overrides=tmp_path / "absent") == render(doc)


def test_undefined_names_are_errors(tmp_path):
    (tmp_path / "report.md.j2").write_text("{{ doc.verdict.no_such_field }}\n")
    with pytest.raises(jinja2.UndefinedError):
        render(load("parity"), overrides=tmp_path)


# Filters


def test_code_spans_hold_backticks_and_pipes():
    assert markdown.code("a`b") == "``a`b``"
    assert markdown.code("`x`") == "`` `x` ``"
    assert markdown.code("a|b") == "`a|b`"
    assert markdown.code("a|b", in_table=True) == "`a\\|b`"


def test_cells_escape_pipes_newlines_and_html():
    assert markdown.cell("a | b\nc <d>") == "a \\| b<br>c &lt;d>"


def test_document_is_not_modified_by_rendering(document):
    before = copy.deepcopy(document)
    render(document)
    assert document == before


def test_a_run_with_nothing_to_show_still_renders_every_section():
    doc = load("parity")
    doc["verdict"].update(status="no tests", passed_both=0, total=0, speedup=None)
    doc["parity"]["tests"] = []
    zero = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    doc["parity"]["counts"] = {"baseline": zero, "target": zero}
    doc["benchmark"].update(command=None, baseline=None, target=None, speedup=None)
    doc["changes"] = {"files": [], "totals": {"converted": 0, "noted": 0, "flagged": 0}}
    doc.update(review=[], reproduce=[], tests_generated={"tested": [], "untested": []})
    text = render(doc)
    assert text.startswith("**PyTPU: no tests, no benchmark (CPU → XLA on the CPU)**\n")
    assert headings(parse(text)) == HEADINGS
    assert not tables(parse(text)) and "<details>" not in text
    for expected in [
        "No tests ran",
        "No benchmark ran.",
        "No XLA metrics",
        "No changes",
        "None: no change needs a person's review.",
        "No tests were generated.",
        "Nothing to run.",
    ]:
        assert expected in text


def test_several_programs_get_their_rows_sections_and_a_mean_speedup():
    """The DDP series as a list: a Programs table, the parity and untested tables with a
    Program column, a benchmark section per timed program and the geometric mean."""
    doc = load("parity")
    first = {**doc["benchmark"], "program": "single_gpu", "speedup": 2.0}
    second = {**doc["benchmark"], "program": "multigpu", "speedup": 0.5}
    doc["benchmark"], doc["benchmarks"] = first, [first, second]
    base = doc["programs"][0]
    doc["programs"] = [
        {**base, "name": "single_gpu", "command": "python single_gpu.py 2 1"},
        {**base, "name": "multigpu", "command": "python multigpu.py 2 1"},
        {**base, "name": "sample", "command": "python sample.py", "benchmarked": False,
         "not_benchmarked": "it takes no training step"},
        {**base, "name": "multinode", "command": "torchrun multinode.py 2 1", "status": "failed",
         "error": "exited with 1:\nRuntimeError: no rendezvous", "tests": 0,
         "benchmarked": False},
    ]  # fmt: skip
    for test in doc["parity"]["tests"]:
        test["program"] = "multigpu" if test["suite"] == "generated" else None
    doc["verdict"]["speedup"] = 1.0
    text = render(doc)
    programs = section(text, "Programs")
    assert (
        "| `multinode` | `torchrun multinode.py 2 1` | configured | — | ❌ could not run: "
        "exited with 1: |" in programs
    )
    assert "| `sample` |" in programs and "it takes no training step" in programs
    parity = section(text, "Test parity")
    assert "| Test | Program | Before | After |" in parity and "| multigpu | passed |" in parity
    bench = section(text, "Benchmark")
    assert "### single_gpu" in bench and "### multigpu" in bench
    assert "**Overall speedup: x1.00**, the geometric mean of the 2 programs' speedups." in bench
    assert "`sample` was not timed: it takes no training step" in bench
    assert "**multigpu**" in section(text, "XLA evidence")


def test_a_repository_whose_programs_do_not_train_says_why_no_benchmark_ran():
    doc = load("parity")
    reason = "`pytest`: it takes no training step (no optimizer step or backward pass was recorded)"
    skipped = benchmark_stage.skipped("python -m pytest tests -q", reason, 3, 10)
    doc["benchmark"] = {**msgspec.to_builtins(skipped), "program": "pytest"}
    doc["benchmark"]["nothing_on_xla"] = False
    doc["benchmarks"] = [doc["benchmark"]]
    doc["verdict"]["speedup"] = None
    assert verdict_line(doc).endswith("no benchmark (CPU → XLA on the CPU)")
    bench = section(render(doc), "Benchmark")
    assert f"No benchmark ran: {reason}." in bench and "failed" not in bench


# The environment section


def test_the_environment_section_names_what_was_installed_and_each_changed_pin():
    page = markdown.render(load("regressed"))
    section = page.split("## Environment", 1)[1].split("\n## ", 1)[0]
    assert "built in 3.1 s" in section and "`requirements.txt`" in section
    assert "Installed: einops 0.8.2, torchvision 0.24.0." in section
    (table,) = tables(parse(section))
    assert table[0] == [
        "`torch<2.6`", "`torch==2.9.0`", "requirements.txt:2",
        "torch-xla 2.9.0 is built for torch 2.9.0 only",
    ]  # fmt: skip
    assert len(table) == 2
    own = markdown.render(load("parity")).split("## Environment", 1)[1].split("\n## ", 1)[0]
    assert "declares no requirements" in own and "torch 2.9.0, torch-xla 2.9.0" in own
    # a requirements file PyTPU's environment meets (`torch>=2.6`: pytorch/examples'
    # word_language_model) is no absence of requirements
    doc = load("parity")
    doc["environment"]["declared"]["files"] = ["word_language_model/requirements.txt"]
    met = markdown.render(doc).split("## Environment", 1)[1].split("\n## ", 1)[0]
    assert "declares no requirements" not in met
    assert "PyTPU's environment meets what `word_language_model/requirements.txt` declares" in met


def test_the_intro_names_the_targets_versions_and_why_it_was_chosen():
    intro = markdown.render(load("parity")).split("## ", 1)[0]
    assert "to torch_xla 2.9 (torch-xla 2.9.0 with torch 2.9.0; PyTPU's default target," in intro
    chosen = markdown.render(load("regressed")).split("## ", 1)[0]
    assert "set by `target` in .github/pytpu.yml" in chosen


# The typed model and the registry of sections


def test_report_schema_is_generated_from_the_sections_models():
    from pytpu.engine.reporting import schema

    assert markdown.SCHEMA_PATH.read_text(encoding="utf-8") == schema.text(), (
        "engine/reporting/report.schema.json is out of date with the report's model; run "
        "`python -m pytpu.engine.reporting.schema`"
    )


def test_every_section_has_a_typed_builder_or_a_template_that_exists():
    for entry in report_sections.SECTIONS.values():
        assert entry.build is not None or entry.template is not None, entry.name
        if entry.template is not None:
            assert (markdown.TEMPLATES / entry.template).is_file(), entry.template
        if entry.build is not None:
            assert entry.kind is not None and entry.doc, entry.name


def test_a_builder_without_a_model_or_registered_twice_is_refused():
    def untyped(stages):
        return {}

    with pytest.raises(TypeError, match="no return annotation"):
        report_sections.section("untyped")(untyped)
    with pytest.raises(ValueError, match="registered twice"):
        report_sections.page_only("intro", "intro.md.j2", "again")
    assert "untyped" not in report_sections.SECTIONS


def test_the_document_is_the_model_encoded(document):
    # A fixture decodes into the model and encodes back to itself: no key is lost or added.
    report = msgspec.convert(document, report_document.report_type())
    assert msgspec.to_builtins(report) == document
    document["machine"]["cores"] = -1
    with pytest.raises(msgspec.ValidationError, match=r"machine.cores"):
        msgspec.convert(document, report_document.report_type())


def test_the_machine_line_says_when_the_benchmark_shared_the_cores(document):
    quiet = {"probes": 5, "mean_cores": 0.02, "most_cores": 0.04, "busy": False}
    document["machine"] = {"cores": 2, "other_work": quiet}
    line = render(document).split("Machine:")[1].splitlines()[0]
    assert line == (
        " 2 CPU cores; other processes used 0.02 of them on average, at most 0.04, in the"
        " benchmark's 5 probes (a second of PyTPU doing nothing before each round)."
    )
    busy = {"probes": 1, "mean_cores": 1.9, "most_cores": 1.9, "busy": True}
    document["machine"] = {"cores": 2, "other_work": busy}
    assert "1 probe (a second" in render(document)
    assert "so the benchmark's times depend on that other work." in render(document)
    document["machine"] = {"cores": 1, "other_work": None}
    assert "Machine: 1 CPU core.\n" in render(document)


def test_a_bfloat16_migration_s_parity_says_which_tolerances_it_used(document):
    assert "bfloat16 tolerances" not in render(document)
    document["parity"]["precision"] = "bf16"
    text = render(document).split("## Test parity")[1]
    assert "**bfloat16 tolerances after the migration.** With `precision: bf16`" in text
