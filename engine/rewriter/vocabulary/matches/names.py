"""Names by what they refer to: CUDA-only namespaces, imports, renamed modules."""

from __future__ import annotations

from functools import cache

import libcst as cst

from pytpu.engine.rewriter import cst_nodes, patterns
from pytpu.engine.rewriter.findings import UNKNOWN
from pytpu.engine.rewriter.vocabulary import DOTTED_LIST, MATCH_KINDS, MatchKind
from pytpu.engine.rewriter.vocabulary.contract import Case, Walk


def _under(name: str, root: str) -> bool:
    return name == root or name.startswith(root + ".")


def _chain(node: cst.CSTNode) -> list[cst.CSTNode]:
    out = [node]
    while isinstance(node, cst.Attribute):
        node = node.value
        out.append(node)
    return out


def _words(case: Case) -> frozenset[str]:
    return frozenset(part for name in case.names for part in name.split(".") if part)


@cache
def _namespaces(cases: tuple) -> tuple[dict, frozenset[str]]:
    roots = {name: case for case in cases for name in case.names}
    return roots, frozenset(n.split(".")[-1] for n in roots)


def _names_a_namespace(node: cst.CSTNode, words: frozenset[str], aliases: set[str]) -> bool:
    """Cheaply (no strings built): a component of the chain is a namespace's last word, or its
    root is a local alias of a namespace (`import torch.cuda as tc`)."""
    while type(node) is cst.Attribute:
        if node.attr.value in words:
            return True
        node = node.value
    return type(node) is cst.Name and (node.value in words or node.value in aliases)


def _namespace(walk: Walk, node: cst.Attribute | cst.Name, cases: list[Case]) -> bool:
    roots, last_words = _namespaces(cases)
    if not _names_a_namespace(node, last_words, walk.namespace_aliases):
        return False
    if cst_nodes.dotted_name(node) is None:
        return False
    for name in walk.resolver.qualified_names(node):
        for root, case in roots.items():
            if _under(name, root):
                walk.plan(node, case, patterns.Bindings())
                walk.claim(_chain(node))
                return True
    return False


def _imported_modules(node: cst.Import | cst.ImportFrom) -> list[str]:
    if isinstance(node, cst.Import):
        return [cst_nodes.dotted_name(a.name) or "" for a in node.names]
    if node.module is None or node.relative:
        return []
    base = cst_nodes.dotted_name(node.module) or ""
    if isinstance(node.names, cst.ImportStar):
        return [base]
    return [base, *(f"{base}.{cst_nodes.dotted_name(a.name)}" for a in node.names)]


def _import(walk: Walk, node: cst.Import | cst.ImportFrom, cases: list[Case]) -> bool:
    modules = _imported_modules(node)
    for case in cases:
        if any(_under(m, n) for m in modules for n in case.names) and walk.satisfies(
            case, patterns.Bindings()
        ):
            walk.plan(node, case, patterns.Bindings())
            return True
    return False


def _module(walk: Walk, node: cst.CSTNode, cases: list[Case]) -> bool:
    """An import of a renamed module, or `torch_xla.experimental.xla_sharding.Mesh` spelled out
    in full after a plain import."""
    if type(node) is not cst.Attribute:
        modules = _imported_modules(node)
        for case in cases:
            if any(_under(m, case.names[0]) for m in modules):
                walk.plan(node, case, patterns.Bindings())
                return True
        return False
    text = cst_nodes.dotted_name(node)
    if text is None:
        return False
    for case in cases:
        old = case.names[0]
        if _under(text, old):
            if any(_under(q, old) for q in walk.resolver.qualified_names(node)):
                walk.plan(node, case, patterns.Bindings())
                walk.claim(_chain(node))
                return True
    return False


def _listed(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


MATCH_KINDS.register(
    MatchKind(
        name="namespace",
        doc="any use of a name under one of the listed namespaces (a CUDA-only API with no "
        "rewrite: its sites count as unknown)",
        properties={"namespace": DOTTED_LIST},
        describe=lambda m: f"Any use of {_listed(m['namespace'])} or a name under it.",
        words=_words,
        match=_namespace,
        node_types=(cst.Attribute, cst.Name),
        finding_kind=lambda case, node: UNKNOWN,
        order=40,
        roots=lambda case: {name.split(".")[0] for name in case.names},
        bare_names=lambda cases: _namespaces(cases)[1],
    )
)
MATCH_KINDS.register(
    MatchKind(
        name="import",
        doc="an import of one of the listed modules or of something inside them",
        properties={"import": DOTTED_LIST},
        describe=lambda m: f"An import of {_listed(m['import'])} or one of its submodules.",
        words=_words,
        match=_import,
        node_types=(cst.Import, cst.ImportFrom),
        order=31,
    )
)
MATCH_KINDS.register(
    MatchKind(
        name="module",
        doc="an import of, or a reference to, a module that was renamed (with the "
        "`rename_module` action)",
        properties={"module": {"$ref": "#/$defs/dotted"}},
        describe=lambda m: f"An import of, or a reference to, the module {_listed([m['module']])}.",
        words=_words,
        match=_module,
        node_types=(cst.Attribute, cst.Import, cst.ImportFrom),
        order=30,
    )
)
