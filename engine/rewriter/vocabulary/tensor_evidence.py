"""Type evidence: what a file's code shows a value to be, for the analyses that move a program
that names no device to the XLA device (`analyses/implicit_device.py`, `analyses/hand_training.py`).

A value is a tensor only where the code shows it: a tensor factory made it (`torch.randn`,
`torch.from_numpy`, ...), a module returned it, a torch function or a tensor method made it from
a tensor, it is an item of a DataLoader or a Dataset, it is a parameter annotated `torch.Tensor`
(or one every call of its function gives a tensor), or arithmetic with a tensor made it. Anything
else is known to be no tensor (a number, a string, None, a module) or not known at all, and the
analyses move neither: `model(x, n_steps=n)` with `n = args.steps` keeps its number.

Names are resolved with libcst's scope analysis: a use sees the assignments its scope makes
before it (in a loop, those of the first iteration, where a host tensor is still on the host)
and those of the scopes around it. The functions of the file are followed: a call gives what
the function's `return`s (a generator's `yield`s) give, a parameter holds what every call of its
function passes. Values that depend on each other are solved together, from nothing known to a
fixed point (`_ROUNDS` passes at most).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import libcst as cst
from libcst.metadata import Assignment, BaseAssignment, MetadataWrapper, ScopeProvider

from pytpu.engine.rewriter import cst_nodes
from pytpu.engine.rewriter.kb_files import torch_api


@dataclass(frozen=True)
class Value:
    """What a value is known to be; `parts` are a tuple's elements or an iterable's item."""

    kind: str
    parts: tuple[Value, ...] = ()


NONE = Value("none")  # nothing known yet: where the solver starts
DEVICE = Value("device")  # a tensor on the XLA device once the program is migrated
HOST = Value("host")  # a tensor on the host
MIXED = Value("mixed")  # a tensor on either (a name assigned one of each)
BATCH = Value("batch")  # a batch: a tensor, or a tuple, list or dict of host tensors
MODEL = Value("model")  # a model that moves to the device, or a part of it
LOSS = Value("loss")  # a loss module: what it returns is where its inputs are moved
MODULE = Value("module")  # another module, left where it is
OTHER = Value("other")  # known to be no tensor: a number, a string, None, a function
UNKNOWN = Value("unknown")  # nothing shows what it is

TENSORS = frozenset({"device", "host", "mixed"})
ON_DEVICE = frozenset({"device", "mixed", "model"})  # may be on the device
MOVABLE = frozenset({"host", "mixed"})  # a tensor that may be on the host


def tuple_of(parts: Iterable[Value]) -> Value:
    return Value("tuple", tuple(parts))


def iterable_of(item: Value) -> Value:
    return Value("iterable", (item,))


def join(a: Value, b: Value) -> Value:
    """What a name assigned both may hold."""
    if a.kind == "none" or a == b:
        return b
    if b.kind == "none":
        return a
    if a.kind in TENSORS and b.kind in TENSORS:
        return MIXED
    if a.kind == b.kind == "tuple" and len(a.parts) == len(b.parts):
        return tuple_of(join(x, y) for x, y in zip(a.parts, b.parts, strict=True))
    if a.kind == b.kind == "iterable":
        return iterable_of(join(a.parts[0], b.parts[0]))
    if _holds_tensors(a) and _holds_tensors(b):
        return BATCH
    if a.kind == b.kind == "other":
        return OTHER
    return UNKNOWN


def _holds_tensors(value: Value) -> bool:
    if value.kind == "tuple":
        return all(_holds_tensors(p) for p in value.parts)
    return value.kind in TENSORS or value.kind == "batch"


def join_all(values: Iterable[Value]) -> Value:
    result = NONE
    for value in values:
        result = join(result, value)
    return result


def element(value: Value) -> Value:
    """What indexing or unpacking it gives, the index unknown."""
    kind = value.kind
    if kind in TENSORS or kind == "model" or kind == "none":
        return value
    if kind == "tuple":
        return join_all(value.parts)
    if kind == "iterable":
        return value.parts[0]
    if kind == "batch":
        return HOST
    return UNKNOWN


def unpack(value: Value, count: int) -> list[Value]:
    if value.kind == "tuple" and len(value.parts) == count:
        return list(value.parts)
    return [element(value)] * count


def combine(values: list[Value]) -> Value:
    """What an operation on these gives: a tensor if any is one. Where a tensor that may be on
    the device meets one that may be on the host, the host ones move (see `meets`): on the
    device."""
    tensors = [v for v in values if v.kind in TENSORS]
    if not tensors:
        return NONE if any(v.kind == "none" for v in values) else UNKNOWN
    if meets(values):
        return DEVICE
    if all(t.kind == "host" for t in tensors):
        return HOST
    return tensors[0]


def meets(values: list[Value]) -> bool:
    """Whether tensors meet here that must be on one device: one that may be on the device and
    another that may be on the host."""
    tensors = [v for v in values if v.kind in TENSORS]
    return (
        len(tensors) > 1
        and any(t.kind != "host" for t in tensors)
        and any(t.kind in MOVABLE for t in tensors)
    )


def sequence(value: Value) -> Value:
    """A tuple of tensors made from a tensor (`x.chunk(2)`, `torch.max(x, 1)`)."""
    return value if value.kind not in MOVABLE else BATCH


# --- what torch says ----------------------------------------------------------------------------

# What torch says about its names: kb/torch_api.yaml (data; each set's `doc` says what it holds).
_API = torch_api()
TENSOR_FACTORIES = _API["tensor_factories"]
RANDOM_FACTORIES = _API["random_factories"]
WRAPPERS = _API["wrappers"]
TENSOR_NAMESPACES = _API["tensor_namespaces"]
NOT_TENSOR_FUNCTIONS = _API["not_tensor_functions"]
UTILITY_FUNCTIONS = _API["utility_functions"]
NOT_TENSOR_MEMBERS = _API["not_tensor_members"]
SEQUENCE_MEMBERS = _API["sequence_members"]
REDUCTIONS_BY_DIMENSION = _API["reductions_by_dimension"]
DATASETS = tuple(sorted(_API["datasets"]))  # (for str.startswith: a package ends in a dot)
DATASET_BASES = _API["dataset_bases"]
MODULE_BASES = _API["module_bases"]
TENSOR_ANNOTATIONS = _API["tensor_annotations"]
NOT_TENSOR_BUILTINS = _API["not_tensor_builtins"]
LOSS_FUNCTIONS = _API["loss_functions"]
_LOSS_FUNCTION_NAMES = frozenset(name.rpartition(".")[2] for name in LOSS_FUNCTIONS)
_CONSTANTS = (
    cst.Integer,
    cst.Float,
    cst.Imaginary,
    cst.SimpleString,
    cst.ConcatenatedString,
    cst.FormattedString,
)
_IDENTITY_OPERATORS = (cst.Is, cst.IsNot, cst.In, cst.NotIn)
_ROUNDS = 12  # passes of the solver at most (a fixed point takes two or three)


def is_constant(node: cst.CSTNode) -> bool:
    """A literal that is no tensor: a number, a string, None, True, False."""
    return isinstance(node, _CONSTANTS) or (
        type(node) is cst.Name and node.value in ("None", "True", "False")
    )


def grad_free_chain(node: cst.CSTNode) -> cst.CSTNode:
    """`p` of `p.data` (what an update of `p.data` updates)."""
    while type(node) is cst.Attribute and node.attr.value == "data":
        node = node.value
    return node


class Metadata:
    """libcst's scope analysis of one module, its nodes' parents and its nodes by type."""

    def __init__(self, module: cst.Module, wrapper: MetadataWrapper | None = None) -> None:
        self.module = module
        self.wrapper = wrapper or MetadataWrapper(module, unsafe_skip_copy=True)
        self.scopes = self.wrapper.resolve(ScopeProvider)
        self.accesses: dict[int, Any] = {}  # id of a Name used -> its libcst Access
        self.assignments: list[Assignment] = []
        for scope in {id(s): s for s in self.scopes.values() if s is not None}.values():
            for access in scope.accesses:
                self.accesses[id(access.node)] = access
            self.assignments.extend(a for a in scope.assignments if isinstance(a, Assignment))
        # (the code's nodes only, not its whitespace: a walk is many times faster than
        # libcst's ParentNodeProvider, which visits every token)
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.nodes: dict[type, list[cst.CSTNode]] = {}
        self.order: dict[int, int] = {}  # id of a node -> its place in the code
        stack: list[cst.CSTNode] = [module]
        while stack:
            node = stack.pop()
            self.order[id(node)] = len(self.order)
            self.nodes.setdefault(type(node), []).append(node)
            children = list(cst_nodes.iter_children(node))
            for child in children:
                self.parents[child] = node
            stack.extend(reversed(children))

    def of_type(self, *kinds: type) -> Iterator[Any]:
        for kind in kinds:
            yield from self.nodes.get(kind, ())

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        parent = self.parents.get(node)
        while parent is not None:
            yield parent
            parent = self.parents.get(parent)

    def path(self, node: cst.CSTNode) -> list[int]:
        """The ids of the nodes above it, the module's first (what a plan's path is)."""
        return [id(n) for n in reversed(list(self.ancestors(node)))]

    def top(self, node: cst.CSTNode) -> int:
        """The index of the top-level statement it is in."""
        above = [node, *self.ancestors(node)]
        statement = above[-2] if len(above) > 1 else node
        return next(i for i, s in enumerate(self.module.body) if s is statement)

    def referents(self, name: cst.Name) -> set[BaseAssignment]:
        """The assignments a use of a name sees; for a name that is not a use (the target of
        `x -= ...`), every assignment its scope sees.

        libcst gives a use every assignment of its scope made before it; one that a later
        assignment always replaces before the use (`x = np.load(f)` then `x =
        torch.from_numpy(x)`, in the same block as the use or one around it) is left out."""
        access = self.accesses.get(id(name))
        if access is None:
            scope = self.scopes.get(name)
            return set(scope[name.value]) if scope is not None and name.value in scope else set()
        found = set(access.referents)
        local = [a for a in found if a.scope is access.scope and isinstance(a, Assignment)]
        killers = [a for a in local if self._always_before(a.node, name)]
        if killers:
            last = max(self.order.get(id(a.node), -1) for a in killers)
            found -= {a for a in local if self.order.get(id(a.node), -1) < last}
        return found

    def _always_before(self, target: cst.CSTNode, use: cst.CSTNode) -> bool:
        """Whether an assignment statement (`target = ...`) always runs before `use`: it is a
        statement of a block that holds the use, before it."""
        holder = self.parents.get(target)
        if type(holder) is not cst.AssignTarget and type(holder) is not cst.AnnAssign:
            return False
        statement = holder
        while statement is not None and type(statement) is not cst.SimpleStatementLine:
            statement = self.parents.get(statement)
        block = self.parents.get(statement) if statement is not None else None
        if block is None:
            return False
        for above in self.ancestors(use):
            if self.parents.get(above) is block:
                return self.order[id(statement)] < self.order[id(above)]
        return False

    def assigned_value(self, assignment: object) -> cst.CSTNode | None:
        """The value of `name = value` that made the assignment, if it is one (a single target:
        the site where the value can change)."""
        node = getattr(assignment, "node", None)
        holder = self.parents.get(node) if type(node) is cst.Name else None
        if type(holder) is not cst.AssignTarget:
            return None
        statement = self.parents[holder]
        if len(statement.targets) != 1 or statement.targets[0].target is not node:
            return None
        return statement.value

    def function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The function a node is in (None: the module's or a class's body)."""
        for above in self.ancestors(node):
            if type(above) is cst.FunctionDef:
                return above
            if type(above) is cst.ClassDef:
                return None
        return None

    def enclosing_class(self, function: cst.FunctionDef) -> cst.ClassDef | None:
        """The class a function is a method of."""
        parent = self.parents.get(function)  # the class's IndentedBlock
        grand = self.parents.get(parent) if parent is not None else None
        return grand if type(grand) is cst.ClassDef else None


class Evidence:
    """The values of a file's names and expressions (see the module's docstring).

    `qualified` gives a node's qualified names (the engine's resolver); `loaders` the qualified
    names of the DataLoader classes; `seeds` fixes what some assignments hold (a model that
    moves: MODEL; a tensor made on the device: DEVICE); `overrides` fixes what some expressions
    are (a loader iterated through MpDeviceLoader: an iterable of device batches).
    """

    def __init__(
        self,
        meta: Metadata,
        qualified: Callable[[cst.CSTNode], set[str]],
        loaders: frozenset[str],
        seeds: dict[BaseAssignment, Value] | None = None,
        overrides: dict[int, Value] | None = None,
    ) -> None:
        self.meta = meta
        self.qualified = qualified
        self.loaders = loaders
        self.seeds = seeds or {}
        self.overrides = overrides or {}
        self.table: dict[Any, Value] = {}  # assignment or function -> value
        self._memo: dict[int, Value] = {}  # expression -> value, in one pass of the solver
        self._rounds: dict[tuple[str, int], set[int]] = {}  # likewise, per function
        self._functions = [f for f in meta.of_type(cst.FunctionDef) if self._followed(f)]
        self._calls = self._call_sites()
        self._solve()

    # --- the solver ---------------------------------------------------------------------------

    def _solve(self) -> None:
        for _ in range(_ROUNDS):
            self._memo, self._rounds = {}, {}
            changed = False
            for assignment in self.meta.assignments:
                new = self.seeds.get(assignment) or self._assigned(assignment)
                if self.table.get(assignment, NONE) != new:
                    self.table[assignment] = new
                    changed = True
            for function in self._functions:
                new = self._returned(function)
                if self.table.get(function, NONE) != new:
                    self.table[function] = new
                    changed = True
            if not changed:
                break
        self._memo = {}

    def value(self, node: cst.CSTNode) -> Value:
        """What an expression is, as far as the code shows."""
        memo = self._memo.get(id(node))
        if memo is None:
            memo = self._memo[id(node)] = self._value(node)
        return memo

    def _value(self, node: cst.CSTNode) -> Value:
        override = self.overrides.get(id(node))
        if override is not None:
            return override
        kind = type(node)
        if is_constant(node):
            return OTHER
        if (kind is cst.Name or kind is cst.Attribute) and self._names_loss_function(node):
            return LOSS  # `loss_fn = F.cross_entropy`: called, it is a loss
        if kind is cst.Name:
            return self._name(node)
        if kind is cst.Tuple or kind is cst.List:
            if any(type(e) is cst.StarredElement for e in node.elements):
                return UNKNOWN
            return tuple_of(self.value(e.value) for e in node.elements)
        if kind is cst.ListComp or kind is cst.GeneratorExp:
            return iterable_of(self.value(node.elt))
        if kind in (cst.Dict, cst.DictComp, cst.Set, cst.SetComp):
            return UNKNOWN
        if kind is cst.Lambda:
            return OTHER
        if kind is cst.BinaryOperation:
            return combine([self.value(node.left), self.value(node.right)])
        if kind is cst.UnaryOperation:
            return OTHER if type(node.operator) is cst.Not else self.value(node.expression)
        if kind is cst.BooleanOperation:
            return join(self.value(node.left), self.value(node.right))
        if kind is cst.IfExp:
            return join(self.value(node.body), self.value(node.orelse))
        if kind is cst.Comparison:
            if any(isinstance(c.operator, _IDENTITY_OPERATORS) for c in node.comparisons):
                return OTHER
            return combine([self.value(n) for n in self.operands(node)])
        if kind is cst.Subscript:
            return self._subscript(node)
        if kind is cst.Attribute:
            return self._attribute(node)
        if kind is cst.Call:
            return self._call(node)
        if kind is cst.NamedExpr:
            return self.value(node.value)
        return UNKNOWN

    def _names_loss_function(self, node: cst.Name | cst.Attribute) -> bool:
        return cst_nodes.last_name(node) in _LOSS_FUNCTION_NAMES and bool(
            self.qualified(node) & LOSS_FUNCTIONS
        )

    def _name(self, node: cst.Name) -> Value:
        referents = self.meta.referents(node)
        if not referents:
            return UNKNOWN
        return join_all(
            self.table.get(a, NONE) if isinstance(a, Assignment) else OTHER for a in referents
        )

    def _subscript(self, node: cst.Subscript) -> Value:
        value = self.value(node.value)
        if value.kind in TENSORS:
            return combine([self.value(n) for n in self.operands(node)])
        if value.kind == "tuple" and len(node.slice) == 1:
            index = node.slice[0].slice
            if type(index) is cst.Index and type(index.value) is cst.Integer:
                position = int(index.value.value, 0)
                if -len(value.parts) <= position < len(value.parts):
                    return value.parts[position]
        return element(value)

    def _attribute(self, node: cst.Attribute) -> Value:
        value = self.value(node.value)
        if value.kind == "model":
            return MODEL  # a layer or a parameter of the model: on the device with it
        if value.kind in TENSORS:
            return OTHER if node.attr.value in NOT_TENSOR_MEMBERS else value
        return UNKNOWN

    def _call(self, node: cst.Call) -> Value:
        func = node.func
        callee = self.value(func) if type(func) is not cst.Attribute else None
        if type(func) is cst.Attribute:
            receiver = self.value(func.value)
            if receiver.kind == "model":
                return DEVICE  # `model.encoder(x)`, `model.parameters()`
            if receiver.kind in TENSORS:
                return self._method(node, func.attr.value, receiver)
            if func.attr.value == "type" and self._host_type(node):
                return HOST
            if receiver.kind in ("module", "none"):
                return UNKNOWN if receiver.kind == "module" else NONE
        elif callee is not None:
            made = self._called(node, callee)
            if made is not None:
                return made
        function = self.function_called(func)
        if function is not None:
            return self.table.get(function, NONE)
        qualified = self.qualified(func)
        if not qualified:
            return UNKNOWN
        return self._qualified_call(node, qualified)

    def _called(self, node: cst.Call, callee: Value) -> Value | None:
        """What calling a value gives: a model's or a loss's output, a module's, an instance of
        a class of the file."""
        kind = callee.kind
        if kind == "model" or kind == "loss":
            return DEVICE
        if kind == "module":
            result = combine(self.arguments(node))
            return result if result.kind in TENSORS else HOST
        if kind == "class_module":
            return MODULE
        if kind == "class_dataset":
            return iterable_of(BATCH)
        return None

    def _host_type(self, node: cst.Call) -> bool:
        """`x.type(torch.FloatTensor)`: a conversion to a host tensor type (of a tensor, or
        the program fails on the CPU too)."""
        return bool(node.args) and bool(self.qualified(node.args[0].value) & TENSOR_FACTORIES)

    def _method(self, node: cst.Call, name: str, receiver: Value) -> Value:
        if name in NOT_TENSOR_MEMBERS:
            return OTHER
        if name == "cpu":
            return HOST
        result = combine([receiver, *self.arguments(node)])
        if name in SEQUENCE_MEMBERS or (name in REDUCTIONS_BY_DIMENSION and node.args):
            if not any(v.kind in TENSORS for v in self.arguments(node)):
                return sequence(result)
        return result

    def _qualified_call(self, node: cst.Call, qualified: set[str]) -> Value:
        if qualified & LOSS_FUNCTIONS:
            return DEVICE
        if qualified & WRAPPERS:
            inner = self.value(node.args[0].value) if node.args else NONE
            return inner if inner.kind in TENSORS else HOST
        if qualified & NOT_TENSOR_BUILTINS:
            return OTHER
        made = self._made(qualified)
        if made is not None:
            return made
        if any(q.startswith("builtins.") for q in qualified):
            return self._builtin(node, qualified)
        if any(q.rpartition(".")[0] in TENSOR_NAMESPACES for q in qualified):
            if qualified & NOT_TENSOR_FUNCTIONS:
                return OTHER
            return self._torch_function(node, qualified)
        return HOST if qualified & TENSOR_FACTORIES else UNKNOWN

    def _torch_function(self, node: cst.Call, qualified: set[str]) -> Value:
        """A torch function: a tensor from tensors (the elements of a list or tuple given to it
        too: `torch.cat((a, b))`); a factory's host tensor from numbers. Given a value nothing
        shows to be a tensor, a function that computes on tensors (not a factory, not one of
        the `UTILITY_FUNCTIONS`) was given one, or the program fails on the CPU too: a tensor
        whose place is not known."""
        values = [v for a in node.args for v in _flattened(self.value(a.value))]
        result = combine(values)
        if result.kind in TENSORS:
            name = next(iter(qualified)).rpartition(".")[2]
            tensors = sum(v.kind in TENSORS for v in values)
            if name in SEQUENCE_MEMBERS or (
                name in REDUCTIONS_BY_DIMENSION and tensors == 1 and len(node.args) > 1
            ):
                return sequence(result)
            return result
        if qualified & TENSOR_FACTORIES:
            return HOST
        if result.kind == "unknown" and not any(
            q.rpartition(".")[2] in UTILITY_FUNCTIONS
            or q.rpartition(".")[2].startswith(("set_", "get_", "is_"))
            for q in qualified
        ):
            if any(v.kind in ("unknown", "batch") for v in values):
                return MIXED
        return result

    def _made(self, qualified: set[str]) -> Value | None:
        """A module, a loss module, a dataset or a loader being made."""
        if qualified & self.loaders or any(q.startswith(DATASETS) for q in qualified):
            return iterable_of(BATCH)
        for name in qualified:
            module, _, last = name.rpartition(".")
            if name.startswith("torch.nn.") and last[:1].isupper() and module != "torch.nn.init":
                return LOSS if last.endswith("Loss") else MODULE
        return None

    def _builtin(self, node: cst.Call, qualified: set[str]) -> Value:
        first = self.value(node.args[0].value) if node.args else NONE
        if "builtins.iter" in qualified:
            return first
        if "builtins.next" in qualified:
            return self.iterated(first)
        if qualified & {"builtins.list", "builtins.tuple", "builtins.sorted", "builtins.reversed"}:
            return iterable_of(self.iterated(first)) if node.args else OTHER
        if "builtins.enumerate" in qualified:
            return iterable_of(tuple_of((OTHER, self.iterated(first))))
        if "builtins.zip" in qualified:
            return iterable_of(tuple_of(self.iterated(self.value(a.value)) for a in node.args))
        if "builtins.map" in qualified and node.args:
            made = self.qualified(node.args[0].value) & TENSOR_FACTORIES
            return iterable_of(HOST) if made else UNKNOWN
        if "builtins.range" in qualified:
            return iterable_of(OTHER)
        return UNKNOWN

    def iterated(self, value: Value) -> Value:
        """What iterating it gives."""
        if value.kind in ("iterable", "tuple", "batch") or value.kind in TENSORS:
            return element(value)
        if value.kind == "model":
            return MODEL
        return NONE if value.kind == "none" else UNKNOWN

    # --- what a name holds --------------------------------------------------------------------

    def _assigned(self, assignment: Assignment) -> Value:
        node = assignment.node
        kind = type(node)
        if kind is cst.Param:
            return self._parameter(node)
        if kind is cst.FunctionDef or kind is cst.Import or kind is cst.ImportFrom:
            return OTHER
        if kind is cst.ClassDef:
            return self._class(node)
        if kind is not cst.Name:
            return UNKNOWN
        return self._target(node)

    def _target(self, name: cst.Name) -> Value:
        """What an assignment target gets, through the tuples it is in."""
        indices: list[tuple[int, int]] = []  # (position, count) from the name up
        node: cst.CSTNode = name
        parent = self.meta.parent(node)
        while type(parent) is cst.Element or type(parent) is cst.StarredElement:
            if type(parent) is cst.StarredElement:
                return UNKNOWN
            holder = self.meta.parent(parent)
            position = next(i for i, e in enumerate(holder.elements) if e is parent)
            indices.append((position, len(holder.elements)))
            node, parent = holder, self.meta.parent(holder)
        source = self._source(node, parent)
        for position, count in reversed(indices):
            source = unpack(source, count)[position]
        return source

    def _source(self, target: cst.CSTNode, holder: cst.CSTNode | None) -> Value:
        """What the statement that binds `target` gives it."""
        kind = type(holder)
        if kind is cst.AssignTarget:
            statement = self.meta.parent(holder)
            return self.value(statement.value)
        if kind is cst.AnnAssign:
            if self._annotated_tensor(holder.annotation):
                return MIXED
            return self.value(holder.value) if holder.value is not None else UNKNOWN
        if kind is cst.AugAssign:
            return self._augmented(holder)
        if kind is cst.For or kind is cst.CompFor:
            return self.iterated(self.value(holder.iter))
        if kind is cst.NamedExpr:
            return self.value(holder.value)
        return UNKNOWN

    def _augmented(self, statement: cst.AugAssign) -> Value:
        """`x += v`: what `x` held before, combined with `v`."""
        before = (
            [
                self.table.get(a, NONE)
                for a in self.meta.referents(statement.target)
                if isinstance(a, Assignment) and type(self.meta.parent(a.node)) is not cst.AugAssign
            ]
            if type(statement.target) is cst.Name
            else []
        )
        prior = join_all(before) if before else UNKNOWN
        return combine([prior, self.value(statement.value)])

    def _annotated_tensor(self, annotation: cst.Annotation | None) -> bool:
        return annotation is not None and bool(
            self.qualified(annotation.annotation) & TENSOR_ANNOTATIONS
        )

    def _class(self, node: cst.ClassDef) -> Value:
        """A class of the file: what calling it makes (a module, a dataset) rides on the value of
        the class itself."""
        result = OTHER
        for base in node.bases:
            names = self.qualified(base.value)
            inherited = self.value(base.value)
            if names & MODULE_BASES or inherited.kind == "class_module":
                result = Value("class_module")
            elif names & DATASET_BASES or inherited.kind == "class_dataset":
                result = Value("class_dataset")
        return result

    def _parameter(self, param: cst.Param) -> Value:
        """What every call of its function passes (a tensor annotation says it is a tensor)."""
        tensor = MIXED if self._annotated_tensor(param.annotation) else UNKNOWN
        function = self.meta.parent(self.meta.parent(param))  # Param < Parameters < FunctionDef
        calls = self._calls.get(id(function)) if type(function) is cst.FunctionDef else None
        if not calls:
            return tensor
        passed = join_all(self._argument_for(call, function, param) for call in calls)
        if passed.kind not in TENSORS:
            return tensor if passed.kind in ("unknown", "none") else passed
        # A tensor parameter may also be a device tensor: its callers' host tensors move where
        # they meet device ones (the first iteration of a loop may pass a host tensor, the
        # next a device one), and the program's tests call its functions on the device.
        return join(passed, DEVICE)

    def _argument_for(self, call: cst.Call, function: cst.FunctionDef, param: cst.Param) -> Value:
        """What one call of `function` passes for `param`, once the call's host tensors that meet
        device ones, or that the function gives the device, are moved."""
        if param in (function.params.star_arg, function.params.star_kwarg):
            return UNKNOWN
        bound = bind(call, function)
        if bound is None:
            return UNKNOWN
        arg = bound.get(id(param))
        if arg is None:
            return self.value(param.default) if param.default is not None else UNKNOWN
        value = self.value(arg.value)
        if value.kind in MOVABLE and (
            meets(self.arguments(call)) or id(param) in self.device_parameters(function)
        ):
            return DEVICE
        return value

    def device_parameters(self, function: cst.FunctionDef) -> set[int]:
        """The parameters (ids) a function gives the device: it feeds them to the model or a
        loss, or computes with them beside what may be on the device (`w * x` with `w` trained
        there). A host tensor passed for one moves where the function is called."""
        key = ("parameters", id(function))
        found = self._rounds.get(key)
        if found is not None:
            return found
        self._rounds[key] = found = set()  # (while it is looked for)
        params = {id(p) for p in (*function.params.posonly_params, *function.params.params)}
        for node in _own_nodes(function.body):
            kind = type(node)
            if kind is cst.Call and self.feeds(node) is not None:
                operands = [a.value for a in node.args]
                device = True
            elif kind in _MEETINGS:
                operands = self.operands(node)
                device = any(self.value(o).kind in ON_DEVICE for o in operands)
            else:
                continue
            for operand in operands if device else ():
                if type(operand) is cst.Name:
                    found.update(
                        id(a.node)
                        for a in self.meta.referents(operand)
                        if id(getattr(a, "node", None)) in params
                    )
        return found

    def device_arguments(self, call: cst.Call) -> list[cst.CSTNode]:
        """The arguments of a call of a function of the file that it gives the device."""
        function = self.function_called(call.func)
        bound = bind(call, function) if function is not None else None
        if not bound:
            return []
        wanted = self.device_parameters(function)
        return [arg.value for key, arg in bound.items() if key in wanted]

    def feeds(self, call: cst.Call) -> str | None:
        """ "model" for a call of the model (or of its layers and methods), "loss" for a loss
        module's or function's: what it is given must be on the device."""
        func = self.value(call.func)
        if func.kind == "model":
            return "model"
        if func.kind == "loss" or self.qualified(call.func) & LOSS_FUNCTIONS:
            return "loss"
        if type(call.func) is cst.Attribute and self.value(call.func.value).kind == "model":
            return "model"
        return None

    def _returned(self, function: cst.FunctionDef) -> Value:
        """What calling a function of the file gives: its returns (a tensor where its return
        annotation says so), or a generator of its yields."""
        returns, yields = [], []
        for node in _own_nodes(function.body):
            if type(node) is cst.Return:
                returns.append(self.value(node.value) if node.value is not None else OTHER)
            elif type(node) is cst.Yield and isinstance(node.value, cst.BaseExpression):
                yields.append(self.value(node.value))
        if yields:
            return iterable_of(join_all(yields))
        returned = join_all(returns) if returns else OTHER
        if returned.kind not in TENSORS and self._annotated_tensor(function.returns):
            return MIXED  # `-> torch.Tensor`
        return returned

    # --- functions of the file ----------------------------------------------------------------

    def _followed(self, function: cst.FunctionDef) -> bool:
        """A plain function (not a method, not decorated): its calls are the file's."""
        return not function.decorators and self.meta.enclosing_class(function) is None

    def function_called(self, func: cst.CSTNode, depth: int = 0) -> cst.FunctionDef | None:
        """The function of the file a call calls, through names that alias it (`net = linreg`)."""
        if type(func) is not cst.Name or depth > 3:
            return None
        referents = self.meta.referents(func)
        if len(referents) != 1:
            return None
        (assignment,) = referents
        node = getattr(assignment, "node", None)
        if type(node) is cst.FunctionDef:
            return node if self._followed(node) else None
        if type(node) is cst.Name:
            holder = self.meta.parent(node)
            if type(holder) is cst.AssignTarget:
                return self.function_called(self.meta.parent(holder).value, depth + 1)
        return None

    def _call_sites(self) -> dict[int, list[cst.Call]]:
        """The calls of each function of the file that is only ever called (a function passed
        somewhere as a value may be called with anything)."""
        sites: dict[int, list[cst.Call]] = {}
        escaped: set[int] = set()
        followed = {id(f) for f in self._functions}
        for name in self.meta.of_type(cst.Name):
            if id(name) not in self.meta.accesses:
                continue
            function = self.function_called(name)
            if function is None or id(function) not in followed:
                continue
            parent = self.meta.parent(name)
            if type(parent) is cst.Call and parent.func is name:
                sites.setdefault(id(function), []).append(parent)
            elif not _is_alias(self.meta, name):
                escaped.add(id(function))
        return {key: calls for key, calls in sites.items() if key not in escaped}

    def calls_of(self, function: cst.FunctionDef) -> list[cst.Call]:
        """Every call of a function of the file; none if it may be called from elsewhere."""
        return self._calls.get(id(function), [])

    # --- operands -----------------------------------------------------------------------------

    def arguments(self, call: cst.Call) -> list[Value]:
        return [self.value(a.value) for a in call.args]

    def operands(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """The expressions an operation computes with, which must be on one device: both sides
        of an operator (`x += y` too), a subscript's value and indices, a tensor method's
        receiver and arguments, the arguments of a torch function or of a function of the file
        (the elements of a list or tuple given to it too: `torch.cat([a, b])`)."""
        kind = type(node)
        if kind is cst.BinaryOperation:
            return [node.left, node.right]
        if kind is cst.Comparison:
            return [node.left, *(c.comparator for c in node.comparisons)]
        if kind is cst.Subscript:
            return [
                node.value,
                *(e.slice.value for e in node.slice if type(e.slice) is cst.Index),
            ]
        if kind is cst.AugAssign:
            return [node.target, node.value]  # (the target cannot move: only the value does)
        if kind is not cst.Call:
            return []
        arguments = [
            item
            for arg in node.args
            if not arg.star
            for item in (
                [e.value for e in arg.value.elements]
                if type(arg.value) in (cst.List, cst.Tuple)
                else [arg.value]
            )
        ]
        func = node.func
        if type(func) is cst.Attribute and self.value(func.value).kind in TENSORS:
            return [func.value, *arguments]
        if self.function_called(func) is not None:
            return arguments
        if type(func) in (cst.Name, cst.Attribute) and any(
            q.rpartition(".")[0] in TENSOR_NAMESPACES for q in self.qualified(func)
        ):
            return arguments
        return []


def _own_nodes(body: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The nodes of a function's body, not those of the functions and classes inside it."""
    stack = [body]
    while stack:
        node = stack.pop()
        yield node
        for child in cst_nodes.iter_children(node):
            if type(child) not in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                stack.append(child)


def _is_alias(meta: Metadata, name: cst.Name) -> bool:
    """`net = linreg`: the name is the whole value of a simple assignment."""
    parent = meta.parent(name)
    return type(parent) is cst.Assign and parent.value is name


_MEETINGS = (cst.BinaryOperation, cst.Comparison, cst.Subscript, cst.Call, cst.AugAssign)


def bind(call: cst.Call, function: cst.FunctionDef) -> dict[int, cst.Arg] | None:
    """The argument a call passes for each parameter of a function (by the parameter's id);
    None where a `*args` or `**kwargs` argument hides which."""
    if any(a.star for a in call.args):
        return None
    params = function.params
    positional = [*params.posonly_params, *params.params]
    by_name = {p.name.value: p for p in (*positional, *params.kwonly_params)}
    bound: dict[int, cst.Arg] = {}
    for index, arg in enumerate(call.args):
        if arg.keyword is not None:
            param = by_name.get(arg.keyword.value)
        else:
            param = positional[index] if index < len(positional) else None
        if param is not None:
            bound[id(param)] = arg
    return bound


def _flattened(value: Value) -> list[Value]:
    """A tuple's or a list's elements (`torch.cat((a, b))`), else the value."""
    if value.kind == "tuple":
        return [v for part in value.parts for v in _flattened(part)]
    if value.kind == "iterable":
        return [value.parts[0]]
    return [value]
