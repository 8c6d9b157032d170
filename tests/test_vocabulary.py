"""The rule vocabulary: registered entries, used by the KB, reaching the schema and the docs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pytpu.engine.rewriter import kb
from pytpu.engine.rewriter.checkout import migrate_text
from pytpu.engine.rewriter.index import RuleIndex
from pytpu.engine.rewriter.vocabulary import (
    ACTIONS,
    ANALYSES,
    CONDITIONS,
    CONTEXTS,
    MATCH_KINDS,
    REGISTRIES,
    Condition,
)


def _used(knowledge: kb.KnowledgeBase) -> dict[str, set[str]]:
    used: dict[str, set[str]] = {r.title: set() for r in REGISTRIES}
    for rule in knowledge.rules:
        for case in rule.cases:
            used[MATCH_KINDS.title].add(case.kind.name)
            used[CONDITIONS.title].update(c.name for c, _ in case.where.values())
            used[ACTIONS.title].update(a.name for a, _ in case.actions)
            if case.context is not None:
                used[CONTEXTS.title].add(case.context.name)
            if case.analysis is not None:
                used[ANALYSES.title].add(case.analysis.name)
    return used


def test_every_entry_is_used_by_a_rule() -> None:
    """Vocabulary nobody uses goes: each entry is used by at least one rule of the KB."""
    used = _used(kb.default())
    for registry in REGISTRIES:
        unused = set(registry.names()) - used[registry.title]
        assert not unused, f"{registry.title} nobody uses: {sorted(unused)}"


def test_registering_a_name_twice_fails() -> None:
    entry = next(iter(CONDITIONS))
    with pytest.raises(ValueError, match="registered twice"):
        CONDITIONS.register(entry)


def _family(rule: str) -> str:
    return textwrap.dedent(
        """\
        family: general
        title: A family for one test rule
        rules:
        """
    ) + textwrap.indent(textwrap.dedent(rule), "  ")


def test_a_new_condition_is_one_registered_object(tmp_path: Path, monkeypatch) -> None:
    """The contributor's path: register a condition, use it in a rule's `where:`, and the
    schema, the loader and the engine take it."""
    condition = Condition(
        name="small_integer",
        doc="is an integer literal below 10",
        check=lambda node, _, walk: (
            isinstance(kb.patterns.literal_value(node), int)
            and kb.patterns.literal_value(node) < 10
        ),
    )
    monkeypatch.setitem(CONDITIONS.entries, condition.name, condition)
    from pytpu.engine.rewriter import kbdocs

    schema = kbdocs.render_schema()
    assert '"small_integer"' in schema
    (tmp_path / "schema.json").write_text(schema, encoding="utf-8")
    (tmp_path / "general.yaml").write_text(
        _family(
            """\
            - id: R-GEN-01
              title: Seeds below ten become ten
              applicability: safe
              versions: {torch_xla: ">=2.1"}
              match: "torch.manual_seed($s)"
              where: {s: small_integer}
              replace: "torch.manual_seed(10)"
              diagnostic:
                code: PYTPU999
                message: a small seed became ten
                why: A test rule that shows a new condition at work.
                fix: Nothing to do.
                effort: none
                source: https://example.org/
              examples:
                - before: "import torch\\ntorch.manual_seed(3)\\n"
                  after: "import torch\\ntorch.manual_seed(10)\\n"
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.setattr(kb, "kb_dir", lambda: tmp_path)
    kb.schema.cache_clear()
    try:
        knowledge = kb.load(tmp_path)
    finally:
        kb.schema.cache_clear()
    index = RuleIndex(knowledge, knowledge.rules)
    assert migrate_text("import torch\ntorch.manual_seed(3)\n", index)[0].endswith("(10)\n")
    assert migrate_text("import torch\ntorch.manual_seed(42)\n", index)[0].endswith("(42)\n")


def test_condition_words_join_the_pre_filter_only_when_the_file_must_spell_them() -> None:
    one_of = CONDITIONS["one_of"]
    assert one_of.words(["nccl", "gloo"]) == {frozenset({"nccl"}), frozenset({"gloo"})}
    # a value source code may write with escapes asks for no word at all
    assert one_of.words(["it's"]) == set()
    assert one_of.words(["a\\b"]) == set()


def test_a_bare_name_is_offered_when_a_kind_may_take_it_aliases_included() -> None:
    """The walk offers a bare Name only when its value is one a kind offered Names looks for,
    or a name the file binds as an alias; aliases of every sort are still found."""
    from pytpu.engine.rewriter import checkout

    index = checkout.rule_index("torch_xla")
    assert index.bare_names is not None
    assert {"FloatTensor", "cuda"} <= index.bare_names and "model" not in index.bare_names
    aliased = {
        "from torch.cuda import FloatTensor as FT\nisinstance(x, FT)\n": "flagged",
        "import torch\nTensor = torch.cuda.FloatTensor\nisinstance(x, Tensor)\n": "flagged",
        "import torch.cuda as tc\nf(tc)\n": "unknown",
    }
    for source, kind in aliased.items():
        findings = migrate_text(source, index)[1]
        assert any(f.line == source.count("\n") and f.kind == kind for f in findings), source
    # where the alias is bound, its value is the one site (its name is not a second one)
    bound = migrate_text("import torch\nTensor = torch.cuda.FloatTensor\n", index)[1]
    assert [(f.rule.id, f.line) for f in bound] == [("R-DEV-07", 2)]
