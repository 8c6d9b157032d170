"""Pass 2 of the rewriter: carry out the plans of pass 1 (`analysis.py`) in one libcst pass.

The transformer only descends into nodes on the path to a planned site, so a file with a few
changes costs a few short walks, not a rebuild of the whole tree. Comments for reviewers go
above the statement that holds the site; imports are added (and ones left unused by a rewrite
removed) with libcst's codemod helpers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper

from pytpu.engine.rewriter import codegen, cst_nodes, node_edits, patterns, statement_flow
from pytpu.engine.rewriter.analysis import FileAnalysis, SitePlan
from pytpu.engine.rewriter.findings import (
    FLAGGED,
    NOTED,
    Finding,
    WrittenComment,
    anchor,
    comment_text,
    written_comments,
)
from pytpu.engine.rewriter.imports import ImportTracker, import_prefix_length
from pytpu.engine.rewriter.index import RuleIndex
from pytpu.engine.rewriter.kb import RuleCase
from pytpu.engine.rewriter.resolve import ImportTableResolver, ScopeResolver
from pytpu.engine.rewriter.vocabulary.contract import NO_CHECKOUT_FACTS, CheckoutFacts

STATEMENTS = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
_DEFERRED = object()


@dataclass
class Edit:
    """One planned site as the rewrite pass leaves it: what the vocabulary's hooks work on."""

    rewriter: Rewriter
    plan: SitePlan
    original: cst.CSTNode
    updated: cst.CSTNode

    @property
    def case(self) -> RuleCase:
        return self.plan.case

    @property
    def imports(self) -> ImportTracker:
        return self.rewriter.imports

    def render(
        self, template: cst.CSTNode, bindings: patterns.Bindings | None = None
    ) -> cst.CSTNode:
        return self.rewriter.render(template, bindings or patterns.Bindings())

    def render_text(self, text: str, quote: str | None = None) -> cst.BaseExpression:
        """`text` as code, its wildcards (`$size`) bound as the site's match bound them."""
        rendered = self.rewriter.render(patterns.parse_code(text), self.plan.bindings, quote)
        assert isinstance(rendered, cst.BaseExpression)
        return rendered

    def delete(self, node: cst.CSTNode) -> Any:
        """Remove the statement that holds the site."""
        return self.rewriter.delete(self, node)

    def insert_after(self, code: str) -> Any:
        """Add `code` as a statement after the site's (once)."""
        return self.rewriter.insert_after(self, code)

    def add_statement_after(self, statement: cst.CSTNode) -> None:
        """The case's replacement as a statement after `statement` (a barrier), once."""
        self.rewriter.add_statement_after(statement, self.plan.finding, self.case)

    def wrap_before(self, code: str) -> Any:
        """Wrap the statements before the site's that compute what it reads in `with code:`."""
        return self.rewriter.wrap_before(self, code)


class Rewriter(cst.CSTTransformer):
    def __init__(self, analysis: FileAnalysis, imports: ImportTracker, quote: str):
        super().__init__()
        self.analysis = analysis
        self.imports = imports
        self.quote = quote  # the quote character new string literals use
        self.findings: list[Finding] = []
        self.stack: list[cst.CSTNode] = []  # the path from the module to the current node
        # comments (with their findings) waiting for each open statement
        self.statements: list[list[tuple[str, Finding]]] = []
        self.deleting: set[int] = set()
        self.produced_true: set[int] = set()
        self.removed_marker: set[int] = set()
        self.inserts: dict[int, list[tuple[Finding, list[cst.BaseStatement]]]] = {}
        self.suite_inserts: dict[int, tuple[Finding, cst.BaseSmallStatement]] = {}
        # statements whose computing run (statement_flow) a `with` wraps: its item, by statement
        self.wraps: dict[int, tuple[Finding, cst.WithItem]] = {}
        self.suite_added: dict[int, Finding] = {}  # statements added on a line, not yet kept
        self.noted: set[str] = set()  # codes whose note the file already got
        # new nodes whose ids key the sets above: kept alive, so no later node reuses the id
        self.keys: list[cst.CSTNode] = []
        # each comment line written (by the id of its node), with its finding
        self.comments: dict[int, tuple[cst.EmptyLine, Finding]] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        if id(node) not in self.analysis.on_path:
            return False  # nothing planned below: leave the subtree as it is
        self.stack.append(node)
        if isinstance(node, STATEMENTS):
            self.statements.append([])
        plan = self.analysis.plans.get(id(node))
        analysis = plan.case.analysis if plan is not None else None
        if analysis is not None and analysis.on_enter is not None:
            analysis.on_enter(Edit(self, plan, node, node))
        return True

    def _key(self, node: cst.CSTNode) -> int:
        self.keys.append(node)
        return id(node)

    def add_statement_after(self, statement: cst.CSTNode, finding: Finding, case: RuleCase) -> None:
        """The case's replacement as a statement after `statement` (a barrier), once."""
        new = self.render(case.template, patterns.Bindings())
        line = cst.SimpleStatementLine(body=[cst.Expr(value=new)])
        self.inserts.setdefault(id(statement), []).append((finding, [line]))

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> Any:
        if id(original) not in self.analysis.on_path:
            return updated  # pruned in on_visit
        self.stack.pop()
        if isinstance(original, cst.Expr) and id(original.value) in self.deleting:
            return cst.RemovalSentinel.REMOVE
        if id(original) in self.suite_inserts:
            finding, statement = self.suite_inserts.pop(id(original))
            self.suite_added[self._key(statement)] = finding  # kept once the line is rewritten
            return cst.FlattenSentinel([updated, statement])
        result: Any = updated
        plan = self.analysis.plans.get(id(original))
        if plan is not None:
            result = self._apply(plan, original, updated)
            for flag in plan.flags:
                self._record(flag)
        if isinstance(original, (cst.BooleanOperation, cst.IfExp)):
            result = self._fold(result)
        if isinstance(result, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            result = self._keep_added(result)
        if isinstance(original, STATEMENTS):
            comments = self.statements.pop()
            if comments and isinstance(result, STATEMENTS):
                result = self._with_comments(result, comments)
            elif comments and isinstance(result, cst.FlattenSentinel) and result.nodes:
                result = cst.FlattenSentinel(
                    [self._with_comments(result.nodes[0], comments), *result.nodes[1:]]
                )
        if (
            isinstance(result, cst.If)
            and id(result.test) in self.produced_true
            and result.orelse is None
        ):
            # (its comments, written above, go above its body's own)
            parent = self.stack[-1] if self.stack else None
            if isinstance(parent, cst.If) and parent.orelse is original:
                result = node_edits.as_else(result)  # an `elif` cannot become statements
            else:
                result = node_edits.hoist_body(result)
        if isinstance(original, STATEMENTS) and id(original) in self.wraps:
            if isinstance(result, cst.SimpleStatementLine):
                self.wraps[self._key(result)] = self.wraps.pop(id(original))
        if isinstance(original, STATEMENTS) and id(original) in self.inserts:
            # what goes after the statement goes after what replaced it (a hoisted `if`'s body:
            # after its last statement)
            last = result
            if isinstance(result, cst.FlattenSentinel):
                last = result.nodes[-1] if result.nodes else None
            if isinstance(last, STATEMENTS):
                self.inserts[self._key(last)] = self.inserts.pop(id(original))
        if isinstance(original, cst.SimpleStatementLine) and isinstance(
            result, cst.SimpleStatementLine
        ):
            if not result.body:
                result = result.with_changes(body=[cst.Pass()])
                self.removed_marker.add(self._key(result))
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
        if text and self.statements and text not in (t for t, _ in self.statements[-1]):
            self.statements[-1].append((text, finding))

    def _keep_added(self, line: cst.SimpleStatementLine | cst.SimpleStatementSuite) -> Any:
        """The statements added on a line (`a; b`, `if x: a`), each unless the statement after
        it, as rewritten, is the same (as `_finish_block` does for a block)."""
        body = list(line.body)
        if not any(id(s) in self.suite_added for s in body):
            return line
        kept = []
        for i, statement in enumerate(body):
            finding = self.suite_added.pop(id(statement), None)
            if finding is not None:
                following = body[i + 1] if i + 1 < len(body) else None
                if node_edits.same_small_statement(statement, following):
                    continue
                self._record(finding)
            kept.append(statement)
        return line.with_changes(body=kept)

    def _with_comments(self, statement: Any, comments: list[tuple[str, Finding]]) -> Any:
        """The statement with the comments above it; each comment line written is recorded."""
        result = node_edits.with_comments(statement, [text for text, _ in comments])
        by_text = dict(comments)
        kept = {id(line) for line in statement.leading_lines}
        for line in result.leading_lines:
            if id(line) not in kept and line.comment is not None:
                self.comments[id(line)] = (line, by_text[line.comment.value])
        return result

    def _comment(self, finding: Finding) -> str | None:
        """The comment for a finding; a note only the first time its rule applies in the file
        (the same note at every site is noise; sites that need review each keep theirs)."""
        if finding.kind == NOTED:
            if finding.code in self.noted:
                return None
            self.noted.add(finding.code)
        return comment_text(finding)

    def _apply(self, plan: SitePlan, original: cst.CSTNode, updated: cst.CSTNode) -> Any:
        case, finding = plan.case, plan.finding
        if not case.changes_code or finding.kind == FLAGGED:
            self._record(finding)  # left as it is, with its comment
            return updated
        imports_before = len(self.imports.needed)
        for module in case.rule.imports:
            self.imports.require(module)
        result = self._rewrite(Edit(self, plan, original, updated))
        if result is _DEFERRED:
            return updated
        if not node_edits.changed(updated, result) and len(self.imports.needed) == imports_before:
            return updated  # already in the migrated form: nothing to report
        self._record(finding)
        if case.template is not None or any(a.removes_names for a, _ in case.actions):
            # The matched names are gone from the code (a template re-adds what it spells).
            for name in {
                id(n): n for n in plan.bindings.covered if isinstance(n, cst.Name)
            }.values():
                self.imports.replaced(name.value)
        return result

    def _rewrite(self, edit: Edit) -> Any:
        """The match kind's own rewrite, else the case's replacement and actions."""
        case = edit.case
        if case.kind.rewrite is not None:
            result = case.kind.rewrite(edit)
            if result is not None:
                return result
        edit.plan.bindings = node_edits.rebind(edit.plan.bindings, edit.original, edit.updated)
        if case.template is None:
            return self._act(edit, edit.updated)
        new = self._act(edit, self.render(case.template, edit.plan.bindings))
        return new if new is _DEFERRED else self._place(edit.updated, new)

    def _act(self, edit: Edit, node: Any) -> Any:
        """The case's actions, in their order, on `node` (the site or its replacement)."""
        for action, value in edit.case.actions:
            if action.apply is not None and node is not _DEFERRED:
                node = action.apply(edit, node, value)
        return node

    def delete(self, edit: Edit, node: cst.CSTNode) -> Any:
        """Remove the statement that holds the site."""
        if isinstance(node, cst.BaseSmallStatement):
            return cst.RemovalSentinel.REMOVE
        self.deleting.add(id(edit.original))
        return cst.Name("__pytpu_deleted__")  # the enclosing statement is removed

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
            self.produced_true.add(self._key(new))
        return new

    def render(
        self, template: cst.CSTNode, bindings: patterns.Bindings, quote: str | None = None
    ) -> cst.CSTNode:
        quote = quote or self.quote
        for node in self.stack:
            if isinstance(node, cst.FormattedString):
                # Inside an f-string (before Python 3.12) a literal must use the other quote.
                outer = node.start[-1]
                quote = '"' if outer == "'" else "'"
        return patterns.render(template, bindings, self.imports.render, quote)

    def insert_after(self, edit: Edit, code: str) -> Any:
        """Add a statement after the matched one (once): on its own line, or after it in a
        one-line block (`if x: torch.manual_seed(0)`)."""
        plan, original, updated = edit.plan, edit.original, edit.updated
        if isinstance(original, cst.BaseSmallStatement) and self.stack:
            expr, holder = original, self.stack[-1]  # the site is a statement (`x = x.to(d)`)
        elif id(original) not in self.analysis.statement_values or len(self.stack) < 2:
            return updated  # not a statement of its own: nothing to insert after
        else:
            expr, holder = self.stack[-1], self.stack[-2]
        rendered = self.render(patterns.parse_code(code), plan.bindings)
        if isinstance(rendered, cst.BaseExpression):
            rendered = cst.Expr(value=rendered)
        if not isinstance(holder, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            return _DEFERRED
        compound = isinstance(rendered, cst.BaseCompoundStatement)  # (`if ...:` and its block)
        if isinstance(holder, cst.SimpleStatementLine) and (compound or holder.body[-1] is expr):
            line = rendered if compound else cst.SimpleStatementLine(body=[rendered])
            self.inserts.setdefault(id(holder), []).append((plan.finding, [line]))
        elif compound:
            return updated  # no line of its own to follow (`if x: a = b`): left as it is
        else:
            # `a; b` or `if x: a`: the new statement goes right after, on the same line
            self.suite_inserts[id(expr)] = (plan.finding, rendered)
        return _DEFERRED

    def wrap_before(self, edit: Edit, code: str) -> Any:
        """Wrap the statements before the matched one that compute what it reads (a training
        step's forward pass and loss before `loss.backward()`) in `with code:`, unless a `with`
        of the same kind is around it already."""
        original = edit.original
        if id(original) not in self.analysis.statement_values or len(self.stack) < 2:
            return edit.updated  # not a statement of its own
        holder = self.stack[-2]
        if not isinstance(holder, cst.SimpleStatementLine) or len(holder.body) != 1:
            return edit.updated
        item = self.render(patterns.parse_code(code), edit.plan.bindings)
        assert isinstance(item, cst.BaseExpression)
        kind = cst_nodes.last_name(item.func) if isinstance(item, cst.Call) else None
        for node in self.stack:
            if isinstance(node, cst.With) and any(
                isinstance(w.item, cst.Call) and cst_nodes.last_name(w.item.func) == kind
                for w in node.items
            ):
                return edit.updated  # (`with torch.autocast(...):` around it already)
        self.wraps[id(holder)] = (edit.plan.finding, cst.WithItem(item=item))
        return _DEFERRED

    def _wrap_run(self, out: list[cst.BaseStatement], statement: cst.BaseStatement) -> None:
        """The statements at the end of `out` that compute what `statement` reads, in the
        `with` it waits for (in place)."""
        finding, item = self.wraps.pop(id(statement))
        start = statement_flow.computing_run([*out, statement], len(out))
        if start == len(out):
            return  # nothing before it computes what it reads (or a `with` does already)
        first, *rest = out[start:]
        wrapped = cst.With(
            items=[item],
            body=cst.IndentedBlock(body=[first.with_changes(leading_lines=[]), *rest]),
            leading_lines=first.leading_lines,
        )
        self.findings.append(finding)
        text = self._comment(finding)
        out[start:] = [self._with_comments(wrapped, [(text, finding)]) if text else wrapped]

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
        if not any(
            id(s) in self.removed_marker or id(s) in self.inserts or id(s) in self.wraps
            for s in body
        ):
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
            if id(stmt) in self.wraps:
                self._wrap_run(out, stmt)
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
                        lines[0] = self._with_comments(lines[0], [(text, finding)])
                    added += lines
            out.append(stmt)
            out += added
        # comments of a deleted last statement are kept on a `pass`; blank lines are not
        carried = [line for line in carried if line.comment is not None]
        if carried or not out:
            out.append(cst.SimpleStatementLine(body=[cst.Pass()], leading_lines=carried))
        return block.with_changes(body=out)

    def _add_setups(self, module: cst.Module) -> cst.Module:
        """Statements a rule needs once per module, right after its top-level imports (those
        above the first rewritten statement)."""
        lines = []
        for finding, case in self.analysis.setups:
            statement = self.render(patterns.parse_code(case.action("setup")), patterns.Bindings())
            if isinstance(statement, cst.BaseExpression):
                statement = cst.Expr(value=statement)
            compound = isinstance(statement, cst.BaseCompoundStatement)
            line = statement if compound else cst.SimpleStatementLine(body=[statement])
            text = self._comment(finding)
            lines.append(self._with_comments(line, [(text, finding)]) if text else line)
            self.findings.append(finding)
        # below the imports above the first rewritten statement, where the new imports go: an
        # import further down (awd-lstm-lm's `from splitcross import ...` after its corpus is on
        # the device) would put `use_spmd()` after the device work it must precede
        cut = import_prefix_length(module, self.analysis.first_site)
        return module.with_changes(body=[*module.body[:cut], *lines, *module.body[cut:]])


@dataclass
class TransformResult:
    module: cst.Module
    findings: list[Finding]
    code: str  # the new module's source
    comments: list[WrittenComment] = field(default_factory=list)  # in the order of their lines


def preferred_quote(text: str) -> str:
    """The quote character the file mostly uses for strings (docstrings' triple quotes aside)."""
    double = text.count('"') - 3 * text.count('"""')
    single = text.count("'") - 3 * text.count("'''")
    return '"' if double > single else "'"


def transform_module(
    module: cst.Module,
    index: RuleIndex,
    quote: str = "'",
    text: str = "",
    checkout: CheckoutFacts = NO_CHECKOUT_FACTS,
) -> TransformResult:
    """Apply all rules to `module` (`checkout`: what the checkout's other files say about it).
    `module` itself is left as it was."""
    analysis, imports = _analyse(module, index, text, checkout)
    if analysis.writes_device_work():
        analysis, imports = _analyse(module, index, text, checkout, device_aware=True)
    if not analysis.plans and not analysis.setups:
        return TransformResult(module=module, findings=[], code=text or module.code)
    if analysis.first_site is not None:
        imports.keep_bindings_before(analysis.first_site)
    rewriter = Rewriter(analysis, imports, quote)
    new = imports.apply(module.visit(rewriter))
    findings = rewriter.findings
    anchors = {id(f): anchor(f.node) for f in findings if f.node is not None}
    wanted = {id(a) for a in anchors.values()}
    focus = _rewritten_statements(module, new, analysis)
    found, texts = codegen.positions(module, wanted, text, focus)
    for finding in findings:
        site = anchors.get(id(finding))
        if site is not None and id(site) in found:
            finding.line, finding.column = found[id(site)]
        finding.node = None
    findings.sort(key=lambda f: (f.line, f.column))
    code, lines = codegen.generate(new, rewriter.comments, texts)
    comments = written_comments(rewriter.comments, lines)
    return TransformResult(module=new, findings=findings, code=code, comments=comments)


def _analyse(
    module: cst.Module,
    index: RuleIndex,
    text: str,
    checkout: CheckoutFacts,
    device_aware: bool | None = None,
) -> tuple[FileAnalysis, ImportTracker]:
    """Pass 1 over `module`, with the import table, or libcst's scope analysis where a name the
    import table answered for is also bound another way."""
    resolver = ImportTableResolver(index.pattern_roots, index.public_paths)
    imports = ImportTracker(index.kb.modules)
    analysis = FileAnalysis(index, resolver, imports, checkout).run(module, text, device_aware)
    if not resolver.consistent():
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        imports = ImportTracker(index.kb.modules)
        scopes = ScopeResolver(wrapper, index.public_paths, resolver.value_aliases)
        analysis = FileAnalysis(index, scopes, imports, checkout).run(module, text, device_aware)
    return analysis, imports


def _rewritten_statements(
    module: cst.Module, new: cst.Module, analysis: FileAnalysis
) -> frozenset[int]:
    """The top-level statements a finding may be in (the rewrite pass went into them) or that
    the rewrite replaced: the ones whose original text is generated again."""
    kept = {id(s) for s in new.body}
    return frozenset(id(s) for s in module.body if id(s) in analysis.on_path or id(s) not in kept)
