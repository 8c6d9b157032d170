"""The rule vocabulary: every word a KB rule may use that is not Python code.

Five registries, one per part of a rule: match kinds (`match: {namespace: [...]}`), conditions
(`where:`), contexts (`context:`), actions (`action:`) and the engine's built-in analyses
(`match: {engine: ...}`). Each entry is one registered object with its name, its description
for the docs, its implementation and, where it has one, its pre-filter words. The schema's enums
(`kb/schema.json`) and the vocabulary section of `docs/kb.md` are generated from them. Two more
registries serve the entries: the position marks the walk puts on nodes before it reaches them
(`marks/`, `PositionMark`: a device argument, a load location), offered to match kinds, and the
per-file facts the entries share (`facts/`, `contract.Fact`). A fact is read by entries, not by
rules: a rule that depends on one uses a context or condition that reads it.

Adding an entry is one Python file in the matching sub-package (`conditions/`, `contexts/`,
`matches/`, `actions/`, `analyses/`, `marks/`, `facts/`) that calls the registry's `register`:
every module there is imported when the vocabulary is first used. Its hooks receive the protocols of
`contract.py` (a `Walk`, an `Edit`, a `Case`) and nothing else; `register` checks each hook's
parameters against the call the engine makes.
"""

from __future__ import annotations

import collections.abc
import functools
import importlib
import inspect
import pkgutil
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any, Generic, TypeVar

import libcst as cst

from pytpu.engine.rewriter.vocabulary.contract import Case, Edit, Fact, KnowledgeBase, Walk


@dataclass(frozen=True)
class Condition:
    """`where: {$x: NAME}` or `where: {$x: {NAME: parameter}}`: a test of what a wildcard bound."""

    name: str
    doc: str
    # (the bound node, or the arguments a `$*rest` bound; the parameter; the walk, for the KB)
    check: Callable[[Any, Any, Walk], bool]
    # JSON schema of the parameter (or what makes it, once the vocabulary is loaded); None: none
    parameter: dict[str, Any] | Callable[[], dict[str, Any]] | None = None
    describe: Callable[[Any], str] | None = None  # the condition in words, on a rule's page
    on_arguments: bool = False  # tests the arguments a `$*rest` wildcard bound
    # pre-filter: alternatives of words a file must contain for the condition to hold there
    words: Callable[[Any], set[frozenset[str]]] | None = None

    def parameter_schema(self) -> dict[str, Any] | None:
        return self.parameter() if callable(self.parameter) else self.parameter


@dataclass(frozen=True)
class Context:
    """`context: NAME`: where in the program a case applies."""

    name: str
    doc: str
    holds: Callable[[Walk], bool]
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
    words: Callable[[Case], frozenset[str]]
    match: Callable[[Walk, cst.CSTNode, list[Case]], bool] | None = None
    node_types: tuple[type, ...] = ()
    marks: tuple[str, ...] = ()
    marks_of: Callable[[Case], tuple[str, ...]] | None = None  # marks a case names itself
    rewrite: Callable[[Edit], Any] | None = None  # None: the case's replace / action
    finding_kind: Callable[[Case, cst.CSTNode], str | None] | None = None
    order: int = 50  # kinds offered the same node are tried in this order
    roots: Callable[[Case], set[str]] = lambda case: set()  # names the resolver must know
    values_of: Callable[[dict[str, Any]], tuple[str, ...]] = lambda match: ()
    # The only values a bare Name it matches can have, given its cases (a name bound by an import
    # or to a CUDA namespace is offered whatever it is); None: any Name. Names are half of all
    # nodes: the walk offers a Name only when some kind may take it.
    bare_names: Callable[[tuple[Case, ...]], frozenset[str]] | None = None

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
    # the site's own code stays (a statement is added beside it or inside it): rules may still
    # rewrite what the pattern covers (`x.to(d, non_blocking=True)` in a matched statement)
    keeps_site: bool = False
    statement_only: bool = False  # only a statement can take it (a value is flagged instead)
    removes_names: bool = False  # the matched names are gone from the code
    shows_code: bool = False  # its value is code: the docs show it as a code block


@dataclass(frozen=True)
class BuiltinAnalysis:
    """`match: {engine: NAME}`: behaviour built into the engine; the rule's examples test it."""

    name: str
    doc: str
    words: Callable[[KnowledgeBase], set[frozenset[str]]] = lambda kb: set()
    # the analyses whose `after_walk` must run before this one's (what they plan, it sees)
    after: tuple[str, ...] = ()
    takes_loop: Callable[[Any], bool] | None = None  # the loop plans it carries out
    before_walk: Callable[[Walk, Case], None] | None = None
    after_walk: Callable[[Walk, Case], None] | None = None
    on_enter: Callable[[Edit], None] | None = None  # the rewrite pass reaches its site
    rewrite: Callable[[Edit], Any] | None = None


@dataclass(frozen=True)
class PositionMark:
    """A position the walk marks nodes in (`MatchKind.marks`): at each node of `node_types`,
    before its children are walked, `find` gives the nodes in that position (a device argument,
    a load location); the match kinds offered the mark are tried on them."""

    name: str
    doc: str
    node_types: tuple[type, ...]
    find: Callable[[Walk, cst.CSTNode], list[cst.CSTNode]]
    order: int = 50  # a node in several positions carries its marks in this order
    words: frozenset[str] = frozenset()  # pre-filter: what a file with such a position contains


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
        problems = hook_problems(entry)
        if problems:
            raise TypeError(f"{self.title}: {name!r}: " + "; ".join(problems))
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


def hook_problems(entry: Any) -> list[str]:
    """How the entry's hooks do not fit the calls the engine makes (a hook: each field typed
    `Callable[[...], ...]`): one that cannot take the call's arguments, or, for a function
    defined with `def`, a parameter without a type (a lambda takes the field's types)."""
    problems = []
    for name, expected in _hooks_of(type(entry)):
        value = getattr(entry, name)
        if not callable(value):
            continue
        signature = inspect.signature(value)
        where = f"`{name}` ({getattr(value, '__qualname__', value)}{signature})"
        try:
            if expected and expected[-1] is Ellipsis:  # (a fact: the walk, then its key if any)
                signature.bind_partial(*[None] * (len(expected) - 1))
                expected = expected[:-1]
            else:
                signature.bind(*[None] * len(expected))
        except TypeError:
            called = ", ".join(getattr(t, "__name__", str(t)) for t in expected)
            problems.append(f"{where} cannot take the engine's call ({called})")
            continue
        if getattr(value, "__name__", "") != "<lambda>":
            untyped = [
                p.name
                for p in signature.parameters.values()
                if p.annotation is inspect.Parameter.empty
            ]
            if untyped:
                problems.append(f"{where}: parameters without a type: {', '.join(untyped)}")
    return problems


@functools.cache
def _hooks_of(entry_type: type) -> tuple[tuple[str, list[Any]], ...]:
    """An entry type's hook fields and the parameter types the engine calls each with (the
    annotations resolved once per type: every process start registers every entry)."""
    hints = typing.get_type_hints(entry_type)
    found = ((f.name, _parameters_of(hints[f.name])) for f in fields(entry_type))
    return tuple((name, expected) for name, expected in found if expected is not None)


def _parameters_of(hint: Any) -> list[Any] | None:
    """The parameter types of a field typed as a callable (in a union too); None: not a hook."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        found = (_parameters_of(arg) for arg in typing.get_args(hint))
        return next((p for p in found if p is not None), None)
    if origin is collections.abc.Callable:
        parameters = typing.get_args(hint)[0]
        return [Walk, Ellipsis] if parameters is Ellipsis else list(parameters)
    return None


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
MARKS: Registry[PositionMark] = Registry(
    "Position marks",
    "marks",
    "Positions the walk marks nodes in before it reaches them, for the match kinds that are "
    "offered a mark rather than a node type (`marks=` of a match kind).",
)
FACTS: Registry[Fact[Any]] = Registry(
    "Per-file facts",
    "facts",
    "What the entries know of a whole file, computed once per file when a hook first asks "
    "(`walk.fact(F)`) and kept by the walk: the entries' shared scratch space.",
)
T = TypeVar("T")


def fact(name: str, doc: str, names: bool = False) -> Callable[[Callable[..., T]], Fact[T]]:
    """`@fact(NAME, DOC)` on the function that computes a per-file fact (from the walk, and a
    key if it takes one) registers it; the name it decorates is the `Fact` hooks ask for. With
    `names`, it is a set of dotted names that rules may ask about (`named_in`)."""

    def register(compute: Callable[..., T]) -> Fact[T]:
        return FACTS.register(Fact(name=name, doc=doc, compute=compute, names=names))

    return register


# The words a rule may use (the schema's enums come from these), and every registry.
# JSON schema of a parameter that lists dotted names (`[torch.device, torch_xla.device]`)
DOTTED_LIST = {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/dotted"}}

WORDS = (MATCH_KINDS, CONDITIONS, CONTEXTS, ACTIONS, ANALYSES)
REGISTRIES = (*WORDS, MARKS, FACTS)
_loaded = False


def load() -> None:
    """Import every module of the sub-packages: each registers its entries."""
    global _loaded
    if _loaded:
        return
    _loaded = True  # (first: an entry's module may use a registry while it loads)
    try:
        for registry in REGISTRIES:
            package = importlib.import_module(f"{__name__}.{registry.package}")
            for module in pkgutil.iter_modules(package.__path__):
                importlib.import_module(f"{package.__name__}.{module.name}")
    except BaseException:
        _loaded = False  # a vocabulary loaded in part is never used: the next use fails again
        raise
