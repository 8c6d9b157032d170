"""`corpus_slicers`: the module's functions that take a corpus laid out in columns on the device
(the fact `column_batchers`) as a parameter, and that parameter's name (pytorch/examples'
word_language_model: `get_batch(source, i)` called as `get_batch(train_data, i)`)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

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


@dataclass
class Followed:
    """Where a module's corpora go: its functions (by node id) with the parameters that receive
    one, and the calls of other modules' functions that pass one (`Callee`, position)."""

    local: dict[int, frozenset[str]]
    passed_out: set[tuple[Hashable, int]]


def follow(
    module: cst.Module,
    is_batcher: Callable[[cst.BaseExpression], bool],
    seeds: Mapping[str, frozenset[str]] | None = None,
    callee: Callable[[cst.BaseExpression], Hashable | None] | None = None,
) -> Followed:
    """Follow the corpora of `module`: the names assigned a call of a batcher (`is_batcher` on
    the called expression), and `seeds`' parameters (module functions by name: parameters that
    another module passes a corpus to), through the calls that pass them on. `callee` names
    a function of another module a call reaches (an import), or None."""
    scopes = _Scopes(module)
    corpora = {  # (binding scope, name)
        (scope, name)
        for scope, nodes in enumerate(scopes.nodes)
        for n in nodes
        if type(n) is cst.Assign
        and len(n.targets) == 1
        and type(n.value) is cst.Call
        and is_batcher(n.value.func)
        and type(n.targets[0].target) is cst.Name
        and (name := n.targets[0].target.value)
    }
    found: set[tuple[int, str]] = set()
    for name, parameters in (seeds or {}).items():
        function = scopes.functions.get((0, name))
        for parameter in parameters if function is not None else ():
            found.add((id(function), parameter))
            corpora.add((scopes.scope_of[id(function)], parameter))
    calls = [
        (scope, n)
        for scope, nodes in enumerate(scopes.nodes)
        for n in nodes
        if type(n) is cst.Call and type(n.func) in (cst.Name, cst.Attribute)
    ]
    passed_out: set[tuple[Hashable, int]] = set()
    while True:  # a parameter that receives a corpus passes it on (`evaluate(val_data)`)
        before = len(found)
        for scope, call in calls:
            function = (
                scopes.function(scope, call.func.value) if type(call.func) is cst.Name else None
            )
            other = None if function is not None or callee is None else callee(call.func)
            if function is None and other is None:
                continue
            parameters = _positional_names(function) if function is not None else None
            for position, argument in enumerate(call.args):
                if argument.keyword is not None or argument.star:
                    break
                if parameters is not None and position >= len(parameters):
                    break
                value = argument.value
                if type(value) is not cst.Name:
                    continue
                if (scopes.binder(scope, value.value), value.value) not in corpora:
                    continue
                if function is None:
                    passed_out.add((other, position))
                    continue
                found.add((id(function), parameters[position]))
                corpora.add((scopes.scope_of[id(function)], parameters[position]))
        if len(found) == before:
            break
    local: dict[int, set[str]] = {}
    for function_id, parameter in found:
        local.setdefault(function_id, set()).add(parameter)
    return Followed({f: frozenset(names) for f, names in local.items()}, passed_out)


def positional_names(module: cst.Module, function: str) -> list[str] | None:
    """The positional parameters of `module`'s function `function` (None: it has none such)."""
    found = _Scopes(module).functions.get((0, function))
    return None if found is None else _positional_names(found)


@fact(
    "corpus_slicers",
    "the functions (by their node's `id`) that are passed a corpus laid out in columns on the "
    "device (what a `column_batchers` function returned, directly or through another such "
    "parameter, in this file or, for a module function, in another file of the checkout), each "
    "with the positional parameters that receive it; a bare name is followed by Python's "
    "scoping rules",
)
def corpus_slicers(walk: Walk) -> Mapping[int, frozenset[str]]:
    batchers = walk.fact(column_batchers)
    seeds = walk.checkout.corpus_parameters
    module = walk.module
    if not (batchers or seeds) or module is None:
        return {}
    return follow(module, lambda func: cst_nodes.dotted_name(func) in batchers, seeds).local
