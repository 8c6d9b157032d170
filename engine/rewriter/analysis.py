"""Pass 1: find every site a rule applies to, without changing anything.

The walk reads the tree's fields directly (no libcst visitor, which would rebuild every node),
top-down, so an outer match such as the whole `'cuda' if torch.cuda.is_available() else 'cpu'`
claims the nodes inside it before they are looked at. It records, for each site, the plan the
rewrite pass carries out, and the path to it, so that pass only walks where there is work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from pytpu.engine.rewriter import devices, patterns
from pytpu.engine.rewriter.dataflow import DeviceVariables, OptimizerOrder, parameters_receiver
from pytpu.engine.rewriter.findings import CONVERTED, FLAGGED, NOTED, UNKNOWN, Finding, short_code
from pytpu.engine.rewriter.imports import ImportTracker, bound_paths
from pytpu.engine.rewriter.index import CompiledKB
from pytpu.engine.rewriter.kb import Case
from pytpu.engine.rewriter.loops import LoopAnalyzer, LoopPlan

# Fields whose names are not uses of a name: `x.attr`, `f(keyword=...)`.
_NOT_USES = frozenset({"attr", "keyword"})
# Nodes that open a scope for the names bound inside them.
_SCOPES = frozenset({cst.FunctionDef, cst.Lambda, cst.ClassDef})


@dataclass
class Plan:
    case: Case
    bindings: patterns.Bindings
    finding: Finding
    loop: LoopPlan | None = None  # for the barrier rules: where the barrier goes
    flags: list[Finding] = field(default_factory=list)  # display-only findings at the same node


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
        # "S" for each enclosing training or evaluation loop, "T" for each enclosing `if` that
        # throttles (`if step % 10 == 0:`): the contexts of host-sync diagnostics
        self.contexts: list[str] = []
        self.training: list[bool] = []  # for each enclosing loop: does it train?
        self.host_nodes: set[int] = set()  # load locations (`map_location=`)
        self.device_variables = DeviceVariables()
        self.optimizer_order = OptimizerOrder()
        self.setups: list[tuple[Finding, Case]] = []  # statements for the top of the module
        self.order = 0  # a counter that orders events in the walk
        self.launches = False  # the module starts processes (mp.spawn, torch_xla.launch)
        self.loops: LoopAnalyzer | None = None
        self.device_aware = True
        self.module: cst.Module | None = None

    def run(self, module: cst.Module, text: str = "") -> Analysis:
        self.module = module
        self.loops = LoopAnalyzer(self.compiled.loop_settings, module, self.resolver)
        # barriers only matter where something runs on a device
        self.device_aware = not text or any(w in text for w in ("cuda", "xla", ".to(", "device="))
        self.launches = self._launches(module, text)
        self.path.append(module)
        for index, statement in enumerate(module.body):
            self.top_index = index
            self._visit(statement)
        self.path.pop()
        self._decide_after_walk()
        return self

    def _launches(self, module: cst.Module, text: str) -> bool:
        """Whether the module calls a process launcher (its name appears in the text first)."""
        launchers = self.compiled.launchers
        words = {q.rsplit(".", 1)[-1] for q in launchers}
        if text and not any(w in text for w in words):
            return False
        for node in patterns.walk(module):
            if type(node) is cst.Call and patterns.dotted_name(node.func):
                if patterns.dotted_name(node.func).rsplit(".", 1)[-1] in words:
                    return True
        return False

    def _visit(self, node: cst.CSTNode) -> None:
        # Types are compared with `is`: libcst's node classes are ABCs, and isinstance on them
        # is the slowest thing a walk over every node can do.
        kind = type(node)
        if kind is cst.Import or kind is cst.ImportFrom:
            self._record_import(node)
            self._match_import(node)
            return  # handled whole
        contexts = len(self.contexts)  # what this node opens is closed when it is left
        handler = self._handlers.get(kind)
        if handler is not None:
            handler(node)
        if id(node) not in self.claimed:
            self._match(node, kind)
        self.order += 1
        loop = kind is cst.For or kind is cst.While
        if loop:
            self._enter_loop(node)
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
        del self.contexts[contexts:]
        if loop:
            self.training.pop()
        if kind is cst.If:
            self.rank_guards.pop()

    def _enter_loop(self, node: cst.For | cst.While) -> None:
        """Plan the loop's step barrier, and open its context for the host-sync rules."""
        assert self.loops is not None
        if not self.device_aware:
            self.training.append(False)  # nothing runs on a device: nothing to plan
            return
        plan, role = self.loops.plan(node, inside_training=any(self.training))
        self.training.append(role == "train")
        if role:
            self.contexts.append("S")
        if plan is None:
            return
        kind = "device_loader" if plan.loader is not None else f"{plan.kind}_barrier"
        case = self.compiled.engine_cases.get(kind)
        if case is None:
            return
        self._plan(node, case, patterns.Bindings(), loop=plan)
        if plan.after is not None:
            # the rewrite pass must reach the body and the statement the barrier follows
            self.on_path.update((id(node.body), id(plan.after)))

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
            if self.loops is not None:
                self.loops.note_assignment(target.target, node.value)
        if len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name:
            return
        name = node.targets[0].target.value
        if devices.cuda_device_kind(node.value) is not None and not self.positions.is_device_name(
            name
        ):
            self.device_variables.assigned(name, node.value, [*self.path, node])
        if not self.scope and hasattr(self.resolver, "record_value_alias"):
            alias = self._cuda_alias(node.value)
            if alias is not None:
                self.resolver.record_value_alias(name, alias)

    def _cuda_alias(self, value: cst.CSTNode) -> str | None:
        """`torch.cuda.FloatTensor if cuda else torch.FloatTensor`: the CUDA name it may hold."""
        for candidate in devices.device_subexpressions(value):
            text = patterns.dotted_name(candidate)
            if text and ("cuda" in text or text.split(".")[0] in self.namespace_aliases):
                for name in self.resolver.qualified_names(candidate):
                    if name.startswith("torch.cuda."):
                        return name
        return None

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
        if id(node) in self.device_nodes:
            self.device_variables.device_uses.add(node.value)
        elif id(node) in self.host_nodes:
            self.device_variables.host_uses.add(node.value)

    def _on_expr(self, node: cst.Expr) -> None:
        self.statement_values.add(id(node.value))

    def _on_if(self, node: cst.If) -> None:
        self.rank_guards.append(self.compiled.rank_guards.is_guard(node.test, self.resolver))
        if any(
            type(n) is cst.BinaryOperation and type(n.operator) is cst.Modulo
            for n in patterns.walk(node.test)
        ):
            self.contexts.append("T")  # `if step % log_every == 0:` throttles what it holds

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
            if arg.keyword is not None:
                if arg.keyword.value in self.positions.keywords:
                    self._mark_device(arg.value)
                elif arg.keyword.value in self.positions.host_keywords:
                    self._mark_host(arg.value)
        first = next((a for a in node.args if a.keyword is None and not a.star), None)
        func = node.func
        if type(func) is cst.Attribute and func.attr.value in ("to", "cuda"):
            self._note_move(func.value)
        if first is None:
            return
        if type(func) is cst.Attribute:
            method = func.attr.value
            if method in self.positions.first_argument_of_methods or (
                method == "startswith" and self.positions.is_device_valued(func.value)
            ):
                self._mark_device(first.value)
                self._match_device_index(node, first)
                return
            if method == "add_argument":
                self._mark_argparse_default(node, first.value)
                return
        name = patterns.dotted_name(func)
        if name is None:
            return
        last = name.rsplit(".", 1)[-1]
        if last in self.positions.first_argument_names:
            if self.resolver.qualified_names(func) & self.positions.first_argument_of:
                self._mark_device(first.value)
        if last[:1].isupper():  # a class: maybe an optimizer
            self._note_optimizer(node, first.value)

    def _mark_host(self, node: cst.CSTNode) -> None:
        for sub in devices.device_subexpressions(node):
            self.host_nodes.add(id(sub))

    def _match_device_index(self, call: cst.Call, argument: cst.Arg) -> None:
        """`.to(rank)`, `.to(self.gpu_id)`: an integer that named a CUDA device."""
        case = self.compiled.device_index_case
        node = argument.value
        name = patterns.dotted_name(node)
        if case is None or name is None or id(node) in self.claimed:
            return
        if self.positions.is_index_name(name.rsplit(".", 1)[-1]):
            # (planned from the call, before the walk reaches the argument: the path to it)
            path = [*(id(n) for n in self.path), id(call), id(argument)]
            self._plan(node, case, patterns.Bindings(covered=list(patterns.walk(node))), path=path)

    def _note_move(self, receiver: cst.CSTNode) -> None:
        name = patterns.dotted_name(receiver)
        if name is not None:
            self.optimizer_order.moves.append((name.rsplit(".", 1)[-1], self.scope, self.order))

    def _note_optimizer(self, node: cst.Call, first: cst.CSTNode) -> None:
        module = parameters_receiver(first)  # (cheap: looked at before resolving names)
        if module is None:
            return
        qualified = self.resolver.qualified_names(node.func)
        if any(q.startswith("torch.optim.") and ".lr_scheduler." not in q for q in qualified):
            self.optimizer_order.optimizers.append((module, self.scope, self.order, node))

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
        if kind is cst.Call and id(node) in self.host_nodes and self._cuda_device_call(node):
            self._plan(node, self.compiled.host_case, patterns.Bindings(covered=[node]))
            self._claim_subtree(node)  # its 'cuda' is gone with it
            return
        key = patterns.index_key(node)
        if key is not None:
            candidates = self.compiled.index.get((kind, key))
            if candidates is None and (kind is cst.Call or kind is cst.Name):
                candidates = self._aliased_candidates(node, key)
            if kind is cst.Assign:
                value_key = patterns.index_key(node.value)
                by_value = self.compiled.index.get((kind, f"={value_key}")) if value_key else None
                if by_value:
                    candidates = [*(candidates or ()), *by_value]
            flags: list[tuple[Case, patterns.Bindings]] = []
            chosen: tuple[Case, patterns.Bindings] | None = None
            for case, pattern in candidates or ():
                if chosen is not None and case.changes_code:
                    continue  # one rewrite per node; flags of other rules may join it
                if any(case.rule is c.rule for c, _ in [*flags, *([chosen] if chosen else [])]):
                    continue  # within a rule, the first case that matches decides
                bindings = patterns.Bindings()
                if patterns.match(pattern, node, self.resolver, bindings) and self._where(
                    case, bindings
                ):
                    if case.changes_code:
                        chosen = (case, bindings)
                    else:
                        flags.append((case, bindings))
            if chosen is None and flags:
                chosen = flags.pop(0)
            if chosen is not None:
                self._plan(node, *chosen)
                plan = self.plans.get(id(node))
                if plan is not None:  # (a setup plan has none)
                    plan.flags = [_finding(c, node) for c, _ in flags]
                return
        if id(node) in self.device_nodes and self.compiled.device_case is not None:
            if devices.cuda_device_kind(node) is not None:
                self._plan(node, self.compiled.device_case, patterns.Bindings(covered=[node]))
                return
        if id(node) in self.host_nodes and self.compiled.host_case is not None:
            # A device variable as the load location holds the XLA device after migration, and
            # XLA storage cannot be restored directly: it loads onto the CPU like a literal.
            if devices.cuda_device_kind(node) is not None or self.positions.is_device_valued(node):
                self._plan(node, self.compiled.host_case, patterns.Bindings(covered=[node]))
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

    def _cuda_device_call(self, node: cst.Call) -> bool:
        """`torch.device('cuda')` as a load location: the CPU there, not the XLA device."""
        if self.compiled.host_case is None or not node.args:
            return False
        if "torch.device" not in self.resolver.qualified_names(node.func):
            return False
        return devices.cuda_device_kind(node.args[0].value) is not None

    def _aliased_candidates(self, node: cst.CSTNode, key: str) -> list[tuple[Case, cst.CSTNode]]:
        """`from torch.cuda import synchronize as sync; sync()`: dispatch on the imported name."""
        func = node.func if isinstance(node, cst.Call) else node
        if type(func) is not cst.Name:
            return []
        original = self.imports.imported_as.get(key)
        if original is None:  # `Tensor = torch.cuda.FloatTensor ...; Tensor(2, 3)`
            alias = getattr(self.resolver, "value_aliases", {}).get(key)
            original = alias.rsplit(".", 1)[-1] if alias else None
        return self.compiled.index.get((type(node), original), []) if original else []

    def _where(self, case: Case, bindings: patterns.Bindings) -> bool:
        if case.context is not None and not self._in_context(case.context):
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

    def _in_context(self, context: str) -> bool:
        if context in ("rank_guarded", "not_rank_guarded"):
            return any(self.rank_guards) == (context == "rank_guarded")
        if context == "in_step":
            return "S" in self.contexts
        if context == "step_unthrottled":
            # in a step, and no throttling `if` between the innermost loop and here
            return "S" in self.contexts and "T" not in self.contexts[_last(self.contexts, "S") :]
        if context == "pre_launch":
            return self.launches and not self.scope
        return False

    def _plan(
        self,
        node: cst.CSTNode,
        case: Case,
        bindings: patterns.Bindings,
        loop: LoopPlan | None = None,
        path: list[int] | None = None,
    ) -> None:
        finding = _finding(case, node)
        if isinstance(case.action, dict) and "setup" in case.action:
            # a statement for the top of the module: nothing changes at the site itself
            self._plan_setup(finding, case)
            return
        self.plans[id(node)] = Plan(case, bindings, finding, loop)
        if self.first_site is None and not isinstance(node, (cst.Import, cst.ImportFrom)):
            self.first_site = self.top_index
        self.on_path.update(path if path is not None else (id(n) for n in self.path))
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

    def _plan_setup(self, finding: Finding, case: Case) -> None:
        assert self.module is not None
        code = case.action["setup"]
        if any(case is c for _, c in self.setups) or _has_statement(self.module, code):
            return
        self.setups.append((finding, case))
        self.on_path.add(id(self.module))

    def _decide_after_walk(self) -> None:
        """Plans that depend on the whole file: device-string variables, optimizer order."""
        for where, node, path in self.device_variables.decisions():
            case = self.compiled.device_case if where == "device" else self.compiled.host_case
            if case is not None and id(node) not in self.claimed:
                self._plan(node, case, patterns.Bindings(covered=[node]), path=path)
        case = self.compiled.engine_cases.get("optimizer_order")
        if case is not None:
            for node in self.optimizer_order.hazards():
                self._plan(node, case, patterns.Bindings())
                break  # one statement fixes them all

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


def _last(items: list[str], value: str) -> int:
    return len(items) - 1 - items[::-1].index(value)


def _has_statement(module: cst.Module, code: str) -> bool:
    """Whether a top-level statement of `module` is `code` (whitespace aside)."""
    wanted = " ".join(code.split())
    empty = cst.Module(body=[])
    return any(
        type(s) is cst.SimpleStatementLine
        and " ".join(empty.code_for_node(s.with_changes(leading_lines=[])).split()) == wanted
        for s in module.body
    )


def _target_names(target: cst.CSTNode) -> list[str]:
    """Names an assignment target binds: `a`, `a, (b, *c)`; not `self.x` or `d[k]`."""
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for element in target.elements for n in _target_names(element.value)]
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return []


def _finding(case: Case, node: cst.CSTNode) -> Finding:
    return Finding(
        rule=case.rule, case=case, kind=_kind(case, node), snippet=short_code(node), node=node
    )


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
    if constraint == "not_host":  # not already `x.cpu()` / `x.to('cpu')`
        return not _on_host(node)
    return constraint == "any"


def _on_host(node: cst.CSTNode) -> bool:
    if type(node) is not cst.Call or type(node.func) is not cst.Attribute:
        return False
    method = node.func.attr.value
    if method == "cpu":
        return True
    return method == "to" and any(patterns.literal_value(a.value) == "cpu" for a in node.args)


def _rest_satisfies(args: list[cst.Arg], constraint: Any) -> bool:
    if isinstance(constraint, dict) and "without_keywords" in constraint:
        return not any(
            a.keyword is not None and a.keyword.value in constraint["without_keywords"]
            for a in args
        )
    if isinstance(constraint, dict) and "max_positional" in constraint:
        return sum(1 for a in args if a.keyword is None) <= constraint["max_positional"]
    return constraint == "any"
