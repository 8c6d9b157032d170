"""Pass 1: find every site a rule applies to, without changing anything.

The walk reads the tree's fields directly (no libcst visitor, which would rebuild every node),
top-down, so an outer match such as the whole `'cuda' if torch.cuda.is_available() else 'cpu'`
claims the nodes inside it before they are looked at. It records, for each site, the plan the
rewrite pass carries out, and the path to it, so that pass only walks where there is work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import libcst as cst

from pytpu.engine import devices, patterns
from pytpu.engine.compiled import CompiledKB
from pytpu.engine.findings import CONVERTED, FLAGGED, NOTED, UNKNOWN, Finding, short_code
from pytpu.engine.imports import ImportTracker, bound_paths
from pytpu.engine.kb import Case

# Fields whose names are not uses of a name: `x.attr`, `f(keyword=...)`.
_NOT_USES = frozenset({"attr", "keyword"})
# Nodes that open a scope for the names bound inside them.
_SCOPES = frozenset({cst.FunctionDef, cst.Lambda, cst.ClassDef})


@dataclass
class Plan:
    case: Case
    bindings: patterns.Bindings
    finding: Finding


class Analysis:
    def __init__(self, compiled: CompiledKB, resolver: patterns.Resolver, imports: ImportTracker):
        self.compiled = compiled
        self.positions = compiled.positions
        self.resolver = resolver
        self.imports = imports
        self.plans: dict[int, Plan] = {}
        self.on_path: set[int] = set()  # ancestors of planned nodes: the rewrite pass visits these
        self.claimed: set[int] = set()
        self.device_nodes: set[int] = set()
        self.statement_values: set[int] = set()  # expressions that are whole statements
        self.path: list[cst.CSTNode] = []
        self.rank_guards: list[bool] = []  # for each enclosing `if`: is its test about the rank?
        self._handlers = self._handler_table()
        self.namespace_aliases: set[str] = set()  # local names bound to a CUDA-only namespace
        self.top_index = 0  # index of the top-level statement being walked
        self.scope: tuple[int, ...] = ()  # enclosing functions, lambdas and classes
        # index of the first top-level statement with a plan (other than an import's own)
        self.first_site: int | None = None

    def run(self, module: cst.Module) -> Analysis:
        self.path.append(module)
        for index, statement in enumerate(module.body):
            self.top_index = index
            self._visit(statement)
        self.path.pop()
        return self

    def _visit(self, node: cst.CSTNode) -> None:
        # Types are compared with `is`: libcst's node classes are ABCs, and isinstance on them
        # is the slowest thing a walk over every node can do.
        kind = type(node)
        if kind is cst.Import or kind is cst.ImportFrom:
            self._record_import(node)
            self._match_import(node)
            return  # handled whole
        handler = self._handlers.get(kind)
        if handler is not None:
            handler(node)
        if id(node) not in self.claimed:
            self._match(node, kind)
        self.path.append(node)
        opens_scope = kind in _SCOPES
        if opens_scope:
            self._set_scope((*self.scope, id(node)))
        for name, child in _children(node):
            if name not in _NOT_USES:
                self._visit(child)
        if opens_scope:
            self._set_scope(self.scope[:-1])
        self.path.pop()
        if kind is cst.If:
            self.rank_guards.pop()

    def _set_scope(self, scope: tuple[int, ...]) -> None:
        self.scope = scope
        if hasattr(self.resolver, "scope"):
            self.resolver.scope = scope

    # --- bookkeeping: what each kind of node tells about names and devices -------------------

    def _handler_table(self) -> dict[type, Callable[[Any], None]]:
        return {
            cst.FunctionDef: lambda n: self._bind(n.name),
            cst.ClassDef: lambda n: self._bind(n.name),
            cst.Call: self._mark_call_positions,
            cst.Assign: self._on_assign,
            cst.AnnAssign: lambda n: self._bind(n.target),
            cst.AugAssign: lambda n: self._bind(n.target),
            cst.For: lambda n: self._bind(n.target),
            cst.CompFor: lambda n: self._bind(n.target),
            cst.AsName: lambda n: self._bind(n.name),
            cst.NamedExpr: lambda n: self._bind(n.target),
            cst.Param: self._on_param,
            cst.Global: self._on_global,
            cst.Nonlocal: self._on_global,
            cst.DictElement: self._on_dict_element,
            cst.Name: self._on_name,
            cst.Expr: self._on_expr,
            cst.If: self._on_if,
        }

    def _on_assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._mark_assignment(target.target, node.value)

    def _on_param(self, node: cst.Param) -> None:
        self._bind(node.name)
        if node.default is not None and self.positions.is_device_name(node.name.value):
            self._mark_device(node.default)

    def _on_global(self, node: cst.Global | cst.Nonlocal) -> None:
        for item in node.names:
            self._bind(item.name, scope=())  # it binds the outer name

    def _on_dict_element(self, node: cst.DictElement) -> None:
        key = node.key
        if type(key) is cst.SimpleString and self.positions.is_device_name(
            str(key.evaluated_value)
        ):
            self._mark_device(node.value)

    def _on_name(self, node: cst.Name) -> None:
        self.imports.uses[node.value] += 1

    def _on_expr(self, node: cst.Expr) -> None:
        self.statement_values.add(id(node.value))

    def _on_if(self, node: cst.If) -> None:
        self.rank_guards.append(self.compiled.rank_guards.is_guard(node.test, self.resolver))

    def _record_import(self, node: cst.Import | cst.ImportFrom) -> None:
        if len(self.path) == 2 and isinstance(self.path[1], cst.SimpleStatementLine):
            # only an import that always runs (not under `if TYPE_CHECKING:` or `try:`)
            self.imports.record(node, self.top_index)
        record = getattr(self.resolver, "record_import", None)
        roots = self.compiled.namespace_roots
        for local, path in bound_paths(node):
            if record is not None:
                record(local, path)
            if any(path == r or path.startswith(r + ".") for r in roots):
                # `import torch.cuda as tc`: `tc.x` belongs to a CUDA namespace
                self.namespace_aliases.add(local)

    def _bind(self, target: cst.CSTNode, scope: tuple[int, ...] | None = None) -> None:
        """A name bound other than by an import (for the resolver and the alias check)."""
        record = getattr(self.resolver, "record_binding", None)
        for name in _target_names(target):
            if record is not None:
                record(name, self.scope if scope is None else scope)
            # Any binding, even a parameter, makes the name unusable as a new import alias.
            self.imports.bind_name(name)

    def _mark_device(self, node: cst.CSTNode) -> None:
        for sub in devices.device_subexpressions(node):
            self.device_nodes.add(id(sub))

    def _mark_call_positions(self, node: cst.Call) -> None:
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in self.positions.keywords:
                self._mark_device(arg.value)
        first = next((a for a in node.args if a.keyword is None and not a.star), None)
        if first is None:
            return
        func = node.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method in self.positions.first_argument_of_methods or (
                method == "startswith" and self.positions.is_device_valued(func.value)
            ):
                self._mark_device(first.value)
                return
            if method == "add_argument":
                self._mark_argparse_default(node, first.value)
                return
        name = patterns.dotted_name(func)
        if name is None:
            return
        if name.rsplit(".", 1)[-1] in self.positions.first_argument_names:
            if self.resolver.qualified_names(func) & self.positions.first_argument_of:
                self._mark_device(first.value)

    def _mark_argparse_default(self, node: cst.Call, flag: cst.BaseExpression) -> None:
        """`parser.add_argument('--device', default='cuda')`: the default names a device."""
        if not isinstance(flag, cst.SimpleString) or not isinstance(flag.evaluated_value, str):
            return
        dest = flag.evaluated_value.lstrip("-").replace("-", "_")
        if self.positions.is_device_name(dest):
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value in ("default", "const"):
                    self._mark_device(arg.value)

    def _mark_assignment(self, target: cst.BaseAssignTargetExpression, value: cst.CSTNode) -> None:
        if isinstance(target, (cst.Name, cst.Attribute)) and self.positions.is_device_valued(
            target
        ):
            self._mark_device(value)
        self._bind(target)

    # --- matching ----------------------------------------------------------------------------

    def _match(self, node: cst.CSTNode, kind: type) -> None:
        key = patterns.index_key(node)
        if key is not None:
            candidates = self.compiled.index.get((kind, key))
            if candidates is None and (kind is cst.Call or kind is cst.Name):
                candidates = self._aliased_candidates(node, key)
            for case, pattern in candidates or ():
                bindings = patterns.Bindings()
                if patterns.match(pattern, node, self.resolver, bindings) and self._where(
                    case, bindings
                ):
                    self._plan(node, case, bindings)
                    return
        if id(node) in self.device_nodes and self.compiled.device_case is not None:
            if devices.cuda_device_kind(node) is not None:
                self._plan(node, self.compiled.device_case, patterns.Bindings(covered=[node]))
                return
        if kind is cst.Comparison and self._match_device_comparison(node):
            return
        if kind is cst.Attribute and self.compiled.module_cases:
            if self._match_module_ref(node):
                return
        if (kind is cst.Attribute or kind is cst.Name) and self.compiled.namespace_cases:
            self._match_namespace(node)
        elif kind is cst.Assign and self.compiled.env_cases:
            self._match_env(node)

    def _aliased_candidates(self, node: cst.CSTNode, key: str) -> list[tuple[Case, cst.CSTNode]]:
        """`from torch.cuda import synchronize as sync; sync()`: dispatch on the imported name."""
        func = node.func if isinstance(node, cst.Call) else node
        original = self.imports.imported_as.get(key) if isinstance(func, cst.Name) else None
        return self.compiled.index.get((type(node), original), []) if original else []

    def _where(self, case: Case, bindings: patterns.Bindings) -> bool:
        if case.context is not None:
            guarded = any(self.rank_guards)
            if guarded != (case.context == "rank_guarded"):
                return False
        for name, constraint in case.where.items():
            if name in bindings.rests:
                if not _rest_satisfies(bindings.rests[name], constraint):
                    return False
                continue
            node = bindings.nodes.get(name)
            if node is None or not _satisfies(node, constraint):
                return False
        return True

    def _plan(self, node: cst.CSTNode, case: Case, bindings: patterns.Bindings) -> None:
        kind = _kind(case, node)
        finding = Finding(rule=case.rule, case=case, kind=kind, snippet=short_code(node), node=node)
        self.plans[id(node)] = Plan(case, bindings, finding)
        if self.first_site is None and not isinstance(node, (cst.Import, cst.ImportFrom)):
            self.first_site = self.top_index
        self.on_path.update(id(n) for n in self.path)
        self.on_path.add(id(node))
        self.claimed.update(id(n) for n in bindings.covered)
        self.claimed.add(id(node))
        if isinstance(case.action, dict) and isinstance(node, cst.Call):
            # Keyword arguments the action drops or sets are replaced whole.
            edited = set(case.action.get("drop_kwargs", ())) | set(
                case.action.get("set_kwargs", {})
            )
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value in edited:
                    self._claim_subtree(arg)
        if case.template is not None:
            # What the replacement drops is gone: nothing inside it is rewritten or reported.
            used = case.template_wildcards
            for name, bound in bindings.nodes.items():
                if name not in used:
                    self._claim_subtree(bound)
            for name, args in bindings.rests.items():
                if name not in used:
                    for arg in args:
                        self._claim_subtree(arg)

    def _claim_subtree(self, node: cst.CSTNode) -> None:
        self.claimed.update(id(n) for n in patterns.walk(node))

    def _match_device_comparison(self, node: cst.Comparison) -> bool:
        """`device.type == 'cuda'`, `'cuda' in device`: False on XLA, and often the guard of a
        CUDA-only feature (fused optimizers, pinned memory), so they are flagged, not flipped."""
        case = self.compiled.device_comparison_case
        if case is None:
            return False
        operands = [node.left] + [c.comparator for c in node.comparisons]
        if not any(self.positions.is_device_valued(o, compared=True) for o in operands):
            return False
        if not any(devices.cuda_device_kind(o) is not None for o in operands):
            return False
        self._plan(node, case, patterns.Bindings(covered=operands))
        return True

    def _match_namespace(self, node: cst.Attribute | cst.Name) -> None:
        text = patterns.dotted_name(node)
        if text is None:
            return
        words = text.split(".")
        if (
            not (set(words) & self.compiled.namespace_words)
            and words[0] not in self.namespace_aliases
        ):
            return
        for name in self.resolver.qualified_names(node):
            for root, case in self.compiled.namespace_roots.items():
                if name == root or name.startswith(root + "."):
                    self._plan(node, case, patterns.Bindings())
                    self.claimed.update(id(n) for n in _chain(node))
                    return

    def _match_module_ref(self, node: cst.Attribute) -> bool:
        """`torch_xla.experimental.xla_sharding.Mesh` spelled out in full after a plain import."""
        text = patterns.dotted_name(node)
        if text is None:
            return False
        for case in self.compiled.module_cases:
            old = case.names[0]
            if text == old or text.startswith(old + "."):
                names = self.resolver.qualified_names(node)
                if any(q == old or q.startswith(old + ".") for q in names):
                    self._plan(node, case, patterns.Bindings())
                    self.claimed.update(id(n) for n in _chain(node))
                    return True
        return False

    def _match_env(self, node: cst.Assign) -> None:
        """`os.environ['XLA_USE_BF16'] = '1'`: environment switches the KB knows."""
        target = node.targets[0].target
        if (
            len(node.targets) != 1
            or not isinstance(target, cst.Subscript)
            or len(target.slice) != 1
        ):
            return
        index = target.slice[0].slice
        if not isinstance(index, cst.Index) or not isinstance(index.value, cst.SimpleString):
            return
        key = index.value.evaluated_value
        if "os.environ" not in self.resolver.qualified_names(target.value):
            return
        value = node.value.evaluated_value if isinstance(node.value, cst.SimpleString) else None
        for case in self.compiled.env_cases:
            if any(_env_name_matches(key, n) for n in case.names):
                if case.values and value not in case.values:
                    continue
                self._plan(node, case, patterns.Bindings())
                return

    def _match_import(self, node: cst.Import | cst.ImportFrom) -> None:
        modules: list[str] = []
        if isinstance(node, cst.Import):
            modules = [patterns.dotted_name(a.name) or "" for a in node.names]
        elif node.module is not None and not node.relative:
            base = patterns.dotted_name(node.module) or ""
            modules = [base]
            if not isinstance(node.names, cst.ImportStar):
                modules += [f"{base}.{patterns.dotted_name(a.name)}" for a in node.names]
        for case in self.compiled.module_cases:
            old = case.names[0]
            if any(m == old or m.startswith(old + ".") for m in modules):
                self._plan(node, case, patterns.Bindings())
                return
        for case in self.compiled.import_cases:
            if any(m == n or m.startswith(n + ".") for m in modules for n in case.names):
                self._plan(node, case, patterns.Bindings())
                return


def _children(node: cst.CSTNode):
    is_node = patterns.is_node
    for name in patterns.fields_of(type(node)):
        value = getattr(node, name)
        if type(value) is tuple or type(value) is list:
            for item in value:
                if is_node(item):
                    yield name, item
        elif is_node(value):
            yield name, value


def _target_names(target: cst.CSTNode) -> list[str]:
    """Names an assignment target binds: `a`, `a, (b, *c)`; not `self.x` or `d[k]`."""
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for element in target.elements for n in _target_names(element.value)]
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return []


def _kind(case: Case, node: cst.CSTNode) -> str:
    if case.kind == "namespace":
        return UNKNOWN
    if case.applicability == "display_only":
        return FLAGGED
    if case.kind == "device_string" and devices.cuda_device_kind(node) == "dynamic":
        return NOTED
    return NOTED if case.applicability == "safe+note" else CONVERTED


def _chain(node: cst.CSTNode) -> list[cst.CSTNode]:
    out = [node]
    while isinstance(node, cst.Attribute):
        node = node.value
        out.append(node)
    return out


def _env_name_matches(key: Any, name: str) -> bool:
    if not isinstance(key, str):
        return False
    return key.startswith(name[:-1]) if name.endswith("*") else key == name


def _satisfies(node: cst.CSTNode, constraint: Any) -> bool:
    if isinstance(constraint, dict):
        return patterns.is_literal(node) and patterns.literal_value(node) in constraint["one_of"]
    kind = devices.cuda_device_kind(node)
    if constraint == "cuda_device":
        return kind is not None
    if constraint == "cuda_device_const":
        return kind == "const"
    if constraint == "cuda_device_dynamic":
        return kind == "dynamic"
    if constraint in ("true", "false"):
        return patterns.literal_value(node) is (constraint == "true")
    if constraint == "string":
        return isinstance(patterns.literal_value(node), str)
    if constraint == "literal":
        return patterns.is_literal(node)
    return constraint == "any"


def _rest_satisfies(args: list[cst.Arg], constraint: Any) -> bool:
    if isinstance(constraint, dict) and "without_keywords" in constraint:
        return not any(
            a.keyword is not None and a.keyword.value in constraint["without_keywords"]
            for a in args
        )
    if isinstance(constraint, dict) and "max_positional" in constraint:
        return sum(1 for a in args if a.keyword is None) <= constraint["max_positional"]
    return constraint == "any"
