"""The mutation operators: every place in the methods of model classes where one libcst node can
be replaced to seed a bug, and the mutated source with one of them applied."""

from __future__ import annotations

import ast
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

from benchmarks.testgen.model_code import import_aliases, model_classes
from pytpu.engine.rewriter.cst_nodes import dotted_name

OPERATORS = ("activation", "constant", "binop", "residual", "transpose")

# Activation swaps: each maps to a different member of its family. Functionals keep their input
# (and `inplace=` when both accept it); constructors keep only `inplace=`, when the new one has it.
FUNCTIONAL_SWAPS = {
    "relu": "gelu",
    "gelu": "relu",
    "leaky_relu": "relu",
    "silu": "relu",
    "elu": "relu",
    "tanh": "sigmoid",
    "sigmoid": "tanh",
}
FUNCTIONAL_INPLACE = {"relu", "leaky_relu", "silu", "elu"}
TORCH_SWAPS = {"relu": "tanh", "tanh": "sigmoid", "sigmoid": "tanh"}
MODULE_SWAPS = {
    "ReLU": "GELU",
    "GELU": "ReLU",
    "LeakyReLU": "ReLU",
    "SiLU": "ReLU",
    "ELU": "ReLU",
    "Tanh": "Sigmoid",
    "Sigmoid": "Tanh",
}
MODULE_INPLACE = {"ReLU", "LeakyReLU", "SiLU", "ELU"}
MATMUL_FUNCTIONS = {"matmul", "bmm"}

BINOP_FLIPS: dict[type, type] = {
    cst.Add: cst.Subtract,
    cst.Subtract: cst.Add,
    cst.Multiply: cst.Divide,
    cst.Divide: cst.Multiply,
}
AUGOP_FLIPS: dict[type, type] = {
    cst.AddAssign: cst.SubtractAssign,
    cst.SubtractAssign: cst.AddAssign,
    cst.MultiplyAssign: cst.DivideAssign,
    cst.DivideAssign: cst.MultiplyAssign,
}
NOT_NUMERIC = (
    cst.SimpleString,
    cst.ConcatenatedString,
    cst.FormattedString,
    cst.List,
    cst.Tuple,
    cst.ListComp,
)
ATOMIC = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)


@dataclass(frozen=True)
class Site:
    """One place a mutant can be made: the operator, where (1-based line and column), the model
    class whose method holds it, and what changes."""

    operator: str
    line: int
    column: int
    cls: str
    description: str


def _short(code: str, width: int = 48) -> str:
    code = " ".join(code.split())
    return code if len(code) <= width else code[: width - 3] + "..."


def _minus(value: str) -> cst.UnaryOperation:
    return cst.UnaryOperation(operator=cst.Minus(), expression=cst.Integer(value))


def transposed(expr: cst.BaseExpression) -> cst.Call:
    """`expr.transpose(-2, -1)`, with `expr` parenthesised where needed."""
    if not isinstance(expr, ATOMIC) and not expr.lpar:
        expr = expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(
        func=cst.Attribute(value=expr, attr=cst.Name("transpose")),
        args=[cst.Arg(_minus("2")), cst.Arg(_minus("1"))],
    )


def _activation_args(
    args: Sequence[cst.Arg], keep_input: bool, keep_inplace: bool
) -> list[cst.Arg] | None:
    """The arguments that still make sense after an activation swap; None when the input (for a
    functional) cannot be told."""
    kept: list[cst.Arg] = []
    if keep_input:
        first = args[0] if args else None
        if first is None or (first.keyword is not None and first.keyword.value != "input"):
            return None
        kept.append(first)
    if keep_inplace:
        kept += [a for a in args if a.keyword is not None and a.keyword.value == "inplace"]
    if kept:
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return kept


def _has_call(expr: cst.CSTNode) -> bool:
    return bool(m.findall(expr, m.Call()))


class _SiteCollector(cst.CSTVisitor):
    """Visits a module once and records every mutation site inside the methods of the given
    model classes, with the node to replace and its replacement."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, module: cst.Module, classes: Collection[str]) -> None:
        super().__init__()
        self.module = module
        self.classes = classes
        self.aliases = import_aliases(module)
        self.scope: list[tuple[str, str]] = []  # ("class", qualified name) or ("def", name)
        self.class_stack: list[str] = []
        self.assign_targets: dict[int, str] = {}  # id(assigned value) -> code of the target
        self.found: list[tuple[Site, cst.CSTNode, cst.CSTNode]] = []

    # scope ---------------------------------------------------------------------------------

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.class_stack.append(node.name.value)
        self.scope.append(("class", ".".join(self.class_stack)))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.class_stack.pop()
        self.scope.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scope.append(("def", node.name.value))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scope.pop()

    def current_class(self) -> str | None:
        """The model class whose method (or a function nested in it) is being visited."""
        in_function = False
        for kind, name in reversed(self.scope):
            if kind == "def":
                in_function = True
            else:
                return name if in_function and name in self.classes else None
        return None

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def add(self, operator: str, node: cst.CSTNode, replacement: cst.CSTNode) -> None:
        cls = self.current_class()
        before, after = self.code(node), self.code(replacement)
        if cls is None or before == after:
            return
        start = self.get_metadata(PositionProvider, node).start
        description = f"{_short(before)} -> {_short(after)}"
        site = Site(operator, start.line, start.column + 1, cls, description)
        self.found.append((site, node, replacement))

    # operators -------------------------------------------------------------------------------

    def visit_Call(self, node: cst.Call) -> None:
        if self.current_class() is None or not isinstance(node.func, cst.Attribute):
            return
        prefix, attr = dotted_name(node.func.value), node.func.attr.value
        if prefix is None:
            return
        new_name, args = None, None
        if prefix in self.aliases.functional and attr in FUNCTIONAL_SWAPS:
            new_name = FUNCTIONAL_SWAPS[attr]
            both_inplace = attr in FUNCTIONAL_INPLACE and new_name in FUNCTIONAL_INPLACE
            args = _activation_args(node.args, keep_input=True, keep_inplace=both_inplace)
        elif prefix in self.aliases.torch and attr in TORCH_SWAPS:
            new_name = TORCH_SWAPS[attr]
            args = _activation_args(node.args, keep_input=True, keep_inplace=False)
        elif prefix in self.aliases.nn and attr in MODULE_SWAPS:
            new_name = MODULE_SWAPS[attr]
            args = _activation_args(
                node.args, keep_input=False, keep_inplace=new_name in MODULE_INPLACE
            )
        elif prefix in self.aliases.torch and attr in MATMUL_FUNCTIONS and len(node.args) >= 2:
            first = node.args[0]
            if first.keyword is None and not first.star:
                first = first.with_changes(value=transposed(first.value))
                self.add("transpose", node, node.with_changes(args=[first, *node.args[1:]]))
        if new_name is not None and args is not None:
            func = node.func.with_changes(attr=cst.Name(new_name))
            self.add("activation", node, node.with_changes(func=func, args=args))

    def visit_Integer(self, node: cst.Integer) -> None:
        if self.current_class() is not None:
            value = ast.literal_eval(node.value)
            self.add("constant", node, node.with_changes(value=str(value + 1)))

    def visit_Float(self, node: cst.Float) -> None:
        if self.current_class() is not None:
            value = ast.literal_eval(node.value)
            new = 0.5 if value == 0 else value * 1.5
            # 12 significant digits: 0.2 * 1.5 gives 0.3, not 0.30000000000000004
            if math.isfinite(new):
                self.add("constant", node, node.with_changes(value=repr(float(f"{new:.12g}"))))

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1:
            self.assign_targets[id(node.value)] = self.code(node.targets[0].target)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if self.current_class() is None:
            return
        flip = BINOP_FLIPS.get(type(node.operator))
        if (
            flip
            and not isinstance(node.left, NOT_NUMERIC)
            and not isinstance(node.right, NOT_NUMERIC)
        ):
            operator = flip(
                whitespace_before=node.operator.whitespace_before,
                whitespace_after=node.operator.whitespace_after,
            )
            self.add("binop", node, node.with_changes(operator=operator))
        if isinstance(node.operator, cst.Add):
            kept = self.residual_branch(node)
            if kept is not None:
                if node.lpar and not kept.lpar:
                    kept = kept.with_changes(lpar=node.lpar, rpar=node.rpar)
                self.add("residual", node, kept)
        if isinstance(node.operator, cst.MatrixMultiply):
            self.add("transpose", node, node.with_changes(left=transposed(node.left)))

    def residual_branch(self, node: cst.BinaryOperation) -> cst.BaseExpression | None:
        """For `x + f(...)` (either order), where `x` is a name or attribute that is the target
        of the assignment or appears in `f(...)`: the branch `f(...)`."""
        target = self.assign_targets.get(id(node))
        for skip, kept in ((node.left, node.right), (node.right, node.left)):
            if not isinstance(skip, (cst.Name, cst.Attribute)) or not _has_call(kept):
                continue
            skip_code = self.code(skip)
            mentioned = {self.code(n) for n in m.findall(kept, m.Name() | m.Attribute())}
            if skip_code == target or skip_code in mentioned:
                return kept
        return None

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if self.current_class() is None:
            return
        flip = AUGOP_FLIPS.get(type(node.operator))
        if flip:
            operator = flip(
                whitespace_before=node.operator.whitespace_before,
                whitespace_after=node.operator.whitespace_after,
            )
            self.add("binop", node, node.with_changes(operator=operator))
        if isinstance(node.operator, cst.AddAssign) and _has_call(node.value):
            assign = cst.Assign(
                targets=[cst.AssignTarget(target=node.target)],
                value=node.value,
                semicolon=node.semicolon,
            )
            self.add("residual", node, assign)


def _collect(
    source: str, classes: Collection[str] | None
) -> tuple[cst.Module, list[tuple[Site, cst.CSTNode, cst.CSTNode]]]:
    wrapper = MetadataWrapper(cst.parse_module(source))
    if classes is None:
        classes = model_classes(wrapper.module)
    collector = _SiteCollector(wrapper.module, classes)
    wrapper.visit(collector)
    return wrapper.module, collector.found


def find_sites(source: str, classes: Collection[str] | None = None) -> list[Site]:
    """Every mutation site in the methods of `classes` (default: the file's model classes)."""
    return [site for site, _, _ in _collect(source, classes)[1]]


def mutate(source: str, index: int, classes: Collection[str] | None = None) -> str:
    """`source` with the `index`-th site of find_sites(source, classes) applied: one node
    replaced, everything else byte for byte the same."""
    module, found = _collect(source, classes)
    _, node, replacement = found[index]
    return module.deep_replace(node, replacement).code
