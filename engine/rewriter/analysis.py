"""Pass 1: find every site a rule applies to, without changing anything.

The walk reads the tree's fields directly (no libcst visitor, which would rebuild every node),
top-down, so an outer match such as the whole `'cuda' if torch.cuda.is_available() else 'cpu'`
claims the nodes inside it before they are looked at. It records, for each site, the plan the
rewrite pass carries out, and the path to it, so that pass only walks where there is work.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeVar

import libcst as cst

from pytpu.engine.rewriter import cst_nodes, devices, patterns
from pytpu.engine.rewriter.dataflow import DeviceVariables, OptimizerOrder, parameters_receiver
from pytpu.engine.rewriter.findings import (
    CONVERTED,
    FLAGGED,
    NOTED,
    OWN_COMMENT_LINE,
    Finding,
    short_code,
)
from pytpu.engine.rewriter.imports import ImportTracker, bound_paths
from pytpu.engine.rewriter.index import RuleIndex
from pytpu.engine.rewriter.kb import RuleCase
from pytpu.engine.rewriter.loops import DEVICE_WORDS, LoopAnalyzer, LoopPlan
from pytpu.engine.rewriter.resolve import MODULE_ROOTS, Resolver
from pytpu.engine.rewriter.vocabulary import PositionMark
from pytpu.engine.rewriter.vocabulary.contract import NO_CHECKOUT_FACTS, CheckoutFacts, Fact

T = TypeVar("T")

# Fields whose names are not uses of a name: `x.attr`, `f(keyword=...)`.
_NOT_USES = frozenset({"attr", "keyword"})
# Nodes that open a scope for the names bound inside them.
_SCOPES = frozenset({cst.FunctionDef, cst.Lambda, cst.ClassDef})


@dataclass
class SitePlan:
    """What the rewrite pass does at one node."""

    case: RuleCase
    bindings: patterns.Bindings
    finding: Finding
    loop: LoopPlan | None = None  # for the loop analyses: the loader, or where the barrier goes
    flags: list[Finding] = field(default_factory=list)  # display-only findings at the same node


class FileAnalysis:
    """The walk over one module: bookkeeping of names, devices and loops, and the match kinds
    of the vocabulary offered each node (see `vocabulary/`)."""

    def __init__(
        self,
        index: RuleIndex,
        resolver: Resolver,
        imports: ImportTracker,
        checkout: CheckoutFacts = NO_CHECKOUT_FACTS,
    ):
        self.index = index
        self.checkout = checkout  # what the checkout's other files say about this one
        self.offered = index.by_type  # node type -> the match kinds to try on it
        self.positions = index.positions
        self.marks_of_type = index.marks_of_type  # node type -> the position marks at it
        self.resolver = resolver
        self.imports = imports
        self.plans: dict[int, SitePlan] = {}
        self.on_path: set[int] = set()  # ancestors of planned nodes: the rewrite pass visits these
        self.claimed: set[int] = set()
        self.marks: dict[int, list[str]] = {}  # node -> positions it is in ("device", "host" ...)
        self.statement_values: set[int] = set()  # expressions that are whole statements
        self.path: list[cst.CSTNode] = []
        self.rank_guards: list[bool] = []  # for each enclosing `if`: is its test about the rank?
        self._handlers = self._handler_table()
        self.namespace_aliases: set[str] = set()  # local names bound to a CUDA-only namespace
        self.namespace_roots = index.namespace_roots
        self.top_index = 0  # index of the top-level statement being walked
        self.scope: tuple[int, ...] = ()  # enclosing functions, lambdas and classes
        self.class_bodies: set[int] = set()  # the ids of the classes among them
        # index of the first top-level statement with a plan (other than an import's own)
        self.first_site: int | None = None
        # sites a match kind plans only if nothing else did by the end of the walk: (node,
        # case, ids of its ancestors, its top-level statement)
        self.deferred: list[tuple[cst.CSTNode, RuleCase, list[int], int]] = []
        # "S" for each enclosing training or evaluation loop, "T" for each enclosing `if` that
        # throttles (`if step % 10 == 0:`): the contexts of host-sync diagnostics
        self.contexts: list[str] = []
        self.training: list[bool] = []  # for each enclosing loop: does it train?
        self.device_variables = DeviceVariables()
        self.optimizer_order = OptimizerOrder()
        self.setups: list[tuple[Finding, RuleCase]] = []  # statements for the top of the module
        self.order = 0  # a counter that orders events in the walk
        self.text = ""
        self.loops: LoopAnalyzer | None = None
        self.device_aware = True
        self.host_training_noted = False  # (a file that places nothing on a device)
        # calls a built-in analysis puts on the device after the walk (the output's device tensors)
        self._placed: set[int] = set()
        self.module: cst.Module | None = None
        self._facts: dict[tuple[str, tuple[Hashable, ...]], Any] = {}  # (fact, key) -> value

    def run(
        self, module: cst.Module, text: str = "", device_aware: bool | None = None
    ) -> FileAnalysis:
        """Walk the module. `device_aware` (default: judged from the text) says whether the file
        is a device program, whose loops are steps."""
        self.module = module
        self.loops = LoopAnalyzer(self.index.loop_settings, module, self.resolver)
        # barriers only matter where something runs on a device
        if device_aware is None:
            device_aware = not text or _names_device_work(text)
        self.device_aware = device_aware
        self.text = text
        for analysis, case in self.index.before_walk:
            analysis.before_walk(self, case)
        self.path.append(module)
        for index, statement in enumerate(module.body):
            self.top_index = index
            self._visit(statement)
        self.path.pop()
        self._decide_after_walk()
        return self

    def writes_device_work(self) -> bool:
        """A file judged to have no device work whose rewrite writes some (`x.xpu()` becomes
        `x.to(torch_xla.device())`): a second run would judge the output a device program, so
        this one must walk it as one."""
        return not self.device_aware and any(
            _writes_device_words(plan.case) for plan in self.plans.values()
        )

    def _visit(self, node: cst.CSTNode) -> None:
        # Types are compared with `is`: libcst's node classes are ABCs, and isinstance on them
        # is the slowest thing a walk over every node can do.
        kind = type(node)
        if kind is cst.Name:  # the most common node, and a leaf: its own short path
            self._on_name(node)
            if id(node) not in self.claimed and (
                id(node) in self.marks or (kind in self.offered and self._may_match_name(node))
            ):
                self._match(node, kind)
            self.order += 1
            return
        if kind is cst.Import or kind is cst.ImportFrom:
            self._record_import(node)
            self._match(node, kind)
            return  # handled whole
        contexts = len(self.contexts)  # what this node opens is closed when it is left
        handler = self._handlers.get(kind)
        if handler is not None:
            handler(node)
        marks = self.marks_of_type.get(kind)
        if marks is not None:
            self._mark_positions(node, marks)
        if id(node) not in self.claimed and (kind in self.offered or id(node) in self.marks):
            self._match(node, kind)
        self.order += 1
        loop = kind is cst.For or kind is cst.While
        if loop:
            self._enter_loop(node)
        self.path.append(node)
        opens_scope = kind in _SCOPES
        if opens_scope:
            self._set_scope((*self.scope, id(node)))
        visit, is_node = self._visit, cst_nodes.is_node
        for name in _child_fields(kind):
            value = getattr(node, name)
            if type(value) is tuple or type(value) is list:
                for item in value:
                    if is_node(item):
                        visit(item)
            elif is_node(value):
                visit(value)
        if opens_scope:
            self._set_scope(self.scope[:-1])
        self.path.pop()
        del self.contexts[contexts:]
        if loop:
            self.training.pop()
        if kind is cst.If:
            self.rank_guards.pop()

    def _may_match_name(self, node: cst.Name) -> bool:
        """Whether a kind offered Names may match this one: its value is one they look for, or
        an alias (an imported name, a name bound to a CUDA namespace or to a dotted name)."""
        names, value = self.index.bare_names, node.value
        return (
            names is None
            or value in names
            or value in self.imports.imported_as
            or value in self.namespace_aliases
            or self.resolver.value_alias(value) is not None
        )

    def _enter_loop(self, node: cst.For | cst.While) -> None:
        """Plan the loop's step barrier, and open its context for the host-sync rules."""
        assert self.loops is not None
        block = self.path[-1]  # (the loop's own block: the loop is not on the path yet)
        body = list(block.body) if type(block) in (cst.IndentedBlock, cst.Module) else []
        later = body[body.index(node) + 1 :] if node in body else []
        if not self.device_aware:
            # Nothing runs on a device: no barrier. A training loop is noted once per file:
            # after the migration it still trains on the CPU.
            if not self.host_training_noted and not any(self.training):
                # (no plan: the loop has its barrier, or iterates a device loader, already)
                plan, role = self.loops.plan(node, False, later)
                if role == "train" and plan is not None:
                    self.host_training_noted = True
                    self._offer_loop(node, LoopPlan("host"))
            self.training.append(False)
            return
        plan, role = self.loops.plan(node, any(self.training), later)
        self.training.append(role == "train")
        if role:
            self.contexts.append("S")
        if plan is not None:
            self._offer_loop(node, plan)

    def _offer_loop(self, node: cst.For | cst.While, plan: LoopPlan) -> None:
        """The loop's plan to the loop analyses that take it: at most two, the loader's
        (planned at the loop) and the barrier's (at its body)."""
        takers = [(a, case) for a, case in self.index.loop_analyses if a.takes_loop(plan)]
        takers.sort(key=lambda taker: taker[0].rewrite is None)  # a rewrite of the loop first
        for (_, case), site in zip(takers, (node, node.body), strict=False):
            self.plan(site, case, patterns.Bindings(), loop=plan)
        if plan.after is not None:
            # the rewrite pass must reach the body and the statement the barrier follows
            self.on_path.update((id(node.body), id(plan.after)))

    def _set_scope(self, scope: tuple[int, ...]) -> None:
        self.scope = scope
        self.resolver.scope = scope

    # --- where the walk is: what the vocabulary's contexts ask ------------------------------

    def rank_guarded(self) -> bool:
        """Inside code that some ranks skip (`if rank == 0:`)."""
        return any(self.rank_guards)

    def in_step(self) -> bool:
        """Inside a training or evaluation loop."""
        return "S" in self.contexts

    def in_training(self) -> bool:
        """The innermost loop around trains (a backward pass or an optimizer step in it): not
        an evaluation loop or a rollout, even inside an epoch loop that trains."""
        return bool(self.training) and self.training[-1]

    def step_throttled(self) -> bool:
        """Under an `if` that throttles (`if step % 10 == 0:`) inside the innermost step."""
        return "T" in self.contexts[_last(self.contexts, "S") :] if self.in_step() else False

    # --- bookkeeping: what each kind of node tells about names and devices -------------------

    def _handler_table(self) -> dict[type, Callable[[Any], None]]:
        return {
            cst.FunctionDef: lambda n: self._bind(n.name),
            cst.ClassDef: self._on_class,
            cst.Call: self._on_call,
            cst.Assign: self._on_assign,
            cst.AnnAssign: self._on_annotated_assign,
            cst.AugAssign: lambda n: self._bind(n.target),
            cst.For: lambda n: self._bind(n.target),
            cst.CompFor: lambda n: self._bind(n.target),
            cst.AsName: lambda n: self._bind(n.name),
            cst.NamedExpr: lambda n: self._bind(n.target),
            cst.Param: self._on_param,
            cst.Global: self._on_global,
            cst.Nonlocal: self._on_global,
            cst.Expr: self._on_expr,
            cst.If: self._on_if,
        }

    def _on_assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target)
            if self.loops is not None:
                self.loops.note_assignment(target.target, node.value)
        if len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name:
            return
        name = node.targets[0].target.value
        if devices.cuda_device_kind(node.value) is not None and not self.positions.is_device_name(
            name
        ):
            self.device_variables.assigned(name, node.value, [*self.path, node])
        if not self.scope or self.scope[-1] not in self.class_bodies:
            alias = self._cuda_alias(node.value)  # (in the module or a function)
            if alias is not None:
                self.resolver.record_value_alias(name, alias)

    def _on_annotated_assign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target)

    def _cuda_alias(self, value: cst.CSTNode) -> str | None:
        """`torch.cuda.FloatTensor if cuda else torch.FloatTensor`: the CUDA name it may hold."""
        for candidate in devices.device_subexpressions(value):
            text = cst_nodes.dotted_name(candidate)
            if text and ("cuda" in text or text.split(".")[0] in self.namespace_aliases):
                for name in self.resolver.qualified_names(candidate):
                    if name.startswith("torch.cuda."):
                        return name
        return None

    def _on_param(self, node: cst.Param) -> None:
        self._bind(node.name)

    def _on_global(self, node: cst.Global | cst.Nonlocal) -> None:
        for item in node.names:
            self._bind(item.name, scope=())  # it binds the outer name

    def _on_name(self, node: cst.Name) -> None:
        self.imports.uses[node.value] += 1
        marks = self.marks.get(id(node))
        if marks and "device" in marks:
            self.device_variables.device_uses.add(node.value)
        elif marks and "host" in marks:
            self.device_variables.host_uses.add(node.value)

    def _on_expr(self, node: cst.Expr) -> None:
        self.statement_values.add(id(node.value))

    def _on_if(self, node: cst.If) -> None:
        nodes = list(cst_nodes.walk(node.test))
        self.rank_guards.append(self.index.rank_guards.is_guard(nodes, self.resolver))
        if any(type(n) is cst.BinaryOperation and type(n.operator) is cst.Modulo for n in nodes):
            self.contexts.append("T")  # `if step % log_every == 0:` throttles what it holds

    def _record_import(self, node: cst.Import | cst.ImportFrom) -> None:
        if len(self.path) == 2 and isinstance(self.path[1], cst.SimpleStatementLine):
            # only an import that always runs (not under `if TYPE_CHECKING:` or `try:`)
            self.imports.record(node, self.top_index)
        roots = self.namespace_roots
        if type(node) is cst.Import:
            self.resolver.record_modules(node)
        for local, path in bound_paths(node):
            self.resolver.record_import(local, path)
            if any(path == r or path.startswith(r + ".") for r in roots):
                # `import torch.cuda as tc`: `tc.x` belongs to a CUDA namespace
                self.namespace_aliases.add(local)

    def _on_class(self, node: cst.ClassDef) -> None:
        self._bind(node.name)
        self.class_bodies.add(id(node))

    def _bind(self, target: cst.CSTNode, scope: tuple[int, ...] | None = None) -> None:
        """A name bound other than by an import (for the resolver and the alias check)."""
        where = self.scope if scope is None else scope
        class_body = bool(where) and where[-1] in self.class_bodies
        for name in _target_names(target):
            if not self._import_fallback(name):
                self.resolver.record_binding(name, where, class_body)
            # Any binding, even a parameter, makes the name unusable as a new import alias.
            self.imports.bind_name(name)

    def _import_fallback(self, name: str) -> bool:
        """`try: import triton` / `except ImportError: triton = None`: the name stands for the
        import wherever the library is installed, which is where the code is meant to run."""
        handler = next(
            (
                i
                for i in range(len(self.path) - 1, 0, -1)
                if type(self.path[i]) is cst.ExceptHandler
            ),
            None,
        )
        if handler is None or type(self.path[handler - 1]) is not cst.Try:
            return False
        return any(
            local == name
            for statement in cst_nodes.statements(self.path[handler - 1].body.body)
            if type(statement) is cst.Import or type(statement) is cst.ImportFrom
            for local, _ in bound_paths(statement)
        )

    def _mark_positions(self, node: cst.CSTNode, marks: tuple[PositionMark, ...]) -> None:
        """Mark the nodes in each position the node's children can be in (the vocabulary's
        position marks): the match kinds of a mark are offered them when the walk gets there."""
        for mark in marks:
            for found in mark.find(self, node):
                self.marks.setdefault(id(found), []).append(mark.name)

    def _on_call(self, node: cst.Call) -> None:
        """What a call tells of the optimizer's order: a module moved, an optimizer built."""
        func = node.func
        if type(func) is cst.Attribute and func.attr.value in ("to", "cuda"):
            self._note_move(func.value)
        first = next((a for a in node.args if a.keyword is None and not a.star), None)
        name = cst_nodes.dotted_name(func)
        if first is not None and name is not None and name.rsplit(".", 1)[-1][:1].isupper():
            self._note_optimizer(node, first.value)  # (a class: maybe an optimizer)

    def _note_move(self, receiver: cst.CSTNode) -> None:
        name = cst_nodes.dotted_name(receiver)
        if name is not None:
            self.optimizer_order.moves.append((name.rsplit(".", 1)[-1], self.scope, self.order))

    def _note_optimizer(self, node: cst.Call, first: cst.CSTNode) -> None:
        module = parameters_receiver(first)  # (cheap: looked at before resolving names)
        if module is None:
            return
        qualified = self.resolver.qualified_names(node.func)
        if any(q.startswith("torch.optim.") and ".lr_scheduler." not in q for q in qualified):
            self.optimizer_order.optimizers.append((module, self.scope, self.order, node))

    # --- matching ----------------------------------------------------------------------------

    def _match(self, node: cst.CSTNode, kind: type) -> None:
        """Offer the node to the match kinds for its type and marks, in order, until one
        claims it."""
        marks = self.marks.get(id(node))
        offer = self.index.offers(kind, marks) if marks else self.offered.get(kind, ())
        for match_kind, cases in offer:
            if match_kind.match(self, node, cases):
                return

    def aliased_candidates(self, node: cst.CSTNode, key: str) -> list[tuple[RuleCase, cst.CSTNode]]:
        """`from torch.cuda import synchronize as sync; sync()`: dispatch on the imported name."""
        func = node.func if isinstance(node, cst.Call) else node
        if type(func) is not cst.Name:
            return []
        original = self.imports.imported_as.get(key)
        if original is None:  # `Tensor = torch.cuda.FloatTensor ...; Tensor(2, 3)`
            if func is node and self.path and type(self.path[-1]) is cst.AssignTarget:
                return []  # the alias's own name where it is bound: its value is the site
            alias = self.resolver.value_alias(key)
            original = alias.rsplit(".", 1)[-1] if alias else None
        return self.index.patterns.get((type(node), original), []) if original else []

    def satisfies(self, case: RuleCase, bindings: patterns.Bindings) -> bool:
        """The case's context holds here, and each `where:` condition holds for its binding."""
        if case.context is not None and not case.context.holds(self):
            return False
        for name, (condition, parameter) in case.where.items():
            bound = bindings.rests.get(name) if condition.on_arguments else bindings.nodes.get(name)
            if bound is None or not condition.check(bound, parameter, self):
                return False
        return True

    def plan(
        self,
        node: cst.CSTNode,
        case: RuleCase,
        bindings: patterns.Bindings,
        loop: LoopPlan | None = None,
        path: list[int] | None = None,
        flags: Sequence[RuleCase] = (),
        statement: int | None = None,
    ) -> None:
        """Record what the rewrite pass does at `node`, and claim what it covers. `statement`:
        the index of the top-level statement that holds it, for a plan made after the walk
        (the walk's own position otherwise)."""
        if statement is not None:
            self.top_index = statement
        if path is None and loop is None and self._written_by_another_rule(case):
            self.claimed.update(id(n) for n in (node, *bindings.covered))
            return
        if loop is None and case.changes_code and _written_code(case):
            flags = [*flags, *self._replacement_flags(case, flags)]
        finding = self._finding(case, node)
        if any(action.at_module_top for action, _ in case.actions):
            # a statement for the top of the module: nothing changes at the site itself
            self._plan_setup(finding, case)
            return
        self.plans[id(node)] = SitePlan(
            case, bindings, finding, loop, [self._finding(c, node) for c in flags]
        )
        if self.first_site is None and not isinstance(node, (cst.Import, cst.ImportFrom)):
            self.first_site = self.top_index
        self.on_path.update(path if path is not None else (id(n) for n in self.path))
        self.on_path.add(id(node))
        keeps_site = case.template is None and bool(case.actions)
        if not (keeps_site and all(action.keeps_site for action, _ in case.actions)):
            self.claimed.update(id(n) for n in bindings.covered)
        self.claimed.add(id(node))
        for action, value in case.actions:
            if action.claims is not None:
                for claimed in action.claims(node, value):
                    self.claim_subtree(claimed)  # replaced whole: nothing inside is matched
        if case.template is not None:
            # What the replacement drops is gone: nothing inside it is rewritten or reported.
            used = case.template_wildcards
            for name, bound in bindings.nodes.items():
                if name not in used:
                    self.claim_subtree(bound)
            for name, args in bindings.rests.items():
                if name not in used:
                    for arg in args:
                        self.claim_subtree(arg)

    def _replacement_flags(self, case: RuleCase, flags: list[RuleCase]) -> list[RuleCase]:
        """The display-only cases the case's replacement meets where it goes: a second run
        would flag them in the output, so this run flags them at the site (`x.cuda()` becomes
        `x.to(torch_xla.device())`, which R-DEV-14 flags before a launch)."""
        seen = {case.rule.id, *case.rule.overrides, *(c.rule.id for c in flags)}
        found: list[RuleCase] = []
        for node in (n for code in _written_code(case) for n in cst_nodes.walk(code)):
            key = patterns.index_key(node)
            for candidate, pattern in self.index.patterns.get((type(node), key), ()) if key else ():
                if candidate.changes_code or candidate.rule.id in seen:
                    continue
                bindings = patterns.Bindings()
                if patterns.match(pattern, node, _TEMPLATE_NAMES, bindings) and self.satisfies(
                    candidate, bindings
                ):
                    seen.add(candidate.rule.id)
                    found.append(candidate)
        return found

    def _finding(self, case: RuleCase, node: cst.CSTNode) -> Finding:
        return Finding(
            rule=case.rule,
            case=case,
            kind=self._finding_kind(case, node),
            snippet=short_code(node),
            node=node,
        )

    def _finding_kind(self, case: RuleCase, node: cst.CSTNode) -> str:
        """The one place a finding's kind is decided."""
        decided = case.kind.finding_kind(case, node) if case.kind.finding_kind else None
        if decided is not None:
            return decided
        if case.applicability == "display_only":
            return FLAGGED
        used_as_value = id(node) not in self.statement_values and not isinstance(
            node, cst.BaseSmallStatement
        )
        if used_as_value and any(action.statement_only for action, _ in case.actions):
            return FLAGGED  # (`x = torch.cuda.synchronize()`): it cannot simply be removed
        return NOTED if case.applicability == "safe+note" else CONVERTED

    def _plan_setup(self, finding: Finding, case: RuleCase) -> None:
        assert self.module is not None
        code = case.action("setup")
        if any(case is c for _, c in self.setups) or _has_statement(self.module, code):
            return
        self.setups.append((finding, case))
        self.on_path.add(id(self.module))

    def _has_setup(self, code: str) -> bool:
        """Whether a top-level statement of the module is `code`, whatever its aliases."""
        assert self.module is not None
        wanted = _parsed(code)
        compound = isinstance(wanted, cst.BaseCompoundStatement)  # (`if ...:` and its block)
        for statement in self.module.body:
            if compound:
                target = statement
            elif type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1:
                continue
            else:
                small = statement.body[0]
                target = small.value if type(small) is cst.Expr else small
            if patterns.match(wanted, target, self.resolver, patterns.Bindings()):
                return True
        return False

    def _written_by_another_rule(self, case: RuleCase) -> bool:
        """The statement around the site carries the comment of another rule (`# PYTPU705 ...`):
        the site is that rule's output (a `.cpu()` it added), which no other rule judges. Only
        what the original program says is matched."""
        lines = next(
            (n.leading_lines for n in reversed(self.path) if hasattr(n, "leading_lines")), ()
        )
        codes = {
            code for line in lines if line.comment for code in _WRITTEN.findall(line.comment.value)
        }
        return bool(codes) and case.rule.diagnostic.code not in codes

    def _decide_after_walk(self) -> None:
        """Plans that depend on the whole file: device-string variables (`device = 'cuda'`
        used as a device or as a load location), then the analyses that look at the whole file."""
        for where, node, path in self.device_variables.decisions():
            cases = self.index.cases_of_mark(where)
            if cases and id(node) not in self.claimed:
                self.plan(node, cases[0], patterns.Bindings(covered=[node]), path=path)
        for node, case, path, top_index in self.deferred:
            # (a site inside another rule's site is mentioned there already; a loop's plan, its
            # barrier or its loader, says nothing of the strings in its header)
            inside = any(a in self.plans and self.plans[a].loop is None for a in path)
            if id(node) not in self.claimed and not inside:
                self.top_index = top_index
                self.plan(node, case, patterns.Bindings(covered=[node]), path=path)
        for analysis, case in self.index.after_walk:
            analysis.after_walk(self, case)
        # A setup statement the module has already, spelled with its own aliases (`import torch
        # as th`; `th.__future__...`): known once the walk has seen every import.
        self.setups = [(f, c) for f, c in self.setups if not self._has_setup(c.action("setup"))]

    # --- the vocabulary's contract (`vocabulary/contract.py`): what a hook may ask and do -------

    def fact(self, fact: Fact[T], *key: Hashable) -> T:
        """A fact about this file, computed the first time a hook asks and kept for the file."""
        cache_key = (fact.name, key)
        if cache_key not in self._facts:
            self._facts[cache_key] = fact.compute(self, *key)
        return self._facts[cache_key]

    def is_claimed(self, node: cst.CSTNode) -> bool:
        """Whether a plan covers the node already (nothing matches it again)."""
        return id(node) in self.claimed

    def plan_at(self, node: cst.CSTNode) -> SitePlan | None:
        return self.plans.get(id(node))

    def planned(self) -> Iterable[SitePlan]:
        return self.plans.values()

    def declare_device_program(self) -> None:
        """The file is a device program from now on (an analysis found what it trains): its
        loops are steps."""
        self.device_aware = True

    def place_on_device(self, nodes: Iterable[cst.CSTNode]) -> None:
        """Values an analysis puts on the device after the walk: the rules that look for device
        tensors see them as a second run would."""
        self._placed.update(id(node) for node in nodes)

    def placed_by_analysis(self, node: cst.CSTNode) -> bool:
        return id(node) in self._placed

    def defer(self, node: cst.CSTNode, case: RuleCase) -> None:
        """Plan `node` for `case` after the walk, if no other plan took it by then (decisions
        made after the walk included): for the KB's safety nets."""
        self.deferred.append((node, case, [id(n) for n in self.path], self.top_index))

    def claim(self, nodes: Iterable[cst.CSTNode]) -> None:
        """Nothing in `nodes` is matched again."""
        self.claimed.update(id(n) for n in nodes)

    def claim_subtree(self, node: cst.CSTNode) -> None:
        self.claimed.update(id(n) for n in cst_nodes.walk(node))


_WRITTEN = re.compile(r"^#\s*(PYTPU\d+)\b")  # a comment PyTPU wrote for a reviewer


def _names_device_work(text: str) -> bool:
    """The text has a word of device work outside the comments PyTPU wrote (their words are
    not the program's: a second run must judge the file as the first did)."""
    if not any(word in text for word in DEVICE_WORDS):
        return False
    if "PYTPU" in text:
        text = OWN_COMMENT_LINE.sub("", text)
    return any(word in text for word in DEVICE_WORDS)


@cache
def _parsed(code: str) -> cst.CSTNode:
    return patterns.parse_code(code)


# Actions whose value is code the rewrite writes at the site (or right after it), by name.
_ACTION_CODE: dict[str, Callable[[Any], list[str]]] = {
    "set_kwargs": lambda value: list(value.values()),
    "insert_after": lambda value: [value],
}


@cache
def _written_code(case: RuleCase) -> tuple[cst.CSTNode, ...]:
    """The code a case writes where its site is: its replacement and its actions' code."""
    code = [case.template] if case.template is not None else []
    for action, value in case.actions:
        texts = _ACTION_CODE.get(action.name)
        code += [_parsed(text) for text in texts(value)] if texts else []
    return tuple(code)


@cache
def _writes_device_words(case: RuleCase) -> bool:
    empty = cst.Module(body=[])
    return any(
        word in empty.code_for_node(code) for code in _written_code(case) for word in DEVICE_WORDS
    )


class _TemplateNames:
    """Names in a rule's replacement are written as what they refer to (`torch_xla.device`):
    each dotted name is its own qualified name, and its module prefixes are modules."""

    def qualified_names(self, node: cst.CSTNode) -> set[str]:
        name = cst_nodes.dotted_name(node)
        return {name} if name else set()

    def is_module(self, node: cst.CSTNode) -> bool:
        name = cst_nodes.dotted_name(node)
        return name is not None and name.split(".")[0] in MODULE_ROOTS


_TEMPLATE_NAMES = _TemplateNames()


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(node_type: type) -> tuple[str, ...]:
    """The fields of a node type that hold the code below it, less those whose names are not
    uses of a name (`x.attr`, `f(keyword=...)`)."""
    names = _CHILD_FIELDS.get(node_type)
    if names is None:
        fields = cst_nodes.fields_of(node_type)
        names = _CHILD_FIELDS[node_type] = tuple(n for n in fields if n not in _NOT_USES)
    return names


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
