"""The knowledge base indexed for one target: which match kinds the walk offers each node, the
patterns by the name they dispatch on, and the words that decide cheaply whether a file can
match at all."""

from __future__ import annotations

import graphlib
from collections import defaultdict
from collections.abc import Iterable, Sequence

import libcst as cst

from pytpu.engine.rewriter import cst_nodes, devices, patterns
from pytpu.engine.rewriter.kb import KnowledgeBase, Rule, RuleCase
from pytpu.engine.rewriter.loops import LoopSettings
from pytpu.engine.rewriter.resolve import PublicPaths
from pytpu.engine.rewriter.vocabulary import (
    ANALYSES,
    MARKS,
    MATCH_KINDS,
    BuiltinAnalysis,
    MatchKind,
    PositionMark,
)
from pytpu.engine.rewriter.vocabulary.matches.patterns import PATTERN

# (kind, its cases), in the order the kinds are tried
Offer = list[tuple[MatchKind, tuple[RuleCase, ...]]]


class RuleIndex:
    """Rules indexed for dispatch, plus the pre-filter's words. Built once per KB and target."""

    def __init__(self, kb: KnowledgeBase, rules: Sequence[Rule]):
        self.kb = kb
        self.rules = list(rules)
        self.patterns: dict[tuple[type, str], list[tuple[RuleCase, cst.CSTNode]]] = defaultdict(
            list
        )
        cases: dict[str, list[RuleCase]] = defaultdict(list)
        for rule in self.rules:
            for case in rule.cases:
                cases[case.kind.name].append(case)
        self.cases = {name: tuple(found) for name, found in cases.items()}
        for case in self.cases.get(PATTERN, ()):
            self._index_patterns(case)
        for candidates in self.patterns.values():
            # A rule that overrides others first (chosen by a setting, it replaces the default
            # rewrite of the same code), then the most specific pattern; KB order breaks ties.
            present = {case.rule.id for case, _ in candidates}
            candidates.sort(
                key=lambda item: (
                    not present.intersection(item[0].rule.overrides),
                    -_specificity(item[0], item[1]),
                )
            )
        self.by_type, self.by_mark = self._offers()
        # node type -> the position marks the walk puts on its children there, in their order
        marks_of_type: dict[type, list[PositionMark]] = defaultdict(list)
        for mark in MARKS:
            for node_type in mark.node_types:
                marks_of_type[node_type].append(mark)
        self.marks_of_type = {t: tuple(found) for t, found in marks_of_type.items()}
        self.bare_names = self._bare_names()
        # (analysis, its case) for the analyses that plan loops, and those with a hook before
        # or after the walk: in the order their `after` declares (by name where it is silent)
        self.loop_analyses: list[tuple[BuiltinAnalysis, RuleCase]] = []
        self.before_walk: list[tuple[BuiltinAnalysis, RuleCase]] = []
        self.after_walk: list[tuple[BuiltinAnalysis, RuleCase]] = []
        for case in _declared_order(self.cases.get("engine", ())):
            if case.analysis.takes_loop is not None:
                self.loop_analyses.append((case.analysis, case))
            if case.analysis.before_walk is not None:
                self.before_walk.append((case.analysis, case))
            if case.analysis.after_walk is not None:
                self.after_walk.append((case.analysis, case))
        # Root names of every dotted name a rule looks for (for the import-table resolver).
        self.pattern_roots = frozenset(
            root
            for name, found in self.cases.items()
            for case in found
            for root in (_pattern_roots(case) if name == PATTERN else MATCH_KINDS[name].roots(case))
        )
        self.public_paths = PublicPaths(kb.families.get("imports", {}).get("public_paths"))
        self.alternatives = self._words()
        # CUDA-only namespaces: a local name bound to one (`import torch.cuda as tc`) is noted
        self.namespace_roots = tuple(n for c in self.cases.get("namespace", ()) for n in c.names)
        self.positions = devices.DevicePositions.from_kb(kb.device_positions)
        self.loop_settings = LoopSettings.from_kb(kb.loops)
        self.launchers = frozenset(kb.loops.get("launchers", []))
        self.process_groups = frozenset(kb.loops.get("process_groups", []))
        self.worker_spawners = frozenset(kb.loops.get("worker_spawners", []))
        self.ddp_wrappers = frozenset(kb.loops.get("ddp_wrappers", []))
        self.role_splitting_calls = frozenset(kb.loops.get("role_splitting_calls", []))
        self.rank_guards = devices.RankGuards.from_kb(kb.rank_guards)

    def _index_patterns(self, case: RuleCase) -> None:
        for pattern in case.patterns:
            key = patterns.index_key(pattern)
            if key is None and type(pattern) is cst.Assign:
                # `$x = $x.pin_memory()`: dispatched on what is assigned
                value_key = patterns.index_key(pattern.value)
                key = f"={value_key}" if value_key else None
            if key is None:
                raise ValueError(f"{case.rule.id}: pattern has no name to dispatch on")
            self.patterns[(type(pattern), key)].append((case, pattern))
            if isinstance(pattern, cst.Attribute) and patterns.is_qualified_pattern(pattern):
                # `from torch.cuda import FloatTensor`: the use is a bare Name
                self.patterns[(cst.Name, key)].append((case, pattern))

    def _offers(self) -> tuple[dict[type, Offer], dict[str, Offer]]:
        """For each node type and each mark, the kinds (with cases in this KB) to try."""
        by_type: dict[type, Offer] = defaultdict(list)
        by_mark: dict[str, Offer] = defaultdict(list)
        for kind in MATCH_KINDS:
            found = self.cases.get(kind.name)
            if not found or kind.match is None:
                continue
            types = {t for t, _ in self.patterns} if kind.name == PATTERN else kind.node_types
            for node_type in types:
                by_type[node_type].append((kind, found))
            for mark in kind.marks:
                by_mark[mark].append((kind, found))
            if kind.marks_of is not None:  # (`match: {marked: NAME}`: each case its marks)
                for mark in dict.fromkeys(m for case in found for m in kind.marks_of(case)):
                    named = tuple(case for case in found if mark in kind.marks_of(case))
                    by_mark[mark].append((kind, named))
        return dict(by_type), dict(by_mark)

    def _bare_names(self) -> frozenset[str] | None:
        """The values a bare Name must have (or be an alias) for any kind offered Names to match
        it; None when one of them may match any Name."""
        names: set[str] = set()
        for kind, found in self.by_type.get(cst.Name, ()):
            if kind.name == PATTERN:  # (indexed here, by the name each pattern dispatches on)
                names.update(key for node_type, key in self.patterns if node_type is cst.Name)
            elif kind.bare_names is None:
                return None
            else:
                names.update(kind.bare_names(found))
        return frozenset(names)

    def _words(self) -> list[frozenset[str]]:
        """Alternatives of words: a file can only match if it contains every word of one."""
        alternatives: set[frozenset[str]] = set()
        for name, found in self.cases.items():
            if name == "engine":
                continue  # each analysis gives its own words, below
            for case in found:
                if name == PATTERN:
                    words = {frozenset(patterns.node_names(p)) for p in case.patterns}
                else:
                    words = {case.kind.words(case)}
                for needed in _required_words(case, self.kb):
                    # the case applies only where its context or condition holds: both words
                    words = {w | n for w in words for n in needed}
                alternatives.update(words)
        for case in self.cases.get("engine", ()):
            alternatives.update(case.analysis.words(self.kb))
        # (a case that asks for no word passes every file: correct, if slow; the KB's own
        # rules all ask for one, a test says)
        return sorted(alternatives, key=len)

    def offers(self, node_type: type, marks: list[str] | None) -> Offer:
        """The kinds to try on a node, in order."""
        offer = self.by_type.get(node_type, [])
        if not marks:
            return offer
        marked = [item for mark in marks for item in self.by_mark.get(mark, ())]
        return sorted([*offer, *marked], key=lambda item: item[0].order)

    def cases_of_mark(self, mark: str) -> tuple[RuleCase, ...]:
        """The cases of the first kind offered nodes with this mark."""
        offer = self.by_mark.get(mark)
        return offer[0][1] if offer else ()

    def may_match(self, text: str) -> bool:
        # (a word is looked for once: many alternatives share theirs)
        present: dict[str, bool] = {}

        def has(word: str) -> bool:
            found = present.get(word)
            if found is None:
                found = present[word] = word in text
            return found

        return any(all(has(word) for word in words) for words in self.alternatives)


def _required_words(case: RuleCase, kb: KnowledgeBase) -> list[set[frozenset[str]]]:
    """Alternatives of words that the case's context and `where:` conditions need."""
    needed = []
    if case.context is not None and case.context.words is not None:
        needed.append(case.context.words(kb))
    for condition, parameter in case.where.values():
        words = condition.words(parameter) if condition.words is not None else None
        if words:  # (none: the condition asks for no word)
            needed.append(words)
    return needed


def _specificity(case: RuleCase, pattern: cst.CSTNode) -> int:
    """How much a pattern pins down: literals, keyword arguments and conditions."""
    score = len(case.where) + (1 if case.context else 0)
    for node in cst_nodes.walk(pattern):
        if isinstance(node, cst.Arg) and node.keyword is not None:
            score += 1
        elif cst_nodes.is_literal(node) and not isinstance(node, cst.Name):
            score += 1
    return score


def _pattern_roots(case: RuleCase) -> set[str]:
    """Root names of the dotted names a case's patterns look for (`torch` in `torch.cuda.x()`)."""
    roots: set[str] = set()
    for pattern in case.patterns:
        for node in cst_nodes.walk(pattern):
            if isinstance(node, cst.Attribute) and patterns.is_qualified_pattern(node):
                roots.add(cst_nodes.dotted_name(node).split(".")[0])
            elif isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
                if patterns.wildcard_name(node.func) is None:
                    roots.add(node.func.value)
    return roots


def _declared_order(cases: Iterable[RuleCase]) -> list[RuleCase]:
    """The analyses' cases ordered so that each comes after those its analysis names in
    `after` (an analysis no rule of this target uses is not waited for); ties by name, then by
    the KB's order of the cases of one analysis."""
    cases = list(cases)
    names = {case.analysis.name for case in cases}
    sorter = graphlib.TopologicalSorter(
        {name: [a for a in ANALYSES[name].after if a in names] for name in names}
    )
    sorter.prepare()  # (raises graphlib.CycleError for analyses that wait for each other)
    order: list[str] = []
    ready: list[str] = []
    while sorter.is_active():
        ready = sorted({*ready, *sorter.get_ready()})  # (each is handed out once)
        order.append(ready.pop(0))
        sorter.done(order[-1])
    rank = {name: i for i, name in enumerate(order)}
    return sorted(cases, key=lambda case: rank[case.analysis.name])
