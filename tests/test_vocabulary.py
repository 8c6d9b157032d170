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
    MARKS,
    MATCH_KINDS,
    WORDS,
    Condition,
)


def _used(knowledge: kb.KnowledgeBase) -> dict[str, set[str]]:
    used: dict[str, set[str]] = {r.title: set() for r in WORDS}
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
    for registry in WORDS:
        unused = set(registry.names()) - used[registry.title]
        assert not unused, f"{registry.title} nobody uses: {sorted(unused)}"


def test_every_position_mark_is_used() -> None:
    """A position mark nobody matches on goes too: each is offered to a match kind some rule
    uses, or named by a rule (`match: {marked: NAME}`)."""
    knowledge = kb.default()
    used: set[str] = set()
    for case in (case for rule in knowledge.rules for case in rule.cases):
        used.update(case.kind.marks)
        if case.kind.marks_of is not None:
            used.update(case.kind.marks_of(case))
    unused = set(MARKS.names()) - used
    assert not unused, f"position marks nobody uses: {sorted(unused)}"


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
            isinstance(kb.cst_nodes.literal_value(node), int)
            and kb.cst_nodes.literal_value(node) < 10
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


# --- the contract (`vocabulary/contract.py`) ----------------------------------------------------


def test_a_hook_is_checked_against_the_engines_call_when_registered() -> None:
    """A hook that cannot take the call the engine makes, or a `def` hook with an untyped
    parameter, is refused when its module registers it, with what is wrong."""
    from pytpu.engine.rewriter.vocabulary import Registry
    from pytpu.engine.rewriter.vocabulary.contract import Walk

    scratch: Registry[Condition] = Registry("Conditions", "conditions", "scratch")

    def two(node: object, parameter: object) -> bool:
        return True

    def untyped(node, parameter, walk) -> bool:  # noqa: ANN001
        return True

    def typed(node: object, parameter: object, walk: Walk) -> bool:
        return True

    with pytest.raises(TypeError, match=r"'short': `check` \(.*two.*cannot take the engine's call"):
        scratch.register(Condition(name="short", doc="", check=two))
    with pytest.raises(TypeError, match="parameters without a type: node, parameter, walk"):
        scratch.register(Condition(name="untyped", doc="", check=untyped))
    scratch.register(Condition(name="typed", doc="", check=typed))
    scratch.register(Condition(name="lambda", doc="", check=lambda node, parameter, walk: True))
    assert scratch.entries.keys() == {"typed", "lambda"}


def test_every_registered_hook_fits_the_contract() -> None:
    from pytpu.engine.rewriter.vocabulary import REGISTRIES, hook_problems

    problems = [
        f"{registry.title}: {entry.name}: {problem}"
        for registry in REGISTRIES
        for entry in registry
        for problem in hook_problems(entry)
    ]
    assert problems == []


def test_the_vocabulary_keeps_no_module_level_cache_and_reaches_no_engine_internals() -> None:
    """Per-file knowledge lives in facts the walk keeps (`walk.fact`), not in module-level
    caches keyed by the walk; entries use the contract, not the walk's bookkeeping."""
    root = Path(__file__).resolve().parents[1] / "engine" / "rewriter" / "vocabulary"
    internals = ("walk.plans", "walk.claimed", "walk.top_index =", "edit.rewriter", "weakref")
    for module in root.rglob("*.py"):
        text = module.read_text()
        for word in internals:
            assert word not in text, f"{module.relative_to(root)}: {word}"


def test_a_fact_is_computed_once_per_file_when_first_asked() -> None:
    from pytpu.engine.rewriter import checkout
    from pytpu.engine.rewriter.analysis import FileAnalysis
    from pytpu.engine.rewriter.imports import ImportTracker
    from pytpu.engine.rewriter.resolve import ImportTableResolver
    from pytpu.engine.rewriter.vocabulary.contract import Fact

    calls: list[tuple[object, tuple[object, ...]]] = []

    def count(walk: object, *key: object) -> int:
        calls.append((walk, key))
        return len(calls)

    fact: Fact[int] = Fact(name="counted", doc="", compute=count)
    index = checkout.rule_index("torch_xla")
    walks = [
        FileAnalysis(index, ImportTableResolver(index.pattern_roots), ImportTracker({}))
        for _ in range(2)
    ]
    assert [walks[0].fact(fact), walks[0].fact(fact), walks[0].fact(fact, "k")] == [1, 1, 2]
    assert walks[1].fact(fact) == 3 and walks[0].fact(fact, "k") == 2
    assert len(calls) == 3


def test_analyses_run_in_the_order_they_declare() -> None:
    """`after:` names registered analyses, without a circle, and the index keeps it."""
    names = set(ANALYSES.names())
    for analysis in ANALYSES:
        assert set(analysis.after) <= names, analysis.name
    from pytpu.engine.rewriter import checkout

    order = [analysis.name for analysis, _ in checkout.rule_index("torch_xla").after_walk]
    assert order.index("implicit_model") < order.index("implicit_inputs")
    for position, name in enumerate(order):
        assert all(order.index(a) < position for a in ANALYSES[name].after if a in order), name


def test_every_set_of_the_torch_api_table_is_read() -> None:
    """kb/torch_api.yaml holds the torch names the analyses of tensors read: each set is read
    by the vocabulary (none kept in Python beside it), and kb.load checks it against its
    schema."""
    from pytpu.engine.rewriter.kb_files import torch_api

    root = Path(__file__).resolve().parents[1] / "engine" / "rewriter" / "vocabulary"
    code = "\n".join(module.read_text() for module in root.rglob("*.py"))
    unread = [name for name in torch_api() if f'["{name}"]' not in code]
    assert unread == []
    assert "torch_api" in kb.default().tables
