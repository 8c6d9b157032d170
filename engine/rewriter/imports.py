"""Imports a rewrite needs (R-IMP-01): render a template's dotted names the way the file already
spells them, add only the imports that are missing, with the aliases the official docs use,
and drop aliased imports that the rewrite left unused.
"""

from __future__ import annotations

from collections import Counter

import libcst as cst

from pytpu.engine.rewriter.cst_nodes import dotted_name
from pytpu.engine.rewriter.node_edits import is_import_line


def _dotted_expr(text: str) -> cst.BaseExpression:
    parts = text.split(".")
    node: cst.BaseExpression = cst.Name(parts[0])
    for part in parts[1:]:
        node = cst.Attribute(value=node, attr=cst.Name(part))
    return node


def _import_path(node: cst.Attribute | cst.Name) -> str:
    name = dotted_name(node)
    assert name is not None
    return name


def _alias_name(alias: cst.ImportAlias) -> str | None:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return None


def bound_paths(node: cst.Import | cst.ImportFrom) -> list[tuple[str, str]]:
    """(local name, what it is bound to) for each name an import statement binds."""
    out: list[tuple[str, str]] = []
    if isinstance(node, cst.Import):
        for alias in node.names:
            path = _import_path(alias.name)
            local = _alias_name(alias)
            out.append((local, path) if local else (path.split(".")[0], path.split(".")[0]))
        return out
    if isinstance(node.names, cst.ImportStar):
        return out
    # A relative import binds one of the project's own modules: never one of the KB's paths.
    module = "." * len(node.relative) + (_import_path(node.module) if node.module else "")
    for alias in node.names:
        name = _import_path(alias.name)
        out.append((_alias_name(alias) or name, f"{module}.{name}" if module else name))
    return out


class ImportTracker:
    """Module-level imports of one file, and the imports its rewrites add or leave unused."""

    def __init__(self, conventions: dict[str, str | None]):
        self.conventions = conventions
        self.bindings: dict[str, str] = {}  # module or object path -> local spelling
        self.explicit: set[str] = set()  # paths imported by name (not just parents of one)
        self.bound_names: set[str] = set()  # names bound anywhere (unusable as new aliases)
        self.shadowed: set[str] = set()  # names bound other than by an import
        self.positions: dict[str, int] = {}  # binding path -> index of its top-level statement
        self.needed: list[tuple[str, str | None]] = []  # (module, alias)
        self.imported_as: dict[str, str] = {}  # local alias -> the name it imports
        self.aliased: set[str] = set()  # locals bound by `as` or `from`: removable if unused
        self.uses: Counter[str] = Counter()  # uses of each name in the original file
        self.replaced_uses: Counter[str] = Counter()  # ... of which a rewrite replaced
        self.introduced_uses: Counter[str] = Counter()  # uses that rewritten code adds
        self.cutoff: int | None = None  # new imports go above this top-level statement

    def record(self, node: cst.Import | cst.ImportFrom, index: int) -> None:
        """An unconditional import in the module's top-level statement number `index`."""
        before = set(self.bindings)
        self._record(node)
        for path in set(self.bindings) - before:
            self.positions[path] = index

    def keep_bindings_before(self, index: int) -> None:
        """Only imports above the first rewritten statement bind names for the rewrites (an
        import further down does not exist yet where the rewritten code runs)."""
        for path, position in list(self.positions.items()):
            if position >= index:
                del self.bindings[path]
                self.explicit.discard(path)
        self.cutoff = index

    def _record(self, node: cst.Import | cst.ImportFrom) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                path = _import_path(alias.name)
                self.explicit.add(path)
                local = _alias_name(alias)
                if local:
                    self.bindings.setdefault(path, local)
                    self.bound_names.add(local)
                    self.imported_as[local] = path.rsplit(".", 1)[-1]
                    self.aliased.add(local)
                else:
                    parts = path.split(".")
                    for i in range(1, len(parts) + 1):
                        self.bindings.setdefault(".".join(parts[:i]), ".".join(parts[:i]))
                    self.bound_names.add(parts[0])
            return
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = _import_path(node.module)
        for alias in node.names:
            name = _import_path(alias.name)
            local = _alias_name(alias) or name
            if local != name:
                self.imported_as[local] = name
            self.bindings.setdefault(f"{module}.{name}", local)
            self.explicit.add(f"{module}.{name}")
            self.bound_names.add(local)
            self.aliased.add(local)

    def bind_name(self, name: str) -> None:
        """A name bound by an assignment, a parameter, a definition ..."""
        self.bound_names.add(name)
        self.shadowed.add(name)

    def render(self, dotted: str) -> cst.BaseExpression:
        expression = self._spell(dotted)
        root = dotted_name(expression)
        if root is not None:
            self.introduced_uses[root.split(".")[0]] += 1
        return expression

    def _spell(self, dotted: str) -> cst.BaseExpression:
        """The longest prefix that is a module the KB knows (or that the file imports by name)
        decides: `import torch_xla` does not make `torch_xla.core.xla_model` usable as such, so
        `xm` is imported for it even when `torch_xla` is."""
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in self.explicit or prefix in self.conventions:
                return self._spell_module(prefix, parts[i:])
        for i in range(len(parts), 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in self.bindings:
                return _dotted_expr(".".join([self.bindings[prefix], *parts[i:]]))
        return self._spell_module(parts[0], parts[1:])

    def _spell_module(self, module: str, rest: list[str]) -> cst.BaseExpression:
        if module in self.bindings:
            return _dotted_expr(".".join([self.bindings[module], *rest]))
        alias = self.conventions.get(module)
        if alias in self.bound_names:
            alias = None
        if alias is None and module.split(".")[0] in self.shadowed:
            # a parameter or variable has the module's own name: import it under another one
            alias = module.replace(".", "_") + "_module"
        self._need(module, alias)
        return _dotted_expr(".".join([alias or module, *rest]))

    def require(self, module: str) -> None:
        """A side-effect import a rule asks for (e.g. the XLA process-group backend)."""
        if module not in self.bindings:
            self._need(module, None)

    def _need(self, module: str, alias: str | None) -> None:
        local = alias or module
        self.bindings[module] = local
        self.explicit.add(module)
        self.bound_names.add(local.split(".")[0])
        if (module, alias) not in self.needed:
            self.needed.append((module, alias))

    def replaced(self, local_root: str) -> None:
        """A rewrite removed one use of `local_root`."""
        self.replaced_uses[local_root] += 1

    def unused(self) -> set[str]:
        """Aliased imports whose every use a rewrite replaced."""
        return {
            name
            for name, count in self.replaced_uses.items()
            if name in self.aliased and self.uses[name] - count + self.introduced_uses[name] <= 0
        }

    def apply(self, module: cst.Module) -> cst.Module:
        """Drop the imports the rewrites left unused, then add the missing ones."""
        unused = self.unused()
        if unused:
            module = _remove_aliases(module, unused)
        if not self.needed:
            # nothing added: a blank line that followed a removed first import must go too
            return _trim_leading_blank_lines(module) if unused else module
        # AddImportsVisitor walks (and copies) whatever it is given; imports go among the
        # leading statements, so it is given only those.
        cut = import_prefix_length(module, self.cutoff)
        # (libcst's codemod package loads its matchers: a quarter of a second, paid only here)
        from libcst.codemod import CodemodContext
        from libcst.codemod.visitors import AddImportsVisitor

        context = CodemodContext()
        for name, alias in self.needed:
            AddImportsVisitor.add_needed_import(context, name, asname=alias)
        # (A form feed in the indentation is not accepted back by libcst's parser config.)
        head = module.with_changes(
            body=module.body[:cut], default_indent=module.default_indent.replace("\f", "")
        )
        had_imports = any(is_import_line(s) for s in module.body[:cut])
        head = AddImportsVisitor(context).transform_module(head)
        rest = list(module.body[cut:])
        if not had_imports and rest and not rest[0].leading_lines:
            # the new import block is the file's first: set it apart from the code (PEP 8)
            blank = [cst.EmptyLine()] * (
                2 if isinstance(rest[0], (cst.FunctionDef, cst.ClassDef)) else 1
            )
            rest[0] = rest[0].with_changes(leading_lines=blank)
        return module.with_changes(header=head.header, body=[*head.body, *rest])


def import_prefix_length(module: cst.Module, cutoff: int | None) -> int:
    """How many leading statements hold the module's top-level imports above `cutoff` (at
    least its docstring, so that new imports go below it): new imports go there, and the
    statements a rule needs once per module right below them."""
    limit = len(module.body) if cutoff is None else cutoff
    last = max((i for i, s in enumerate(module.body[:limit]) if is_import_line(s)), default=-1)
    if last >= 0:
        return last + 1
    first = module.body[0] if module.body else None
    has_docstring = (
        isinstance(first, cst.SimpleStatementLine)
        and isinstance(first.body[0], cst.Expr)
        and isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )
    return 1 if has_docstring else 0


def _remove_aliases(module: cst.Module, names: set[str]) -> cst.Module:
    """Remove the top-level import aliases that bind `names`; drop statements left empty."""
    body: list[cst.BaseStatement] = []
    carried: list[cst.EmptyLine] = []
    for statement in module.body:
        if not is_import_line(statement):
            if carried:
                statement = statement.with_changes(
                    leading_lines=[*carried, *statement.leading_lines]
                )
                carried = []
            body.append(statement)
            continue
        small: list[cst.BaseSmallStatement] = []
        for item in statement.body:
            if isinstance(item, (cst.Import, cst.ImportFrom)) and not isinstance(
                item.names, cst.ImportStar
            ):
                kept = [a for a in item.names if _local_of(item, a) not in names]
                if not kept:
                    continue
                if len(kept) != len(item.names):
                    kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                    item = item.with_changes(names=kept)
            small.append(item)
        if small:
            body.append(statement.with_changes(body=small))
        else:
            carried += [line for line in statement.leading_lines if line.comment is not None]
    return module.with_changes(body=body)


def _local_of(node: cst.Import | cst.ImportFrom, alias: cst.ImportAlias) -> str:
    local = _alias_name(alias)
    if local:
        return local
    path = _import_path(alias.name)
    return path.split(".")[0] if isinstance(node, cst.Import) else path


def _trim_leading_blank_lines(module: cst.Module) -> cst.Module:
    """A removed first import must not leave the file starting with a blank line."""
    if module.header or not module.body:
        return module
    first = module.body[0]
    lines = list(first.leading_lines)
    while lines and lines[0].comment is None:
        lines.pop(0)
    if len(lines) == len(first.leading_lines):
        return module
    return module.with_changes(body=[first.with_changes(leading_lines=lines), *module.body[1:]])
