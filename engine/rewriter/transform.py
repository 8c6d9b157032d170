"""Pass 2 of the engine: carry out the plans of pass 1 (`analysis.py`) in one libcst pass.

The transformer only descends into nodes on the path to a planned site, so a file with a few
changes costs a few short walks, not a rebuild of the whole tree. Comments for reviewers go
above the statement that holds the site; imports are added (and ones left unused by a rewrite
removed) with libcst's codemod helpers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper

from pytpu.engine.rewriter import devices, node_edits, patterns
from pytpu.engine.rewriter.analysis import Analysis, Plan
from pytpu.engine.rewriter.findings import (  # noqa: F401  (re-exported for callers of the engine)
    CONVERTED,
    FLAGGED,
    KINDS,
    NOTED,
    UNKNOWN,
    Finding,
    comment_text,
    locate,
)
from pytpu.engine.rewriter.imports import ImportTracker
from pytpu.engine.rewriter.index import CompiledKB
from pytpu.engine.rewriter.resolve import ImportTableResolver, ScopeResolver

STATEMENTS = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
_DEFERRED = object()


class Rewriter(cst.CSTTransformer):
    def __init__(self, analysis: Analysis, imports: ImportTracker, quote: str):
        super().__init__()
        self.analysis = analysis
        self.imports = imports
        self.quote = quote  # the quote character new string literals use
        self.findings: list[Finding] = []
        self.stack: list[cst.CSTNode] = []  # the path from the module to the current node
        self.statements: list[list[str]] = []  # comments waiting for each open statement
        self.statement_nodes: list[cst.CSTNode] = []
        self.deleting: set[int] = set()
        self.produced_true: set[int] = set()
        self.removed_marker: set[int] = set()
        self.inserts: dict[int, list[tuple[Finding, list[cst.SimpleStatementLine]]]] = {}
        self.suite_inserts: dict[int, tuple[Finding, cst.BaseSmallStatement]] = {}
        self.noted: set[str] = set()  # codes whose note the file already got

    def on_visit(self, node: cst.CSTNode) -> bool:
        if id(node) not in self.analysis.on_path:
            return False  # nothing planned below: leave the subtree as it is
        self.stack.append(node)
        if isinstance(node, STATEMENTS):
            self.statements.append([])
            self.statement_nodes.append(node)
        plan = self.analysis.plans.get(id(node))
        if plan is not None and plan.loop is not None and plan.loop.after is not None:
            # the barrier goes after a statement of the body, which is visited before the
            # loop itself is left: ask for it now
            barrier = self._render(plan.case.template, patterns.Bindings())
            line = cst.SimpleStatementLine(body=[cst.Expr(value=barrier)])
            self.inserts.setdefault(id(plan.loop.after), []).append((plan.finding, [line]))
        return True

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> Any:
        if id(original) not in self.analysis.on_path:
            return updated  # pruned in on_visit
        self.stack.pop()
        if isinstance(original, cst.Expr) and id(original.value) in self.deleting:
            return cst.RemovalSentinel.REMOVE
        if id(original) in self.suite_inserts:
            finding, statement = self.suite_inserts.pop(id(original))
            self._record(finding)
            return cst.FlattenSentinel([updated, statement])
        result: Any = updated
        plan = self.analysis.plans.get(id(original))
        if plan is not None:
            result = self._apply(plan, original, updated)
            for flag in plan.flags:
                self._record(flag)
        if isinstance(original, (cst.BooleanOperation, cst.IfExp)):
            result = self._fold(result)
        if (
            isinstance(result, cst.If)
            and id(result.test) in self.produced_true
            and result.orelse is None
        ):
            result = node_edits.hoist_body(result)
        if isinstance(original, STATEMENTS):
            self.statement_nodes.pop()
            comments = self.statements.pop()
            if comments and isinstance(result, STATEMENTS):
                result = node_edits.with_comments(result, comments)
            elif comments and isinstance(result, cst.FlattenSentinel) and result.nodes:
                result = cst.FlattenSentinel(
                    [node_edits.with_comments(result.nodes[0], comments), *result.nodes[1:]]
                )
            if id(original) in self.inserts and isinstance(result, STATEMENTS):
                self.inserts[id(result)] = self.inserts.pop(id(original))
        if isinstance(original, cst.SimpleStatementLine) and isinstance(
            result, cst.SimpleStatementLine
        ):
            if not result.body:
                result = result.with_changes(body=[cst.Pass()])
                self.removed_marker.add(id(result))
        if isinstance(result, (cst.IndentedBlock, cst.Module)):
            result = self._finish_block(result)
        if isinstance(result, cst.Module) and self.analysis.setups:
            result = self._add_setups(result)
        if isinstance(result, cst.Module) and result.body and result.header:
            result = node_edits.dedupe_module_header(result)
        if isinstance(result, cst.SimpleStatementSuite) and not result.body:
            result = result.with_changes(body=[cst.Pass()])
        return result

    def _record(self, finding: Finding) -> None:
        self.findings.append(finding)
        text = self._comment(finding)
        if text and self.statements and text not in self.statements[-1]:
            self.statements[-1].append(text)

    def _comment(self, finding: Finding) -> str | None:
        """The comment for a finding; a note only the first time its rule applies in the file
        (the same note at every site is noise; sites that need review each keep theirs)."""
        if finding.kind == NOTED:
            if finding.code in self.noted:
                return None
            self.noted.add(finding.code)
        return comment_text(finding)

    def _apply(self, plan: Plan, original: cst.CSTNode, updated: cst.CSTNode) -> Any:
        case, finding = plan.case, plan.finding
        if not case.changes_code:
            self._record(finding)
            return updated
        action = case.action
        if action == "delete" and id(original) not in self.analysis.statement_values:
            if not isinstance(original, cst.BaseSmallStatement):
                finding.kind = FLAGGED  # used as a value: it cannot simply be removed
                self._record(finding)
                return updated
        imports_before = len(self.imports.needed)
        for module in case.rule.imports:
            self.imports.require(module)
        result = self._rewrite(plan, original, updated)
        if result is _DEFERRED:
            return updated
        if not node_edits.changed(updated, result) and len(self.imports.needed) == imports_before:
            return updated  # already in the migrated form: nothing to report
        self._record(finding)
        if case.template is not None or case.action in ("delete", "unwrap"):
            # The matched names are gone from the code (a template re-adds what it spells).
            for name in {
                id(n): n for n in plan.bindings.covered if isinstance(n, cst.Name)
            }.values():
                self.imports.replaced(name.value)
        return result

    def _rewrite(self, plan: Plan, original: cst.CSTNode, updated: cst.CSTNode) -> Any:
        case = plan.case
        action = case.action
        if case.kind in ("device_string", "host_string"):
            value = patterns.literal_value(case.template)
            if case.kind == "device_string":
                self.imports.require("torch_xla")
            return devices.quote_like(updated, value)
        if case.kind == "engine":
            return self._rewrite_loop(plan, original, updated)
        if case.kind == "module":
            new_module = action["rename_module"]
            if isinstance(updated, (cst.Import, cst.ImportFrom)):
                return node_edits.rename_module_import(updated, case.names[0], new_module)
            text = patterns.dotted_name(updated) or ""
            return node_edits.keep_parens(
                updated, node_edits.dotted(new_module + text[len(case.names[0]) :])
            )
        if isinstance(action, dict) and "insert_after" in action:
            return self._plan_insert(plan, original, updated)
        if case.kind == "env" and case.template is not None and isinstance(updated, cst.Assign):
            return updated.with_changes(value=self._render(case.template, patterns.Bindings()))
        bindings = node_edits.rebind(plan.bindings, original, updated)
        if case.template is not None:
            new = self._render(case.template, bindings)
            if isinstance(action, dict) and isinstance(new, cst.Call):
                new = node_edits.edit_kwargs(new, action, self._render_text)
            return self._place(updated, new)
        if action == "delete":
            if isinstance(updated, cst.BaseSmallStatement):
                return cst.RemovalSentinel.REMOVE
            self.deleting.add(id(original))
            return cst.Name("__pytpu_deleted__")  # the enclosing statement is removed
        if action == "keep":
            return updated  # the rule only needs its imports
        if action == "unwrap" and isinstance(updated, cst.With):
            return node_edits.hoist_body(updated)
        if isinstance(action, dict) and isinstance(updated, cst.Call):
            return node_edits.edit_kwargs(updated, action, self._render_text)
        return updated

    def _rewrite_loop(self, plan: Plan, original: cst.CSTNode, updated: cst.CSTNode) -> Any:
        """R-DATA-01: iterate the loader through MpDeviceLoader. (A barrier statement is added
        by the block that holds it; see on_visit.)"""
        loop = plan.loop
        if loop is None or loop.loader is None or type(updated) is not cst.For:
            return updated
        bindings = node_edits.rebind(
            patterns.Bindings(nodes={"loader": loop.loader}), original, updated
        )
        wrapped = self._render(plan.case.template, bindings)
        target = bindings.nodes["loader"]
        return updated.with_changes(iter=_replace_node(updated.iter, target, wrapped))

    def _place(self, updated: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
        """Put a rendered replacement where `updated` was: statement for statement, expression
        for expression, with parentheses where the surrounding code needs them."""
        if isinstance(updated, cst.Expr) and isinstance(new, cst.BaseExpression):
            return updated.with_changes(value=new)
        if isinstance(updated, cst.BaseSmallStatement) and isinstance(new, cst.BaseExpression):
            return cst.Expr(value=new)
        if not (isinstance(new, cst.BaseExpression) and isinstance(updated, cst.BaseExpression)):
            return new
        new = node_edits.keep_parens(updated, new)
        parent = self.stack[-1] if self.stack else None
        if node_edits.needs_parens(parent, updated, new):
            new = new.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        if isinstance(new, cst.Name) and new.value == "True":
            self.produced_true.add(id(new))
        return new

    def _render(
        self, template: cst.CSTNode, bindings: patterns.Bindings, quote: str | None = None
    ) -> cst.CSTNode:
        quote = quote or self.quote
        for node in self.stack:
            if isinstance(node, cst.FormattedString):
                # Inside an f-string (before Python 3.12) a literal must use the other quote.
                outer = node.start[-1]
                quote = '"' if outer == "'" else "'"
        return patterns.render(template, bindings, self.imports.render, quote)

    def _render_text(self, text: str, quote: str | None = None) -> cst.BaseExpression:
        rendered = self._render(patterns.parse_code(text), patterns.Bindings(), quote)
        assert isinstance(rendered, cst.BaseExpression)
        return rendered

    def _plan_insert(self, plan: Plan, original: cst.CSTNode, updated: cst.CSTNode) -> Any:
        """`insert_after`: add a statement after the matched one (once): on its own line, or
        after it in a one-line block (`if x: torch.manual_seed(0)`)."""
        if id(original) not in self.analysis.statement_values or len(self.stack) < 2:
            return updated  # not a statement of its own: nothing to insert after
        expr, holder = self.stack[-1], self.stack[-2]
        bindings = node_edits.rebind(plan.bindings, original, updated)
        rendered = self._render(patterns.parse_code(plan.case.action["insert_after"]), bindings)
        if isinstance(rendered, cst.BaseExpression):
            rendered = cst.Expr(value=rendered)
        if not isinstance(holder, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            return _DEFERRED
        position = holder.body.index(expr)
        if position + 1 < len(holder.body):
            # `a; b` on one line: the new statement goes right after, unless it is there
            if not node_edits.same_small_statement(rendered, holder.body[position + 1]):
                self.suite_inserts[id(expr)] = (plan.finding, rendered)
        elif isinstance(holder, cst.SimpleStatementLine):
            line = cst.SimpleStatementLine(body=[rendered])
            self.inserts.setdefault(id(holder), []).append((plan.finding, [line]))
        else:
            self.suite_inserts[id(expr)] = (plan.finding, rendered)
        return _DEFERRED

    def _fold(self, node: Any) -> Any:
        """Simplify `True and x`, `x if True else y` where a replacement produced the True."""
        produced = self.produced_true
        if isinstance(node, cst.BooleanOperation):
            left, right = id(node.left) in produced, id(node.right) in produced
            if isinstance(node.operator, cst.And) and (left or right):
                keep = node.left if left and right else (node.right if left else node.left)
                return node_edits.keep_parens(node, keep)
            if isinstance(node.operator, cst.Or) and left:
                return node_edits.keep_parens(node, node.left)
        if isinstance(node, cst.IfExp) and id(node.test) in produced:
            return node_edits.keep_parens(node, node.body)
        return node

    def _finish_block(self, block: cst.IndentedBlock | cst.Module) -> Any:
        """Drop statements emptied by deletions (keeping their comments) and add inserts."""
        body = list(block.body)
        if not any(id(s) in self.removed_marker or id(s) in self.inserts for s in body):
            return block
        out: list[cst.BaseStatement] = []
        carried: list[cst.EmptyLine] = []
        for i, stmt in enumerate(body):
            if id(stmt) in self.removed_marker:
                seen = {line.comment.value for line in carried if line.comment is not None}
                carried += [
                    line
                    for line in stmt.leading_lines
                    if line.comment is None or line.comment.value not in seen
                ]
                continue
            pending = self.inserts.pop(id(stmt), ())  # keyed by this node, before it changes
            if carried:
                stmt = stmt.with_changes(leading_lines=[*carried, *stmt.leading_lines])
                carried = []
            following = body[i + 1] if i + 1 < len(body) else None
            added: list[cst.BaseStatement] = []
            for finding, lines in pending:
                lines = [ln for ln in lines if not node_edits.same_statement(ln, following)]
                if lines:
                    self.findings.append(finding)
                    text = self._comment(finding)
                    if text:  # the comment explains the statement that was added
                        lines[0] = node_edits.with_comments(lines[0], [text])
                    added += lines
            out.append(stmt)
            out += added
        if carried or not out:
            out.append(cst.SimpleStatementLine(body=[cst.Pass()], leading_lines=carried))
        return block.with_changes(body=out)

    def _add_setups(self, module: cst.Module) -> cst.Module:
        """Statements a rule needs once per module, right after its top-level imports."""
        lines = []
        for finding, case in self.analysis.setups:
            statement = self._render(patterns.parse_code(case.action["setup"]), patterns.Bindings())
            if isinstance(statement, cst.BaseExpression):
                statement = cst.Expr(value=statement)
            line = cst.SimpleStatementLine(body=[statement])
            text = self._comment(finding)
            lines.append(node_edits.with_comments(line, [text]) if text else line)
            self.findings.append(finding)
        cut = max(
            (i + 1 for i, s in enumerate(module.body) if node_edits.is_import_line(s)), default=0
        )
        return module.with_changes(body=[*module.body[:cut], *lines, *module.body[cut:]])


def _replace_node(tree: cst.CSTNode, target: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
    """`tree` with the node `target` (found by identity) replaced by `new`."""
    if tree is target:
        return new

    class Replace(cst.CSTTransformer):
        def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
            return new if original is target else updated

    return tree.visit(Replace())


@dataclass
class TransformResult:
    module: cst.Module
    findings: list[Finding]


def preferred_quote(text: str) -> str:
    """The quote character the file mostly uses for strings (docstrings' triple quotes aside)."""
    double = text.count('"') - 3 * text.count('"""')
    single = text.count("'") - 3 * text.count("'''")
    return '"' if double > single else "'"


def transform_module(
    module: cst.Module, compiled: CompiledKB, quote: str = "'", text: str = ""
) -> TransformResult:
    """Apply all rules to `module`. `module` itself is left as it was."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    resolver = ImportTableResolver(compiled.pattern_roots)
    imports = ImportTracker(compiled.kb.modules)
    analysis = Analysis(compiled, resolver, imports).run(module, text)
    if not resolver.consistent():
        # A name the import table answered for is also bound another way: ask libcst's scope
        # analysis instead, for this file.
        imports = ImportTracker(compiled.kb.modules)
        analysis = Analysis(compiled, ScopeResolver(wrapper), imports).run(module, text)
    if not analysis.plans and not analysis.setups:
        return TransformResult(module=module, findings=[])
    if analysis.first_site is not None:
        imports.keep_bindings_before(analysis.first_site)
    rewriter = Rewriter(analysis, imports, quote)
    new = imports.apply(module.visit(rewriter))
    findings = rewriter.findings
    locate(module, findings)
    findings.sort(key=lambda f: (f.line, f.column))
    return TransformResult(module=new, findings=findings)
