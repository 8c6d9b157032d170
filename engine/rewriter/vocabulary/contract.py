"""What a vocabulary entry's hooks receive, and all they may do: the contract between the rule
vocabulary and the engine that calls it.

The engine's own classes satisfy these protocols (`analysis.FileAnalysis` is a `Walk`,
`transform.Edit` an `Edit`, `kb.RuleCase` a `Case`); the entries see only what is declared
here, so the walk's bookkeeping can change without touching them. The protocols sit below the
rest of the rewriter: this module imports none of the modules that implement them.

Per-file facts (`Fact`) are the entries' scratch space, the way libcst's metadata providers
are: a fact is computed once per file, the first time a hook asks for it (`walk.fact(F)`), and
kept by the walk, never in a module-level cache.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import libcst as cst

from pytpu.engine.rewriter import patterns
from pytpu.engine.rewriter.dataflow import OptimizerOrder
from pytpu.engine.rewriter.devices import DevicePositions
from pytpu.engine.rewriter.imports import ImportTracker
from pytpu.engine.rewriter.loops import LoopAnalyzer, LoopPlan, LoopSettings
from pytpu.engine.rewriter.resolve import PublicPaths, Resolver

T = TypeVar("T")


class Diagnostic(Protocol):
    @property
    def code(self) -> str: ...  # PYTPUnnn

    @property
    def message(self) -> str: ...


class Rule(Protocol):
    """A KB rule (`kb.Rule`), as the entries read it."""

    @property
    def id(self) -> str: ...

    @property
    def diagnostic(self) -> Diagnostic: ...

    @property
    def overrides(self) -> tuple[str, ...]: ...  # rules it replaces on the code both match


class Case(Protocol):
    """One compiled case of a rule (`kb.RuleCase`): how it matches and what it does."""

    @property
    def rule(self) -> Rule: ...

    @property
    def applicability(self) -> str: ...

    @property
    def template(self) -> cst.CSTNode | None: ...

    @property
    def note(self) -> str | None: ...  # the reviewer's note of a `safe+note` case

    @property
    def names(self) -> tuple[str, ...]: ...  # the names a match kind lists

    @property
    def values(self) -> tuple[str, ...]: ...

    @property
    def options(self) -> dict[str, Any]: ...  # the match mapping's other keys

    @property
    def analysis(self) -> Any: ...  # its `BuiltinAnalysis`, for `match: {engine: name}`

    @property
    def changes_code(self) -> bool: ...

    def action(self, name: str) -> Any: ...


class Finding(Protocol):
    """What the report says of a site (`findings.Finding`)."""

    @property
    def case(self) -> Case: ...


class SitePlan(Protocol):
    """What the rewrite pass does at a node (`analysis.SitePlan`)."""

    @property
    def case(self) -> Case: ...

    @property
    def bindings(self) -> patterns.Bindings: ...

    @property
    def finding(self) -> Finding: ...

    @property
    def loop(self) -> LoopPlan | None: ...

    @property
    def flags(self) -> list[Finding]: ...


class Index(Protocol):
    """The KB compiled for one target (`index.RuleIndex`), as the entries read it."""

    @property
    def loop_settings(self) -> LoopSettings: ...

    @property
    def public_paths(self) -> PublicPaths: ...

    @property
    def patterns(self) -> dict[tuple[type, str], list[tuple[Case, cst.CSTNode]]]: ...

    @property
    def launchers(self) -> frozenset[str]: ...  # the KB's process launchers

    @property
    def process_groups(self) -> frozenset[str]: ...  # calls that join a process group

    @property
    def worker_spawners(self) -> frozenset[str]: ...  # launchers of the program's own workers

    @property
    def ddp_wrappers(self) -> frozenset[str]: ...  # DistributedDataParallel

    @property
    def role_splitting_calls(self) -> frozenset[str]: ...  # RPC: processes in different roles


class Walk(Protocol):
    """Pass 1 over one module (`analysis.FileAnalysis`): its queries, and the hooks' acts
    (planning a site, deferring one, claiming nodes, declaring a device program)."""

    # --- what the walk knows ---
    @property
    def index(self) -> Index: ...

    @property
    def positions(self) -> DevicePositions: ...

    @property
    def resolver(self) -> Resolver: ...

    @property
    def imports(self) -> ImportTracker: ...

    @property
    def module(self) -> cst.Module | None: ...

    @property
    def text(self) -> str: ...  # the module's source ("" when the caller gave none)

    @property
    def loops(self) -> LoopAnalyzer | None: ...

    @property
    def path(self) -> Sequence[cst.CSTNode]: ...  # from the module to the node being walked

    @property
    def training(self) -> Sequence[bool]: ...  # for each enclosing loop: does it train?

    @property
    def namespace_aliases(self) -> AbstractSet[str]: ...  # names bound to a CUDA namespace

    @property
    def optimizer_order(self) -> OptimizerOrder: ...

    @property
    def device_aware(self) -> bool: ...  # a device program: its loops are steps

    @property
    def checkout(self) -> CheckoutFacts: ...  # what the checkout's other files say about it

    def rank_guarded(self) -> bool: ...

    def in_step(self) -> bool: ...

    def in_training(self) -> bool: ...  # the innermost loop around trains

    def step_throttled(self) -> bool: ...

    def fact(self, fact: Fact[T], *key: Hashable) -> T: ...

    def is_claimed(self, node: cst.CSTNode) -> bool: ...

    def plan_at(self, node: cst.CSTNode) -> SitePlan | None: ...

    def planned(self) -> Iterable[SitePlan]: ...

    def placed_by_analysis(self, node: cst.CSTNode) -> bool: ...

    def satisfies(self, case: Case, bindings: patterns.Bindings) -> bool: ...

    def aliased_candidates(self, node: cst.CSTNode, key: str) -> list[tuple[Case, cst.CSTNode]]: ...

    # --- what a hook may do ---
    def plan(
        self,
        node: cst.CSTNode,
        case: Case,
        bindings: patterns.Bindings,
        loop: LoopPlan | None = None,
        path: list[int] | None = None,
        flags: Sequence[Case] = (),
        statement: int | None = None,
    ) -> None: ...

    def defer(self, node: cst.CSTNode, case: Case) -> None: ...

    def claim(self, nodes: Iterable[cst.CSTNode]) -> None: ...

    def claim_subtree(self, node: cst.CSTNode) -> None: ...

    def declare_device_program(self) -> None: ...

    def place_on_device(self, nodes: Iterable[cst.CSTNode]) -> None: ...


class Edit(Protocol):
    """One planned site as the rewrite pass leaves it (`transform.Edit`)."""

    @property
    def case(self) -> Case: ...

    @property
    def plan(self) -> SitePlan: ...

    @property
    def original(self) -> cst.CSTNode: ...

    @property
    def updated(self) -> cst.CSTNode: ...

    @property
    def imports(self) -> ImportTracker: ...

    def render(
        self, template: cst.CSTNode, bindings: patterns.Bindings | None = None
    ) -> cst.CSTNode: ...

    def render_text(self, text: str, quote: str | None = None) -> cst.BaseExpression: ...

    def delete(self, node: cst.CSTNode) -> Any: ...  # the statement that holds the site

    def insert_after(self, code: str) -> Any: ...  # a statement after the site's

    def add_statement_after(self, statement: cst.CSTNode) -> None: ...  # the case's replacement

    def wrap_before(self, code: str) -> Any: ...  # `with code:` around what the site reads


class KnowledgeBase(Protocol):
    """The loaded KB (`kb.KnowledgeBase`), for the pre-filter words of contexts and analyses."""

    @property
    def rules(self) -> Sequence[Any]: ...

    @property
    def loops(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class CheckoutFacts:
    """What the other files of the checkout say about one file, gathered before any file is
    migrated (`rewriter/checkout_facts.py`): a file alone cannot see how its functions are
    called from the scripts that import them."""

    # module function -> its parameters another file passes a device corpus laid out in
    # columns to (salesforce's awd-lstm-lm: main.py's `get_batch(train_data, i, args)` of
    # utils.py's `get_batch(source, i, args)`)
    corpus_parameters: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # the names (`batchify`, `utils.batchify`) it calls another file's column batcher by
    batchers: frozenset[str] = frozenset()


NO_CHECKOUT_FACTS = CheckoutFacts()


@dataclass(frozen=True)
class Fact(Generic[T]):
    """A fact about one file, computed once on demand and kept by the walk: `walk.fact(F)`, or
    `walk.fact(F, key)` for one that depends on a hashable key (the callables a condition
    names). Registered in `FACTS`, so the docs list it; one file in `facts/` each."""

    name: str
    doc: str
    compute: Callable[..., T]  # (walk, *key) -> the fact
    names: bool = False  # a set of dotted names, with no key: rules may ask `named_in` of it
