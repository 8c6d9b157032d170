"""The knowledge base compiled for one target: rules indexed for dispatch, and the words that
decide cheaply whether a file can match at all."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import libcst as cst

from pytpu.engine.rewriter import devices, patterns
from pytpu.engine.rewriter.kb import Case, KnowledgeBase, Rule
from pytpu.engine.rewriter.loops import LoopSettings


class CompiledKB:
    """Rules indexed for dispatch, plus the pre-filter's words. Built once per KB and target."""

    def __init__(self, kb: KnowledgeBase, rules: Sequence[Rule]):
        self.kb = kb
        self.rules = list(rules)
        self.index: dict[tuple[type, str], list[tuple[Case, cst.CSTNode]]] = defaultdict(list)
        self.device_case: Case | None = None  # 'cuda' where a device is named
        self.host_case: Case | None = None  # 'cuda' where a load location is named
        self.device_index_case: Case | None = None  # `.to(rank)`
        self.device_comparison_case: Case | None = None
        self.engine_cases: dict[str, Case] = {}  # behaviours the engine runs, by kind
        self.namespace_cases: list[Case] = []
        self.import_cases: list[Case] = []
        self.module_cases: list[Case] = []
        self.env_cases: list[Case] = []
        alternatives: set[frozenset[str]] = set()
        for rule in self.rules:
            for case in rule.cases:
                if case.kind == "pattern":
                    for pattern in case.patterns:
                        key = patterns.index_key(pattern)
                        if key is None and type(pattern) is cst.Assign:
                            # `$x = $x.pin_memory()`: dispatched on what is assigned
                            value_key = patterns.index_key(pattern.value)
                            key = f"={value_key}" if value_key else None
                        if key is None:
                            raise ValueError(f"{rule.id}: pattern has no name to dispatch on")
                        self.index[(type(pattern), key)].append((case, pattern))
                        if isinstance(pattern, cst.Attribute) and patterns.is_qualified_pattern(
                            pattern
                        ):
                            # `from torch.cuda import FloatTensor`: the use is a bare Name
                            self.index[(cst.Name, key)].append((case, pattern))
                        alternatives.add(frozenset(patterns.node_names(pattern)))
                    continue
                if case.kind == "device_string":
                    self.device_case = case
                elif case.kind == "host_string":
                    self.host_case = case
                elif case.kind == "device_index":
                    self.device_index_case = case
                elif case.kind == "device_comparison":
                    self.device_comparison_case = case
                elif case.kind == "namespace":
                    self.namespace_cases.append(case)
                elif case.kind == "import":
                    self.import_cases.append(case)
                elif case.kind == "module":
                    self.module_cases.append(case)
                elif case.kind == "env":
                    self.env_cases.append(case)
                else:  # "engine": behaviour built into the engine itself
                    self.engine_cases[case.names[0]] = case
                    continue
                alternatives.add(_words_of(case))
        for candidates in self.index.values():
            # The most specific pattern is tried first; KB order breaks ties.
            candidates.sort(key=lambda item: -_specificity(item[0], item[1]))
        self.namespace_roots = {n: c for c in self.namespace_cases for n in c.names}
        # Root names of every dotted name a rule looks for (for the import-table resolver).
        self.pattern_roots = frozenset(
            {w.split(".")[0] for w in self.namespace_roots}
            | {"os"}
            | {
                root
                for candidates in self.index.values()
                for _, pattern in candidates
                for root in _dotted_roots(pattern)
            }
        )
        self.namespace_words = frozenset(n.split(".")[-1] for n in self.namespace_roots)
        self.positions = devices.DevicePositions.from_kb(kb.device_positions)
        self.loop_settings = LoopSettings.from_kb(kb.loops)
        self.launchers = frozenset(kb.loops.get("launchers", []))
        if self.engine_cases.keys() & {"train_barrier", "eval_barrier", "device_loader"}:
            # A loop needs a barrier when it trains or runs a model on a device.
            for word in ("backward", "step", *kb.loops.get("model_words", [])):
                for device in ("cuda", "xla", ".to(", "device="):
                    alternatives.add(frozenset({word, device}))
        if "optimizer_order" in self.engine_cases:
            alternatives.add(frozenset({"optim", "parameters"}))
        # A file can only match if it contains every word of at least one alternative.
        self.alternatives = sorted((a for a in alternatives if a), key=len)
        self.rank_guards = devices.RankGuards.from_kb(kb.rank_guards)

    def may_match(self, text: str) -> bool:
        return any(all(word in text for word in words) for words in self.alternatives)


def _specificity(case: Case, pattern: cst.CSTNode) -> int:
    """How much a pattern pins down: literals, keyword arguments and constraints."""
    score = len(case.where) + (1 if case.context else 0)
    for node in patterns.walk(pattern):
        if isinstance(node, cst.Arg) and node.keyword is not None:
            score += 1
        elif patterns.is_literal(node) and not isinstance(node, cst.Name):
            score += 1
    return score


def _words_of(case: Case) -> frozenset[str]:
    if case.kind in ("device_string", "host_string", "device_comparison"):
        return frozenset({"cuda"})
    if case.kind == "env":
        return frozenset({"environ"})
    if case.kind == "device_index":
        return frozenset({".to("})
    return frozenset(part for name in case.names for part in name.split(".") if part)


def _dotted_roots(pattern: cst.CSTNode) -> set[str]:
    """Root names of the dotted names a pattern looks for (`torch` in `torch.cuda.x()`)."""
    roots: set[str] = set()
    for node in patterns.walk(pattern):
        if isinstance(node, cst.Attribute) and patterns.is_qualified_pattern(node):
            roots.add(patterns.dotted_name(node).split(".")[0])
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            if patterns.wildcard_name(node.func) is None:
                roots.add(node.func.value)
    return roots
