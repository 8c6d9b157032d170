"""The rule vocabulary: every word a KB rule may use that is not Python code.

Five registries, one per part of a rule: match kinds (`match: {namespace: [...]}`), conditions
(`where:`), contexts (`context:`), actions (`action:`) and the engine's built-in analyses
(`match: {engine: ...}`). Each entry is one registered object with its name, its description
for the docs, its implementation and, where it has one, its pre-filter words. The schema's enums
(`kb/schema.json`) and the vocabulary section of `docs/kb.md` are generated from them.

Adding an entry is one Python file in the matching sub-package (`conditions/`, `contexts/`,
`matches/`, `actions/`, `analyses/`) that calls the registry's `register`: every module there is
imported when the vocabulary is first used.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    import libcst as cst

    from pytpu.engine.rewriter.analysis import FileAnalysis
    from pytpu.engine.rewriter.kb import KnowledgeBase, RuleCase
    from pytpu.engine.rewriter.transform import Edit


@dataclass(frozen=True)
class Condition:
    """`where: {$x: NAME}` or `where: {$x: {NAME: parameter}}`: a test of what a wildcard bound."""

    name: str
    doc: str
    # (the bound node, or the arguments a `$*rest` bound; the parameter; the walk, for the KB)
    check: Callable[[Any, Any, FileAnalysis], bool]
    parameter: dict[str, Any] | None = None  # JSON schema of the parameter; None: none taken
    describe: Callable[[Any], str] | None = None  # the condition in words, on a rule's page
    on_arguments: bool = False  # tests the arguments a `$*rest` wildcard bound
    # pre-filter: alternatives of words a file must contain for the condition to hold there
    words: Callable[[Any], set[frozenset[str]]] | None = None


@dataclass(frozen=True)
class Context:
    """`context: NAME`: where in the program a case applies."""

    name: str
    doc: str
    holds: Callable[[FileAnalysis], bool]
    # pre-filter: alternatives of words a file must contain for the context to hold anywhere
    words: Callable[[KnowledgeBase], set[frozenset[str]]] | None = None


@dataclass(frozen=True)
class MatchKind:
    """`match: {NAME: ...}`: a kind of site that is not a code pattern.

    `offered` says which nodes the walk offers it: node types, or marks the walk puts on nodes
    in known positions ("device": a device argument, "host": a load location, "device_index":
    `.to(rank)`). `match` plans the node and returns True when it claimed it.
    """

    name: str
    doc: str
    properties: dict[str, Any] | Callable[[], dict[str, Any]]  # JSON schema of the mapping's keys
    describe: Callable[[dict[str, Any]], str]
    words: Callable[[RuleCase], frozenset[str]]
    match: Callable[[FileAnalysis, cst.CSTNode, list[RuleCase]], bool] | None = None
    node_types: tuple[type, ...] = ()
    marks: tuple[str, ...] = ()
    rewrite: Callable[[Edit], Any] | None = None  # None: the case's replace / action
    finding_kind: Callable[[RuleCase, cst.CSTNode], str | None] | None = None
    order: int = 50  # kinds offered the same node are tried in this order
    roots: Callable[[RuleCase], set[str]] = lambda case: set()  # names the resolver must know
    values_of: Callable[[dict[str, Any]], tuple[str, ...]] = lambda match: ()
    # The only values a bare Name it matches can have, given its cases (a name bound by an import
    # or to a CUDA namespace is offered whatever it is); None: any Name. Names are half of all
    # nodes: the walk offers a Name only when some kind may take it.
    bare_names: Callable[[tuple[RuleCase, ...]], frozenset[str]] | None = None

    def schema_properties(self) -> dict[str, Any]:
        return self.properties() if callable(self.properties) else self.properties


@dataclass(frozen=True)
class Action:
    """`action: NAME` or `action: {NAME: value}`: what a case does at its site."""

    name: str
    doc: str
    parameter: dict[str, Any] | None  # JSON schema of its value; None: a word on its own
    describe: Callable[[Any], str]
    apply: Callable[[Edit, Any, Any], Any] | None = None  # (edit, node, value) -> new node
    claims: Callable[[cst.CSTNode, Any], list[cst.CSTNode]] | None = None  # replaced whole
    order: int = 50  # several keys of one action mapping apply in this order
    at_module_top: bool = False  # nothing changes at the site: a statement after the imports
    statement_only: bool = False  # only a statement can take it (a value is flagged instead)
    removes_names: bool = False  # the matched names are gone from the code
    shows_code: bool = False  # its value is code: the docs show it as a code block


@dataclass(frozen=True)
class BuiltinAnalysis:
    """`match: {engine: NAME}`: behaviour built into the engine; the rule's examples test it."""

    name: str
    doc: str
    words: Callable[[KnowledgeBase], set[frozenset[str]]] = lambda kb: set()
    takes_loop: Callable[[Any], bool] | None = None  # the loop plans it carries out
    before_walk: Callable[[FileAnalysis, RuleCase], None] | None = None
    after_walk: Callable[[FileAnalysis, RuleCase], None] | None = None
    on_enter: Callable[[Edit], None] | None = None  # the rewrite pass reaches its site
    rewrite: Callable[[Edit], Any] | None = None


E = TypeVar("E")


@dataclass
class Registry(Generic[E]):
    """Entries of one part of the vocabulary, by name."""

    title: str
    package: str
    doc: str
    entries: dict[str, E] = field(default_factory=dict)

    def register(self, entry: E) -> E:
        name = entry.name  # type: ignore[attr-defined]
        if name in self.entries:
            raise ValueError(f"{self.title}: {name!r} is registered twice")
        self.entries[name] = entry
        return entry

    def get(self, name: str) -> E | None:
        load()
        return self.entries.get(name)

    def __getitem__(self, name: str) -> E:
        load()
        return self.entries[name]

    def __iter__(self) -> Iterator[E]:
        load()
        return iter(sorted(self.entries.values(), key=_order))

    def names(self) -> list[str]:
        return [e.name for e in self]  # type: ignore[attr-defined]


def _order(entry: Any) -> tuple[int, str]:
    return getattr(entry, "order", 50), entry.name


CONDITIONS: Registry[Condition] = Registry(
    "Conditions", "conditions", "What a `where:` entry may ask of the code a wildcard bound."
)
CONTEXTS: Registry[Context] = Registry(
    "Contexts", "contexts", "Where in the program a case applies (`context:`)."
)
MATCH_KINDS: Registry[MatchKind] = Registry(
    "Match kinds",
    "matches",
    "Sites that are not a code pattern (`match: {kind: ...}`). A string (or a list of them) "
    "under `match:` is a code pattern with `$name` wildcards.",
)
ACTIONS: Registry[Action] = Registry(
    "Actions", "actions", "What a case does instead of (or besides) a `replace:` template."
)
ANALYSES: Registry[BuiltinAnalysis] = Registry(
    "Built-in analyses",
    "analyses",
    "Behaviour built into the engine, named by a rule as `match: {engine: name}`; the rule "
    "carries its diagnostic, its replacement (where it has one) and examples that test it.",
)
REGISTRIES = (MATCH_KINDS, CONDITIONS, CONTEXTS, ACTIONS, ANALYSES)
_loaded = False


def load() -> None:
    """Import every module of the sub-packages: each registers its entries."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for registry in REGISTRIES:
        package = importlib.import_module(f"{__name__}.{registry.package}")
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{module.name}")
