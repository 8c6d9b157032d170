"""Qualified names of dotted names, the way libcst's QualifiedNameProvider gives them.

libcst's scope analysis walks and rebuilds the whole module, which costs more than parsing it.
Most files bind each imported name once and never rebind it; for those the import table gives
the same answer. The engine answers from the table, notes every name it relied on, and redoes a
file with the scope analysis when one of them turns out to be bound in another way as well.
"""

from __future__ import annotations

import builtins
from typing import Any, Protocol

import libcst as cst
from libcst.metadata import (
    ClassScope,
    FunctionScope,
    GlobalScope,
    MetadataWrapper,
    QualifiedNameSource,
    ScopeProvider,
)

from pytpu.engine.rewriter import cst_nodes, patterns

_BUILTINS = frozenset(dir(builtins))
# Names imported from under these are modules or their members (`dist.Backend.NCCL`), never a
# tensor a `$x.method()` pattern means. Other modules are known by their plain imports
# (`ModulePaths`).
MODULE_ROOTS = ("torch", "torch_xla")
Scope = tuple[int, ...]


class Resolver(patterns.NameLookup, Protocol):
    """What the analysis tells a resolver as it walks a file, and asks it."""

    scope: Scope  # the enclosing functions and classes of the node being looked at

    def record_import(self, local: str, path: str) -> None: ...

    def record_modules(self, statement: cst.Import) -> None: ...  # what it names are modules

    def record_binding(self, name: str, scope: Scope, class_body: bool = False) -> None: ...

    def record_value_alias(self, name: str, qualified: str) -> None: ...  # in `scope`

    def value_alias(self, name: str) -> str | None: ...


class PublicPaths:
    """Names torch defines in one module and exports from a shorter path (KB data: the imports
    family's `public_paths`): a name imported from the first also answers to the second."""

    def __init__(self, table: dict[str, str] | None = None) -> None:
        self.table = table or {}
        self.prefixes = tuple(f"{module}." for module in self.table)

    def add_to(self, names: set[str]) -> set[str]:
        if not self.prefixes:
            return names
        extra = set()
        for name in names:
            if name.startswith(self.prefixes):  # (rare: one C call for the common case)
                module = max((p for p in self.prefixes if name.startswith(p)), key=len)[:-1]
                extra.add(self.table[module] + name[len(module) :])
        return names | extra if extra else names


class ModulePaths:
    """The modules the file's plain imports name (`import scipy.special as sp`: scipy and
    scipy.special), whatever they are bound to: a name that stands for one is a module, never a
    value a `$x.method()` pattern means (`sp.expit(x)`, `np.unique(x)`). A name imported from a
    module (`from data import frame`) may be any value, and is not one unless a plain import
    names it too."""

    def __init__(self) -> None:
        self.paths: set[str] = set()

    def __contains__(self, path: str) -> bool:
        return path in self.paths

    def add(self, statement: cst.Import) -> None:
        for name in filter(None, (cst_nodes.dotted_name(a.name) for a in statement.names)):
            parts = name.split(".")  # (importing a.b.c imports a and a.b first)
            self.paths.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))


class ValueAliases:
    """Names bound once to a CUDA name (`Tensor = torch.cuda.FloatTensor if cuda else ...`),
    by the scope of the assignment: the module's, or a function's (the walk's scope path)."""

    def __init__(self) -> None:
        self.by_name: dict[str, dict[Scope, str]] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.by_name

    def record(self, name: str, scope: Scope, qualified: str) -> None:
        self.by_name.setdefault(name, {})[scope] = qualified

    def seen_from(self, name: str, use: Scope) -> str | None:
        """The alias a use in scope `use` sees: the innermost enclosing scope's."""
        found = self.by_name.get(name, {})
        seen = [scope for scope in found if use[: len(scope)] == scope]
        return found[max(seen, key=len)] if seen else None

    def in_scope(self, name: str, scope: Scope) -> str | None:
        return self.by_name.get(name, {}).get(scope)


class ImportTableResolver:
    """Answers from the file's imports; `consistent()` says afterwards whether that was exact."""

    def __init__(self, pattern_roots: frozenset[str], public: PublicPaths | None = None) -> None:
        self.pattern_roots = pattern_roots  # names that patterns start with (torch, os, ...)
        self.public = public or PublicPaths()
        self.imports: dict[str, set[str]] = {}  # local name -> import paths it is bound to
        # name -> the scopes (paths of enclosing function/class nodes) where it is bound by an
        # assignment, a parameter, a definition ..., each with whether it is a class's body
        self.other_bindings: dict[str, set[tuple[Scope, bool]]] = {}
        self.relied_on: set[tuple[str, Scope]] = set()  # (name, scope of the use)
        self.scope: Scope = ()  # set by the walker: where the current node is
        # `Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`, at module level or
        # in a function: uses of `Tensor` that see it are uses of the CUDA name
        self.value_aliases = ValueAliases()
        self.late_aliases: set[str] = set()
        self.asked_aliases: set[str] = set()  # names asked for before any alias of theirs
        self.binding_counts: dict[str, int] = {}
        self.modules = ModulePaths()

    def record_import(self, local: str, path: str) -> None:
        self.imports.setdefault(local, set()).add(path)

    def record_modules(self, statement: cst.Import) -> None:
        self.modules.add(statement)

    def record_binding(self, name: str, scope: Scope, class_body: bool = False) -> None:
        self.other_bindings.setdefault(name, set()).add((scope, class_body))
        self.binding_counts[name] = self.binding_counts.get(name, 0) + 1

    def record_value_alias(self, name: str, qualified: str) -> None:
        self.value_aliases.record(name, self.scope, qualified)
        if name in self.asked_aliases or any(root == name for root, _ in self.relied_on):
            # a function above the assignment used it: answered as a plain name then
            self.late_aliases.add(name)

    def value_alias(self, name: str) -> str | None:
        alias = self.value_aliases.seen_from(name, self.scope)
        if alias is None:
            self.asked_aliases.add(name)
        return alias

    def consistent(self) -> bool:
        """True when every name an answer relied on has at most one import binding and no
        other binding in a scope that encloses the use, and no alias was used above its
        assignment."""
        if self.late_aliases:
            return False
        for name, use in self.relied_on:
            paths = self.imports.get(name, set())
            if not self._may_name_a_rule_root(name, paths):
                continue  # `try: import triton ... except: triton = None`: no rule looks there
            if len(paths) > 1:
                return False
            if name in self.value_aliases and (paths or self.binding_counts.get(name) != 1):
                return False  # the alias is only exact when its assignment is the only binding
            shadowed = any(
                _sees(use, scope, class_body)
                for scope, class_body in self.other_bindings.get(name, ())
            )
            if shadowed and (paths or name in self.pattern_roots):
                return False  # e.g. `torch = None`, or a parameter called `torch`
        return True

    def _may_name_a_rule_root(self, name: str, paths: set[str]) -> bool:
        """Whether the name, whatever binding it has, may stand for something a rule looks for:
        it is a root of the rules' names (`torch`, `os`), is imported from under one, holds a
        CUDA name, or is a module a plain import names (not a value a `$x.method()` pattern
        means). Otherwise an inexact answer about it cannot change a match."""
        roots = self.pattern_roots
        return (
            name in roots
            or name in self.value_aliases
            or any(path.split(".", 1)[0] in roots or path in self.modules for path in paths)
        )

    def _path(self, node: cst.CSTNode) -> tuple[str, str | None] | None:
        dotted = cst_nodes.dotted_name(node)
        if dotted is None:
            return None
        root, _, rest = dotted.partition(".")
        self.relied_on.add((root, self.scope))
        paths = self.imports.get(root)
        if not paths:
            alias = self.value_aliases.seen_from(root, self.scope)
            if alias is not None:
                return (f"{alias}.{rest}" if rest else alias), None
            return dotted, None
        path = next(iter(paths))
        return (f"{path}.{rest}" if rest else path), path

    def qualified_names(self, node: cst.CSTNode) -> set[str]:
        found = self._path(node)
        if found is None:
            return set()
        name, imported = found
        if imported is None and name.split(".", 1)[0] in _BUILTINS:
            return {f"builtins.{name}"}
        return self.public.add_to({name})

    def is_module(self, node: cst.CSTNode) -> bool:
        if not isinstance(node, (cst.Name, cst.Attribute)):
            return False  # a call's result, a subscript, ...: a value, never a module
        found = self._path(node)
        if found is None or found[1] is None:
            return False  # not imported
        name, imported = found
        return imported.split(".")[0] in MODULE_ROOTS or name in self.modules


def _binding_scope(scope: Any, name: str) -> Any:
    """The scope whose binding of `name` a use in `scope` sees (None: none binds it); a class's
    names are seen in its body, not in its methods."""
    use = scope
    while scope is not None:
        if (scope is use or not isinstance(scope, ClassScope)) and scope.assignments[name]:
            return scope
        if isinstance(scope, GlobalScope):
            return None
        scope = scope.parent
    return None


def _sees(use: Scope, binding: Scope, class_body: bool) -> bool:
    """Whether code in scope `use` sees a name bound in scope `binding`: code inside it, unless
    that is a class's body, whose names its methods do not see (`def triton(self)` in a class
    leaves `triton` in its other methods the module's)."""
    return use == binding if class_body else use[: len(binding)] == binding


class ScopeResolver:
    """Qualified names from libcst's scope analysis (QualifiedNameProvider's own source). It
    needs nothing recorded: the scope analysis sees every binding itself."""

    def __init__(
        self,
        wrapper: MetadataWrapper,
        public: PublicPaths | None = None,
        value_aliases: ValueAliases | None = None,
    ):
        self.wrapper = wrapper
        self.public = public or PublicPaths()
        self._scopes: Any = None
        self.scope: Scope = ()
        # `Tensor = torch.cuda.FloatTensor if cuda else ...`, as in the import table; known
        # from its pass before the walk, for the uses above the assignment
        self.value_aliases = value_aliases or ValueAliases()
        self.modules = ModulePaths()

    def record_import(self, local: str, path: str) -> None:
        pass

    def record_modules(self, statement: cst.Import) -> None:
        self.modules.add(statement)

    def record_binding(self, name: str, scope: Scope, class_body: bool = False) -> None:
        pass

    def record_value_alias(self, name: str, qualified: str) -> None:
        self.value_aliases.record(name, self.scope, qualified)

    def value_alias(self, name: str) -> str | None:
        return self.value_aliases.seen_from(name, self.scope)

    @property
    def scopes(self) -> Any:
        if self._scopes is None:
            self._scopes = self.wrapper.resolve(ScopeProvider)
        return self._scopes

    def qualified(self, node: cst.CSTNode) -> set[tuple[str, QualifiedNameSource]]:
        scope = self.scopes.get(node)
        if scope is None:
            return set()
        try:
            return {(q.name, q.source) for q in scope.get_qualified_names_for(node)}
        except Exception:  # libcst cannot resolve some exotic nodes; treat as unknown
            return set()

    def qualified_names(self, node: cst.CSTNode) -> set[str]:
        found = self.qualified(node)
        if found:
            return self.public.add_to({self._through_alias(node, name) for name, _ in found})
        # An unbound root (a fragment without its imports): take the spelling literally.
        root = cst_nodes.chain_root(node)
        if isinstance(root, cst.Name) and not self._is_bound(root):
            literal = cst_nodes.dotted_name(node)
            return {literal} if literal else set()
        return set()

    def _through_alias(self, node: cst.CSTNode, name: str) -> str:
        """`Tensor` (or `Tensor.x`) where it is the `Tensor` of the module or of a function,
        bound there once, to a CUDA name: that name. The scope analysis calls it `Tensor` (or
        `train.<locals>.Tensor`); the alias is only exact when that one assignment is the only
        binding the use sees."""
        root = cst_nodes.chain_root(node)
        if type(root) is not cst.Name or root.value not in self.value_aliases:
            return name
        scope = self.scopes.get(root)
        if scope is None:
            return name
        bound = _binding_scope(scope, root.value)
        if bound is None or len(bound.assignments[root.value]) != 1:
            return name
        path = () if isinstance(bound, GlobalScope) else self._scope_path(bound)
        alias = self.value_aliases.in_scope(root.value, path) if path is not None else None
        dotted = cst_nodes.dotted_name(node)
        if alias is None or dotted is None:
            return name
        _, _, rest = dotted.partition(".")  # (`Tensor.x`: the alias's own attribute)
        return f"{alias}.{rest}" if rest else alias

    def _scope_path(self, scope: Any) -> Scope | None:
        """The walk's scope path (ids of the enclosing functions and classes) of a function's
        scope, or None for another kind (a class's, a comprehension's)."""
        if not isinstance(scope, FunctionScope):
            return None
        path = []
        while not isinstance(scope, GlobalScope):
            if isinstance(scope, (FunctionScope, ClassScope)):
                path.append(id(scope.node))
            scope = scope.parent
        return tuple(reversed(path))

    def _is_bound(self, name: cst.Name) -> bool:
        scope = self.scopes.get(name)
        return scope is not None and name.value in scope

    def is_module(self, node: cst.CSTNode) -> bool:
        if not isinstance(node, (cst.Name, cst.Attribute)):
            return False  # a call's result, a subscript, ...: a value, never a module
        for name, source in self.qualified(node):
            if source is QualifiedNameSource.IMPORT and (
                name.split(".")[0] in MODULE_ROOTS or name in self.modules
            ):
                return True
        return False
