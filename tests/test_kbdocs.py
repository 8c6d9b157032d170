"""The generated knowledge-base reference page, docs/kb.md."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pytpu.engine.rewriter import kb, kbdocs

DOCS = Path(__file__).resolve().parents[1] / "docs" / "kb.md"


def test_docs_kb_md_is_current() -> None:
    expected = kbdocs.render().splitlines()
    actual = DOCS.read_text(encoding="utf-8").splitlines() if DOCS.exists() else []
    if actual != expected:
        pairs = enumerate(zip(actual, expected, strict=False))
        line = next((i for i, (a, e) in pairs if a != e), min(len(actual), len(expected)))
        pytest.fail(
            f"docs/kb.md is out of date with kb/*.yaml (first difference at line {line + 1}); "
            "run `pytpu kb docs` from the repository root to regenerate it, never edit it by hand",
            pytrace=False,
        )


def test_render_does_not_depend_on_rule_or_file_order() -> None:
    knowledge = kb.default()
    shuffled = dataclasses.replace(
        knowledge, rules=list(reversed(knowledge.rules)), files=list(reversed(knowledge.files))
    )
    assert kbdocs.render(shuffled) == kbdocs.render(knowledge)


def test_index_links_every_rule_to_its_anchor() -> None:
    text = kbdocs.render()
    for rule in kb.default().rules:
        code = rule.diagnostic.code
        assert f"| [{code}](#{code.lower()}) | `{rule.id}` |" in text
        assert text.count(f'<a id="{code.lower()}"></a>') == 1
        assert f"### {code}: {rule.title}" in text


def test_cases_are_a_numbered_list_with_their_replacements() -> None:
    section = kbdocs.rule_markdown(kb.default().find("R-DEV-01"))
    assert "1. Matches:" in section
    assert "2. Matches:" in section
    assert "3. Matches:" in section
    assert "   torch.device($kind, $index)" in section
    assert "Where `$d` is `cuda_device_const`." in section
    assert "Replaced by (safe+note):" in section


def test_section_shows_added_imports_action_and_examples() -> None:
    knowledge = kb.default()
    section = kbdocs.rule_markdown(knowledge.find("PYTPU002"))
    assert "**Adds imports:** `import torch_xla.distributed.xla_backend`" in section
    section = kbdocs.rule_markdown(knowledge.find("PYTPU105"))
    assert "Action (safe): `drop_kwargs`: drops the keyword argument `non_blocking=`." in section
    rule = knowledge.find("PYTPU104")
    section = kbdocs.rule_markdown(rule)
    assert "```python\n" + rule.examples[0].before in section
    assert "After:\n\n```python\n" + rule.examples[0].after in section
    assert f"<{rule.diagnostic.source}>" in section


def test_flagged_only_rule_says_the_code_is_left_as_it_is() -> None:
    section = kbdocs.rule_markdown(kb.default().find("PYTPU213"), level=1, with_anchor=False)
    assert section.startswith("# PYTPU213: ")
    assert "Flagged only (display_only)" in section
    assert "<a id=" not in section


def test_schema_vocabulary_is_current() -> None:
    """kb/schema.json's enums of match kinds, conditions, contexts and actions come from the
    vocabulary's registries."""
    path, make = kbdocs.generated_files()[0]
    if not kbdocs.is_current(path, make()):
        pytest.fail(
            "kb/schema.json's vocabulary is out of date with engine/rewriter/vocabulary/; run "
            "`pytpu kb docs` from the repository root to regenerate it",
            pytrace=False,
        )


def test_every_vocabulary_entry_is_documented_and_in_the_schema() -> None:
    from pytpu.engine.rewriter.vocabulary import WORDS

    text = kbdocs.render()
    schema_text = kbdocs.render_schema()
    for registry in WORDS:
        for entry in registry:
            assert f"| `{entry.name}` |" in text, f"{registry.title}: {entry.name}"
            assert f'"{entry.name}"' in schema_text, f"{registry.title}: {entry.name}"
