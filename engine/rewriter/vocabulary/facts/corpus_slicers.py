"""`corpus_slicers`: the module's functions that take a corpus laid out in columns on the device
(the fact `column_batchers`) as a parameter, and that parameter's name (pytorch/examples'
word_language_model: `get_batch(source, i)` called as `get_batch(train_data, i)`)."""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.vocabulary import fact
from pytpu.engine.rewriter.vocabulary.contract import Walk
from pytpu.engine.rewriter.vocabulary.facts.column_batchers import column_batchers


def _positional_names(function: cst.FunctionDef) -> list[str]:
    parameters = function.params
    return [p.name.value for p in (*parameters.posonly_params, *parameters.params)]


class _Scopes:
    """The module's scopes, by lexical nesting: the module's own statements (scope 0), each
    function's body and each class body (a function under an `if` or a `try` is in its
    enclosing scope), with the names each binds: Python's rules for a bare name."""

    def __init__(self, module: cst.Module):
        self.parent: list[int] = [0]
        self.nodes: list[list[cst.CSTNode]] = [[]]
        self.bound: list[set[str]] = [set()]  # the names each scope binds
        self.is_class: list[bool] = [False]
        self.functions: dict[tuple[int, str], cst.FunctionDef] = {}
        self.scope_of: dict[int, int] = {}  # id(function) -> its body's scope
        stack: list[tuple[cst.CSTNode, int]] = [(child, 0) for child in module.children]
        while stack:
            node, scope = stack.pop()
            if type(node) is cst.ClassDef:  # its names are not seen by the functions in it
                inner = self._open(scope, set(), is_class=True)
                stack.extend((child, inner) for child in node.body.children)
                continue
            if type(node) is cst.FunctionDef:
                inner = self._open(scope, set(_positional_names(node)))
                self.functions[scope, node.name.value] = node
                self.bound[scope].add(node.name.value)
                self.scope_of[id(node)] = inner
                stack.extend((child, inner) for child in node.body.children)
                continue
            if type(node) is cst.Assign:
                for target in node.targets:
                    if type(target.target) is cst.Name:
                        self.bound[scope].add(target.target.value)
            self.nodes[scope].append(node)
            stack.extend((child, scope) for child in node.children)

    def _open(self, parent: int, bound: set[str], is_class: bool = False) -> int:
        self.parent.append(parent)
        self.nodes.append([])
        self.bound.append(bound)
        self.is_class.append(is_class)
        return len(self.parent) - 1

    def binder(self, scope: int, name: str) -> int | None:
        """The scope whose binding of `name` a use in `scope` reads (None: a global elsewhere):
        its own, else the enclosing functions' and the module's (a class's only from itself)."""
        start = scope
        while True:
            if name in self.bound[scope] and (scope == start or not self.is_class[scope]):
                return scope
            if scope == 0:
                return None
            scope = self.parent[scope]

    def function(self, scope: int, name: str) -> cst.FunctionDef | None:
        found = self.binder(scope, name)
        return None if found is None else self.functions.get((found, name))


@fact(
    "corpus_slicers",
    "the functions (by their node's `id`) that are passed a corpus laid out in columns on the "
    "device (what a `column_batchers` function returned, directly or through another such "
    "parameter), each with the positional parameters that receive it; a bare name is followed "
    "by Python's scoping rules",
)
def corpus_slicers(walk: Walk) -> Mapping[int, frozenset[str]]:
    batchers = walk.fact(column_batchers)
    module = walk.module
    if not batchers or module is None:
        return {}
    scopes = _Scopes(module)
    corpora = {  # (binding scope, name)
        (scope, name)
        for scope, nodes in enumerate(scopes.nodes)
        for n in nodes
        if type(n) is cst.Assign
        and len(n.targets) == 1
        and type(n.value) is cst.Call
        and cst_nodes.dotted_name(n.value.func) in batchers
        and type(n.targets[0].target) is cst.Name
        and (name := n.targets[0].target.value)
    }
    calls = [
        (scope, n, function)
        for scope, nodes in enumerate(scopes.nodes)
        for n in nodes
        if type(n) is cst.Call
        and type(n.func) is cst.Name
        and (function := scopes.function(scope, n.func.value)) is not None
    ]
    found: set[tuple[int, str]] = set()
    while True:  # a parameter that receives a corpus passes it on (`evaluate(val_data)`)
        before = len(found)
        for scope, call, function in calls:
            parameters = _positional_names(function)
            for position, argument in enumerate(call.args):
                if argument.keyword is not None or argument.star or position >= len(parameters):
                    break
                value = argument.value
                if type(value) is not cst.Name:
                    continue
                if (scopes.binder(scope, value.value), value.value) in corpora:
                    found.add((id(function), parameters[position]))
                    corpora.add((scopes.scope_of[id(function)], parameters[position]))
        if len(found) == before:
            sliced: dict[int, set[str]] = {}
            for function_id, parameter in found:
                sliced.setdefault(function_id, set()).add(parameter)
            return {function_id: frozenset(names) for function_id, names in sliced.items()}
